// The master's notion of now, injectable so tests can move it forward; times as stored in the
// database are RFC 3339 UTC strings with second precision.

import { formatTime } from '../schema/schema.ts';

export class Clock {
  constructor(readonly now: () => number = Date.now) {}

  /** The current time (plus `offsetMs`) as an RFC 3339 string, as stored in the database. */
  timestamp(offsetMs = 0): string {
    return formatTime(this.now() + offsetMs);
  }
}
