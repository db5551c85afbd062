// The nftables table an agent owns, `inet portplane_<node id>` (one per node, so that agents of several nodes on one
// machine, as when trying portplane out, keep apart), written out whole for one transaction: direct rules DNAT'ed by
// the kernel to their target (and masqueraded, so that replies come back through the node, unless the rule keeps
// the client's address), with a pair of named counters per rule. Nothing outside the table is touched.
//
// A rule with one target up is an element of the port map; with several, its port jumps (a verdict map) to a chain
// of its own whose DNAT draws the target from an anonymous map: numgen over the weighted cycle, or jhash of the
// client's address over the source buckets (domain/spread.ts). The agent fills these with the targets up.
//
// Which packets: those addressed to one of the node's own addresses (fib daddr type local), from other hosts
// (prerouting) and from the node itself (output), but not to loopback: loopback stays with the relay, which holds
// every kernel rule's port as well (so the port is taken, as for any rule, and a client the kernel does not take,
// such as one of an address family the target lacks, is still forwarded).
//
// What the counters count: IP packets of the rule's connections, headers included, in the direction the relay calls
// in (client to target, counted where the packet enters the node or leaves the node's own sockets) and out (back).
// Named counters survive a transaction that declares them again, so re-applying never resets them.
//
// The node's own limits hold in the kernel as in the relay: a client address may hold at most `perSource` connections
// (and UDP flows) on a rule's port at once, conntrack counting them (a set of address and port with `ct count`), more
// are refused (TCP reset, UDP dropped); and a TCP connection idle for `tcpIdleSeconds` is forgotten by conntrack (a
// timeout policy set on each new connection), and its next packet, which is no new connection's SYN, is reset. A
// timeout object is named by its value, since one declared again keeps the value it had.

import { ID_DIGITS } from '../schema/ids.ts';
import { bucketOwners, SOURCE_BUCKETS } from '../domain/spread.ts';
import type { KernelPorts } from '../domain/ranges.ts';
import { carries } from '../domain/rules.ts';

const AGENT_TABLE = new RegExp(`^portplane_${ID_DIGITS}$`);
const COUNTER = new RegExp(`^r(${ID_DIGITS})_(in|out|refused)$`);

/** The table of the node with this id. */
export function tableOf(nodeId: number): string {
  return `portplane_${nodeId}`;
}

/** Whether `name` is a table an agent made (what `agent --uninstall` removes). */
export function isAgentTable(name: string): boolean {
  return AGENT_TABLE.test(name);
}

export interface Destination {
  address: string;
  port: number;
}

/** Who may use a rule: `allow` (null: everyone) but `deny`, each a list of blocks (`10.0.0.0/8`, `2001:db8::1`). */
export interface Sources {
  allow: readonly string[] | null;
  deny: readonly string[];
}

/** One of a rule's targets the kernel sends new clients to: its place among the rule's targets, its weight. */
export interface KernelTarget {
  index: number;
  weight: number;
  v4: Destination | null;
  v6: Destination | null;
}

/** How the kernel spreads new clients over several targets (one target takes them all). */
export const kernelSpreads = ['round_robin', 'random', 'source_hash'] as const;
export type Spread = (typeof kernelSpreads)[number];

/**
 * A rule as the kernel carries it: its port, the targets it sends new clients to (those up; none: every client goes
 * to the relay, which refuses them at once, as with every target down; established connections go on), how it
 * spreads them, who may use it.
 */
export interface KernelRule {
  id: number;
  protocol: 'tcp' | 'udp' | 'tcp+udp';
  listen_port: number;
  /** The last port of its range (listen_port without one). */
  lastPort?: number;
  /** How its ports map to its targets' (see domain/ranges.ts); absent: fixed, each target's one port. */
  ports?: KernelPorts;
  targets: KernelTarget[];
  spread: Spread;
  /** Null: every client. */
  sources?: Sources | null;
  /** Connections (TCP) and flows (UDP) the rule carries at once, both counted together; null: the node's limits. */
  maxConnections?: number | null;
  /** New connections (TCP) and flows (UDP) a second, with a burst of as many, each protocol its own; null: any. */
  newPerSecond?: number | null;
  /** No source NAT: targets see the client's address (and route their replies back through the node). */
  preserveSource?: boolean;
  /** The node's address its connections to the targets come from (source NAT to it); null: masquerade's choice. */
  source?: string | null;
  /** TCP rules only (see relayOnlyReason): what the kernel lets through before it resets the rule's connections. */
  quota?: KernelQuota | null;
}

