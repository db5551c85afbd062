// Failed-login throttling per username and per client address. An attempt is reserved as a
// failure before its password is checked, so concurrent guesses cannot all slip through
// while the first are still hashing; a success takes its reservation back.
//
// Per address the limit is hard: past it, that address waits until its oldest failure ages
// out. Per username it is progressive: past the limit, each further attempt waits twice as
// long as the one before, up to MAX_USER_DELAY_MS. A stranger guessing at `admin` from many
// addresses so slows those guesses down without ever locking the real admin out for long.

import { sourceOf } from '../schema/net.ts';
import { FailureWindow, MAX_KEYS } from './failures.ts';

export interface ThrottleLimits {
  maxPerUser: number;
  maxPerAddress: number;
  windowMs: number;
}

/** The longest a username's next attempt waits, however many failures it has. */
export const MAX_USER_DELAY_MS = 60_000;

export interface Attempt {
  /** The password was right: the reservation is taken back and the user's failures forgotten. */
  succeeded(): void;
  /** The attempt was never judged (e.g. the server was too busy): it counts as nothing. */
  abandoned(): void;
}

export class LoginThrottle {
  private readonly failures: FailureWindow;
  /** When each username last failed (or reserved), for its progressive delay. */
  private readonly lastFailure = new Map<string, number>();

  constructor(private readonly now: () => number = Date.now) {
    this.failures = new FailureWindow(now);
  }

  /**
   * Reserves an attempt: returns the milliseconds to wait (> 0) when it may not be made now,
   * or the attempt, already counted as a failure until it says otherwise.
   */
  begin(username: string, address: string, limits: ThrottleLimits): number | Attempt {
    const user = `u:${username.toLowerCase()}`;
    const addr = `a:${sourceOf(address)}`;
    const wait = Math.max(
      this.userWait(user, limits),
      this.failures.retryAfterMs(addr, limits.maxPerAddress, limits.windowMs),
    );
    if (wait > 0) return wait;
    this.failures.record(user, limits.windowMs);
    this.failures.record(addr, limits.windowMs);
    const previous = this.lastFailure.get(user);
    // In the order of their last failure, as many as the failures kept: the oldest goes first.
    this.lastFailure.delete(user);
    this.lastFailure.set(user, this.now());
    if (this.lastFailure.size > MAX_KEYS) this.lastFailure.delete(this.lastFailure.keys().next().value!);
    return {
      succeeded: () => {
        this.failures.clear(user);
        this.lastFailure.delete(user);
        this.failures.forgetOne(addr);
      },
      abandoned: () => {
        this.failures.forgetOne(user);
        this.failures.forgetOne(addr);
        if (previous === undefined) this.lastFailure.delete(user);
        else this.lastFailure.set(user, previous);
      },
    };
  }

  /** Drops what has aged out (the maps are bounded anyway). */
  sweep(windowMs: number): void {
    this.failures.sweep(windowMs);
    const cutoff = this.now() - windowMs;
    for (const [key, at] of this.lastFailure) {
      if (at > cutoff) break;
      this.lastFailure.delete(key);
    }
  }

  private userWait(user: string, limits: ThrottleLimits): number {
    const excess = this.failures.count(user, limits.windowMs) - limits.maxPerUser;
    if (excess < 0) return 0;
    const delay = Math.min(1000 * 2 ** excess, MAX_USER_DELAY_MS);
    return Math.max(0, (this.lastFailure.get(user) ?? 0) + delay - this.now());
  }
}
