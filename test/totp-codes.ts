// The code an authenticator app shows for a base32 secret the master gave, `offsetSeconds` from now: for tests that
// sign in with a second factor where oathtool (test/totp.test.ts's independent check) is not the point.

import { hotp, TOTP_STEP_SECONDS } from '../internal/auth/totp.ts';

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';

export function totpCode(secret: string, offsetSeconds = 0): string {
  const bits = [...secret.toUpperCase()].map((char) => ALPHABET.indexOf(char).toString(2).padStart(5, '0')).join('');
  const key = Buffer.from(bits.match(/.{8}/g)!.map((byte) => parseInt(byte, 2)));
  return hotp(key, Math.floor((Date.now() / 1000 + offsetSeconds) / TOTP_STEP_SECONDS));
}
