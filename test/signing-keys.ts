// Keys to sign tokens with as a provider (or a forger) would: RS256, ES256, EdDSA, made with node:crypto.

import { generateKeyPairSync, sign, type JsonWebKey } from 'node:crypto';

export interface SigningKey {
  kid: string;
  alg: 'RS256' | 'ES256' | 'EdDSA';
  private: JsonWebKey;
}

export function signingKey(kid: string, alg: SigningKey['alg'] = 'RS256'): SigningKey {
  const pair =
    alg === 'RS256'
      ? generateKeyPairSync('rsa', { modulusLength: 2048 })
      : alg === 'ES256'
        ? generateKeyPairSync('ec', { namedCurve: 'P-256' })
        : generateKeyPairSync('ed25519');
  return { kid, alg, private: pair.privateKey.export({ format: 'jwk' }) };
}

/** `claims` signed as a JWS with `key` (what a forger, or the provider, would send). */
export function signedToken(claims: Record<string, unknown>, key: SigningKey): string {
  const header = Buffer.from(JSON.stringify({ alg: key.alg, kid: key.kid, typ: 'JWT' })).toString('base64url');
  const payload = Buffer.from(JSON.stringify(claims)).toString('base64url');
  const data = Buffer.from(`${header}.${payload}`);
  const privateKey = { key: key.private, format: 'jwk' as const };
  const signature =
    key.alg === 'EdDSA'
      ? sign(null, data, privateKey)
      : sign('sha256', data, key.alg === 'ES256' ? { ...privateKey, dsaEncoding: 'ieee-p1363' } : privateKey);
  return `${header}.${payload}.${signature.toString('base64url')}`;
}

/** The claims of a JWS, unverified (the test's own reading). */
export function claimsOf(token: string): Record<string, unknown> {
  return JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString('utf8'));
}
