// A rule's allow_hours: the times of the week, on the clock of one IANA zone, when it takes new clients. Daylight
// saving is the zone's: a window is read on the wall clock there, so 08:00-18:00 in Europe/Berlin is 07:00-17:00 UTC
// in winter and 06:00-16:00 in summer; on the day the clocks go forward the hour skipped is in no window, and on the
// day they go back the hour repeated is in a window both times it comes.

export const weekdays = ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'] as const;
export type Weekday = (typeof weekdays)[number];

export interface HoursWindow {
  /** The days it starts on; a window whose `to` is before its `from` runs past midnight into the next day. */
  days: Weekday[];
  /** HH:MM, from 00:00 to 23:59. */
  from: string;
  /** HH:MM, from 00:00 to 24:00 (the end of the day); before `from`: the next day's. */
  to: string;
}

export interface AllowHours {
  /** An IANA time zone (Europe/Berlin, America/New_York, UTC). */
  zone: string;
  windows: HoursWindow[];
}

/** Whether `zone` is an IANA zone this runtime knows. */
export function knownZone(zone: string): boolean {
  if (zone.length > 64 || !/^[A-Za-z0-9_+/-]+$/.test(zone)) return false;
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: zone });
    return true;
  } catch {
    return false;
  }
}

/** Minutes since midnight of `HH:MM`. */
export function minutesOf(time: string): number {
  return Number(time.slice(0, 2)) * 60 + Number(time.slice(3, 5));
}

const clocks = new Map<string, Intl.DateTimeFormat>();

/** The weekday and minute of the day at `ms` on `zone`'s wall clock. */
export function wallClock(zone: string, ms: number): { day: Weekday; minute: number } {
  let clock = clocks.get(zone);
  if (!clock) {
    clock = new Intl.DateTimeFormat('en-US', {
      timeZone: zone,
      weekday: 'short',
      hour: '2-digit',
      minute: '2-digit',
      hourCycle: 'h23',
    });
    clocks.set(zone, clock);
  }
  const parts = Object.fromEntries(clock.formatToParts(ms).map((part) => [part.type, part.value]));
  return {
    day: String(parts.weekday).slice(0, 3).toLowerCase() as Weekday,
    minute: Number(parts.hour) * 60 + Number(parts.minute),
  };
}

/** Whether `hours` allows a new client at `ms`. */
export function allowedAt(hours: AllowHours, ms: number): boolean {
  const { day, minute } = wallClock(hours.zone, ms);
  const yesterday = weekdays[(weekdays.indexOf(day) + 6) % 7]!;
  return hours.windows.some((window) => {
    const [from, to] = [minutesOf(window.from), minutesOf(window.to)];
    if (from < to) return window.days.includes(day) && minute >= from && minute < to;
    // Past midnight: from `from` on its own days, and until `to` on the day after.
    return (window.days.includes(day) && minute >= from) || (window.days.includes(yesterday) && minute < to);
  });
}
