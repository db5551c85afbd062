// How many messages that write state one agent link may send: a bucket of WRITES_BURST, refilled at
// WRITES_PER_MINUTE. A well-behaved agent sends its vitals each report interval, its health and tunnel changes (a
// few, coalesced) and one acknowledgement per config: far below. Past it, a message is dropped, not obeyed, and the
// link is told and logged.

export const WRITES_PER_MINUTE = 600;
export const WRITES_BURST = 300;

export class WriteBudget {
  private tokens = WRITES_BURST;
  private at: number;
  /** Messages dropped since the last `takeDropped`. */
  private dropped = 0;

  constructor(private readonly now: () => number) {
    this.at = now();
  }

  /** Spends one write if the link has one left; otherwise counts the message as dropped. */
  take(): boolean {
    const now = this.now();
    this.tokens = Math.min(WRITES_BURST, this.tokens + ((now - this.at) * WRITES_PER_MINUTE) / 60_000);
    this.at = now;
    if (this.tokens >= 1) {
      this.tokens -= 1;
      return true;
    }
    this.dropped++;
    return false;
  }

  takeDropped(): number {
    const dropped = this.dropped;
    this.dropped = 0;
    return dropped;
  }
}
