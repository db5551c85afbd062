// How many bytes an agent can plausibly have relayed: a bucket that fills at a line rate no
// node exceeds, from the last report of the node's that was counted. A report that claims more
// is not traffic but a lie, and ends the link before anything is counted. Nothing an operator
// sets moves it: a longer report interval only means the bytes since the last report are more.

/** 2 x 100 Gbit/s: a node's relays in both directions at full line rate. */
export const LINE_RATE_BYTES_PER_SECOND = 25e9;

/** Time for the bytes counted by an agent just before the report the master counted last, and for clocks. */
const SLACK_SECONDS = 60;
/** The longest span a link starts with credit for: a week at line rate is more than any node moves. */
const MAX_CREDIT_SECONDS = 7 * 86_400;

export class TrafficAllowance {
  private available: number;
  private updatedMs: number;

  /** `countedAtMs`: when the master counted the node's last report (or first knew the node), so a backlog fits. */
  constructor(
    private readonly now: () => number,
    countedAtMs: number,
  ) {
    this.updatedMs = now();
    const since = Number.isFinite(countedAtMs) ? Math.max(0, this.updatedMs - countedAtMs) / 1000 : 0;
    this.available = LINE_RATE_BYTES_PER_SECOND * Math.min(MAX_CREDIT_SECONDS, since + SLACK_SECONDS);
  }

  /** Spends `bytes` if the node could have relayed that much; false (spending nothing) otherwise. */
  take(bytes: number): boolean {
    const now = this.now();
    this.available += (LINE_RATE_BYTES_PER_SECOND * Math.max(0, now - this.updatedMs)) / 1000;
    this.updatedMs = now;
    if (bytes > this.available) return false;
    this.available -= bytes;
    return true;
  }
}