/**
 * A rule's quota as the kernel holds it: a quota object declared with the bytes of the period and what the master
 * had counted of it (`used`), named by the period and the bytes, so that each config's declaration keeps the object
 * (and what the kernel counted into it) until the period starts over or the bytes change, which make a new one.
 */
export interface KernelQuota {
  bytes: number;
  used: number;
  /** Which way of a connection is billed: client to target (in), back (out) or both. */
  direction: 'in' | 'out' | 'both';
  /** When the period started, in seconds since the epoch (0: a quota without periods). */
  periodStart: number;
}

/**
 * How far past its quota the kernel carries a rule: what the master, counting the same bytes, needs to see the quota
 * spent (and stop the rule) before the kernel refuses a packet, whatever the size of the packet that crosses it (a
 * GRO'ed segment is up to 64 KiB). It is the relay's bound too (one read of 256 KiB), but for the rule, not each
 * connection.
 */
export const QUOTA_SLACK = 256 * 1024;

/** The quota object of rule `id` for `quota`'s period and bytes. */
export function quotaName(id: number, quota: Pick<KernelQuota, 'bytes' | 'periodStart'>): string {
  return `r${id}_quota_${quota.periodStart}_${quota.bytes}`;
}

const QUOTA = new RegExp(`^r${ID_DIGITS}_quota_\\d+_\\d+$`);

/** Whether `name` is a quota object this table makes (see quotaName). */
export function isQuotaName(name: string): boolean {
  return QUOTA.test(name);
}

/**
 * What a table holds that a rewrite deletes when no rule needs it any more: by name, counters, chains, quotas and idle
 * timeout policies.
 */
export interface Held {
  counters: ReadonlySet<string>;
  chains: ReadonlySet<string>;
  quotas: ReadonlySet<string>;
  timeouts: ReadonlySet<string>;
}

export const NOTHING_HELD: Held = { counters: new Set(), chains: new Set(), quotas: new Set(), timeouts: new Set() };

const IDLE_TIMEOUT = /^tcp_idle[46]_\d+$/;

/**
 * What of a table outlined (see Outline) a rewrite may delete when no rule needs it: the objects of this agent's
 * making. Of a table it wrote, `heldIn(outlineOf(plan))`.
 */
export function heldIn(outline: Outline | null): Held {
  const counters = new Set<string>();
  const chains = new Set<string>();
  const quotas = new Set<string>();
  const timeouts = new Set<string>();
  for (const object of outline?.objects ?? []) {
    const name = object.slice(object.lastIndexOf(' ') + 1);
    if (object.startsWith('counter ') && counterOf(name)) counters.add(name);
    else if (object.startsWith('chain ') && isSpreadChain(name)) chains.add(name);
    else if (object.startsWith('quota ') && isQuotaName(name)) quotas.add(name);
    else if (object.startsWith('ct timeout ') && IDLE_TIMEOUT.test(name)) timeouts.add(name);
  }
  return { counters, chains, quotas, timeouts };
}

/**
 * A TCP port the kernel carried until lately, and how many seconds more its connections are reset at their next
 * packet: long enough that each has either sent one or been forgotten by conntrack (the rule's idle timeout policy).
 */
export interface ClosedPort {
  port: number;
  last: number;
  seconds: number;
}

/** Whether the kernel refuses some of `rule`'s clients itself, counting them (in a `refused` counter of the rule). */
function refuses(rule: KernelRule): boolean {
  return Boolean(rule.sources) || (rule.maxConnections ?? null) !== null || (rule.newPerSecond ?? null) !== null;
}

/** What a counter counts: a rule's bytes in (client to target) or out, or the clients it refused (packets). */
export type Direction = 'in' | 'out' | 'refused';

export function counterName(id: number, direction: Direction): string {
  return `r${id}_${direction}`;
}

/** The rule id and direction a counter of this table is for; null for a name this table never makes. */
export function counterOf(name: string): { id: number; direction: Direction } | null {
  const match = COUNTER.exec(name);
  return match ? { id: Number(match[1]), direction: match[2] as Direction } : null;
}

/** The chain that spreads `rule`'s new clients of one transport and address family over its targets. */
export function spreadChainName(id: number, l4: 'tcp' | 'udp', family: 4 | 6): string {
  return `r${id}_${l4}${family}`;
}

const SPREAD_CHAIN = new RegExp(`^r${ID_DIGITS}_(tcp|udp)[46]$`);

/** Whether `name` is a chain this table makes per spread rule (see spreadChainName). */
export function isSpreadChain(name: string): boolean {
  return SPREAD_CHAIN.test(name);
}

