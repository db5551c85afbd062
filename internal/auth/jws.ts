// Signed tokens from an identity provider (JWS compact form, RFC 7515) checked with the provider's published keys
// (JWK, RFC 7517) through node:crypto alone: RS256, ES256 and EdDSA (Ed25519), nothing else, and never "none". A
// token's header picks the key by `kid`; what the header says of the algorithm must agree with the key's kind, so a
// public RSA key can never be taken as an HMAC secret.

import { createPublicKey, verify, type KeyObject } from 'node:crypto';

/** A public key as a provider publishes it (only the members used here). */
export interface Jwk {
  kty?: unknown;
  kid?: unknown;
  alg?: unknown;
  use?: unknown;
  crv?: unknown;
  n?: unknown;
  e?: unknown;
  x?: unknown;
  y?: unknown;
}

interface Algorithm {
  kty: string;
  crv?: string;
  /** Node's digest for verify(); null for EdDSA, which hashes itself. */
  digest: string | null;
  /** ECDSA signatures in a JWS are r || s, not DER. */
  p1363?: boolean;
}

export const ALGORITHMS: Record<string, Algorithm> = {
  RS256: { kty: 'RSA', digest: 'sha256' },
  ES256: { kty: 'EC', crv: 'P-256', digest: 'sha256', p1363: true },
  EdDSA: { kty: 'OKP', crv: 'Ed25519', digest: null },
};

/** A token that is not one to trust, and why in words fit for the audit log. */
export class JwsRefused extends Error {}

/**
 * Refused because no key of the set has the token's `kid`, or the provider was not known to sign with its algorithm:
 * it may have rotated (read its keys, and what it says of itself, again).
 */
export class UnknownKey extends JwsRefused {}

/** The longest token taken: real ID tokens are a few kilobytes. */
const MAX_TOKEN = 16_384;
const BASE64URL = /^[A-Za-z0-9_-]*$/;

function decodePart(part: string, what: string): Buffer {
  if (!BASE64URL.test(part)) throw new JwsRefused(`its ${what} is not base64url`);
  return Buffer.from(part, 'base64url');
}

function jsonPart(part: string, what: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(decodePart(part, what).toString('utf8'));
  } catch (error) {
    if (error instanceof JwsRefused) throw error;
    throw new JwsRefused(`its ${what} is not JSON`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    throw new JwsRefused(`its ${what} is not a JSON object`);
  return value as Record<string, unknown>;
}

/** The public key a JWK describes, for algorithm `alg`; null when it is not one of it. */
export function publicKeyOf(jwk: Jwk, alg: string): KeyObject | null {
  const algorithm = ALGORITHMS[alg];
  if (!algorithm || jwk.kty !== algorithm.kty) return null;
  if (algorithm.crv && jwk.crv !== algorithm.crv) return null;
  if (jwk.alg !== undefined && jwk.alg !== alg) return null;
  if (jwk.use !== undefined && jwk.use !== 'sig') return null;
  const members = algorithm.kty === 'RSA' ? ['n', 'e'] : algorithm.kty === 'EC' ? ['x', 'y'] : ['x'];
  const key: Record<string, string> = { kty: algorithm.kty };
  if (algorithm.crv) key.crv = algorithm.crv;
  for (const member of members) {
    const value = jwk[member as keyof Jwk];
    if (typeof value !== 'string' || !BASE64URL.test(value) || value.length > 2048) return null;
    key[member] = value;
  }
  try {
    const publicKey = createPublicKey({ key, format: 'jwk' });
    // Short RSA keys sign nothing trusted here.
    if (algorithm.kty === 'RSA' && (publicKey.asymmetricKeyDetails?.modulusLength ?? 0) < 2048) return null;
    return publicKey;
  } catch {
    return null;
  }
}

/** Whether `signature` is `alg`'s over `data` by `key`. */
export function verifiesWith(alg: string, key: KeyObject, data: Buffer, signature: Buffer): boolean {
  const algorithm = ALGORITHMS[alg];
  if (!algorithm) return false;
  try {
    return verify(algorithm.digest, data, algorithm.p1363 ? { key, dsaEncoding: 'ieee-p1363' } : key, signature);
  } catch {
    return false;
  }
}

/**
 * The claims of `token` once its signature verifies with one of `keys` (a provider's JWKS), its header's `alg` one of
 * `allowed`. Throws `UnknownKey` when no key has its `kid` (or, without one, none fits) or its algorithm is not
 * `allowed` (but one known here), `JwsRefused` for any other fault. Checks the signature only: what the claims say
 * is the caller's to check.
 */
export function verifyJws(
  token: string,
  keys: readonly Jwk[],
  allowed: readonly string[] = Object.keys(ALGORITHMS),
): Record<string, unknown> {
  if (token.length > MAX_TOKEN) throw new JwsRefused('it is too long');
  const parts = token.split('.');
  if (parts.length !== 3) throw new JwsRefused('it is not a signed token (three parts)');
  const [headerPart, payloadPart, signaturePart] = parts as [string, string, string];
  const header = jsonPart(headerPart, 'header');
  const alg = header.alg;
  if (typeof alg !== 'string' || !ALGORITHMS[alg])
    throw new JwsRefused(`its algorithm ${JSON.stringify(alg)?.slice(0, 20)} is not one taken (${allowed.join(', ')})`);
  // One the provider did not say it signs with, as far as the caller knows: it may have said so since.
  if (!allowed.includes(alg)) throw new UnknownKey(`its algorithm ${alg} is not one the provider signs with`);
  if (header.crit !== undefined) throw new JwsRefused('it has critical header parameters, which none are understood');
  const kid = header.kid;
  if (kid !== undefined && typeof kid !== 'string') throw new JwsRefused('its kid is not a string');
  const candidates = keys
    .filter((jwk) => kid === undefined || jwk.kid === kid)
    .map((jwk) => publicKeyOf(jwk, alg))
    .filter((key): key is KeyObject => key !== null);
  if (candidates.length === 0)
    throw new UnknownKey(kid === undefined ? `no key fits ${alg}` : `no ${alg} key has kid ${kid.slice(0, 80)}`);
  const data = Buffer.from(`${headerPart}.${payloadPart}`);
  const signature = decodePart(signaturePart, 'signature');
  if (!candidates.some((key) => verifiesWith(alg, key, data, signature)))
    throw new JwsRefused('its signature does not verify');
  return jsonPart(payloadPart, 'payload');
}
