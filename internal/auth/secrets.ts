// Bearer secrets and password hashes. Secrets carry a recognisable prefix and 256 bits of
// randomness and are stored only as SHA-256; passwords use scrypt with a per-hash salt.

import { createHash, randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from 'node:crypto';
import { ID_DIGITS } from '../schema/ids.ts';

const AGENT_TOKEN = new RegExp(`^mat_(${ID_DIGITS})_[A-Za-z0-9_-]{43}$`);

export const SECRET_PREFIXES = { api: 'mst_', session: 'mss_', agent: 'mat_' } as const;
export type SecretKind = keyof typeof SECRET_PREFIXES;

export function newSecret(kind: SecretKind): string {
  return SECRET_PREFIXES[kind] + randomBytes(32).toString('base64url');
}

/** The kind a presented secret claims to be, or null when it has none of our shapes. */
export function secretKind(secret: string): SecretKind | null {
  if (!/^[a-z]{3}_[A-Za-z0-9_-]{43}$/.test(secret)) return null;
  for (const [kind, prefix] of Object.entries(SECRET_PREFIXES)) {
    if (secret.startsWith(prefix)) return kind as SecretKind;
  }
  return null;
}

/**
 * An agent token names its node (`mat_<node id>_<secret>`), so a failed link can be recorded
 * on the node it claims to be, and the check is one hash comparison in constant time.
 */
export function newAgentToken(nodeId: number): string {
  return `${SECRET_PREFIXES.agent}${nodeId}_${randomBytes(32).toString('base64url')}`;
}

/** The node id an agent token claims, or null when it is not of that shape. */
export function agentTokenNode(token: string): number | null {
  const match = AGENT_TOKEN.exec(token);
  return match ? Number(match[1]) : null;
}

export function sameHash(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

/** The lookup key stored in place of a secret; a fast hash suffices for 256 random bits. */
export function hashSecret(secret: string): Buffer {
  return createHash('sha256').update(secret).digest();
}

/** Shortest password a user may set. */
export const MIN_PASSWORD = 10;

/** What a user who signs in only by the provider (or a passkey) has for a password hash: none verifies. */
export const NO_PASSWORD = 'none';

// N=2^15, r=8: 32 MiB and tens of milliseconds per hash. The parameters are stored with
// each hash so they can be raised later without breaking existing passwords.
const SCRYPT = { N: 32768, r: 8, p: 1, keylen: 32 };

/** Thrown when too much password hashing is already under way; the caller answers 429 and may retry. */
export class PasswordWorkBusy extends Error {
  constructor() {
    super('too many password checks are under way');
  }
}

// Each hash takes 32 MiB and a thread of libuv's small pool (shared with file and DNS work),
// so a flood of logins could starve the process: a few run at once, a few more wait, the
// rest are turned away at once.
const MAX_HASHING = 2;
const MAX_WAITING = 16;
let hashing = 0;
const waiting: (() => void)[] = [];

async function scryptAsync(password: string, salt: Buffer, keylen: number, options: ScryptOptions): Promise<Buffer> {
  if (hashing < MAX_HASHING) hashing += 1;
  else if (waiting.length >= MAX_WAITING) throw new PasswordWorkBusy();
  // A finishing hash hands its slot straight to the first waiter.
  else await new Promise<void>((resolve) => waiting.push(resolve));
  try {
    return await new Promise((resolve, reject) => {
      scrypt(password, salt, keylen, options, (error, key) => (error ? reject(error) : resolve(key)));
    });
  } finally {
    const next = waiting.shift();
    if (next) next();
    else hashing -= 1;
  }
}

function maxmemFor(N: number, r: number): number {
  return 256 * N * r + 1024 * 1024;
}

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const { N, r, p, keylen } = SCRYPT;
  const key = await scryptAsync(password, salt, keylen, { N, r, p, maxmem: maxmemFor(N, r) });
  return ['scrypt', N, r, p, salt.toString('base64url'), key.toString('base64url')].join('$');
}

/** Compares in constant time. A malformed stored hash never verifies. */
export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const [scheme, n, r, p, salt, key] = stored.split('$');
  if (scheme !== 'scrypt' || !salt || !key) return false;
  const expected = Buffer.from(key, 'base64url');
  const N = Number(n);
  const R = Number(r);
  const actual = await scryptAsync(password, Buffer.from(salt, 'base64url'), expected.length, {
    N,
    r: R,
    p: Number(p),
    maxmem: maxmemFor(N, R),
  });
  return timingSafeEqual(actual, expected);
}

// A login for an unknown user still pays for one hash, so timing does not reveal which
// usernames exist.
let decoy: Promise<string> | undefined;
export function decoyHash(): Promise<string> {
  decoy ??= hashPassword(randomBytes(16).toString('base64url'));
  return decoy;
}