/**
 * What a spread chain's DNAT sends a new client to, as an nftables expression: a map from a number the kernel draws
 * per connection (numgen: in turn or at random over the weighted cycle; jhash of the client's address over
 * SOURCE_BUCKETS) to a target. Weights are spans of the cycle (`slotOwner`), source hashing the relay's own buckets
 * (`bucketOwners`), so both paths spread a rule alike.
 */
function spreadExpression(rule: KernelRule, members: KernelTarget[], family: 4 | 6, dest: (t: KernelTarget) => string) {
  const byIndex = new Map(members.map((member) => [member.index, member]));
  const spans: string[] = [];
  const addSpan = (from: number, to: number, index: number) =>
    spans.push(`${from === to ? from : `${from}-${to}`} : ${dest(byIndex.get(index)!)}`);
  if (rule.spread === 'source_hash') {
    const owners = bucketOwners(members);
    let from = 0;
    for (let bucket = 1; bucket <= owners.length; bucket++)
      if (bucket === owners.length || owners[bucket] !== owners[from]) {
        addSpan(from, bucket - 1, owners[from]!);
        from = bucket;
      }
    const saddr = family === 4 ? 'ip saddr' : 'ip6 saddr';
    return `jhash ${saddr} mod ${SOURCE_BUCKETS} map { ${spans.join(', ')} }`;
  }
  let slot = 0;
  for (const member of members) {
    addSpan(slot, slot + member.weight - 1, member.index);
    slot += member.weight;
  }
  return `numgen ${rule.spread === 'random' ? 'random' : 'inc'} mod ${slot} map { ${spans.join(', ')} }`;
}

/**
 * What picks out a new connection (or a UDP flow's first datagram) of `rule` on `l4` once the kernel DNAT'ed it: the
 * port its client asked for, kept by conntrack. No route lookup: the DNAT made it already.
 */
function newToRule(rule: KernelRule, l4: 'tcp' | 'udp'): string {
  return `ct state new ct status dnat meta l4proto ${l4} ct original proto-dst ${portKey(rule)}`;
}

/**
 * The rules of the `sources` chain for `rule` on `l4`: per address family, new connections (or a UDP client's first
 * datagram of a flow; a refused one starts none, so each is counted) from a denied block, or from outside the allowed
 * ones (all of a family the allow list has no block of), are refused and counted.
 */
function sourceRules(rule: KernelRule, l4: 'tcp' | 'udp', refuse: string): string[] {
  const sources = rule.sources;
  if (!sources) return [];
  const count = `counter name "${counterName(rule.id, 'refused')}" ${refuse}`;
  const rules: string[] = [];
  for (const [nfproto, saddr, v6] of [
    ['ipv4', 'ip saddr', false],
    ['ipv6', 'ip6 saddr', true],
  ] as const) {
    const fresh = `${newToRule(rule, l4)} meta nfproto ${nfproto}`;
    const ofFamily = (blocks: readonly string[]) => blocks.filter((block) => block.includes(':') === v6);
    const denied = ofFamily(sources.deny);
    if (denied.length > 0) rules.push(`${fresh} ${saddr} { ${elements(denied)} } ${count}`);
    if (sources.allow === null) continue;
    const allowed = ofFamily(sources.allow);
    rules.push(allowed.length > 0 ? `${fresh} ${saddr} != { ${elements(allowed)} } ${count}` : `${fresh} ${count}`);
  }
  return rules;
}

const L4 = ['tcp', 'udp'] as const;

/** The rule's ports as a key of the table's maps and sets (all intervals): `8080`, or `30000-30999`. */
function portKey(rule: KernelRule): string {
  const last = rule.lastPort ?? rule.listen_port;
  return last === rule.listen_port ? String(rule.listen_port) : `${rule.listen_port}-${last}`;
}

/** What a rule's connections are counted under, together (rule_flows): its id, in the set's 32 bits. */
function flowKey(rule: KernelRule): number {
  return rule.id % 2 ** 32;
}

/**
 * The port map's elements for one of a rule's targets, of one family: its ports to the target's one port (fixed), or
 * each port to the one at the same place of the target's range (shifted: an element per port, since nftables' DNAT
 * adds no offset to a port).
 */
function portElements(rule: KernelRule, to: Destination): string[] {
  if (rule.ports !== 'shifted') return [`${portKey(rule)} : ${to.address} . ${to.port}`];
  const elements: string[] = [];
  for (let port = rule.listen_port; port <= (rule.lastPort ?? rule.listen_port); port++)
    elements.push(`${port} : ${to.address} . ${to.port + port - rule.listen_port}`);
  return elements;
}

