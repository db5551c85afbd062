// Passkeys' checks without a server (auth/cbor.ts, auth/webauthn.ts): CBOR as hostile bytes, and registrations and
// assertions of a software authenticator right and wrong.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CborRefused, decodeCbor } from '../../internal/auth/cbor.ts';
import { PasskeyRefused, verifyAssertion, verifyRegistration } from '../../internal/auth/webauthn.ts';
import { SoftAuthenticator } from '../authenticator.ts';

const RP = { id: 'console.example', origin: 'https://console.example' };

function answerOf(credential: { response: Record<string, string> }) {
  return Object.fromEntries(
    Object.entries(credential.response).map(([name, value]) => [name, Buffer.from(value, 'base64url')]),
  ) as Record<string, Buffer>;
}

test('CBOR: what WebAuthn sends is read; truncated, indefinite, too deep, too long, floats, tags refused', () => {
  const map = decodeCbor(Buffer.from('a2616101626263820203', 'hex'));
  assert.deepEqual(
    map.value,
    new Map<unknown, unknown>([
      ['a', 1],
      ['bc', [2, 3]],
    ]),
  );
  assert.equal(map.end, 10);
  assert.equal(decodeCbor(Buffer.from('3903ff', 'hex')).value, -1024);
  const hostile: [string, RegExp][] = [
    ['a2616101', /ends too soon/],
    ['9f01ff', /indefinite/],
    ['81'.repeat(20) + '01', /too deep/],
    ['5b00000001000000000000', /ends too soon/],
    ['5bffffffffffffffff', /too large/],
    ['99ffff', /too long/],
    ['f93c00', /float/],
    ['c11a514b67b0', /tag/],
    ['a201010102', /twice/],
    ['a1810101', /neither a number nor a text/],
  ];
  for (const [hex, why] of hostile)
    assert.throws(
      () => decodeCbor(Buffer.from(hex, 'hex')),
      (error: Error) => error instanceof CborRefused && why.test(error.message),
      hex,
    );
});

test('a registration is checked: its challenge, origin, site, user verification; its key kept', () => {
  const device = new SoftAuthenticator(RP.id, RP.origin);
  const kept = verifyRegistration(answerOf(device.register('c1')) as never, 'c1', RP);
  assert.equal(kept.algorithm, -7);
  assert.deepEqual(kept.credentialId, new Uint8Array(device.credentialId));
  assert.equal(kept.publicKey.x, device.publicJwk.x);
  const wrong: [ReturnType<SoftAuthenticator['register']>, string, RegExp][] = [
    [device.register('c1'), 'c2', /another challenge/],
    [device.register('c1', { origin: 'https://evil.example' }), 'c1', /another origin/],
    [new SoftAuthenticator('evil.example', RP.origin).register('c1'), 'c1', /another site/],
    [device.register('c1', { flags: 0x41 }), 'c1', /not verified/],
    [device.register('c1', { flags: 0x44 }), 'c1', /not present/],
    [device.register('c1', { flags: 0x05 }), 'c1', /no credential/],
  ];
  for (const [credential, challenge, why] of wrong)
    assert.throws(
      () => verifyRegistration(answerOf(credential) as never, challenge, RP),
      (error: Error) => error instanceof PasskeyRefused && why.test(error.message),
    );
  const cut = answerOf(device.register('c1'));
  cut.attestationObject = cut.attestationObject!.subarray(0, 40);
  assert.throws(() => verifyRegistration(cut as never, 'c1', RP), PasskeyRefused);
});

test('an assertion is checked: its signature by the kept key, and a counter that goes forward', () => {
  const device = new SoftAuthenticator(RP.id, RP.origin);
  const kept = verifyRegistration(answerOf(device.register('c1')) as never, 'c1', RP);
  const first = verifyAssertion(answerOf(device.assert('c2')) as never, 'c2', RP, kept);
  assert.equal(first, 1);
  const stored = { ...kept, signCount: first };
  assert.equal(verifyAssertion(answerOf(device.assert('c3')) as never, 'c3', RP, stored), 2);
  assert.throws(
    () => verifyAssertion(answerOf(device.assert('c4')) as never, 'c4', RP, { ...kept, signCount: 9 }),
    /went back/,
  );
  const forged = answerOf(device.assert('c5'));
  forged.signature = answerOf(new SoftAuthenticator(RP.id, RP.origin).assert('c5')).signature!;
  assert.throws(() => verifyAssertion(forged as never, 'c5', RP, stored), /signature does not verify/);
  assert.throws(
    () => verifyAssertion(answerOf(device.assert('c6')) as never, 'other', RP, stored),
    /another challenge/,
  );
});
