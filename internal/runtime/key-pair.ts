// An Ed25519 key pair written for an operator: DIR/NAME-private.pem (0600, never over an existing one: what it
// signed would no longer verify) and DIR/NAME-public.pem.

import { generateKeyPairSync } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeFileAtomic } from './files.ts';

/** Writes the pair; returns the two paths, or throws naming the private key that exists already. */
export function writeKeyPair(dir: string, name: string): { privatePath: string; publicPath: string } {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const privatePath = join(dir, `${name}-private.pem`);
  const publicPath = join(dir, `${name}-public.pem`);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  try {
    writeFileSync(privatePath, privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600, flag: 'wx' });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    throw new Error(`${privatePath} exists already; move it away to make a new key pair`, { cause: error });
  }
  writeFileAtomic(publicPath, publicKey.export({ type: 'spki', format: 'pem' }).toString(), 0o644);
  return { privatePath, publicPath };
}