function elements(entries: string[]): string {
  return entries.join(', ');
}

/** The node's limits the kernel holds its rules to (the agent's config: max_connections_per_source and its like). */
export interface KernelLimits {
  perSource: number;
  tcpIdleSeconds: number;
}

/** The timeout policy of TCP connections for an address family, by its value (see above). */
export function idleTimeoutName(family: 4 | 6, seconds: number): string {
  return `tcp_idle${family}_${seconds}`;
}

/**
 * What the table is to hold, in parts a later write can compare: its declarations (sets, maps, objects, chains: each
 * declared again keeps what it has), each chain's rules in order, and each map's and set's elements (the sets the
 * kernel fills itself are none of these).
 */
export interface TablePlan {
  declarations: string[];
  chains: Map<string, string[]>;
  elements: Map<string, string[]>;
}

/** The base chains, each written whole by every plan (spread chains come and go with their rules). */
const BASE_CHAINS = [
  'prerouting',
  'output',
  'to_rules',
  'postrouting',
  'count_prerouting',
  'count_output',
  'conn_limits',
  'fresh_tcp',
  'fresh_udp',
  'sources',
  'sources_local',
  'stop_prerouting',
  'stop_output',
];

/** Elements that time out by themselves: written whole every time, never compared. */
const VOLATILE = new Set(['tcp_closed']);

