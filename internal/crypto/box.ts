// Encryption at rest for secrets the master must read back (SSH keys and passwords):
// AES-256-GCM with a random 96-bit nonce, under a key kept in the data dir or, better, in a
// file of its own outside it (--secret-key), so that a copy of the data dir alone is not
// enough to read the fleet's credentials.

import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';

const KEY_BYTES = 32;
const NONCE_BYTES = 12;
const TAG_BYTES = 16;

export class SecretBox {
  private constructor(private readonly keyBytes: Buffer) {}

  /** Reads the key at `path`, creating it (0600) on first use. Throws if it exists but is malformed. */
  static open(path: string): SecretBox {
    let key: Buffer;
    try {
      key = readFileSync(path);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      key = randomBytes(KEY_BYTES);
      writeFileSync(path, key, { mode: 0o600, flag: 'wx' });
    }
    if (key.length !== KEY_BYTES) throw new Error(`${path} must hold exactly ${KEY_BYTES} bytes`);
    return new SecretBox(key);
  }

  /** The same box in a worker thread of this process, made from `key()`. */
  static of(key: Uint8Array): SecretBox {
    if (key.length !== KEY_BYTES) throw new Error(`a sealing key is ${KEY_BYTES} bytes`);
    return new SecretBox(Buffer.from(key));
  }

  /** A copy of the key, for a worker thread of this process (`SecretBox.of`) and nothing else. */
  key(): Uint8Array {
    return new Uint8Array(this.keyBytes);
  }

  /** Returns nonce | tag | ciphertext. */
  seal(plaintext: string): Buffer {
    const nonce = randomBytes(NONCE_BYTES);
    const cipher = createCipheriv('aes-256-gcm', this.keyBytes, nonce);
    const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
    return Buffer.concat([nonce, cipher.getAuthTag(), body]);
  }

  /** Throws if the box was altered or sealed under another key. */
  open(sealed: Uint8Array): string {
    const data = Buffer.from(sealed);
    const decipher = createDecipheriv('aes-256-gcm', this.keyBytes, data.subarray(0, NONCE_BYTES));
    decipher.setAuthTag(data.subarray(NONCE_BYTES, NONCE_BYTES + TAG_BYTES));
    return Buffer.concat([decipher.update(data.subarray(NONCE_BYTES + TAG_BYTES)), decipher.final()]).toString('utf8');
  }
}
