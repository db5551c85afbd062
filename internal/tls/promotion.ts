// A promotion statement: "the master holding this key is the primary of epoch N", signed with the key a master serves
// TLS with. A promoted master hands it to its agents with each config; an agent shows it to an older primary it links
// to, which believes it only if the key is one whose pin it already holds for a peer (standby_masters): so agents carry
// a fence they cannot forge, and no node's word alone stops a primary.

import { createPrivateKey, createPublicKey, sign, verify, type KeyObject } from 'node:crypto';
import { keyPinOf } from './pin.ts';

/** The longest statement read: a P-256 or RSA-4096 key and its signature fit well within it. */
export const MAX_STATEMENT_BYTES = 4096;

export interface Promotion {
  epoch: number;
  /** The pin of the key that signed it. */
  pin: string;
}

/** The digest each key type signs with: Ed25519 has its own. */
const digestOf = (key: KeyObject) => (key.asymmetricKeyType === 'ed25519' ? null : 'sha256');

/** The statement that the master whose TLS key is `keyPem` is the primary of `epoch`, as `<payload>.<signature>`. */
export function statePromotion(keyPem: string, epoch: number, at: string): string {
  const key = createPrivateKey(keyPem);
  const spki = createPublicKey(key).export({ type: 'spki', format: 'der' });
  const payload = Buffer.from(JSON.stringify({ epoch, key: spki.toString('base64'), at })).toString('base64url');
  return `${payload}.${sign(digestOf(key), Buffer.from(payload), key).toString('base64url')}`;
}

/**
 * What `statement` proves, when it is one signed by a key among `pins`; null otherwise (malformed, too long, another
 * key, a signature that does not verify). Whatever an agent sends, it only ever returns null or a verified promotion.
 */
export function verifyPromotion(statement: string, pins: ReadonlySet<string>): Promotion | null {
  if (statement.length > MAX_STATEMENT_BYTES) return null;
  const match = /^([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)$/.exec(statement);
  if (!match) return null;
  try {
    const { epoch, key } = JSON.parse(Buffer.from(match[1]!, 'base64url').toString('utf8')) as Record<string, unknown>;
    if (!Number.isSafeInteger(epoch) || (epoch as number) < 2 || typeof key !== 'string') return null;
    const publicKey = createPublicKey({ key: Buffer.from(key, 'base64'), format: 'der', type: 'spki' });
    const pin = keyPinOf(publicKey);
    // The pin first: a key nobody vouched for is not worth a signature check.
    if (!pins.has(pin)) return null;
    const signature = Buffer.from(match[2]!, 'base64url');
    if (!verify(digestOf(publicKey), Buffer.from(match[1]!), publicKey, signature)) return null;
    return { epoch: epoch as number, pin };
  } catch {
    return null;
  }
}