export function tablePlan(
  rules: readonly KernelRule[],
  limits: KernelLimits,
  closed: readonly ClosedPort[] = [],
): TablePlan {
  const declarations: string[] = [];
  const chains = new Map<string, string[]>(BASE_CHAINS.map((name) => [name, []]));
  const elements = new Map<string, string[]>();
  const rule = (chain: string, body: string) => chains.get(chain)!.push(body);
  const fill = (name: string, entries: string[]) => {
    const list = elements.get(name);
    if (!list) elements.set(name, [...entries]);
    else for (const entry of entries) list.push(entry);
  };
  // A rule's connections and flows at once, by its id (flowKey): TCP and UDP, every port of its range, together, as
  // the relay counts them.
  declarations.push('set rule_flows { type mark; flags dynamic; }');
  // Every map and set keyed by port takes intervals: a rule's range is one element.
  for (const l4 of L4) {
    declarations.push(
      `map ${l4}4 { type inet_service : ipv4_addr . inet_service; flags interval; }`,
      `map ${l4}6 { type inet_service : ipv6_addr . inet_service; flags interval; }`,
      // Ranges whose targets keep the port: the DNAT names the address alone.
      `map ${l4}4_kept { type inet_service : ipv4_addr; flags interval; }`,
      `map ${l4}6_kept { type inet_service : ipv6_addr; flags interval; }`,
      `map ${l4}_in { type inet_service : counter; flags interval; }`,
      `map ${l4}_out { type inet_service : counter; flags interval; }`,
      `set ${l4}_ports { type inet_service; flags interval; }`,
      // The ports whose connections are source-NATed: all but those of rules that keep the client's address.
      `set ${l4}_snat { type inet_service; flags interval; }`,
      // Of those, the ports whose connections come from a given address of the node (a rule's source_address).
      `map ${l4}4_source { type inet_service : ipv4_addr; flags interval; }`,
      `map ${l4}6_source { type inet_service : ipv6_addr; flags interval; }`,
      `map ${l4}4_spread { type inet_service : verdict; flags interval; }`,
      `map ${l4}6_spread { type inet_service : verdict; flags interval; }`,
      `set ${l4}4_sources { type ipv4_addr . inet_service; flags dynamic; }`,
      `set ${l4}6_sources { type ipv6_addr . inet_service; flags dynamic; }`,
    );
    for (const name of [`${l4}4`, `${l4}6`, `${l4}4_kept`, `${l4}6_kept`, `${l4}_in`, `${l4}_out`])
      elements.set(name, []);
    for (const name of [`${l4}4_source`, `${l4}6_source`]) elements.set(name, []);
    for (const name of [`${l4}_ports`, `${l4}_snat`, `${l4}4_spread`, `${l4}6_spread`]) elements.set(name, []);
  }
  for (const [family, l3] of [
    [4, 'ip'],
    [6, 'ip6'],
  ] as const) {
    declarations.push(
      `ct timeout ${idleTimeoutName(family, limits.tcpIdleSeconds)} { protocol tcp; l3proto ${l3}; ` +
        `policy = { established: ${limits.tcpIdleSeconds} }; }`,
    );
  }
  for (const r of rules)
    for (const direction of ['in', 'out', ...(refuses(r) ? ['refused' as const] : [])] as const)
      declarations.push(`counter ${counterName(r.id, direction)} { }`);
  // Declared with what the master counted; declared again (same period, same bytes), an object keeps its own count.
  for (const r of rules)
    if (r.quota)
      declarations.push(
        `quota ${quotaName(r.id, r.quota)} { over ${r.quota.bytes + QUOTA_SLACK} bytes ` +
          `used ${Math.min(r.quota.used, r.quota.bytes)} bytes; }`,
      );
  declarations.push(
    'map tcp_quota_in { type inet_service : quota; flags interval; }',
    'map tcp_quota_out { type inet_service : quota; flags interval; }',
    'set tcp_closed { type inet_service; flags interval, timeout; }',
  );
  for (const name of ['tcp_quota_in', 'tcp_quota_out', 'tcp_closed']) elements.set(name, []);
  for (const r of rules)
    for (const l4 of L4) {
      if (!carries(r.protocol, l4)) continue;
      for (const family of [4, 6] as const) {
        const members = r.targets.filter((target) => (family === 4 ? target.v4 : target.v6));
        if (members.length <= 1) continue;
        const name = spreadChainName(r.id, l4, family);
        const [nfproto, ip] = family === 4 ? ['ipv4', 'ip'] : ['ipv6', 'ip6'];
        // Targets that keep the port are named by their address alone (the DNAT leaves the port as it is).
        const dest = (target: KernelTarget) => {
          const to = (family === 4 ? target.v4 : target.v6)!;
          return r.ports === 'kept' ? to.address : `${to.address} . ${to.port}`;
        };
        const expression = spreadExpression(r, members, family, dest);
        declarations.push(`chain ${name} { }`);
        chains.set(name, [`meta nfproto ${nfproto} meta l4proto ${l4} dnat ${ip} to ${expression}`]);
      }
    }
  declarations.push(
    'chain prerouting { type nat hook prerouting priority dstnat; policy accept; }',
    'chain output { type nat hook output priority -100; policy accept; }',
    // What both go to for a packet to one of the node's own addresses: the rules' maps, each looked at once.
    'chain to_rules { }',
    'chain postrouting { type nat hook postrouting priority srcnat; policy accept; }',
    'chain count_prerouting { type filter hook prerouting priority filter; policy accept; }',
    'chain count_output { type filter hook output priority filter; policy accept; }',
    // Before the DNAT, where the port is still the rule's.
    'chain conn_limits { type filter hook prerouting priority dstnat - 10; policy accept; }',
    'chain fresh_tcp { }',
    'chain fresh_udp { }',
    // A rule's own controls, after its DNAT (which marks its connections): nothing else is looked at twice. Clients
    // from other hosts pass the forward hook; the node's own (DNAT'ed in `output`) the output hook: both are held.
    'chain sources { type filter hook forward priority filter - 10; policy accept; }',
    'chain sources_local { type filter hook output priority filter - 10; policy accept; }',
    // Quotas and closed ports, before the DNAT (and the undoing of the source NAT), where a reset carries the
    // addresses the client and the target know the connection by.
    'chain stop_prerouting { type filter hook prerouting priority dstnat - 5; policy accept; }',
    'chain stop_output { type filter hook output priority -150; policy accept; }',
  );
  quotaRules(rules, closed, rule, fill);
  // One route lookup a new connection (the costliest test here), not one for each map looked at.
  rule('prerouting', 'fib daddr type local goto to_rules');
  rule('output', 'ip daddr 127.0.0.0/8 return');
  rule('output', 'ip6 daddr ::1 return');
  rule('output', 'fib daddr type local goto to_rules');

  for (const l4 of L4) {
    for (const map of [`${l4}4`, `${l4}4_kept`])
      rule('to_rules', `meta nfproto ipv4 dnat ip to ${l4} dport map @${map}`);
    for (const map of [`${l4}6`, `${l4}6_kept`])
      rule('to_rules', `meta nfproto ipv6 dnat ip6 to ${l4} dport map @${map}`);
    rule('to_rules', `meta nfproto ipv4 ${l4} dport vmap @${l4}4_spread`);
    rule('to_rules', `meta nfproto ipv6 ${l4} dport vmap @${l4}6_spread`);
    // A port with a source address leaves from it; the NAT statement that matches first is the one taken.
    for (const [family, l3] of [
      [4, 'ip'],
      [6, 'ip6'],
    ] as const)
      rule(
        'postrouting',
        `meta nfproto ipv${family} ct status dnat meta l4proto ${l4} ` +
          `snat ${l3} to ct original proto-dst map @${l4}${family}_source`,
      );
    rule('postrouting', `ct status dnat meta l4proto ${l4} ct original proto-dst @${l4}_snat masquerade`);
    const count = `ct status dnat meta l4proto ${l4}`;
    rule('count_prerouting', `${count} ct direction original counter name ct original proto-dst map @${l4}_in`);
    rule('count_prerouting', `${count} ct direction reply counter name ct original proto-dst map @${l4}_out`);
    rule('count_output', `${count} ct direction original counter name ct original proto-dst map @${l4}_in`);
    const refuse = l4 === 'tcp' ? 'reject with tcp reset' : 'drop';
    // The port first, then the route lookup (the costliest test) once: what a new connection to a rule's port meets
    // is in a chain of its own rather than repeated in front of each rule.
    const fresh = `fresh_${l4}`;
    rule('conn_limits', `ct state new ${l4} dport @${l4}_ports fib daddr type local jump ${fresh}`);
    // A connection conntrack forgot (idle past the timeout) is not picked up again mid-stream, as conntrack would.
    if (l4 === 'tcp') rule(fresh, 'tcp flags & (syn | ack) != syn reject with tcp reset');
    const over = `${l4} dport ct count over ${limits.perSource} } ${refuse}`;
    rule(fresh, `meta nfproto ipv4 add @${l4}4_sources { ip saddr . ${over}`);
    rule(fresh, `meta nfproto ipv6 add @${l4}6_sources { ip6 saddr . ${over}`);
    if (l4 === 'tcp') {
      rule(fresh, `meta nfproto ipv4 ct timeout set "${idleTimeoutName(4, limits.tcpIdleSeconds)}"`);
      rule(fresh, `meta nfproto ipv6 ct timeout set "${idleTimeoutName(6, limits.tcpIdleSeconds)}"`);
    }

    const mine = rules.filter((r) => carries(r.protocol, l4));
    const controlled = (body: string) => ['sources', 'sources_local'].forEach((chain) => rule(chain, body));
    for (const r of mine) sourceRules(r, l4, refuse).forEach(controlled);
    // After the sources (a refused client takes no place); one more than the rule's most is refused.
    for (const r of mine.filter((r) => (r.maxConnections ?? null) !== null))
      controlled(
        `${newToRule(r, l4)} add @rule_flows { ${flowKey(r)} ct count over ${r.maxConnections} } ` +
          `counter name "${counterName(r.id, 'refused')}" ${refuse}`,
      );
    // Last, as the relay's gate does: what another limit refused takes no place in the second's allowance.
    for (const r of mine.filter((r) => (r.newPerSecond ?? null) !== null))
      controlled(
        `${newToRule(r, l4)} limit rate over ${r.newPerSecond}/second burst ${r.newPerSecond} packets ` +
          `counter name "${counterName(r.id, 'refused')}" ${refuse}`,
      );
    // A rule with one target up for a family goes in that family's map; with more, its port jumps to its chain.
    for (const family of [4, 6] as const) {
      const of = (target: KernelTarget) => (family === 4 ? target.v4 : target.v6);
      for (const r of mine) {
        const members = r.targets.filter(of);
        if (members.length > 1)
          fill(`${l4}${family}_spread`, [`${portKey(r)} : goto ${spreadChainName(r.id, l4, family)}`]);
        else if (members.length === 0) continue;
        else if (r.ports === 'kept') fill(`${l4}${family}_kept`, [`${portKey(r)} : ${of(members[0]!)!.address}`]);
        else fill(`${l4}${family}`, portElements(r, of(members[0]!)!));
      }
    }
    fill(
      `${l4}_in`,
      mine.map((r) => `${portKey(r)} : "${counterName(r.id, 'in')}"`),
    );
    fill(
      `${l4}_out`,
      mine.map((r) => `${portKey(r)} : "${counterName(r.id, 'out')}"`),
    );
    fill(`${l4}_ports`, mine.map(portKey));
    fill(`${l4}_snat`, mine.filter((r) => !r.preserveSource).map(portKey));
    for (const r of mine.filter((r) => r.source))
      fill(`${l4}${r.source!.includes(':') ? 6 : 4}_source`, [`${portKey(r)} : ${r.source}`]);
  }
  return { declarations, chains, elements };
}

