// HAProxy (Debian's package) as the peer of the data plane: TCP mode, one thread, pinned to the relay's CPU, so that
// the relay and it are measured on the same core against the same targets; or as many threads as the relay's, on
// every CPU.

import { writeFileSync } from 'node:fs';
import { pinned, start, type Running } from './procs.ts';

export interface Listener {
  name: string;
  /** host:port */
  bind: string;
  /** host:port of what it forwards to; several: balanced round robin */
  server: string | string[];
  /** A PEM file (certificate and key): the listener takes TLS. */
  tlsCertificate?: string;
  /** The listener's server is spoken to over TLS (certificate not checked: the chain measures cost, not trust). */
  tlsToServer?: boolean;
}

/**
 * Writes `file` and starts HAProxy in the foreground with it (in namespace terms, `wrap` the argv): on `threads`
 * threads, one on the relay's CPU, more on every CPU.
 */
export function startHaproxy(
  file: string,
  listeners: Listener[],
  wrap: (argv: string[]) => string[] = (a) => a,
  threads = 1,
): Running {
  const lines = [
    'global',
    `  nbthread ${threads}`,
    '  maxconn 4000',
    'defaults',
    '  mode tcp',
    '  timeout connect 5s',
    '  timeout client 60s',
    '  timeout server 60s',
  ];
  for (const listener of listeners) {
    lines.push(
      `listen ${listener.name}`,
      `  bind ${listener.bind}${listener.tlsCertificate ? ` ssl crt ${listener.tlsCertificate}` : ''}`,
      ...(Array.isArray(listener.server)
        ? ['  balance roundrobin', ...listener.server.map((server, i) => `  server target${i} ${server}`)]
        : [`  server target ${listener.server}${listener.tlsToServer ? ' ssl verify none' : ''}`]),
    );
  }
  writeFileSync(file, `${lines.join('\n')}\n`);
  const argv = ['haproxy', '-db', '-f', file];
  return start(wrap(threads === 1 ? pinned(0, argv) : argv));
}
