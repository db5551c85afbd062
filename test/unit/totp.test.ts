import assert from 'node:assert/strict';
import { test } from 'node:test';
import { base32, hotp, matchingStep, newRecoveryCodes, otpauthUri, recoveryForm } from '../../internal/auth/totp.ts';

// RFC 6238, appendix B: SHA1 with the ASCII key "12345678901234567890" (its 8-digit codes; ours are their last 6).
const RFC_KEY = Buffer.from('12345678901234567890');
const VECTORS: [number, string][] = [
  [59, '94287082'],
  [1111111109, '07081804'],
  [1111111111, '14050471'],
  [1234567890, '89005924'],
  [2000000000, '69279037'],
  [20000000000, '65353130'],
];

test("a code is RFC 6238's for its time, in 6 digits", () => {
  for (const [seconds, code] of VECTORS)
    assert.equal(hotp(RFC_KEY, Math.floor(seconds / 30)), code.slice(2), `${seconds}`);
});

test('a code is taken within a step either way, never at or before the last step taken, and only as 6 digits', () => {
  const now = 1234567890_000;
  const step = Math.floor(now / 30_000);
  const at = (offset: number) => hotp(RFC_KEY, step + offset);
  assert.equal(matchingStep(RFC_KEY, at(0), now, null), step);
  assert.equal(matchingStep(RFC_KEY, at(-1), now, null), step - 1);
  assert.equal(matchingStep(RFC_KEY, at(1), now, null), step + 1);
  assert.equal(matchingStep(RFC_KEY, at(2), now, null), null, 'two steps ahead');
  assert.equal(matchingStep(RFC_KEY, at(-2), now, null), null, 'two steps late');
  assert.equal(matchingStep(RFC_KEY, at(0), now, step), null, 'its step taken');
  assert.equal(matchingStep(RFC_KEY, at(-1), now, step - 1), null, 'an earlier step after a later one');
  assert.equal(matchingStep(RFC_KEY, at(1), now, step), step + 1);
  for (const bad of ['', '12345', '1234567', ' 123456', 'abcdef', '１２３４５６'])
    assert.equal(matchingStep(RFC_KEY, bad, now, null), null, JSON.stringify(bad));
});

test('base32 is RFC 4648 without padding; the URI is what authenticator apps read; recovery codes are 80 bits', () => {
  // RFC 4648 section 10.
  for (const [text, encoded] of [
    ['f', 'MY'],
    ['fo', 'MZXQ'],
    ['foo', 'MZXW6'],
    ['foob', 'MZXW6YQ'],
    ['fooba', 'MZXW6YTB'],
    ['foobar', 'MZXW6YTBOI'],
  ])
    assert.equal(base32(Buffer.from(text!)), encoded);
  const uri = new URL(otpauthUri(RFC_KEY, 'portplane', 'ops lead'));
  assert.equal(uri.protocol, 'otpauth:');
  assert.equal(uri.host, 'totp');
  assert.equal(decodeURIComponent(uri.pathname), '/portplane:ops lead');
  assert.equal(uri.searchParams.get('secret'), base32(RFC_KEY));
  assert.deepEqual(
    ['issuer', 'algorithm', 'digits', 'period'].map((key) => uri.searchParams.get(key)),
    ['portplane', 'SHA1', '6', '30'],
  );
  const codes = newRecoveryCodes();
  assert.equal(new Set(codes).size, 10);
  for (const code of codes) assert.match(code, /^[a-z2-7]{4}(-[a-z2-7]{4}){3}$/);
  assert.equal(recoveryForm(' ABCD-efgh-2345-7777 '), 'abcdefgh23457777');
});
