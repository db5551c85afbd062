// What sign-ins keep in memory (oidc/sign-ins.ts, auth/challenges.ts), with a clock of the test's: each state, code
// and challenge taken once, none past its time, and no more than the bound held however many are asked for.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Challenges, CHALLENGE_TTL_MS } from '../../internal/auth/challenges.ts';
import { HANDOFF_TTL_MS, ProviderSignIns, SIGN_IN_TTL_MS } from '../../internal/oidc/sign-ins.ts';

const CONFIG = { issuer: 'https://idp.example', clientId: 'c', clientSecret: null, scopes: 'openid' };

test('a sign-in state is taken once, not after its time, and the oldest go past the bound', () => {
  let now = 0;
  const signIns = new ProviderSignIns<string>(() => now);
  const provider = signIns.providerFor(CONFIG);
  assert.equal(signIns.providerFor({ ...CONFIG }), provider, 'the same settings keep the provider');
  assert.notEqual(signIns.providerFor({ ...CONFIG, scopes: 'openid email' }), provider);
  const first = signIns.start(provider, 'https://console.example/cb');
  assert.ok(signIns.take(first.state));
  assert.equal(signIns.take(first.state), undefined, 'once');
  const late = signIns.start(provider, 'https://console.example/cb');
  now += SIGN_IN_TTL_MS;
  assert.equal(signIns.take(late.state), undefined, 'too old');
  const states = Array.from({ length: 1001 }, () => signIns.start(provider, 'https://console.example/cb').state);
  assert.equal(signIns.take(states[0]!), undefined, 'the oldest dropped past 1,000 in flight');
  assert.ok(signIns.take(states[1000]!));
});

test('a handed-off session is taken once, within its minute', () => {
  let now = 0;
  const signIns = new ProviderSignIns<string>(() => now);
  const code = signIns.handOff('session');
  assert.equal(signIns.takeHandOff(code), 'session');
  assert.equal(signIns.takeHandOff(code), undefined);
  const late = signIns.handOff('other');
  now += HANDOFF_TTL_MS;
  assert.equal(signIns.takeHandOff(late), undefined);
});

test('a WebAuthn challenge is taken once, for its purpose, within its time', () => {
  let now = 0;
  const challenges = new Challenges(() => now);
  const one = challenges.issue('register:1');
  assert.equal(challenges.take(one, 'register:2'), false, "another user's");
  assert.equal(challenges.take(one, 'register:1'), false, 'taken by the try before');
  const two = challenges.issue('sign-in');
  now += CHALLENGE_TTL_MS;
  assert.equal(challenges.take(two, 'sign-in'), false, 'too old');
  const many = Array.from({ length: 1001 }, () => challenges.issue('sign-in'));
  assert.equal(challenges.take(many[0]!, 'sign-in'), false, 'the oldest dropped past 1,000');
  assert.equal(challenges.take(many[1000]!, 'sign-in'), true);
});
