// A rule's traffic quota: how many bytes it may carry in a period, counted in the direction(s) its writer bills, and
// when the period starts over. Periods are in UTC: a day from reset_hour, a month from reset_day at reset_hour (days
// past the 28th are not offered: every month has them).

export const quotaPeriods = ['none', 'day', 'month'] as const;
export type QuotaPeriod = (typeof quotaPeriods)[number];
/** Which bytes count: in (client to target), out (back to the client), or both. */
export const quotaDirections = ['in', 'out', 'both'] as const;
export type QuotaDirection = (typeof quotaDirections)[number];

export interface Quota {
  bytes: number;
  period: QuotaPeriod;
  direction: QuotaDirection;
  /** The day of the month a monthly period starts (1 to 28). */
  reset_day: number;
  /** The hour (UTC) a daily or monthly period starts. */
  reset_hour: number;
}

/** How much of its quota a rule has used in the current period. */
export interface QuotaUsage {
  used_bytes: number;
  period_started_at: string;
  /** When the period starts over; null for a quota with no period. */
  resets_at: string | null;
}

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

/** The period of `quota` that holds `nowMs`: its start and the next one's (null when it never starts over). */
export function quotaPeriodAt(quota: Quota, nowMs: number): { start: number; next: number | null } {
  if (quota.period === 'none') return { start: nowMs, next: null };
  if (quota.period === 'day') {
    const start = Math.floor((nowMs - quota.reset_hour * HOUR) / DAY) * DAY + quota.reset_hour * HOUR;
    return { start, next: start + DAY };
  }
  const now = new Date(nowMs);
  const startIn = (year: number, month: number) => Date.UTC(year, month, quota.reset_day, quota.reset_hour);
  let start = startIn(now.getUTCFullYear(), now.getUTCMonth());
  if (start > nowMs) start = startIn(now.getUTCFullYear(), now.getUTCMonth() - 1);
  const from = new Date(start);
  return { start, next: startIn(from.getUTCFullYear(), from.getUTCMonth() + 1) };
}
