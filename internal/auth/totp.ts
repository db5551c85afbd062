// Time-based one-time passwords (RFC 6238 over RFC 4226's HOTP): HMAC-SHA1, 30 s steps, 6 digits, what every
// authenticator app reads from an otpauth:// URI. A code is taken within a step either way of the master's clock, and
// each step once per user (the caller keeps the last step taken). Recovery codes stand in for a lost device, once each.

import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

export const TOTP_STEP_SECONDS = 30;
export const TOTP_DIGITS = 6;
/** Steps either way of the clock a code is taken within: a phone's clock a little off, a code typed late. */
const WINDOW = 1;
/** 160 bits: RFC 4226's recommended length for an HMAC-SHA1 key. */
const SECRET_BYTES = 20;
export const RECOVERY_CODES = 10;

const BASE32 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';

/** RFC 4648 base32 without padding: how authenticator apps take a secret. */
export function base32(bytes: Uint8Array): string {
  let bits = 0;
  let value = 0;
  let out = '';
  for (const byte of bytes) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += BASE32[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += BASE32[(value << (5 - bits)) & 31];
  return out;
}

export function newTotpSecret(): Buffer {
  return randomBytes(SECRET_BYTES);
}

/** The code of `step` (RFC 4226 5.3: the dynamic truncation of HMAC-SHA1 of the step counter). */
export function hotp(secret: Uint8Array, step: number): string {
  const counter = Buffer.alloc(8);
  counter.writeBigUInt64BE(BigInt(step));
  const mac = createHmac('sha1', secret).update(counter).digest();
  const offset = mac[mac.length - 1]! & 0x0f;
  const number = mac.readUInt32BE(offset) & 0x7fffffff;
  return String(number % 10 ** TOTP_DIGITS).padStart(TOTP_DIGITS, '0');
}

export function stepAt(nowMs: number): number {
  return Math.floor(nowMs / 1000 / TOTP_STEP_SECONDS);
}

/**
 * The step whose code `code` is, within WINDOW steps of `nowMs` and after `lastStep` (a step taken is not taken
 * again); null when none. Every candidate is compared in constant time, and all of them each call.
 */
export function matchingStep(secret: Uint8Array, code: string, nowMs: number, lastStep: number | null): number | null {
  if (!/^[0-9]{6}$/.test(code)) return null;
  const given = Buffer.from(code);
  const now = stepAt(nowMs);
  let found: number | null = null;
  for (let step = now - WINDOW; step <= now + WINDOW; step++) {
    const same = timingSafeEqual(Buffer.from(hotp(secret, step)), given);
    if (same && found === null && (lastStep === null || step > lastStep)) found = step;
  }
  return found;
}

/** An otpauth:// URI for authenticator apps (their key URI format): the master as issuer, the user as account. */
export function otpauthUri(secret: Uint8Array, issuer: string, account: string): string {
  const label = `${encodeURIComponent(issuer)}:${encodeURIComponent(account)}`;
  const query = new URLSearchParams({
    secret: base32(secret),
    issuer,
    algorithm: 'SHA1',
    digits: String(TOTP_DIGITS),
    period: String(TOTP_STEP_SECONDS),
  });
  return `otpauth://totp/${label}?${query}`;
}

/**
 * Ten recovery codes, each 16 characters of base32 (80 bits, so that a fast hash keeps them as API tokens are kept) in
 * four groups: xxxx-xxxx-xxxx-xxxx.
 */
export function newRecoveryCodes(): string[] {
  return Array.from({ length: RECOVERY_CODES }, () => base32(randomBytes(10)).toLowerCase().match(/.{4}/g)!.join('-'));
}

/** A recovery code as typed, the way it was hashed: lower case, without spaces or the dash. */
export function recoveryForm(code: string): string {
  return code.toLowerCase().replace(/[\s-]/g, '');
}