/** What a table holds, as tableOutline (nft.ts) lists it: its objects by kind and name, and each chain's rules. */
export interface Outline {
  objects: Set<string>;
  rules: Map<string, number>;
}

/** The outline of a table written with `plan`. */
export function outlineOf(plan: TablePlan): Outline {
  const objects = new Set<string>();
  for (const line of plan.declarations) {
    const match = /^(ct timeout|set|map|counter|quota|chain) (\S+)/.exec(line);
    if (match) objects.add(`${match[1]} ${match[2]}`);
  }
  return { objects, rules: new Map([...plan.chains].map(([chain, rules]) => [chain, rules.length])) };
}

/** Whether two outlines are of the same table. */
export function sameOutline(a: Outline, b: Outline): boolean {
  return (
    a.objects.size === b.objects.size &&
    [...a.objects].every((object) => b.objects.has(object)) &&
    a.rules.size === b.rules.size &&
    [...a.rules].every(([chain, count]) => b.rules.get(chain) === count)
  );
}

/** An element's key: what a map maps from (`8080 : ...`), or the element itself. */
function keyOf(element: string): string {
  const at = element.indexOf(' : ');
  return at === -1 ? element : element.slice(0, at);
}

/**
 * The script that makes the table hold `plan`, as one transaction (`nft -f`), deleting what of `held` it no longer
 * needs. With `previous` (the plan last written, which the table still holds), only the difference: declarations
 * not made before, chains whose rules changed, elements gone or new; a change to one rule of 10,000 is a few lines,
 * where the whole table was half a second of nft's. Without it, everything is emptied and filled again.
 */
