// The master's TLS identity: a certificate and key from files the operator gives, or one the
// master makes for itself once and keeps in the data dir. Reloadable (renewals), with the pin
// agents check it by.

import { createPrivateKey, X509Certificate } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { writeFileAtomic } from '../runtime/files.ts';
import { hostname, networkInterfaces } from 'node:os';
import { join } from 'node:path';
import { selfSigned } from './certificate.ts';
import { pinOf } from './pin.ts';

export interface TlsFiles {
  certPath: string;
  keyPath: string;
}

/**
 * The names a certificate made for `listenHost` should carry: the address (or, for a wildcard, every local one) and the
 * hostname.
 */
export function namesFor(listenHost: string): string[] {
  const wildcard = listenHost === '0.0.0.0' || listenHost === '::' || listenHost === '';
  const addresses = wildcard
    ? Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((i) => i.address.replace(/%.*$/, '')))
    : [listenHost];
  return [...new Set([hostname(), 'localhost', ...addresses])];
}

/**
 * The certificate the master made for itself in `dataDir/tls`, made on first use (0600) and
 * the same ever after, so agents' pins keep matching across restarts.
 */
export function selfSignedFiles(dataDir: string, listenHost: string): TlsFiles {
  const dir = join(dataDir, 'tls');
  const files = { certPath: join(dir, 'cert.pem'), keyPath: join(dir, 'key.pem') };
  if (!existsSync(files.certPath) || !existsSync(files.keyPath)) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const made = selfSigned(namesFor(listenHost));
    writeFileAtomic(files.keyPath, made.key);
    writeFileAtomic(files.certPath, made.cert);
  }
  return files;
}

export class TlsIdentity {
  cert!: string;
  key!: string;
  /** `sha256/<base64>` of the certificate's public key (RFC 7469). */
  pin!: string;
  /** Valid until, as the certificate says. */
  notAfter!: string;

  constructor(readonly files: TlsFiles) {
    this.reload();
  }

  /** Reads the files again. Throws (keeping the current identity) if they do not hold a certificate and its key. */
  reload(): void {
    const cert = readFileSync(this.files.certPath, 'utf8');
    const key = readFileSync(this.files.keyPath, 'utf8');
    const x509 = new X509Certificate(cert);
    if (!x509.checkPrivateKey(createPrivateKey(key)))
      throw new Error(`${this.files.keyPath} is not the key of ${this.files.certPath}`);
    Object.assign(this, { cert, key, pin: pinOf(x509), notAfter: new Date(x509.validTo).toISOString() });
  }
}
