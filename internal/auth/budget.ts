// Per-user write budget, shared by all of a user's tokens and sessions (so logging in again
// does not renew it): a fixed window of `limit` writes a minute (the setting
// write_budget_per_minute), reported with the IETF RateLimit header fields so scripts can pace
// themselves.

/** The budget's window: a minute, as the setting that sizes it says. */
const WINDOW_SECONDS = 60;

export interface BudgetState {
  allowed: boolean;
  limit: number;
  remaining: number;
  resetSeconds: number;
  windowSeconds: number;
}

export class WriteBudget {
  private readonly windows = new Map<number, { start: number; used: number }>();

  constructor(private readonly now: () => number = Date.now) {}

  /** Looks without spending. A `limit` of 0 means unlimited. */
  peek(userId: number, limit: number): BudgetState {
    return this.state(userId, limit, WINDOW_SECONDS, false);
  }

  /** Spends one write if any is left. */
  spend(userId: number, limit: number): BudgetState {
    return this.state(userId, limit, WINDOW_SECONDS, true);
  }

  /** Forgets the windows that have ended. */
  sweep(): void {
    const cutoff = this.now() - WINDOW_SECONDS * 1000;
    for (const [id, window] of this.windows) if (window.start <= cutoff) this.windows.delete(id);
  }

  private state(userId: number, limit: number, windowSeconds: number, spend: boolean): BudgetState {
    const now = this.now();
    const windowMs = windowSeconds * 1000;
    let window = this.windows.get(userId);
    if (!window || now - window.start >= windowMs) {
      window = { start: now, used: 0 };
      if (spend) this.windows.set(userId, window);
    }
    const resetSeconds = Math.max(1, Math.ceil((window.start + windowMs - now) / 1000));
    if (limit === 0) return { allowed: true, limit, remaining: 0, resetSeconds, windowSeconds };
    const allowed = window.used < limit;
    if (spend && allowed) window.used += 1;
    return { allowed, limit, remaining: Math.max(0, limit - window.used), resetSeconds, windowSeconds };
  }
}

/** `RateLimit-Policy` and `RateLimit` values (draft-ietf-httpapi-ratelimit-headers). */
export function rateLimitHeaders(state: BudgetState): Record<string, string> {
  if (state.limit === 0) return {};
  return {
    'RateLimit-Policy': `"writes";q=${state.limit};w=${state.windowSeconds}`,
    RateLimit: `"writes";r=${state.remaining};t=${state.resetSeconds}`,
  };
}
