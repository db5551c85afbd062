// What iptables and nftables say alike: DNATs in the nat table's prerouting hook, and the source NAT that goes with
// them, as rules. DNATs of one port and protocol are one rule of several targets (spread as the source spreads them);
// the same port for TCP and for UDP to the same place is one tcp+udp rule. The POSTROUTING that goes with a DNAT
// decides how the targets see clients: MASQUERADE is what a rule does, SNAT to one address its source_address, and
// no SNAT at all preserve_source (for a rule of one target).

import type { Protocol, Strategy } from '../domain/rules.ts';
import { ruleName, type ForeignRule, type Unmapped } from './foreign.ts';

/** A DNAT as read: its line, what it matches and where it sends. */
export interface Dnat {
  line: number;
  protocol: 'tcp' | 'udp';
  ports: [number, number];
  target: string;
  /** The target's address, to find the source NAT that goes with it. */
  targetHost: string;
  sources: string[];
  denied: string[];
  spread: Strategy | null;
  /** Its share of new clients among the rule's targets (a span of a numgen or jhash map). */
  weight: number;
}

/** Source NAT by the destination it applies to (an address), or to everything (`all`). */
export interface SourceNat {
  byTarget: Map<string, { kind: 'masquerade' | 'snat'; to: string | null }>;
  all: boolean;
}

/** DNATs of one protocol and port as one rule; TCP and UDP alike as one tcp+udp rule. */
export function natRules(format: string, dnats: Dnat[], nat: SourceNat, unmapped: Unmapped[]): ForeignRule[] {
  const byPort = new Map<string, Dnat[]>();
  for (const dnat of dnats) {
    const key = `${dnat.protocol}/${dnat.ports.join('-')}`;
    byPort.set(key, [...(byPort.get(key) ?? []), dnat]);
  }
  const rules: ForeignRule[] = [];
  for (const group of byPort.values()) {
    const [first] = group;
    const rule: ForeignRule = {
      line: first!.line,
      name: ruleName(
        format,
        first!.protocol,
        first!.ports[0],
        first!.ports[1] === first!.ports[0] ? null : first!.ports[1],
      ),
      protocol: first!.protocol,
      listen_port: first!.ports[0],
      listen_port_end: first!.ports[1] === first!.ports[0] ? null : first!.ports[1],
      targets: [...new Set(group.map((dnat) => dnat.target))],
      ...(group.some((dnat) => dnat.weight !== 1) && new Set(group.map((dnat) => dnat.target)).size === group.length
        ? { weights: group.map((dnat) => dnat.weight) }
        : {}),
      strategy: first!.spread ?? 'round_robin',
    };
    const sources = [...new Set(group.flatMap((dnat) => dnat.sources))];
    const denied = [...new Set(group.flatMap((dnat) => dnat.denied))];
    if (sources.length > 0) rule.allow_sources = sources;
    if (denied.length > 0) rule.deny_sources = denied;
    const outs = group.map(
      (dnat) => nat.byTarget.get(dnat.targetHost) ?? (nat.all ? { kind: 'masquerade' as const, to: null } : null),
    );
    // No SNAT: the targets see the clients' addresses, which a rule of one target keeps with preserve_source.
    if (outs.every((out) => out === null) && rule.targets.length === 1) rule.preserve_source = true;
    else if (outs.every((out) => out === null))
      unmapped.push({
        line: rule.line,
        construct: rule.name,
        why: "no SNAT for its targets: a rule of several targets shows them the node's address, not the client's",
      });
    else if (outs.every((out) => out?.kind === 'snat' && out.to !== null && out.to === outs[0]!.to))
      rule.source_address = outs[0]!.to;
    else if (outs.some((out) => out === null))
      unmapped.push({
        line: rule.line,
        construct: rule.name,
        why: 'some targets are masqueraded and some not: all are',
      });
    rules.push(rule);
  }
  // TCP and UDP of the same port to the same targets: one rule for both.
  const out: ForeignRule[] = [];
  for (const rule of rules) {
    const twin = out.find(
      (other) =>
        other.listen_port === rule.listen_port &&
        other.listen_port_end === rule.listen_port_end &&
        other.protocol !== rule.protocol &&
        other.protocol !== 'tcp+udp' &&
        JSON.stringify({ ...other, line: 0, name: '', protocol: '' }) ===
          JSON.stringify({ ...rule, line: 0, name: '', protocol: '' }),
    );
    if (twin) {
      twin.protocol = 'tcp+udp' as Protocol;
      twin.name = ruleName(format, 'tcp+udp', twin.listen_port, twin.listen_port_end);
    } else out.push(rule);
  }
  return out;
}
