// What an ID token (OpenID Connect Core 3.1.3.7) must say before the master trusts who it names: its issuer, meant for
// this client, in date, and the nonce of the sign-in it answers. Its signature is checked before (auth/jws.ts).

import { timingSafeEqual } from 'node:crypto';

/** How far the provider's clock may be from the master's, in seconds. */
const SKEW_SECONDS = 60;

export interface Expected {
  issuer: string;
  clientId: string;
  /** The sign-in's nonce; null for a token from a refresh, which carries none. */
  nonce: string | null;
  nowMs: number;
}

/** The user an ID token names, and what else of it the master reads. */
export interface Identity {
  subject: string;
  claims: Record<string, unknown>;
}

function sameText(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** Why `claims` are not an ID token meant for `expected`, or null with the identity they name. */
export function idTokenProblem(claims: Record<string, unknown>, expected: Expected): string | null {
  const now = expected.nowMs / 1000;
  if (claims.iss !== expected.issuer) return 'it is from another issuer';
  const audience = claims.aud;
  const audiences = typeof audience === 'string' ? [audience] : Array.isArray(audience) ? audience : [];
  if (!audiences.includes(expected.clientId)) return 'it is meant for another client (aud)';
  if (audiences.length > 1 && claims.azp !== expected.clientId) return 'it was issued to another party (azp)';
  if (typeof claims.exp !== 'number') return 'it has no expiry (exp)';
  if (claims.exp + SKEW_SECONDS <= now) return 'it has expired';
  if (typeof claims.iat !== 'number' || claims.iat - SKEW_SECONDS > now)
    return 'its issue time (iat) is missing or ahead';
  if (claims.nbf !== undefined && (typeof claims.nbf !== 'number' || claims.nbf - SKEW_SECONDS > now))
    return 'it is not valid yet (nbf)';
  if (typeof claims.sub !== 'string' || claims.sub.length === 0 || claims.sub.length > 255)
    return 'it names no subject (sub)';
  if (expected.nonce !== null && (typeof claims.nonce !== 'string' || !sameText(claims.nonce, expected.nonce)))
    return 'its nonce is not the sign-in one';
  return null;
}
