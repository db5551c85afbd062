// The pin of a TLS key: the SHA-256 of the certificate's SubjectPublicKeyInfo, written
// `sha256/<base64>` (RFC 7469). It names the key, not the certificate, so a certificate
// renewed for the same key keeps its pin.

import { createHash, X509Certificate } from 'node:crypto';

export const PIN = /^sha256\/[A-Za-z0-9+/]{43}=$/;

export function pinOf(certificate: X509Certificate | string | Buffer): string {
  const x509 = certificate instanceof X509Certificate ? certificate : new X509Certificate(certificate);
  const spki = x509.publicKey.export({ type: 'spki', format: 'der' });
  return `sha256/${createHash('sha256').update(spki).digest('base64')}`;
}
