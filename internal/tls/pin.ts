// The pin of a TLS key: the SHA-256 of the certificate's SubjectPublicKeyInfo, written
// `sha256/<base64>` (RFC 7469). It names the key, not the certificate, so a certificate
// renewed for the same key keeps its pin.

import { createHash, createPublicKey, X509Certificate, type KeyObject } from 'node:crypto';
import type { PeerCertificate } from 'node:tls';

export const PIN = /^sha256\/[A-Za-z0-9+/]{43}=$/;

export function pinOf(certificate: X509Certificate | string | Buffer): string {
  const x509 = certificate instanceof X509Certificate ? certificate : new X509Certificate(certificate);
  return keyPinOf(x509.publicKey);
}

/** The pin of a key (a private one: of its public half), as `pinOf` writes a certificate's. */
export function keyPinOf(key: KeyObject): string {
  const spki = (key.type === 'private' ? createPublicKey(key) : key).export({ type: 'spki', format: 'der' });
  return `sha256/${createHash('sha256').update(spki).digest('base64')}`;
}

/**
 * TLS options that trust a peer by its key's pin alone (its certificate may be its own); none without a pin (the
 * system CAs).
 */
export function trustedByPin(pin: string | null): {
  rejectUnauthorized?: false;
  checkServerIdentity?: (host: string, cert: PeerCertificate) => Error | undefined;
} {
  if (!pin) return {};
  return {
    rejectUnauthorized: false,
    checkServerIdentity: (_host, cert) => {
      const presented = pinOf(cert.raw);
      return presented === pin ? undefined : new Error(`the peer presented ${presented}, not ${pin}`);
    },
  };
}
