// ID tokens as the master checks them (auth/jws.ts, oidc/id-token.ts): each algorithm it takes verified with
// node:crypto against keys made here, and every way a token can be wrong refused.

import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { test } from 'node:test';
import { JwsRefused, UnknownKey, verifyJws, type Jwk } from '../../internal/auth/jws.ts';
import { idTokenProblem } from '../../internal/oidc/id-token.ts';
import { signedToken, signingKey, type SigningKey } from '../signing-keys.ts';

function publicJwk(key: SigningKey): Jwk {
  const { d: _d, p: _p, q: _q, dp: _dp, dq: _dq, qi: _qi, ...shown } = key.private;
  return { ...shown, kid: key.kid, alg: key.alg };
}

const NOW = 1_800_000_000;
const CLAIMS = { iss: 'https://idp.example', aud: 'portplane', sub: 'alice', iat: NOW, exp: NOW + 300, nonce: 'n1' };
const EXPECTED = { issuer: 'https://idp.example', clientId: 'portplane', nonce: 'n1', nowMs: NOW * 1000 };

test('RS256, ES256 and EdDSA tokens verify with their key, and with no other', () => {
  const keys = (['RS256', 'ES256', 'EdDSA'] as const).map((alg) => signingKey(`k-${alg}`, alg));
  for (const key of keys) {
    const token = signedToken(CLAIMS, key);
    assert.deepEqual(verifyJws(token, keys.map(publicJwk)), CLAIMS, key.alg);
    const impostor = { ...signingKey(key.kid, key.alg), kid: key.kid };
    assert.throws(() => verifyJws(signedToken(CLAIMS, impostor), keys.map(publicJwk)), /signature does not verify/);
  }
});

test('a token is refused unsigned, with a tampered payload, an unknown kid, an algorithm not taken, or crit', () => {
  const key = signingKey('k1', 'RS256');
  const keys = [publicJwk(key)];
  const token = signedToken(CLAIMS, key);
  const [header, payload, signature] = token.split('.') as [string, string, string];
  const none = Buffer.from(JSON.stringify({ alg: 'none', kid: 'k1' })).toString('base64url');
  assert.throws(() => verifyJws(`${none}.${payload}.`, keys), JwsRefused);
  const hs = Buffer.from(JSON.stringify({ alg: 'HS256', kid: 'k1' })).toString('base64url');
  assert.throws(() => verifyJws(`${hs}.${payload}.${signature}`, keys), /algorithm "HS256" is not one taken/);
  const admin = Buffer.from(JSON.stringify({ ...CLAIMS, sub: 'admin' })).toString('base64url');
  assert.throws(() => verifyJws(`${header}.${admin}.${signature}`, keys), /signature does not verify/);
  assert.throws(() => verifyJws(signedToken(CLAIMS, signingKey('k2')), keys), UnknownKey);
  assert.throws(() => verifyJws(token, keys, ['ES256']), UnknownKey, 'an algorithm the provider did not announce');
  assert.throws(() => verifyJws('a.b', keys), /three parts/);
  assert.throws(() => verifyJws(`${header}.${payload}.${signature}!`, keys), /not base64url/);
  const crit = signedToken(CLAIMS, key).split('.');
  crit[0] = Buffer.from(JSON.stringify({ alg: 'RS256', kid: 'k1', crit: ['b64'] })).toString('base64url');
  assert.throws(() => verifyJws(crit.join('.'), keys), /critical/);
  const short = generateKeyPairSync('rsa', { modulusLength: 1024 }).privateKey.export({ format: 'jwk' });
  const weak: SigningKey = { kid: 'weak', alg: 'RS256', private: short };
  assert.throws(() => verifyJws(signedToken(CLAIMS, weak), [publicJwk(weak)]), UnknownKey, 'no key under 2048 bits');
});

test('what an ID token says is checked: issuer, audience, azp, expiry, issue time, subject, nonce', () => {
  assert.equal(idTokenProblem(CLAIMS, EXPECTED), null);
  assert.equal(idTokenProblem({ ...CLAIMS, aud: ['portplane'] }, EXPECTED), null);
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ iss: 'https://other.example' }, /another issuer/],
    [{ aud: 'someone-else' }, /another client/],
    [{ aud: ['portplane', 'other'] }, /another party/],
    [{ aud: ['portplane', 'other'], azp: 'other' }, /another party/],
    [{ exp: NOW - 61 }, /expired/],
    [{ exp: undefined }, /no expiry/],
    [{ iat: NOW + 3600 }, /issue time/],
    [{ nbf: NOW + 3600 }, /not valid yet/],
    [{ sub: '' }, /no subject/],
    [{ nonce: 'n2' }, /nonce/],
    [{ nonce: undefined }, /nonce/],
  ];
  for (const [change, why] of cases) assert.match(idTokenProblem({ ...CLAIMS, ...change }, EXPECTED) ?? '', why);
  assert.equal(idTokenProblem({ ...CLAIMS, nonce: undefined }, { ...EXPECTED, nonce: null }), null, 'a refresh');
});
