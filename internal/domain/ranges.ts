// Port ranges: a rule listens on listen_port, or on listen_port to listen_port_end (inclusive), each port forwarded
// to its target's one port (`host:port`) or to the port at the same place of the target's range (`host:lo-hi`, as
// many ports as the rule's). What both the master (validation, claims) and the agent (relay, kernel) reckon with.

import { parseTarget, type TargetAddress } from '../schema/net.ts';

/** The most ports one rule covers. */
export const MAX_RANGE_PORTS = 10_000;

/**
 * The most ports of one rule the relay listens on (a socket each, per transport): a wider range is the kernel's
 * alone, which takes it as one element of its maps.
 */
export const RELAY_RANGE_PORTS = 1_000;

export interface PortSpan {
  listen_port: number;
  listen_port_end: number | null;
}

/** A count as people read it: 10,000. */
export function counted(n: number): string {
  return n.toLocaleString('en');
}

/** The last port a rule listens on (its listen_port without a range). */
export function lastPort(rule: PortSpan): number {
  return rule.listen_port_end ?? rule.listen_port;
}

export function portCount(rule: PortSpan): number {
  return lastPort(rule) - rule.listen_port + 1;
}

/** The ports as people write them: `8080`, or `30000-30999`. */
export function portsText(rule: PortSpan): string {
  return rule.listen_port_end === null ? String(rule.listen_port) : `${rule.listen_port}-${rule.listen_port_end}`;
}

/** The port `target` is sent to for a client of the rule's port `offset` places past its listen_port. */
export function portAt(target: TargetAddress, offset: number): number {
  return target.lastPort === undefined ? target.port : target.port + offset;
}

/**
 * How the kernel sends a rule's ports to its targets, or null when it cannot: `fixed`, every port to each target's
 * one port (a single port rule's case); `kept`, each port to the same port of the target (ranges starting where the
 * rule's starts); `shifted`, one target whose range starts elsewhere, an element per port (nftables' DNAT adds no
 * offset to a port). Several targets' ranges starting elsewhere, or targets of both forms, have no kernel form.
 */
export type KernelPorts = 'fixed' | 'kept' | 'shifted';

export function kernelPorts(rule: PortSpan & { targets: readonly string[] }): KernelPorts | null {
  const targets = rule.targets.map(parseTarget);
  if (targets.every((target) => target?.lastPort === undefined)) return 'fixed';
  if (targets.every((target) => target?.lastPort !== undefined && target.port === rule.listen_port)) return 'kept';
  return targets.length === 1 ? 'shifted' : null;
}

/** What is wrong with a rule's range and its targets' ports, by field; none when they go together. */
export function rangeErrors(
  rule: PortSpan & { targets: readonly string[]; tunnel_id: number | null },
): { field: 'listen_port_end' | 'targets'; index?: number; detail: string }[] {
  const errors: ReturnType<typeof rangeErrors> = [];
  const end = rule.listen_port_end;
  if (end !== null) {
    if (end < rule.listen_port) errors.push({ field: 'listen_port_end', detail: `is below listen_port` });
    else if (portCount(rule) > MAX_RANGE_PORTS)
      errors.push({
        field: 'listen_port_end',
        detail: `makes a range of ${counted(portCount(rule))} ports; a rule covers at most ${counted(MAX_RANGE_PORTS)}`,
      });
    if (rule.tunnel_id !== null)
      errors.push({ field: 'listen_port_end', detail: 'is for direct rules: a tunnel carries one port per rule' });
  }
  rule.targets.forEach((given, index) => {
    const target = parseTarget(given);
    if (target?.lastPort === undefined) return;
    const ports = target.lastPort - target.port + 1;
    if (end === null)
      errors.push({ field: 'targets', index, detail: 'is a range of ports, which is for a rule with listen_port_end' });
    else if (end >= rule.listen_port && ports !== portCount(rule))
      errors.push({
        field: 'targets',
        index,
        detail:
          `covers ${ports} ports and the rule ${portCount(rule)}: a range target has one port for each of the ` +
          "rule's",
      });
  });
  return errors;
}

/**
 * The most ports one request (a batch, an import) may claim, each port of each transport once: what its claims cost
 * the master to write is bounded, whatever the number of rules and nodes it names.
 */
export const MAX_PORTS_PER_REQUEST = 1_000_000;

/** Why `rules` claim too many ports for one request, or null. */
export function portBudgetProblem(rules: readonly (PortSpan & { protocol: string })[]): string | null {
  let claimed = 0;
  for (const rule of rules) claimed += portCount(rule) * (rule.protocol === 'tcp+udp' ? 2 : 1);
  return claimed > MAX_PORTS_PER_REQUEST
    ? `claim ${counted(claimed)} ports (each port of each protocol); one request claims at most ` +
        `${counted(MAX_PORTS_PER_REQUEST)}: send them in parts`
    : null;
}
