// The foreign formats read and written, each by its module: the one place that names them all.

import type { RuleFields } from '../domain/rules.ts';
import type { ForeignConfig, Unmapped } from './foreign.ts';
import { readGost } from './gost.ts';
import { readHaproxy, writeHaproxy } from './haproxy.ts';
import { readIptables } from './iptables.ts';
import { readNftables } from './nftables.ts';
import { readNodepass } from './nodepass.ts';
import { writeNftables } from './nftables-script.ts';
import { readRealm, writeRealm } from './realm.ts';

const readers = {
  realm: readRealm,
  iptables: readIptables,
  nftables: readNftables,
  haproxy: readHaproxy,
  gost: readGost,
  nodepass: readNodepass,
} satisfies Record<string, (source: string) => ForeignConfig>;
const writers = { realm: writeRealm, nftables: writeNftables, haproxy: writeHaproxy } satisfies Record<
  string,
  (rules: readonly RuleFields[]) => string
>;

export type ImportFormat = keyof typeof readers;
export type ExportFormat = keyof typeof writers;
export const importFormats = Object.keys(readers) as ImportFormat[];
export const exportFormats = Object.keys(writers) as ExportFormat[];

/** What a foreign source asks for: read for `node` (and `peer_node`, where a pair of ends makes a tunnel). */
export interface ForeignImport {
  format: ImportFormat;
  node: string;
  peer_node: string | null;
  source: string;
}

/** A tunnel as an export document names it. */
interface NamedTunnel {
  name: string;
  entry_node: string;
  exit_node: string;
  listen_port: number;
  transport: 'tls';
}

/**
 * A foreign source as the tunnels and rules of an export document (to be checked as any document is: its defaults
 * filled in, its fields held to the rules'), with what did not map and the source line of each rule and tunnel.
 */
export interface Translated {
  tunnels: NamedTunnel[];
  rules: object[];
  unmapped: Unmapped[];
  lines: { rules: number[]; tunnels: number[] };
}

/** Reads `request.source` in its format. Throws SourceError when it is not that format at all. */
export function translate(request: ForeignImport): Translated {
  const read = readers[request.format](request.source);
  const unmapped = [...read.unmapped];
  const rules: object[] = read.rules.map(({ line: _line, ...rule }) => ({ ...rule, node: request.node }));
  const tunnels: NamedTunnel[] = [];
  const tunnelLines: number[] = [];
  for (const tunnel of read.tunnels) {
    if (request.peer_node === null) {
      unmapped.push({
        line: tunnel.line,
        construct: tunnel.name,
        why: 'a pair of ends becomes a tunnel with peer_node',
      });
      continue;
    }
    tunnels.push({
      name: tunnel.name,
      entry_node: tunnel.peerIs === 'entry' ? request.peer_node : request.node,
      exit_node: tunnel.peerIs === 'exit' ? request.peer_node : request.node,
      listen_port: tunnel.listen_port,
      transport: 'tls',
    });
    tunnelLines.push(tunnel.line);
    const { line: _line, ...rule } = tunnel.rule;
    rules.push({ ...rule, node: tunnel.peerIs === 'entry' ? request.peer_node : request.node, tunnel: tunnel.name });
  }
  const ruleLines = [
    ...read.rules.map((rule) => rule.line),
    ...(request.peer_node === null ? [] : read.tunnels.map((tunnel) => tunnel.rule.line)),
  ];
  return {
    tunnels,
    rules,
    unmapped: unmapped.sort((a, b) => a.line - b.line),
    lines: { rules: ruleLines, tunnels: tunnelLines },
  };
}

/** A node's rules in `format`, for a config that runs without an agent. */
export function exportAs(format: ExportFormat, rules: readonly RuleFields[]): string {
  return writers[format](rules);
}
