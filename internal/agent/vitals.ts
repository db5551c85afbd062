// How the node is doing, as its agent reports it with each report interval: CPU since the last reading, load,
// memory, and each network interface's bytes (Linux's /proc/net/dev; none elsewhere).

import { readFileSync } from 'node:fs';
import { cpus, freemem, loadavg, networkInterfaces as osInterfaces, totalmem } from 'node:os';
import { MAX_ADDRESSES, MAX_INTERFACES, type RelayThreading, type VitalsMessage } from '../domain/link.ts';
import { localKind } from '../schema/net.ts';
import { faults } from '../relay/faults.ts';

const INTERFACE_NAME = /^[A-Za-z0-9_.:@-]{1,15}$/;

/** Bytes received and sent per interface, from the text of /proc/net/dev. */
export function parseNetDev(text: string): VitalsMessage['interfaces'] {
  const interfaces: VitalsMessage['interfaces'] = [];
  // Two header lines, then `name: rx_bytes packets errs drop fifo frame compressed multicast tx_bytes ...`.
  for (const line of text.split('\n').slice(2)) {
    const colon = line.indexOf(':');
    if (colon < 0) continue;
    const name = line.slice(0, colon).trim();
    const fields = line
      .slice(colon + 1)
      .trim()
      .split(/\s+/)
      .map(Number);
    const [rx, tx] = [fields[0], fields[8]];
    if (!INTERFACE_NAME.test(name) || !Number.isSafeInteger(rx) || !Number.isSafeInteger(tx)) continue;
    interfaces.push({ name, rx_bytes: rx!, tx_bytes: tx! });
    if (interfaces.length === MAX_INTERFACES) break;
  }
  return interfaces;
}

function networkInterfaces(): VitalsMessage['interfaces'] {
  try {
    return parseNetDev(readFileSync('/proc/net/dev', 'utf8'));
  } catch {
    return [];
  }
}

/**
 * The node's own addresses a rule may dial from (source_address): every interface's, but loopback and link-local
 * ones (which need a zone or reach nothing beyond the node), each once.
 */
export function ownAddresses(): string[] {
  const found = new Set<string>();
  for (const addresses of Object.values(osInterfaces()))
    for (const { address, internal } of addresses ?? []) {
      const kind = localKind(address);
      if (!internal && kind !== 'link-local' && kind !== 'loopback' && !address.includes('%')) found.add(address);
    }
  return [...found].slice(0, MAX_ADDRESSES);
}

function cpuTimes(): { busy: number; total: number } {
  let busy = 0;
  let total = 0;
  for (const { times } of cpus()) {
    const all = times.user + times.nice + times.sys + times.idle + times.irq;
    total += all;
    busy += all - times.idle;
  }
  return { busy, total };
}

export class VitalsMeter {
  private lastCpu = cpuTimes();
  private readonly startedAt = performance.now();

  /**
   * The node's vitals now; CPU is counted since the previous reading (or since the meter was made). With its
   * addresses only for a master that reads them (`withAddresses`): an older one ends a link on a field it does not
   * know.
   */
  read(
    withAddresses: boolean,
    /** The relay's threads, for a master that reads them. */
    relay?: RelayThreading,
  ): Omit<VitalsMessage, 'faults' | 'addresses' | 'relay'> & Partial<VitalsMessage> {
    const cpu = cpuTimes();
    const spent = cpu.total - this.lastCpu.total;
    const cpuPercent = spent > 0 ? Math.min(100, Math.max(0, ((cpu.busy - this.lastCpu.busy) / spent) * 100)) : null;
    this.lastCpu = cpu;
    const total = totalmem();
    const contained = faults.totals();
    return {
      type: 'vitals',
      cpu_percent: cpuPercent,
      load: loadavg().map((l) => Math.min(1_000_000, Math.max(0, l))),
      memory_total_bytes: total,
      memory_available_bytes: Math.min(total, freemem()),
      interfaces: networkInterfaces(),
      uptime_seconds: Math.floor((performance.now() - this.startedAt) / 1000),
      ...(withAddresses ? { addresses: ownAddresses() } : {}),
      // Only when there were any: a master older than faults would end the link on a field it does not know.
      ...(contained.length > 0 ? { faults: contained } : {}),
      ...(relay ? { relay } : {}),
    };
  }
}
