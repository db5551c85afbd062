// A node's vitals as the API shows them, from its agent's report and the one before it.

import { formatTime } from '../schema/schema.ts';
import type { FaultSite, RelayThreading, VitalsMessage } from './link.ts';

/** Network bytes of a node at a moment: what rates are counted from. */
export interface NetworkTotals {
  atMs: number;
  rx: number;
  tx: number;
}

export interface Vitals {
  at: string;
  cpu_percent: number | null;
  load: number[];
  memory: { total_bytes: number; available_bytes: number };
  interfaces: { name: string; rx_bytes: number; tx_bytes: number }[];
  /** The node's own addresses, but loopback and link-local: what a rule's source_address may be. */
  addresses: string[];
  /** Bytes a second over every interface but loopback, since the previous report; null for the first. */
  network: { rx_bytes_per_second: number | null; tx_bytes_per_second: number | null };
  agent: {
    version: string | null;
    uptime_seconds: number;
    faults: Partial<Record<FaultSite, number>>;
    /** Absent from agents older than the relay's threads. */
    relay?: RelayThreading;
  };
}

const round = (value: number, places: number) => Math.round(value * 10 ** places) / 10 ** places;

/** The totals of `message` at `atMs`, and the vitals it says, with rates against `before` (same agent run). */
export function vitalsOf(
  message: VitalsMessage,
  before: NetworkTotals | null,
  atMs: number,
  agentVersion: string | null,
): { vitals: Vitals; totals: NetworkTotals } {
  const external = message.interfaces.filter((i) => i.name !== 'lo');
  const totals = {
    atMs,
    rx: external.reduce((sum, i) => sum + i.rx_bytes, 0),
    tx: external.reduce((sum, i) => sum + i.tx_bytes, 0),
  };
  const seconds = before ? (atMs - before.atMs) / 1000 : 0;
  // A counter that went back (a reboot, an interface gone) gives no rate rather than a false one.
  const rate = (now: number, then: number | undefined) =>
    then === undefined || seconds <= 0 || now < then ? null : round((now - then) / seconds, 1);
  return {
    totals,
    vitals: {
      at: formatTime(atMs),
      cpu_percent: message.cpu_percent === null ? null : round(message.cpu_percent, 1),
      load: message.load.map((l) => round(l, 2)),
      memory: { total_bytes: message.memory_total_bytes, available_bytes: message.memory_available_bytes },
      interfaces: message.interfaces,
      addresses: message.addresses,
      network: { rx_bytes_per_second: rate(totals.rx, before?.rx), tx_bytes_per_second: rate(totals.tx, before?.tx) },
      agent: {
        version: agentVersion,
        uptime_seconds: message.uptime_seconds,
        faults: Object.fromEntries(message.faults.map(({ site, count }) => [site, count])),
        ...(message.relay ? { relay: message.relay } : {}),
      },
    },
  };
}
