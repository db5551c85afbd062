// Connections the kernel carries for its rules, counted from its connection tracking table as this network namespace
// sees it (/proc/net/nf_conntrack): each entry whose original direction is to one of the rules' ports, by protocol and
// port. Read to a bound: past it, the counts are of the entries read (a node with more connections than that is told
// as "at least"); where the table cannot be read (no procfs for conntrack), there is nothing to count.

import { open } from 'node:fs/promises';

const TABLE = '/proc/net/nf_conntrack';
/** The most of the table read in one count: about 100,000 entries. */
const MAX_BYTES = 32 * 1024 * 1024;
/** What ends a TCP connection's life in the table while it still stands there. */
const GONE = new Set(['TIME_WAIT', 'CLOSE', 'CLOSE_WAIT', 'LAST_ACK', 'FIN_WAIT']);

export interface PortCount {
  /** `tcp:443`, `udp:53`. */
  key: string;
  open: number;
}

/** Entries of the conntrack table by `protocol:port` of their original destination; null when it cannot be read. */
export async function countConnections(ports: ReadonlySet<string>, table = TABLE): Promise<Map<string, number> | null> {
  let file;
  try {
    file = await open(table, 'r');
  } catch {
    return null;
  }
  const counts = new Map<string, number>();
  try {
    const buffer = Buffer.alloc(1024 * 1024);
    let read = 0;
    let rest = '';
    while (read < MAX_BYTES) {
      const { bytesRead } = await file.read(buffer, 0, buffer.length, null);
      if (bytesRead === 0) break;
      read += bytesRead;
      const lines = (rest + buffer.toString('latin1', 0, bytesRead)).split('\n');
      rest = lines.pop() ?? '';
      for (const line of lines) {
        const key = keyOf(line);
        if (key !== null && ports.has(key)) counts.set(key, (counts.get(key) ?? 0) + 1);
      }
    }
  } finally {
    await file.close();
  }
  return counts;
}

/** `tcp:443` of a conntrack line (`ipv4 2 tcp 6 431999 ESTABLISHED src=... dst=... sport=... dport=443 ...`). */
function keyOf(line: string): string | null {
  const fields = line.trim().split(/\s+/);
  const protocol = fields[2];
  if (protocol !== 'tcp' && protocol !== 'udp') return null;
  if (protocol === 'tcp' && GONE.has(fields[5] ?? '')) return null;
  // The first dport is the original direction's: the port the client asked for.
  const dport = fields.find((field) => field.startsWith('dport='));
  return dport ? `${protocol}:${dport.slice(6)}` : null;
}
