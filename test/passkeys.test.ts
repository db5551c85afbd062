// Passkeys over HTTP with a software authenticator (test/e2e/passkeys.test.ts has Chromium's): registered from one's
// own session, signing in without a password or a second factor, every answer that is not right refused.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ADMIN_PASSWORD, assertProblem, call, holdingWrites, login, mintToken, startMaster } from './helpers.ts';
import { SoftAuthenticator } from './authenticator.ts';

/** Registers `authenticator`'s credential as `name` for the user of login session `session`. */
export async function registerSoftPasskey(
  base: string,
  session: string,
  authenticator: SoftAuthenticator,
  name: string,
) {
  const options = await call(base, 'POST', '/api/auth/passkeys/options', { token: session });
  return call(base, 'POST', '/api/auth/passkeys', {
    token: session,
    body: { name, credential: authenticator.register(options.body.challenge) },
  });
}

/** Signs in with `authenticator`'s credential: the answer. */
export async function softPasskeySignIn(base: string, authenticator: SoftAuthenticator) {
  const options = await call(base, 'POST', '/api/auth/passkeys/sign-in/options');
  return call(base, 'POST', '/api/auth/passkeys/sign-in', {
    body: { credential: authenticator.assert(options.body.challenge) },
  });
}

async function withPasskeys(t: Parameters<typeof startMaster>[0]) {
  const m = await startMaster(t);
  const origin = `http://localhost:${new URL(m.url).port}`;
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { public_url: origin } });
  return { m, origin, session: await login(m.url, 'admin', ADMIN_PASSWORD) };
}

test('a passkey registered signs in, with no second factor asked, and counts forward', async (t) => {
  const { m, origin, session } = await withPasskeys(t);
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { totp_required: 2 } });
  const device = new SoftAuthenticator('localhost', origin);
  const made = await registerSoftPasskey(m.url, session, device, 'laptop');
  assert.equal(made.status, 201, JSON.stringify(made.body));
  assert.equal(made.body.algorithm, -7);
  const signedIn = await softPasskeySignIn(m.url, device);
  assert.equal(signedIn.status, 200, JSON.stringify(signedIn.body));
  const me = await call(m.url, 'GET', '/api/auth/me', { token: signedIn.body.token });
  assert.deepEqual(me.body.token.scopes, ['*'], 'a full session: user verification is the factor');

  // A copy behind the original: refused, audited as a failed login.
  const clone = Object.assign(Object.create(Object.getPrototypeOf(device)), device, { counter: 0 });
  assertProblem(await softPasskeySignIn(m.url, clone), 401, 'unauthorized');
  assert.equal((await softPasskeySignIn(m.url, device)).status, 200, 'the original goes on');
  assertProblem(await registerSoftPasskey(m.url, session, device, 'again'), 409, 'conflict');
});

test('a registration or sign-in that is not right is refused and keeps nothing', async (t) => {
  const { m, origin, session } = await withPasskeys(t);
  const device = new SoftAuthenticator('localhost', origin);
  const elsewhere = new SoftAuthenticator('evil.example', origin);
  const wrong: [(challenge: string) => unknown, RegExp][] = [
    [(challenge) => device.register(challenge, { origin: 'http://evil.example' }), /another origin/],
    [() => device.register('not-the-challenge'), /no challenge of yours/],
    [(challenge) => elsewhere.register(challenge), /another site/],
    [(challenge) => device.register(challenge, { flags: 0x41 }), /not verified/],
  ];
  for (const [credential, why] of wrong) {
    const { challenge } = (await call(m.url, 'POST', '/api/auth/passkeys/options', { token: session })).body;
    const body = { name: 'x', credential: credential(challenge) };
    const refused = await call(m.url, 'POST', '/api/auth/passkeys', { token: session, body });
    assertProblem(refused, 422, 'validation_failed');
    assert.match(refused.body.errors[0].detail, why);
  }
  assert.equal((await call(m.url, 'GET', '/api/auth/passkeys', { token: session })).body.items.length, 0);
  const api = await mintToken(m, ['*']);
  assertProblem(await call(m.url, 'POST', '/api/auth/passkeys/options', { token: api }), 403, 'insufficient_scope');
  assertProblem(await softPasskeySignIn(m.url, device), 401, 'unauthorized');
});

test('a passkey sign-in while an import holds writes waits its turn, counts forward and signs in', async (t) => {
  const { m, origin, session } = await withPasskeys(t);
  const device = new SoftAuthenticator('localhost', origin);
  assert.equal((await registerSoftPasskey(m.url, session, device, 'laptop')).status, 201);
  const hold = await holdingWrites(m);
  const answer = softPasskeySignIn(m.url, device);
  setTimeout(hold.release, 300);
  const signedIn = await answer;
  await hold.ended;
  assert.equal(signedIn.status, 200, JSON.stringify(signedIn.body));
  const clone = Object.assign(Object.create(Object.getPrototypeOf(device)), device, { counter: device.counter - 1 });
  assertProblem(await softPasskeySignIn(m.url, clone), 401, 'unauthorized');
});
