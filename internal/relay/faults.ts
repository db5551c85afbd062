// A fault in one flow (a relayed connection, a UDP session, a probe, a health check, a tunnel's stream) ends that flow
// and nothing else. Node runs the data plane's callbacks (a socket's events, a timer, a DNS answer) with nothing above
// them: a throw there would end the agent, and every rule of its node with it, on one client's datagram. So every such
// callback goes through `contained`, which turns a throw into the end of its own flow, counts it by where it happened
// and tells the agent, which logs it and reports the counts with the node's vitals.

import type { FaultSite } from '../domain/link.ts';

class Faults {
  private readonly counts = new Map<FaultSite, number>();
  /** Told of each fault contained (the agent logs it). */
  onFault: (site: FaultSite, error: Error) => void = () => undefined;

  record(site: FaultSite, thrown: unknown): void {
    this.counts.set(site, (this.counts.get(site) ?? 0) + 1);
    const error = thrown instanceof Error ? thrown : new Error(String(thrown));
    try {
      this.onFault(site, error);
    } catch {
      // telling of a fault must not be one
    }
  }

  /** Faults contained since the agent started, by site; sites with none are left out. */
  totals(): { site: FaultSite; count: number }[] {
    return [...this.counts].map(([site, count]) => ({ site, count }));
  }
}

/** The faults of this process's data plane. */
export const faults = new Faults();

/**
 * `handler` as a callback whose throw ends only its flow: the fault is counted at `site`, then `end` (given the error
 * and the callback's arguments) lets go of what the flow holds. A throw from `end` itself is counted and dropped.
 */
export function contained<A extends unknown[]>(
  site: FaultSite,
  handler: (...args: A) => void,
  end: (error: unknown, ...args: A) => void,
): (...args: A) => void {
  return (...args) => {
    try {
      handler(...args);
    } catch (error) {
      faults.record(site, error);
      try {
        end(error, ...args);
      } catch (again) {
        faults.record(site, again);
      }
    }
  };
}
