// The nftables table an agent owns, `inet portplane_<node id>` (one per node, so that agents of several nodes on one
// machine, as when trying portplane out, keep apart), written out whole for one transaction: direct rules DNAT'ed by
// the kernel to their target (and masqueraded, so that replies come back through the node), with a pair of named
// counters per rule. Nothing outside the table is touched.
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

/** A rule as the kernel carries it: its port, its one target per address family it can reach, who may use it. */
export interface KernelRule {
  id: number;
  protocol: 'tcp' | 'udp' | 'tcp+udp';
  listen_port: number;
  v4: Destination | null;
  v6: Destination | null;
  /** Null: every client. */
  sources?: Sources | null;
  /** Connections (TCP) and flows (UDP) the rule carries at once, both counted together; null: the node's limits. */
  maxConnections?: number | null;
  /**
   * Its health checks found its target down: the kernel sends it no new client (they reach the relay, which closes
   * them at once, as with every target down); established connections go on.
   */
  targetDown?: boolean;
}

/** Whether the kernel refuses some of `rule`'s clients itself, counting them (in a `refused` counter of the rule). */
function refuses(rule: KernelRule): boolean {
  return Boolean(rule.sources) || (rule.maxConnections ?? null) !== null;
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

/**
 * What picks out a new connection (or a UDP flow's first datagram) of `rule` on `l4` once the kernel DNAT'ed it: the
 * port its client asked for, kept by conntrack. No route lookup: the DNAT made it already.
 */
function newToRule(rule: KernelRule, l4: 'tcp' | 'udp'): string {
  return `ct state new ct status dnat meta l4proto ${l4} ct original proto-dst ${rule.listen_port}`;
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

function carries(rule: KernelRule, l4: (typeof L4)[number]): boolean {
  return rule.protocol === 'tcp+udp' || rule.protocol === l4;
}

function elements(entries: string[]): string {
  return entries.join(', ');
}

/** Whether `name` is one of the sets the kernel fills by itself, with the sources of new connections (ct count). */
export function isLearnedSet(name: string): boolean {
  return /^(tcp|udp)[46]_sources$/.test(name) || name === 'rule_flows';
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
 * The script that makes the table hold exactly `rules`, as one transaction (`nft -f`): declarations (which keep
 * whatever of them exists, counters included), every chain, map and set emptied and filled again, and the counters of
 * rules no longer wanted deleted. `existing` names the counters the table holds now.
 */
export function rulesetScript(
  table: string,
  rules: readonly KernelRule[],
  existing: ReadonlySet<string>,
  limits: KernelLimits,
): string {
  const FAMILY_TABLE = `inet ${table}`;
  const wanted = new Set(
    rules.flatMap((rule) => [
      counterName(rule.id, 'in'),
      counterName(rule.id, 'out'),
      ...(refuses(rule) ? [counterName(rule.id, 'refused')] : []),
    ]),
  );
  const lines = [`table ${FAMILY_TABLE} {`];
  // A rule's connections and flows at once, by its port: TCP and UDP counted together, as the relay counts them.
  lines.push('  set rule_flows { type inet_service; flags dynamic; }');
  for (const l4 of L4) {
    lines.push(
      `  map ${l4}4 { type inet_service : ipv4_addr . inet_service; }`,
      `  map ${l4}6 { type inet_service : ipv6_addr . inet_service; }`,
      `  map ${l4}_in { type inet_service : counter; }`,
      `  map ${l4}_out { type inet_service : counter; }`,
      `  set ${l4}_ports { type inet_service; }`,
      `  set ${l4}4_sources { type ipv4_addr . inet_service; flags dynamic; }`,
      `  set ${l4}6_sources { type ipv6_addr . inet_service; flags dynamic; }`,
    );
  }
  for (const [family, l3] of [
    [4, 'ip'],
    [6, 'ip6'],
  ] as const) {
    lines.push(
      `  ct timeout ${idleTimeoutName(family, limits.tcpIdleSeconds)} {`,
      `    protocol tcp; l3proto ${l3}; policy = { established: ${limits.tcpIdleSeconds} };`,
      '  }',
    );
  }
  for (const name of wanted) lines.push(`  counter ${name} { }`);
  lines.push(
    '  chain prerouting { type nat hook prerouting priority dstnat; policy accept; }',
    '  chain output { type nat hook output priority -100; policy accept; }',
    '  chain postrouting { type nat hook postrouting priority srcnat; policy accept; }',
    '  chain count_prerouting { type filter hook prerouting priority filter; policy accept; }',
    '  chain count_output { type filter hook output priority filter; policy accept; }',
    // Before the DNAT, where the port is still the rule's.
    '  chain conn_limits { type filter hook prerouting priority dstnat - 10; policy accept; }',
    // A rule's own controls, after its DNAT (which marks its connections): nothing else is looked at twice. Clients
    // from other hosts pass the forward hook; the node's own (DNAT'ed in `output`) the output hook: both are held.
    '  chain sources { type filter hook forward priority filter - 10; policy accept; }',
    '  chain sources_local { type filter hook output priority filter - 10; policy accept; }',
    '}',
  );
  const chains = [
    'prerouting',
    'output',
    'postrouting',
    'count_prerouting',
    'count_output',
    'conn_limits',
    'sources',
    'sources_local',
  ];
  for (const chain of chains) lines.push(`flush chain ${FAMILY_TABLE} ${chain}`);
  for (const l4 of L4)
    for (const name of [`${l4}4`, `${l4}6`, `${l4}_in`, `${l4}_out`]) lines.push(`flush map ${FAMILY_TABLE} ${name}`);
  for (const l4 of L4) lines.push(`flush set ${FAMILY_TABLE} ${l4}_ports`);

  for (const l4 of L4) {
    const rule = (chain: string, body: string) => lines.push(`add rule ${FAMILY_TABLE} ${chain} ${body}`);
    rule('prerouting', `fib daddr type local meta nfproto ipv4 dnat ip to ${l4} dport map @${l4}4`);
    rule('prerouting', `fib daddr type local meta nfproto ipv6 dnat ip6 to ${l4} dport map @${l4}6`);
    rule('output', `fib daddr type local ip daddr != 127.0.0.0/8 dnat ip to ${l4} dport map @${l4}4`);
    rule('output', `fib daddr type local ip6 daddr != ::1 dnat ip6 to ${l4} dport map @${l4}6`);
    rule('postrouting', `ct status dnat meta l4proto ${l4} ct original proto-dst @${l4}_ports masquerade`);
    const count = `ct status dnat meta l4proto ${l4}`;
    rule('count_prerouting', `${count} ct direction original counter name ct original proto-dst map @${l4}_in`);
    rule('count_prerouting', `${count} ct direction reply counter name ct original proto-dst map @${l4}_out`);
    rule('count_output', `${count} ct direction original counter name ct original proto-dst map @${l4}_in`);
    const refuse = l4 === 'tcp' ? 'reject with tcp reset' : 'drop';
    const fresh = `ct state new fib daddr type local ${l4} dport @${l4}_ports`;
    // A connection conntrack forgot (idle past the timeout) is not picked up again mid-stream, as conntrack would.
    if (l4 === 'tcp') rule('conn_limits', `${fresh} tcp flags & (syn | ack) != syn reject with tcp reset`);
    const over = `${l4} dport ct count over ${limits.perSource} } ${refuse}`;
    rule('conn_limits', `meta nfproto ipv4 ${fresh} add @${l4}4_sources { ip saddr . ${over}`);
    rule('conn_limits', `meta nfproto ipv6 ${fresh} add @${l4}6_sources { ip6 saddr . ${over}`);
    if (l4 === 'tcp') {
      rule('conn_limits', `meta nfproto ipv4 ${fresh} ct timeout set "${idleTimeoutName(4, limits.tcpIdleSeconds)}"`);
      rule('conn_limits', `meta nfproto ipv6 ${fresh} ct timeout set "${idleTimeoutName(6, limits.tcpIdleSeconds)}"`);
    }

    const mine = rules.filter((r) => carries(r, l4));
    const held = (body: string) => ['sources', 'sources_local'].forEach((chain) => rule(chain, body));
    for (const r of mine) sourceRules(r, l4, refuse).forEach(held);
    // After the sources (a refused client takes no place); one more than the rule's most is refused.
    for (const r of mine.filter((r) => (r.maxConnections ?? null) !== null))
      held(
        `${newToRule(r, l4)} add @rule_flows { ct original proto-dst ct count over ${r.maxConnections} } ` +
          `counter name "${counterName(r.id, 'refused')}" ${refuse}`,
      );
    const fill = (name: string, entries: string[]) => {
      if (entries.length > 0) lines.push(`add element ${FAMILY_TABLE} ${name} { ${elements(entries)} }`);
    };
    fill(
      `${l4}4`,
      mine.flatMap((r) => (r.v4 && !r.targetDown ? [`${r.listen_port} : ${r.v4.address} . ${r.v4.port}`] : [])),
    );
    fill(
      `${l4}6`,
      mine.flatMap((r) => (r.v6 && !r.targetDown ? [`${r.listen_port} : ${r.v6.address} . ${r.v6.port}`] : [])),
    );
    fill(
      `${l4}_in`,
      mine.map((r) => `${r.listen_port} : "${counterName(r.id, 'in')}"`),
    );
    fill(
      `${l4}_out`,
      mine.map((r) => `${r.listen_port} : "${counterName(r.id, 'out')}"`),
    );
    fill(
      `${l4}_ports`,
      mine.map((r) => String(r.listen_port)),
    );
  }
  for (const name of existing) if (!wanted.has(name)) lines.push(`delete counter ${FAMILY_TABLE} ${name}`);
  return `${lines.join('\n')}\n`;
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
