import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { test } from 'node:test';
import { keyPinOf } from '../../internal/tls/pin.ts';
import { MAX_STATEMENT_BYTES, statePromotion, verifyPromotion } from '../../internal/tls/promotion.ts';

const pem = (type: 'ec' | 'rsa' | 'ed25519') => {
  const { privateKey } =
    type === 'ec'
      ? generateKeyPairSync('ec', { namedCurve: 'prime256v1' })
      : type === 'rsa'
        ? generateKeyPairSync('rsa', { modulusLength: 2048 })
        : generateKeyPairSync('ed25519');
  return { pem: privateKey.export({ type: 'pkcs8', format: 'pem' }) as string, pin: keyPinOf(privateKey) };
};

test('a promotion statement verifies by the pin of the key that signed it, whatever its type', () => {
  for (const type of ['ec', 'rsa', 'ed25519'] as const) {
    const key = pem(type);
    const statement = statePromotion(key.pem, 7, '2026-12-06T12:00:00Z');
    assert.ok(statement.length <= MAX_STATEMENT_BYTES, `${type}: ${statement.length} bytes`);
    assert.deepEqual(verifyPromotion(statement, new Set([key.pin])), { epoch: 7, pin: key.pin }, type);
  }
});

test('no statement proves anything but by a pinned key and a signature that verifies', () => {
  const peer = pem('ec');
  const stranger = pem('ec');
  const pins = new Set([peer.pin]);
  const good = statePromotion(peer.pem, 7, '2026-12-06T12:00:00Z');
  const [payload, signature] = good.split('.') as [string, string];
  const fields = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'));
  const reencoded = (changed: object) => Buffer.from(JSON.stringify({ ...fields, ...changed })).toString('base64url');
  const strangers = statePromotion(stranger.pem, 7, '2026-12-06T12:00:00Z');
  const strangerKey = JSON.parse(Buffer.from(strangers.split('.')[0]!, 'base64url').toString('utf8')).key;
  const cases: [string, string][] = [
    ['signed by a key no peer pins', strangers],
    ['an epoch raised after signing', `${reencoded({ epoch: 99 })}.${signature}`],
    ["a pinned key claimed over another's signature", `${reencoded({ key: fields.key })}.${strangers.split('.')[1]}`],
    ["the stranger's key put in the pinned one's payload", `${reencoded({ key: strangerKey })}.${signature}`],
    ['no signature', `${payload}.`],
    ['not base64url', `${payload}.${signature}!`],
    ['no statement', ''],
    ['not JSON', `${Buffer.from('{').toString('base64url')}.${signature}`],
    ['epoch 1', statePromotion(peer.pem, 1, '2026-12-06T12:00:00Z')],
    ['a key that is no key', `${reencoded({ key: 'AAAA' })}.${signature}`],
    ['too long', `${payload}.${'A'.repeat(MAX_STATEMENT_BYTES)}`],
  ];
  for (const [what, statement] of cases) assert.equal(verifyPromotion(statement, pins), null, what);
  assert.equal(verifyPromotion(good, new Set()), null, 'with no pin at all');
  assert.deepEqual(verifyPromotion(good, pins), { epoch: 7, pin: peer.pin });
});