export function planScript(table: string, plan: TablePlan, held: Held, previous: TablePlan | null = null): string {
  const FAMILY_TABLE = `inet ${table}`;
  const { objects } = outlineOf(plan);
  const lines: string[] = [];
  const declaredBefore = new Set(previous?.declarations ?? []);
  const declarations = plan.declarations.filter((line) => !declaredBefore.has(line));
  if (declarations.length > 0 || !previous)
    lines.push(`table ${FAMILY_TABLE} {`, ...declarations.map((line) => `  ${line}`), '}');
  for (const [chain, rules] of plan.chains) {
    const before = previous?.chains.get(chain);
    if (before && before.length === rules.length && before.every((body, i) => body === rules[i])) continue;
    lines.push(`flush chain ${FAMILY_TABLE} ${chain}`);
    for (const body of rules) lines.push(`add rule ${FAMILY_TABLE} ${chain} ${body}`);
  }
  const additions: string[] = [];
  for (const [name, entries] of plan.elements) {
    const before = VOLATILE.has(name) ? undefined : previous?.elements.get(name);
    const kind = objects.has(`set ${name}`) ? 'set' : 'map';
    if (!before) {
      lines.push(`flush ${kind} ${FAMILY_TABLE} ${name}`);
      if (entries.length > 0) additions.push(`add element ${FAMILY_TABLE} ${name} { ${elements(entries)} }`);
      continue;
    }
    const now = new Set(entries);
    const gone = before.filter((entry) => !now.has(entry)).map(keyOf);
    const was = new Set(before);
    const fresh = entries.filter((entry) => !was.has(entry));
    if (gone.length > 0) lines.push(`delete element ${FAMILY_TABLE} ${name} { ${elements(gone)} }`);
    if (fresh.length > 0) additions.push(`add element ${FAMILY_TABLE} ${name} { ${elements(fresh)} }`);
  }
  // Every element gone before any new one: a new interval may overlap one being taken out.
  lines.push(...additions);
  // Last, once nothing refers to them: the maps that named them are emptied, the chains that used them rewritten.
  for (const [kind, names] of [
    ['counter', held.counters],
    ['chain', held.chains],
    ['quota', held.quotas],
    ['ct timeout', held.timeouts],
  ] as const)
    for (const name of names) {
      if (objects.has(`${kind} ${name}`)) continue;
      if (kind === 'chain') lines.push(`flush chain ${FAMILY_TABLE} ${name}`);
      lines.push(`delete ${kind} ${FAMILY_TABLE} ${name}`);
    }
  return `${lines.join('\n')}\n`;
}

/** The whole script for `rules` (see tablePlan, planScript): what tests and a first write use. */
export function rulesetScript(
  table: string,
  rules: readonly KernelRule[],
  held: Held,
  limits: KernelLimits,
  closed: readonly ClosedPort[] = [],
): string {
  return planScript(table, tablePlan(rules, limits, closed), held);
}

