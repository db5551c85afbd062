// NodePass URLs (one a line, as `nodepass "..."` commands or bare): `client://` whose tunnel address is the node
// itself is a plain port forward (its tunnel port to its target); a `server://` and the `client://` that dials it
// (the same tunnel port) are the two ends of a tunnel, the server's target port listened on at the node read for,
// the client's target dialled from the other (peer_node); either without the other is listed. Query options are
// NodePass's own (TLS, pools, logs, modes) and are listed; portplane's tunnels are always TLS.

import {
  ruleName,
  SourceError,
  splitHostPort,
  targetOf,
  type ForeignConfig,
  type ForeignTunnel,
  type Unmapped,
} from './foreign.ts';

const LOCAL = new Set(['', '0.0.0.0', '127.0.0.1', 'localhost', '[::]', '[::1]']);

interface End {
  line: number;
  kind: 'server' | 'client';
  tunnel: { host: string; port: number };
  target: { host: string; port: number };
  options: string[];
}

function endOf(line: number, text: string): End {
  const url = /^(server|client):\/\/([^/]*)\/([^?#]*)(?:\?([^#]*))?$/.exec(text);
  if (!url) throw new SourceError(line, `${text.slice(0, 60)} is no server:// or client:// URL`);
  const hostPort = (part: string) =>
    splitHostPort(part.startsWith(':') ? `${part}` : part) ?? splitHostPort(`0.0.0.0${part}`);
  const tunnel = hostPort(url[2]!);
  const target = hostPort(url[3]!);
  if (!tunnel || !target) throw new SourceError(line, `${text.slice(0, 60)}: its addresses must be host:port`);
  return { line, kind: url[1] as End['kind'], tunnel, target, options: (url[4] ?? '').split('&').filter(Boolean) };
}

/** The URLs as rules and tunnels; throws SourceError when a line is no NodePass URL. */
export function readNodepass(source: string): ForeignConfig {
  const unmapped: Unmapped[] = [];
  const ends: End[] = [];
  for (const [i, raw] of source.split(/\r?\n/).entries()) {
    const text = raw
      .trim()
      .replace(/^nodepass\s+/, '')
      .replace(/^["']|["']$/g, '');
    if (text === '' || text.startsWith('#')) continue;
    ends.push(endOf(i + 1, text));
  }
  const rules = [];
  const tunnels: ForeignTunnel[] = [];
  for (const end of ends) {
    for (const option of end.options)
      unmapped.push({ line: end.line, construct: option, why: "NodePass's own option (portplane's tunnels are TLS)" });
    const rule = {
      line: end.line,
      name: ruleName('nodepass', 'tcp+udp', end.kind === 'client' ? end.tunnel.port : end.target.port),
      protocol: 'tcp+udp' as const,
      listen_port: end.kind === 'client' ? end.tunnel.port : end.target.port,
      targets: [targetOf(end.target.host, end.target.port)],
      strategy: 'round_robin' as const,
    };
    if (end.kind === 'client' && LOCAL.has(end.tunnel.host)) {
      rules.push(rule);
      continue;
    }
    if (end.kind === 'client') {
      const server = ends.find((other) => other.kind === 'server' && other.tunnel.port === end.tunnel.port);
      if (server?.options.includes('mode=2') || end.options.includes('mode=2'))
        unmapped.push({
          line: end.line,
          construct: `client://${end.tunnel.host}:${end.tunnel.port}`,
          why: 'forward mode (mode=2): see its server',
        });
      else if (!server)
        unmapped.push({
          line: end.line,
          construct: `client://${end.tunnel.host}:${end.tunnel.port}`,
          why: 'a client without its server here',
        });
      continue;
    }
    const forward = [
      end,
      ...ends.filter((other) => other.kind === 'client' && other.tunnel.port === end.tunnel.port),
    ].some((one) => one.options.includes('mode=2'));
    if (forward) {
      unmapped.push({
        line: end.line,
        construct: `server://:${end.tunnel.port}`,
        why: 'forward mode (mode=2): the client listens, not this node',
      });
      continue;
    }
    const client = ends.find(
      (other) => other.kind === 'client' && other.tunnel.port === end.tunnel.port && !LOCAL.has(other.tunnel.host),
    );
    if (!client) {
      unmapped.push({
        line: end.line,
        construct: `server://:${end.tunnel.port}`,
        why: 'a server without its client: give both ends',
      });
      continue;
    }
    tunnels.push({
      line: end.line,
      name: `nodepass-${end.tunnel.port}`,
      peerIs: 'exit',
      listen_port: end.tunnel.port,
      rule: { ...rule, targets: [targetOf(client.target.host, client.target.port)] },
    });
  }
  return { rules, tunnels, unmapped };
}
