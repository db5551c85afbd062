// WebAuthn challenges the master handed out and not yet answered, in memory, briefly and bounded: each taken once,
// by the ceremony (and, for a registration, the user) it was made for. And, on a standby (whose copy takes no
// write), the signature counters its own passkey sign-ins saw.

import { randomBytes } from 'node:crypto';

/** How long a browser has to answer a challenge. */
export const CHALLENGE_TTL_MS = 5 * 60_000;
/** The most challenges outstanding: past it, the oldest goes (anyone may ask for one at sign-in). */
const MAX_OUTSTANDING = 1000;

interface Outstanding {
  /** `register:<user id>` or `sign-in`. */
  purpose: string;
  atMs: number;
}

export class Challenges {
  private readonly outstanding = new Map<string, Outstanding>();
  private readonly standbyCounts = new Map<number, number>();

  constructor(private readonly now: () => number = Date.now) {}

  /** A new challenge (base64url of 32 random bytes) for `purpose`. */
  issue(purpose: string): string {
    const nowMs = this.now();
    for (const [challenge, entry] of this.outstanding) {
      if (nowMs - entry.atMs < CHALLENGE_TTL_MS && this.outstanding.size < MAX_OUTSTANDING) break;
      this.outstanding.delete(challenge);
    }
    const challenge = randomBytes(32).toString('base64url');
    this.outstanding.set(challenge, { purpose, atMs: nowMs });
    return challenge;
  }

  /** Whether `challenge` was issued for `purpose` and is not too old; taken either way (each once). */
  take(challenge: string, purpose: string): boolean {
    const entry = this.outstanding.get(challenge);
    this.outstanding.delete(challenge);
    return entry !== undefined && entry.purpose === purpose && this.now() - entry.atMs < CHALLENGE_TTL_MS;
  }

  /** On a standby: the highest counter passkey `id` showed here, if any. */
  standbyCount(id: number): number | undefined {
    return this.standbyCounts.get(id);
  }

  setStandbyCount(id: number, count: number): void {
    this.standbyCounts.set(id, count);
  }
}
