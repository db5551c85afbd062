// How many bytes an agent can plausibly have relayed: a bucket that fills at a line rate no
// node exceeds, from the last time the master heard from the node. A report that claims more
// is not traffic but a lie, and ends the link before anything is counted.

/** 2 x 100 Gbit/s: a node's relays in both directions at full line rate. */
export const LINE_RATE_BYTES_PER_SECOND = 25e9;

export class TrafficAllowance {
  private available: number;
  private updatedMs: number;

  /**
   * `heardAtMs`: when the master last heard from the node, so reports held through an outage
   * fit; `intervalSeconds`: the report interval, whose bytes may have been counted before that.
   */
  constructor(
    private readonly now: () => number,
    heardAtMs: number,
    intervalSeconds: number,
  ) {
    this.updatedMs = now();
    const since = Number.isFinite(heardAtMs) ? Math.max(0, this.updatedMs - heardAtMs) / 1000 : 0;
    this.available = LINE_RATE_BYTES_PER_SECOND * (since + 2 * intervalSeconds);
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