/**
 * The rules that hold TCP rules to their quotas and close ports, in the stop chains: before the counters, so that
 * what they reset is not counted as carried. Past its quota and QUOTA_SLACK, each packet of a rule's connections,
 * either way it is billed, is answered with a TCP reset (its sender's side closes; the other side's at its own next
 * packet). A closed port's DNAT'ed connections are reset alike: a rule taken out of the table (stopped, its quota
 * spent, deleted, moved to the relay) ends the kernel's connections of it, which the kernel would go on translating.
 */
function quotaRules(
  rules: readonly KernelRule[],
  closed: readonly ClosedPort[],
  rule: (chain: string, body: string) => void,
  fill: (name: string, entries: string[]) => void,
): void {
  // Not a reset: the kernel's own resets (which carry the connection's conntrack entry) pass here on their way out.
  const ours = 'ct status dnat meta l4proto tcp tcp flags & rst == 0';
  const spent = (way: 'original' | 'reply', map: string) =>
    `${ours} ct direction ${way} quota name ct original proto-dst map @${map} reject with tcp reset`;
  // Only where there is something to stop: every packet of every connection the kernel carries passes here.
  const carried = rules
    .filter((r) => carries(r.protocol, 'tcp'))
    .map((r) => ({ port: r.listen_port, last: r.lastPort ?? r.listen_port }));
  const closing = uncovered(closed, carried);
  const metered = rules.some((r) => r.quota);
  for (const chain of ['stop_prerouting', 'stop_output']) {
    if (closing.length > 0) rule(chain, `${ours} ct original proto-dst @tcp_closed reject with tcp reset`);
    if (metered) rule(chain, spent('original', 'tcp_quota_in'));
  }
  if (metered) rule('stop_prerouting', spent('reply', 'tcp_quota_out'));
  for (const way of ['in', 'out'] as const)
    fill(
      `tcp_quota_${way}`,
      rules
        .filter((r) => r.quota && (r.quota.direction === 'both' || r.quota.direction === way))
        .map((r) => `${portKey(r)} : "${quotaName(r.id, r.quota!)}"`),
    );
  fill(
    'tcp_closed',
    closing.map((entry) => {
      const key = entry.last === entry.port ? String(entry.port) : `${entry.port}-${entry.last}`;
      return `${key} timeout ${entry.seconds}s`;
    }),
  );
}

/**
 * The parts of the closed spans no carried span covers, none overlapping another (an interval set refuses overlaps):
 * overlapping closed spans are one, closed as long as the longest. Sorted walks, so that a node's ten thousand rules
 * and as many just taken out cost no more than sorting them.
 */
export function uncovered(
  closed: readonly ClosedPort[],
  carried: readonly { port: number; last: number }[],
): ClosedPort[] {
  const merged: ClosedPort[] = [];
  for (const span of [...closed].sort((a, b) => a.port - b.port)) {
    const previous = merged[merged.length - 1];
    if (previous && span.port <= previous.last + 1) {
      previous.last = Math.max(previous.last, span.last);
      previous.seconds = Math.max(previous.seconds, span.seconds);
    } else merged.push({ ...span });
  }
  const taken = [...carried].sort((a, b) => a.port - b.port);
  const out: ClosedPort[] = [];
  let next = 0;
  for (const span of merged) {
    while (next < taken.length && taken[next]!.last < span.port) next++;
    let from = span.port;
    for (let i = next; i < taken.length && taken[i]!.port <= span.last && from <= span.last; i++) {
      if (taken[i]!.port > from) out.push({ port: from, last: taken[i]!.port - 1, seconds: span.seconds });
      from = Math.max(from, taken[i]!.last + 1);
    }
    if (from <= span.last) out.push({ port: from, last: span.last, seconds: span.seconds });
  }
  return out;
}

/**
 * The devices of the flowtables in an `nft -j list flowtables` listing: connections offloaded there (flow offload, in
 * software or the NIC) bypass the rest of the ruleset, this agent's counters included.
 */
export function flowtableDevices(listing: string): string[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(listing);
  } catch {
    return [];
  }
  const devices = new Set<string>();
  for (const object of (parsed as { nftables?: unknown[] }).nftables ?? []) {
    const dev = (object as { flowtable?: { dev?: unknown } }).flowtable?.dev;
    for (const name of Array.isArray(dev) ? dev : [dev]) if (typeof name === 'string') devices.add(name.slice(0, 64));
  }
  return [...devices].sort().slice(0, 64);
}
