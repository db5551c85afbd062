// A node's rules as an nftables script that forwards them without an agent, written to be read: a table of its own
// (inet portplane_export) with a DNAT a rule and protocol at prerouting (several targets drawn by numgen or jhash
// over a map, weights as spans of it) and the source NAT of its targets at postrouting (masquerade, snat to its
// source_address, none with preserve_source). What needs the agent (the relay's controls, names to resolve, health
// checks, quotas) is said in comments: those rules left out, or carried without it. nftables.ts reads it back.

import { relayOnlyReason, type RuleFields } from '../domain/rules.ts';
import { canonicalAddress } from '../schema/net.ts';
import { notCarried, splitHostPort } from './foreign.ts';

/** A health check, for asking what else than its absence keeps a rule on the relay. */
const ANY_CHECK = { interval_seconds: 10, timeout_ms: 1000, fall: 3, rise: 2 };

/** The table the script makes: apart from an agent's (`portplane_<id>`), so that neither touches the other. */
const EXPORT_TABLE = 'portplane_export';

interface Target {
  address: string;
  v6: boolean;
  port: number;
  /** The last port of a range target (the same span as the rule's). */
  last: number | null;
}

/** The rule's targets as the kernel takes them, or why it cannot. */
function targetsOf(rule: RuleFields): Target[] | string {
  const targets: Target[] = [];
  for (const target of rule.targets) {
    const range = /-(\d{1,5})$/.exec(target);
    const split = splitHostPort(range ? target.slice(0, range.index) : target);
    const address = split && canonicalAddress(split.host.replace(/^\[|\]$/g, ''));
    if (!split || !address) return `its target ${target} is a name: the kernel needs addresses`;
    targets.push({ address, v6: address.includes(':'), port: split.port, last: range ? Number(range[1]) : null });
  }
  if (new Set(targets.map((t) => t.v6)).size > 1) return 'its targets are of both address families';
  if (rule.listen_port_end !== null && targets.some((t) => t.port !== rule.listen_port))
    return 'its targets shift its port range: a DNAT to a range picks any port of it';
  if (targets.length > 1 && new Set(targets.map((t) => t.port)).size > 1)
    return 'its targets have different ports: one DNAT sends to one port';
  return targets;
}

/** The address part of a DNAT: one address, or a map drawn by numgen (in turn, at random) or jhash of the client. */
function addressOf(rule: RuleFields, targets: Target[]): string {
  if (targets.length === 1) return targets[0]!.address;
  const weights = targets.map((_, i) => rule.weights?.[i] ?? 1);
  let at = 0;
  const spans = targets.map((target, i) => {
    const span = weights[i]! === 1 ? `${at}` : `${at}-${at + weights[i]! - 1}`;
    at += weights[i]!;
    return `${span} : ${target.address}`;
  });
  const draw =
    rule.strategy === 'source_hash'
      ? `jhash ${targets[0]!.v6 ? 'ip6' : 'ip'} saddr mod ${at}`
      : `numgen ${rule.strategy === 'random' ? 'random' : 'inc'} mod ${at}`;
  return `${draw} map { ${spans.join(', ')} }`;
}

/** The matches of who may use the rule. */
function sourcesOf(rule: RuleFields, v6: boolean): string {
  const family = v6 ? 'ip6' : 'ip';
  const own = (list: string[]) => list.filter((block) => block.includes(':') === v6);
  const allowed = own(rule.allow_sources);
  const denied = own(rule.deny_sources);
  return [
    allowed.length > 0 ? `${family} saddr { ${allowed.join(', ')} } ` : '',
    denied.length > 0 ? `${family} saddr != { ${denied.join(', ')} } ` : '',
  ].join('');
}

/** A node's rules as a script for `nft -f`. */
export function writeNftables(rules: readonly RuleFields[]): string {
  const notes: string[] = [];
  const prerouting: string[] = [];
  const postrouting = new Map<string, string>();
  for (const rule of rules) {
    const quota = rule.quota;
    // Several targets without health checks are the agent's concern (the relay moves on from one that does not
    // answer); here each gets its share, up or not, as the comment under the rule says.
    const why = !rule.enabled
      ? 'it is disabled'
      : (relayOnlyReason({ ...rule, quota: null, health_check: rule.health_check ?? ANY_CHECK }) ??
        (quota ? 'its quota is counted by the master' : null));
    const targets = why ? null : targetsOf(rule);
    if (why || typeof targets === 'string') {
      notes.push(`# rule ${rule.name} (port ${rule.listen_port}) is left out: ${why ?? targets}`);
      continue;
    }
    const first = (rule.strategy === 'failover' || rule.strategy === 'lowest_latency') && targets!.length > 1;
    const used = first ? targets!.slice(0, 1) : targets!;
    const uncarried = notCarried(rule, ['allow_sources', 'deny_sources', 'preserve_source', 'source_address']);
    if (first) uncarried.push(`strategy ${rule.strategy} (no health checks: the first target takes every client)`);
    else if (used.length > 1) uncarried.push('health checks (a target down still gets its share)');
    prerouting.push(`# rule ${rule.name}${uncarried.length > 0 ? `; not carried: ${uncarried.join(', ')}` : ''}`);
    const v6 = used[0]!.v6;
    const ports = rule.listen_port_end === null ? `${rule.listen_port}` : `${rule.listen_port}-${rule.listen_port_end}`;
    const to = `${addressOf(rule, used)}${rule.listen_port_end === null ? ` : ${used[0]!.port}` : ''}`;
    const match =
      rule.protocol === 'tcp+udp' ? `meta l4proto { tcp, udp } th dport ${ports}` : `${rule.protocol} dport ${ports}`;
    prerouting.push(`${sourcesOf(rule, v6)}${match} dnat ${v6 ? 'ip6' : 'ip'} to ${to}`);
    if (rule.preserve_source) continue;
    for (const target of used) {
      const nat = rule.source_address ? `snat ${v6 ? 'ip6' : 'ip'} to ${rule.source_address}` : 'masquerade';
      postrouting.set(target.address, `${v6 ? 'ip6' : 'ip'} daddr ${target.address} ${nat}`);
    }
  }
  return [
    '#!/usr/sbin/nft -f',
    `# portplane rules as nftables: the table inet ${EXPORT_TABLE} (nft -f to load it, nft delete table inet`,
    `# ${EXPORT_TABLE} to remove it). The node must forward (net.ipv4.ip_forward=1, net.ipv6.conf.all.forwarding=1)`,
    '# and its own filter let the connections through.',
    ...notes,
    `table inet ${EXPORT_TABLE} {`,
    '  chain prerouting {',
    '    type nat hook prerouting priority dstnat; policy accept;',
    ...prerouting.map((line) => `    ${line}`),
    '  }',
    '  chain postrouting {',
    '    type nat hook postrouting priority srcnat; policy accept;',
    ...[...postrouting.values()].map((line) => `    ${line}`),
    '  }',
    '}',
    '',
  ].join('\n');
}
