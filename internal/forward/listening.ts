// The ports programs of this node listen on, as the kernel lists its sockets (/proc/net/tcp, tcp6, udp, udp6, of the
// agent's network namespace): what a range the kernel alone carries must leave to them.

import { readFile } from 'node:fs/promises';

/** A listening TCP socket's state in /proc/net/tcp; a bound UDP socket's (unconnected). */
const LISTENING = { tcp: '0A', udp: '07' } as const;

/** The ports listened on for `transport`, sorted; none where the lists cannot be read. */
export async function listeningPorts(transport: 'tcp' | 'udp'): Promise<number[]> {
  const ports = new Set<number>();
  for (const file of [`/proc/net/${transport}`, `/proc/net/${transport}6`]) {
    let text: string;
    try {
      text = await readFile(file, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      // sl local_address rem_address st ...: the local address ends in :PORT (hex).
      const [, local, , state] = line.trim().split(/\s+/);
      if (state !== LISTENING[transport] || !local) continue;
      ports.add(Number.parseInt(local.slice(local.lastIndexOf(':') + 1), 16));
    }
  }
  return [...ports].sort((a, b) => a - b);
}
