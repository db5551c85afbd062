// Applies a node's whole rule set and its tunnel ends idempotently, and decides how each rule is carried: by the
// kernel (nftables, internal/kernel) or by the relay (internal/relay). Listeners whose port and protocol are unchanged
// stay up (keeping their connections, with targets or tunnel updated in place), removed or moved ones close, new ones
// open; a tunnel end whose address or keys are unchanged keeps its session. Every enabled rule has its relay
// listener, kernel rules too: it holds the port (so a port in use is port_in_use either way) and carries what the
// kernel does not take (loopback, an address family the target lacks), and switching a rule between the paths leaves
// no moment when the port answers nothing. The kernel table is written whole, in one transaction, after the relays.
// A rule that keeps the client's address (preserve_source) is the kernel's or fails: the relay cannot keep it.
// Each rule's outcome carries a machine code on failure: for a rule this node is the exit of, what the exit did.

import { lookup } from 'node:dns/promises';
import { isIP, isIPv4 } from 'node:net';
import { networkInterfaces } from 'node:os';
import { canonicalAddress, isSrvName, parseTarget } from '../schema/net.ts';
import {
  counted,
  kernelPorts,
  lastPort,
  portCount,
  portsText,
  rangeErrors,
  RELAY_RANGE_PORTS,
} from '../domain/ranges.ts';
import { listeningPorts, portsListenedBeside } from './listening.ts';
import {
  carries,
  relayOnlyReason,
  transportsOf,
  type ForwardRule,
  type RuleErrorCode,
  type RuleResult,
  type RuleTraffic,
  type TargetHealth,
} from '../domain/rules.ts';
import type { ProbeResult, RelayThreading, TunnelEnd } from '../domain/link.ts';
import { TunnelEntries, type EntriesConfig, type EntryView } from '../tunnel/exits.ts';
import { DEFAULT_SWITCHING } from '../domain/tunnels.ts';
import { TunnelExit, type ExitRule } from '../tunnel/exit.ts';
import { exitCannotListen, type TunnelView } from '../tunnel/wire.ts';
import { countConnections } from '../kernel/conntrack.ts';
import {
  applyPlan,
  kernelAvailability,
  flowOffloadDevices,
  tableOutline,
  keepRouterAdvertisements,
  readCounters,
  removeTable,
  type Counts,
} from '../kernel/nft.ts';
import {
  heldIn,
  NOTHING_HELD,
  tableOf,
  outlineOf,
  sameOutline,
  tablePlan,
  type TablePlan,
  type ClosedPort,
  type Held,
  type Destination,
  type KernelQuota,
  type KernelRule,
  type KernelTarget,
  type Sources,
} from '../kernel/ruleset.ts';
import {
  localRefusal,
  addressRefusal as refusal,
  policyFor,
  probeDatagram,
  probeTarget,
  type DialPolicy,
} from '../relay/dial.ts';
import { DEFAULT_LIMITS, type Limits } from '../relay/limits.ts';
import { Gate } from '../relay/gate.ts';
import { RuleCells } from '../relay/cells.ts';
import { HealthChecker, type HealthChange } from '../relay/health.ts';
import { TargetPicker, type Target } from '../relay/targets.ts';
import { directDials, relayOf, retarget, transportOf, type Dials, type Relay } from '../relay/relays.ts';
import { proxyHeader } from '../relay/proxy-protocol.ts';
import { formatTime } from '../schema/schema.ts';
import { knownZone } from '../domain/hours.ts';
import { DEFAULT_SRV_BOUNDS, SrvTargets, type SrvBounds, type Tiered } from './srv.ts';
import { FLUSH_MS } from './relay-thread.ts';
import { migrateQueued, oneThreadOnly, RelayThreads } from './relay-threads.ts';

interface Listener {
  key: string;
  relays: Relay[];
  /** Each relay's port as its distance from the rule's listen_port (a range has a relay per port and transport). */
  offsets: number[];
  /** The rule's allow and deny lists, max_connections, bandwidth, quota and expiry, shared by its relays. */
  gate: Gate;
  picker: TargetPicker;
  /** The checks of its targets, with a health_check (direct rules only: through a tunnel the exit dials). */
  health: HealthChecker | null;
  /** The rule's targets as given (names unresolved). */
  targets: string[];
  /** The rule's listen_port. */
  firstPort: number;
  /** What the relay's threads were last told of the rule; null: nothing (they do not carry it). */
  told: { rule: string; picker: SharedArrayBuffer; health: SharedArrayBuffer | null } | null;
}

/**
 * Holds a copy of each listening socket outside this process (the agent's supervisor), so that a crash does not close
 * it: connections wait in its backlog for the next process, which is handed the copies (see Forwarder.inherit).
 */
export interface SocketKeeper {
  /** Keeps a copy of the socket listening for `key` (`transport:port`), replacing any it had. */
  keep(key: string, handle: object): void;
  /** Drops the copies of these keys; resolves once they are closed, so that their ports can be bound again. */
  release(keys: string[]): Promise<void>;
}

/** Where the agent may forward: the kernel where it can (auto), the kernel only, or the relay only. */
export const forwardingModes = ['auto', 'kernel', 'relay'] as const;
export type ForwardingMode = (typeof forwardingModes)[number];

/** What the kernel counted since the previous read, and whether its counters started over (a new table). */
export interface KernelCounts {
  /** Every counter of the table now, with the last value of those of rules taken out since the previous read. */
  counts: Map<number, Counts>;
  /** Rules whose counters were taken out since the previous read: their values above are final. */
  removed: Set<number>;
  /** The table was made anew since the previous read (a reboot, or someone removed it): earlier values are gone. */
  fresh: boolean;
}

/** Whether the kernel path can be used here, as the node reports it. */
export type KernelState = { available: true } | { available: false; reason: string };

/** How one end of a tunnel stands, as the agent reports it. */
export interface TunnelReport extends TunnelView {
  id: number;
  /** The entry's: how each exit stands, which new connections go to, and the choice's last move. */
  exits?: EntryView['exits'];
  chosen?: EntryView['chosen'];
  switched?: EntryView['switched'];
}

function listenerKey(rule: ForwardRule): string {
  return `${rule.protocol}:${portsText(rule)}`;
}

/** The master reads details of at most 500 characters; a long list of targets is cut short. */
const MAX_DETAIL = 300;

function ruleError(code: RuleErrorCode, detail: string): NonNullable<RuleResult['error']> {
  return { code, detail: detail.length > MAX_DETAIL ? `${detail.slice(0, MAX_DETAIL - 3)}...` : detail };
}

function bindError(error: NodeJS.ErrnoException, rule: Pick<ForwardRule, 'listen_port' | 'protocol'>, whose = '') {
  const where = `${whose}port ${rule.listen_port}/${rule.protocol}`;
  if (error.code === 'EADDRINUSE') return ruleError('port_in_use', `${where} is already in use on the node`);
  if (error.code === 'EACCES' || error.code === 'EPERM' || error.code === 'EADDRNOTAVAIL') {
    return ruleError('bind_denied', `the agent may not listen on ${where} (${error.code})`);
  }
  return ruleError('listen_failed', `listening on ${where} failed: ${error.message}`);
}

/** Whether the rule is past its expires_at: it is carried no more, as if disabled. */
function expired(rule: ForwardRule, now: number): boolean {
  return rule.expires_at !== null && Date.parse(rule.expires_at) <= now;
}

/** Why the relay carries a rule the kernel could have: no address of its target is one the kernel can send to. */
const NO_KERNEL_DESTINATION =
  'the kernel has no address of the target to send its clients to (a name that resolves to none, or one local to ' +
  'the node)';

/** Who may use `rule`, as the kernel holds it; null when everyone may. */
function sourcesOf(rule: ForwardRule): Sources | null {
  if (rule.allow_sources.length === 0 && rule.deny_sources.length === 0) return null;
  return { allow: rule.allow_sources.length > 0 ? rule.allow_sources : null, deny: rule.deny_sources };
}

/** The rule's quota as the kernel holds it; null without one. */
function kernelQuotaOf(rule: ForwardRule): KernelQuota | null {
  const quota = rule.quota;
  if (!quota) return null;
  const started = Date.parse(quota.period_start);
  return {
    bytes: quota.bytes,
    used: quota.used,
    direction: quota.direction,
    periodStart: Number.isFinite(started) ? Math.floor(started / 1000) : 0,
  };
}

/**
 * How long past its idle timeout a TCP connection may still be known to conntrack (its closing states, FIN_WAIT and
 * TIME_WAIT, last up to 120 s by default): a closed port stays closed for the idle timeout and this.
 */
const CONNTRACK_CLOSING_SECONDS = 120;

/**
 * Why some of `rules` cannot have their ports, by rule id: a port another rule of the config has too (the master
 * claims ports so that this never happens; a config is checked all the same, since nftables refuses a table whose
 * intervals overlap, and with it every rule), or, for a range wider than the relay listens on, a port some program of
 * the node listens on (the kernel would take its clients from other hosts; a narrower rule's relay finds the port
 * taken when it listens).
 */
async function portClashes(rules: readonly ForwardRule[]): Promise<Map<number, NonNullable<RuleResult['error']>>> {
  const clashes = new Map<number, NonNullable<RuleResult['error']>>();
  // What the master refuses (a range backwards or too wide, a target's range of another length) fails here alone
  // rather than in the kernel's table, where one bad element would fail every rule.
  for (const rule of rules) {
    const problem = rangeErrors(rule)[0];
    if (problem) clashes.set(rule.id, ruleError('listen_failed', `${problem.field} ${problem.detail}`));
  }
  rules = rules.filter((rule) => !clashes.has(rule.id));
  for (const transport of ['tcp', 'udp'] as const) {
    const spans = rules
      .filter((rule) => carries(rule.protocol, transport))
      .sort((a, b) => a.listen_port - b.listen_port);
    let reach: ForwardRule | null = null;
    for (const rule of spans) {
      if (reach && rule.listen_port <= lastPort(reach))
        clashes.set(
          rule.id,
          ruleError(
            'port_in_use',
            `ports ${portsText(rule)}/${transport} overlap rule ${reach.id}'s (${portsText(reach)})`,
          ),
        );
      if (!reach || lastPort(rule) > lastPort(reach)) reach = rule;
    }
    const wide = spans.filter((rule) => portCount(rule) > RELAY_RANGE_PORTS && !clashes.has(rule.id));
    if (wide.length === 0) continue;
    const listening = await listeningPorts(transport);
    for (const rule of wide) {
      const taken = listening.find((port) => port >= rule.listen_port && port <= lastPort(rule));
      if (taken !== undefined)
        clashes.set(rule.id, ruleError('port_in_use', `port ${taken}/${transport} is already in use on the node`));
    }
  }
  return clashes;
}

/** setTimeout's longest wait; an expiry further away is looked at again then. */
const LONGEST_TIMER_MS = 2 ** 31 - 1;

function sameEnd(a: TunnelEnd, b: TunnelEnd): boolean {
  return (
    a.role === b.role &&
    a.host === b.host &&
    a.port === b.port &&
    a.cert === b.cert &&
    a.key === b.key &&
    a.peer_pin === b.peer_pin &&
    a.transport === b.transport &&
    a.via === b.via &&
    a.local_targets === b.local_targets &&
    a.exit_strategy === b.exit_strategy &&
    a.probe_target === b.probe_target &&
    JSON.stringify([a.exits, a.switching]) === JSON.stringify([b.exits, b.switching])
  );
}

/** What the entry of `end` runs on: its exits (the one of a master older than several), and how it chooses. */
function entriesOf(end: TunnelEnd & { host: string }): EntriesConfig {
  const exits = end.exits ?? [{ node_id: 1, host: end.host, port: end.port, peer_pin: end.peer_pin, via: end.via }];
  const { round_seconds, cooldown_seconds, ...switching } = end.switching ?? DEFAULT_SWITCHING;
  return {
    ...{ id: end.id, cert: end.cert, key: end.key, transport: end.transport, exits, strategy: end.exit_strategy },
    switching: { ...switching, cooldown_ms: cooldown_seconds * 1000 },
    round_ms: round_seconds * 1000,
    probing: exits.length > 1 || end.probe_target !== null,
  };
}

function parseTargets(targets: string[]): Target[] {
  return targets.map(parseTarget).filter((t): t is Target => t !== null);
}

/** Whether `address` is one of this node's own (any interface's, loopback included: a rule may reach local targets). */
function ownAddress(address: string): boolean {
  const wanted = canonicalAddress(address);
  return Object.values(networkInterfaces()).some((list) =>
    (list ?? []).some((entry) => canonicalAddress(entry.address) === wanted),
  );
}

function sourceUnavailable(address: string): NonNullable<RuleResult['error']> {
  return ruleError('source_unavailable', `${address} is not an address of this node: nothing can be dialled from it`);
}

async function resolvable(targets: Target[]): Promise<boolean> {
  for (const target of targets) {
    if (isIP(target.host)) return true;
    try {
      await lookup(target.host);
      return true;
    } catch {
      // try the next target
    }
  }
  return false;
}

/** The addresses the kernel sends a target's clients to, per address family (null: none of that family). */
type Destinations = Pick<KernelTarget, 'v4' | 'v6'>;

/** A rule the kernel carries, with what its targets resolved to when it was applied. */
interface KernelEntry {
  rule: ForwardRule;
  resolved: Destinations[];
}

interface Exit {
  end: TunnelEnd;
  exit: TunnelExit;
  /** Why it does not listen, when it does not. */
  failure: NodeJS.ErrnoException | null;
  /** Rules whose targets resolved, by id, with the targets they had: resolved again only when those change. */
  resolved: Map<number, string>;
}

export class Forwarder {
  private readonly listeners = new Map<number, Listener>();
  /** The rules in the kernel table as last written, by id. */
  private kernelRules = new Map<number, KernelRule>();
  /** What those were made of: each rule with its targets' addresses, looked up when it was applied. */
  private kernelEntries = new Map<number, KernelEntry>();
  /** Final counts of kernel rules taken out, and whether the table was made anew, until the next counter read. */
  private kernelRemoved = new Map<number, Counts>();
  private kernelFresh = false;
  /** Whether a table left by an earlier run was looked for. */
  private kernelSwept = false;
  /** Whether the node forwards IPv6 (at the last apply), so that targets' IPv6 addresses go to the kernel too. */
  private kernelIpv6 = false;
  /** Whether the kernel path was usable at the last apply, and why not. */
  kernelState: KernelState = { available: false, reason: 'not checked yet' };
  /**
   * The plan last written, which the table holds (the next write is the difference, and a look at the table compares
   * it with this); null while not known: before this run's first write, after a drift or a failure.
   */
  private kernelPlan: TablePlan | null = null;
  /** The devices flowtables offload connections on (the kernel's counters miss what is offloaded); see nft.ts. */
  flowOffload: string[] = [];
  /** Interfaces whose accept_ra this agent set to 2, so that forwarding IPv6 costs them no route (for the log). */
  raKept: string[] = [];
  /** How often something else changed or removed the table since the agent started, and when it last did. */
  kernelDrift: { count: number; lastAt: string | null } = { count: 0, lastAt: null };
  private readonly entries = new Map<number, { end: TunnelEnd; entry: TunnelEntries }>();
  private readonly exits = new Map<number, Exit>();
  /** Called whenever how a tunnel end stands changes (state, error, round trip). */
  onTunnelChange: () => void = () => undefined;
  /**
   * Called when a health-checked target of rule `id` goes up or down ('status'), or its fastest target changes
   * ('lead': what lowest_latency goes by, which the kernel's map follows but the master is not told).
   */
  onHealthChange: (id: number, change: HealthChange) => void = () => undefined;
  /** Called when a rule's expires_at comes: the config is to be applied again, which stops it. */
  onExpiry: () => void = () => undefined;
  /** The records of rules' SRV targets, read again at their TTL; an answer that changed calls onChange. */
  readonly srv: SrvTargets;
  /** How long an SRV answer is kept at least and at most, as the master says (see SrvBounds). */
  srvBounds: SrvBounds = DEFAULT_SRV_BOUNDS;
  private expiryTimer: NodeJS.Timeout | undefined;
  /** Traffic of listeners closed since the last drain, so no byte is lost at a reconfigure. */
  private leftover = new Map<number, RuleTraffic>();
  /** Listening sockets handed over (see agent/supervisor.ts), by `transport:port`, until a rule takes each. */
  private inherited = new Map<string, { close(): unknown }>();
  /** Where copies of the listening sockets are kept; null: nowhere (the agent runs alone). */
  keeper: SocketKeeper | null = null;
  /** Keys of sockets closed whose kept copies are still to be dropped (see released). */
  private unkept: string[] = [];

  /** Shared with every relay, so a change applies to their next connection. */
  private readonly limits: Limits;
  /** The relay's threads beside this one; null: it runs in this thread alone. */
  private readonly threads: RelayThreads | null = null;
  /** How many threads keep a share of each shared count: this one and those it started. */
  private readonly countedBy: number = 1;
  /** Looks at the rules' quotas a thread may have spent (see Gate.watchQuota), while threads run. */
  private readonly quotaWatch: NodeJS.Timeout | undefined;
  /** How many threads relay, this one included, how many were asked for and why not as many (see relayThreads). */
  private readonly threading: RelayThreading;
  /**
   * The ports no other thread listens on beside this one (`tcp:port`), and why: handed over by an agent older than the
   * relay's threads (`handed_over`), or the code of a thread's failed bind.
   */
  private readonly alone = new Map<string, string>();
  /** What the threads are being told in this apply: sent in turn without waiting, waited for before it ends. */
  private telling: Promise<void>[] = [];
  /**
   * The ports other programs listen on, read once an apply when a listener is opened: with threads a listener binds
   * with SO_REUSEPORT, which another program's socket of the same user and option would share rather than refuse.
   */
  private othersListening: Promise<Record<'tcp' | 'udp', Set<number>>> | null = null;
  /** Why an upgrade may reset connections queued on the old agent's relay threads (see migrateQueued); null: none. */
  readonly queuedAtRisk: string | null = null;

  constructor(
    private readonly host: string,
    limits: Partial<Limits> = {},
    private readonly mode: ForwardingMode = 'relay',
    /** The nftables table this node's kernel rules live in (see kernel/ruleset.ts). */
    private readonly table = tableOf(0),
    /** How many threads relay the rules straight to their targets (see relay-thread.ts), this one included. */
    threads = 1,
    /** Told of a relay thread that ended while it should not have. */
    onThreadEnd: (error: Error | null) => void = () => undefined,
  ) {
    this.limits = { ...DEFAULT_LIMITS, ...limits };
    const unsupported = threads > 1 ? oneThreadOnly() : null;
    this.threading = { threads: unsupported ? 1 : threads, asked: threads, reason: unsupported };
    if (threads > 1 && !unsupported) {
      this.queuedAtRisk = migrateQueued();
      this.countedBy = threads;
      this.threads = new RelayThreads(threads - 1, this.limits, (error, index) => {
        this.threading.threads--;
        this.threading.reason = `a relay thread ended${error ? `: ${error.message}` : ''}`;
        // Its connections closed with it: what they held in the shared counts (places, least_conn's) is free.
        for (const listener of this.listeners.values()) {
          listener.gate.cells.reclaim(index);
          listener.picker.reclaim(index);
          for (const relay of listener.relays) relay.counts.reclaim(index);
        }
        onThreadEnd(error);
      });
      this.quotaWatch = setInterval(() => {
        for (const listener of this.listeners.values()) listener.gate.watchQuota();
      }, FLUSH_MS).unref();
    }
    this.srv = new SrvTargets(() => this.srvBounds);
  }

  /** How many threads relay, this one included, how many were asked for and why not as many; told in the vitals. */
  get relayThreads(): RelayThreading {
    if (this.alone.size === 0 || this.threading.reason) return { ...this.threading };
    const causes = new Map<string, number>();
    for (const cause of this.alone.values()) causes.set(cause, (causes.get(cause) ?? 0) + 1);
    const handedOver = causes.get(HANDED_OVER) ?? 0;
    causes.delete(HANDED_OVER);
    const said = [
      ...(handedOver > 0
        ? [
            `${counted(handedOver)} ports handed over by an agent older than the relay's threads are relayed on one ` +
              'thread until their rules are opened anew',
          ]
        : []),
      ...[...causes].map(
        ([code, ports]) => `${counted(ports)} ports on fewer threads, where a thread's bind met ${code}`,
      ),
    ];
    return { ...this.threading, reason: said.join('; ').slice(0, 300) };
  }

  setLimits(limits: Partial<Limits>): void {
    Object.assign(this.limits, limits);
    void this.threads?.tell({ type: 'limits', limits: this.limits });
  }

  async apply(declared: ForwardRule[], declaredTunnels: TunnelEnd[] = []): Promise<RuleResult[]> {
    // SRV targets become their records, for the node's rules and its exits' alike (see srv.ts).
    const exitRules = declaredTunnels.flatMap((end) => end.rules);
    const expanded = await this.srv.expand<ForwardRule | TunnelEnd['rules'][number]>([...declared, ...exitRules]);
    const given = expanded.slice(0, declared.length) as (ForwardRule & Tiered)[];
    let at = declared.length;
    const tunnels = declaredTunnels.map((end) => ({
      ...end,
      rules: expanded.slice(at, (at += end.rules.length)) as (TunnelEnd['rules'][number] & Tiered)[],
    }));
    await this.applyTunnels(tunnels);
    const now = Date.now();
    const rules = given.map((rule) => (rule.enabled && expired(rule, now) ? { ...rule, enabled: false } : rule));
    this.scheduleExpiry(rules, now);
    const wanted = new Map(rules.filter((r) => r.enabled).map((r) => [r.id, r]));
    for (const [id, listener] of this.listeners) {
      const rule = wanted.get(id);
      if (!rule || listenerKey(rule) !== listener.key) await this.stop(id);
    }
    this.othersListening = null;
    const kernel = this.mode === 'relay' ? null : await kernelAvailability();
    this.kernelState = kernel
      ? kernel.available
        ? { available: true }
        : kernel
      : { available: false, reason: 'the agent forwards in user space only (--forwarding relay)' };
    const results: RuleResult[] = [];
    const toKernel: { rule: ForwardRule; result: RuleResult }[] = [];
    const clashes = await portClashes(rules.filter((rule) => rule.enabled));
    for (const rule of rules) {
      const refusal = this.kernelRefusal(rule, kernel?.available ?? false);
      const clash = clashes.get(rule.id);
      if (!rule.enabled) results.push({ id: rule.id, state: 'applied', error: null });
      else if (this.kernelOnly(rule) && refusal) {
        await this.stop(rule.id);
        const wide =
          portCount(rule) > RELAY_RANGE_PORTS
            ? `its ${counted(portCount(rule))} ports are the kernel's alone (the relay listens on at most ` +
              `${counted(RELAY_RANGE_PORTS)} ports of a rule), and `
            : '';
        results.push({ id: rule.id, state: 'failed', error: ruleError('kernel_unsupported', wide + refusal) });
      } else if (rule.tunnel_id !== null && !this.entries.has(rule.tunnel_id)) {
        await this.stop(rule.id);
        results.push({
          id: rule.id,
          state: 'failed',
          error: ruleError('tunnel_missing', `tunnel ${rule.tunnel_id} does not start at this node`),
        });
      } else if (clash) {
        await this.stop(rule.id);
        results.push({ id: rule.id, state: 'failed', error: clash });
      } else if (rule.allow_hours && !knownZone(rule.allow_hours.zone)) {
        await this.stop(rule.id);
        const why = `this node's runtime knows no time zone ${rule.allow_hours.zone}: upgrade its Node.js`;
        results.push({ id: rule.id, state: 'failed', error: ruleError('zone_unknown', why) });
      } else if (rule.tunnel_id === null && rule.source_address !== null && !ownAddress(rule.source_address)) {
        await this.stop(rule.id);
        results.push({ id: rule.id, state: 'failed', error: sourceUnavailable(rule.source_address) });
      } else if (rule.tunnel_id === null && rule.targets.some(isSrvName)) {
        // An SRV name left as it was given: it has no records here (see srv.ts), now or any more.
        await this.stop(rule.id);
        const why = `none of ${rule.targets.join(', ')} resolves on the node${this.srvWhy(rule)}`;
        results.push({ id: rule.id, state: 'failed', error: ruleError('target_unresolvable', why) });
      } else {
        const result = await this.start(rule);
        results.push(result);
        if (result.state !== 'applied') continue;
        result.path = 'relay';
        if (!refusal) toKernel.push({ rule, result });
        else result.reason = refusal;
      }
    }
    this.kernelIpv6 = kernel?.available ? kernel.ipv6 : false;
    if (this.kernelIpv6) this.raKept = [...this.raKept, ...(await keepRouterAdvertisements())];
    if (kernel?.available) this.flowOffload = kernel.flowOffload;
    await this.applyKernel(toKernel);
    // The rule is carried once this thread listens; the others have listened beside it once they answer.
    await Promise.all(this.telling);
    this.telling = [];
    for (const exit of this.exits.values()) {
      for (const rule of exit.end.rules) results.push(await this.exitResult(exit, rule));
    }
    // A socket handed over for a rule no longer here is not kept listening.
    for (const [key, handle] of this.inherited) {
      handle.close();
      this.unkept.push(key);
    }
    this.inherited.clear();
    await this.released();
    return results;
  }

  /** Takes over these listening sockets (by `transport:port`) for the rules of the next apply. */
  inherit(handles: Map<string, { close(): unknown }>): void {
    this.inherited = handles;
  }

  /** Every relay's listening socket, by `transport:port`, for the agent taking over. */
  listeningHandles(): { key: string; handle: object }[] {
    const handles = [...this.listeners.values()].flatMap(socketsOf).filter(listening);
    for (const { end, exit } of this.exits.values()) {
      const handle = exit.listeningHandle;
      if (handle) handles.push({ key: `tunnel:${end.port}`, handle });
    }
    return handles;
  }

  /** The keeper drops its copies of the sockets closed since the last call; resolves once it has. */
  private async released(): Promise<void> {
    if (this.unkept.length === 0) return;
    const keys = this.unkept;
    this.unkept = [];
    await this.keeper?.release(keys);
  }

  /** The relays take no more connections (another agent took their sockets over); those open go on. */
  async stopAccepting(): Promise<void> {
    for (const listener of this.listeners.values()) for (const relay of listener.relays) relay.stopAccepting();
    for (const { exit } of this.exits.values()) exit.stopAccepting();
    await this.threads?.tell({ type: 'stop_accepting' });
  }

  /** How many connections the relays carry now. */
  get openConnections(): number {
    let open = 0;
    for (const listener of this.listeners.values()) for (const relay of listener.relays) open += relay.carrying;
    for (const { exit } of this.exits.values()) open += exit.carrying;
    return open;
  }

  /**
   * The connections (TCP) and flows (UDP) each rule carries now: its relays', and for a rule the kernel carries, the
   * kernel's (its conntrack entries to the rule's ports, where that table can be read). Rules carrying none are left
   * out.
   */
  async openByRule(): Promise<Map<number, number>> {
    const open = new Map<number, number>();
    for (const [id, listener] of this.listeners) {
      const carrying = listener.relays.reduce((sum, relay) => sum + relay.carrying, 0);
      if (carrying > 0) open.set(id, carrying);
    }
    if (this.kernelRules.size === 0) return open;
    const portsOf = new Map<string, number>();
    for (const rule of this.kernelRules.values()) {
      const transports = transportsOf(rule.protocol);
      for (let port = rule.listen_port; port <= (rule.lastPort ?? rule.listen_port); port++)
        for (const transport of transports) portsOf.set(`${transport}:${port}`, rule.id);
    }
    const counted = await countConnections(new Set(portsOf.keys()));
    for (const [key, count] of counted ?? []) {
      const id = portsOf.get(key)!;
      open.set(id, (open.get(id) ?? 0) + count);
    }
    return open;
  }

  /** Adds what another agent relayed (one handing over) to what the next drain reports. */
  absorb(traffic: readonly RuleTraffic[]): void {
    for (const counted of traffic) addTraffic(this.leftover, counted.id, counted);
  }

  /** Calls onExpiry when the first of the enabled rules' expires_at comes. */
  private scheduleExpiry(rules: ForwardRule[], now: number): void {
    clearTimeout(this.expiryTimer);
    // A loop, not Math.min(...): a config may hold 200,000 rules, more arguments than a call takes.
    let next = Infinity;
    for (const rule of rules)
      if (rule.enabled && rule.expires_at !== null) next = Math.min(next, Date.parse(rule.expires_at));
    if (next === Infinity) return;
    this.expiryTimer = setTimeout(() => this.onExpiry(), Math.min(next - now, LONGEST_TIMER_MS)).unref();
  }

  /**
   * Whether `rule` fails where the kernel cannot carry it, rather than going to the relay: on an agent that forwards
   * in the kernel only, and for a rule that keeps the client's address, which the relay cannot.
   */
  private kernelOnly(rule: ForwardRule): boolean {
    return this.mode === 'kernel' || rule.preserve_source || portCount(rule) > RELAY_RANGE_PORTS;
  }

  /** Why `rule` cannot be carried by the kernel here, or null when it can. */
  private kernelRefusal(rule: ForwardRule, available: boolean): string | null {
    if (this.mode === 'relay') return 'the agent forwards in user space only';
    if (!available) return this.kernelState.available ? 'the kernel path is not available' : this.kernelState.reason;
    return relayOnlyReason(rule);
  }

  /**
   * Writes the kernel table for `wanted` (rules whose relay listener is up), each with its target's address per
   * family; results say which path carries each. A table nftables refuses leaves the rules to their relays (auto), or
   * fails them (kernel only).
   */
  private async applyKernel(wanted: { rule: ForwardRule; result: RuleResult }[]): Promise<void> {
    const entries = new Map<number, KernelEntry>();
    for (const { rule } of wanted) {
      const resolved = await Promise.all(
        rule.targets.map(async (given) => {
          const target = parseTarget(given);
          return target ? this.destinations(target, this.policyOf(rule)) : { v4: null, v6: null };
        }),
      );
      // Every target, or none: a target the kernel cannot send to would lose its share of the clients.
      if (resolved.every((destinations) => destinations.v4 || destinations.v6))
        entries.set(rule.id, { rule, resolved });
    }
    const next = new Map([...entries].map(([id, entry]) => [id, this.kernelRuleOf(entry)]));
    // Nothing for the kernel, and nothing there from before (this run's, or a previous one's: it is taken out).
    if (next.size === 0 && this.kernelRules.size === 0 && this.kernelSwept) return;
    this.kernelSwept = true;
    try {
      // The counters are read (a listing of the whole table) only for the final counts of rules leaving it, or where
      // this run has not written it yet: a change to one rule of 10,000 is a write, not three listings and a write.
      const leaving = [...this.kernelRules.keys()].some((id) => !next.has(id));
      const before = leaving || this.kernelPlan === null ? await readCounters(this.table) : undefined;
      if (before === null && next.size === 0) return;
      if (before === null) this.kernelFresh = true;
      for (const [id, counts] of before ?? []) if (!next.has(id)) this.kernelRemoved.set(id, counts);
      this.closeLeaving(next);
      // A table with no rule stays while it closes ports: their connections are reset rather than go on untracked.
      if (next.size === 0 && this.closedPorts().length === 0) {
        await removeTable(this.table);
        this.kernelPlan = null;
      } else await this.writeTable([...next.values()]);
      this.kernelRules = next;
      this.kernelEntries = entries;
    } catch (error) {
      this.forgetKernel((error as Error).message);
      for (const { rule, result } of wanted) {
        if (this.kernelOnly(rule)) await this.failKernelOnly(rule, result, 'kernel_failed', (error as Error).message);
        else result.reason = (error as Error).message;
      }
      return;
    }
    for (const { rule, result } of wanted) {
      if (next.has(rule.id)) result.path = 'kernel';
      else if (this.kernelOnly(rule))
        await this.failKernelOnly(rule, result, 'kernel_unsupported', NO_KERNEL_DESTINATION);
      else result.reason = NO_KERNEL_DESTINATION;
    }
  }

  /** Fails a rule that only the kernel may carry (see kernelOnly), which it does not: its relay listener closes. */
  private async failKernelOnly(
    rule: ForwardRule,
    result: RuleResult,
    code: 'kernel_failed' | 'kernel_unsupported',
    why: string,
  ): Promise<void> {
    await this.stop(rule.id);
    Object.assign(result, { state: 'failed', error: ruleError(code, why) });
    delete result.path;
    delete result.reason;
  }

  /**
   * The rule as the kernel is to carry it now: the targets its strategy sends new clients to among those up (all of
   * them, weighted, for round_robin, random and source_hash; the first up for failover; the fastest for
   * lowest_latency).
   */
  private kernelRuleOf({ rule, resolved }: KernelEntry): KernelRule {
    const health = this.listeners.get(rule.id)?.health ?? null;
    const up: KernelTarget[] = [];
    // From a source address, only its family's clients: the kernel translates no family into another, and the others'
    // reach the relay, which dials from the source.
    const from = rule.source_address === null ? null : rule.source_address.includes(':') ? 6 : 4;
    resolved.forEach((destinations, index) => {
      const { v4, v6 } = destinations;
      const kept = { v4: from === 6 ? null : v4, v6: from === 4 ? null : v6 };
      if (!health?.isDownAt(index)) up.push({ index, weight: rule.weights?.[index] ?? 1, ...kept });
    });
    // An SRV name's records: those of the lowest priority up (the kernel fails over to no other).
    const tiers = (rule as ForwardRule & Tiered).tiers;
    if (tiers && up.length > 0) {
      const lowest = Math.min(...up.map((target) => tiers[target.index] ?? 0));
      up.splice(0, up.length, ...up.filter((target) => (tiers[target.index] ?? 0) === lowest));
    }
    const fastest = health?.fastest() ?? null;
    const targets =
      rule.strategy === 'failover'
        ? up.slice(0, 1)
        : rule.strategy === 'lowest_latency'
          ? [up.find((target) => target.index === fastest) ?? up[0]].filter((target) => target !== undefined)
          : up;
    return {
      id: rule.id,
      protocol: rule.protocol,
      listen_port: rule.listen_port,
      targets,
      spread: rule.strategy === 'random' || rule.strategy === 'source_hash' ? rule.strategy : 'round_robin',
      sources: sourcesOf(rule),
      maxConnections: rule.max_connections,
      newPerSecond: rule.max_new_connections_per_second,
      source: rule.source_address,
      preserveSource: rule.preserve_source,
      quota: kernelQuotaOf(rule),
      lastPort: lastPort(rule),
      ports: kernelPorts(rule) ?? 'fixed',
    };
  }

  /** TCP ports the kernel carried until lately, by span (`first-last`), and until when (ms) they are closed. */
  private closedTcp = new Map<string, { port: number; last: number; until: number }>();

  /**
   * Closes the TCP ports of the kernel's rules that `next` drops or moves (see ruleset.ts quotaRules); what `next`
   * still carries is left out when the table is written.
   */
  private closeLeaving(next: ReadonlyMap<number, KernelRule>): void {
    const span = (rule: KernelRule) => `${rule.listen_port}-${rule.lastPort ?? rule.listen_port}`;
    const until = Date.now() + (this.idleSeconds() + CONNTRACK_CLOSING_SECONDS) * 1000;
    for (const rule of this.kernelRules.values()) {
      const staying = next.get(rule.id);
      if (rule.protocol === 'udp' || (staying && staying.protocol !== 'udp' && span(staying) === span(rule))) continue;
      this.closedTcp.set(span(rule), { port: rule.listen_port, last: rule.lastPort ?? rule.listen_port, until });
    }
  }

  /** The closed ports still closed, with the seconds left; the others forgotten. */
  private closedPorts(): ClosedPort[] {
    const now = Date.now();
    const closed: ClosedPort[] = [];
    for (const [key, { port, last, until }] of this.closedTcp)
      if (until <= now) this.closedTcp.delete(key);
      else closed.push({ port, last, seconds: Math.ceil((until - now) / 1000) });
    return closed;
  }

  private idleSeconds(): number {
    return Math.max(1, Math.round(this.limits.tcpIdleMs / 1000));
  }

  /**
   * Writes the kernel table with `rules`, held to the node's limits as the relay holds its own: the difference from
   * the plan last written, or, where that is not known, the whole table, over what it holds (`found`, or what a look
   * at it finds).
   */
  private async writeTable(rules: KernelRule[], found?: Held): Promise<void> {
    const limits = { perSource: this.limits.maxConnectionsPerSource, tcpIdleSeconds: this.idleSeconds() };
    const written = this.kernelPlan;
    const held = written ? heldIn(outlineOf(written)) : (found ?? heldIn(await tableOutline(this.table)));
    // Not known again until written.
    this.kernelPlan = null;
    const plan = tablePlan(rules, limits, this.closedPorts());
    try {
      await applyPlan(this.table, plan, held, written);
    } catch {
      // A table declared otherwise (a map without intervals, by an agent older than port ranges) is not declared
      // over, and one changed under the difference (an element gone) refuses it: it is made anew, its counts since
      // the last report lost, as when something else removes it.
      await removeTable(this.table);
      this.kernelFresh = true;
      await applyPlan(this.table, plan, NOTHING_HELD, null);
    }
    this.kernelPlan = plan;
  }

  /** Looks for flowtables again; returns whether their devices changed. */
  async checkFlowOffload(): Promise<boolean> {
    const devices = await flowOffloadDevices();
    const changed = devices.join() !== this.flowOffload.join();
    this.flowOffload = devices;
    return changed;
  }

  /**
   * Whether the kernel table is still what this agent wrote. When something else removed or changed it (a `flush
   * ruleset` in nftables.conf, a firewall's or Docker's reload), it is written back and counted as a drift:
   * 'restored'. 'failed' when it could not be written back (kernelState says why, and the kernel carries nothing: the
   * agent applies its config again, so that each rule says the relay carries it); 'intact'; null while there is no
   * table to watch. The bytes the kernel counted since the last report are lost with a removed table.
   */
  async checkKernel(): Promise<'intact' | 'restored' | 'failed' | null> {
    const written = this.kernelPlan;
    if (this.kernelRules.size === 0 || !written) return null;
    const outline = await tableOutline(this.table);
    if (outline && sameOutline(outline, outlineOf(written))) return 'intact';
    this.kernelDrift = { count: this.kernelDrift.count + 1, lastAt: formatTime(Date.now()) };
    // What the table holds now, not what this agent wrote: what a rewrite may delete is read from it.
    this.kernelPlan = null;
    try {
      if (outline === null) this.kernelFresh = true;
      await this.writeTable([...this.kernelRules.values()], heldIn(outline));
      // What was added to the table beside the agent's own (a chain, say) is not flushed by a rewrite: anew, then.
      const rewritten = await tableOutline(this.table);
      if (!rewritten || !sameOutline(rewritten, outlineOf(this.kernelPlan!))) {
        await removeTable(this.table);
        this.kernelFresh = true;
        this.kernelPlan = null;
        await this.writeTable([...this.kernelRules.values()], NOTHING_HELD);
      }
      return 'restored';
    } catch (error) {
      this.forgetKernel(`the kernel table could not be written back: ${(error as Error).message}`);
      return 'failed';
    }
  }

  /** The kernel path failed (`reason`): it carries nothing now, and nothing is written to it until the next apply. */
  private forgetKernel(reason: string): void {
    this.kernelState = { available: false, reason };
    this.kernelRules = new Map();
    this.kernelEntries = new Map();
    this.kernelPlan = null;
  }

  /** The addresses the kernel sends a target's clients to, per family; none that the rule's dial policy refuses. */
  private async destinations(target: Target, policy: DialPolicy): Promise<Destinations> {
    let addresses: string[];
    if (isIP(target.host)) addresses = [target.host];
    else {
      try {
        addresses = (await lookup(target.host, { all: true })).map((found) => found.address);
      } catch {
        addresses = [];
      }
    }
    // What is local to the node (loopback above all, which the kernel cannot reach from another host) stays with the
    // relay, which dials it where the rule's policy lets it; so does what the relay would refuse (the master).
    const allowed = addresses.filter((address) => !localRefusal(address) && !refusal(address, policy));
    const pick = (v4: boolean): Destination | null => {
      const address = allowed.find((a) => isIPv4(a) === v4);
      return address ? { address, port: target.port } : null;
    };
    return { v4: pick(true), v6: this.kernelIpv6 ? pick(false) : null };
  }

  /**
   * The kernel's counts since the previous call, and what to make of them (see KernelCounts); null when the kernel
   * carries nothing and never did since the previous call.
   */
  async kernelCounts(): Promise<KernelCounts | null> {
    const removed = this.kernelRemoved;
    const fresh = this.kernelFresh;
    this.kernelRemoved = new Map();
    this.kernelFresh = false;
    if (this.kernelRules.size === 0 && removed.size === 0) return null;
    const counts =
      this.kernelRules.size > 0 ? ((await readCounters(this.table)) ?? new Map<number, Counts>()) : new Map();
    for (const [id, last] of removed) if (!counts.has(id)) counts.set(id, last);
    return { counts, removed: new Set([...removed.keys()].filter((id) => !this.kernelRules.has(id))), fresh };
  }

  /**
   * Rewrites the kernel table when the targets the kernel rules `ids` send new clients to changed by their health
   * checks (one went down or came up, or lowest_latency found another faster): established connections go on, only
   * new clients see the change. Only those rules are looked at again. Returns whether it rewrote.
   */
  async refreshKernelHealth(ids: Iterable<number>): Promise<boolean> {
    const next = new Map(this.kernelRules);
    let changed = false;
    for (const id of ids) {
      const entry = this.kernelEntries.get(id);
      if (!entry) continue;
      const rule = this.kernelRuleOf(entry);
      if (JSON.stringify(rule) === JSON.stringify(next.get(id))) continue;
      next.set(id, rule);
      changed = true;
    }
    if (!changed) return false;
    await this.writeTable([...next.values()]);
    this.kernelRules = next;
    return true;
  }

  /** Looks up the kernel rules' target names again and rewrites the table if an address changed. */
  async refreshKernel(): Promise<boolean> {
    if (this.kernelEntries.size === 0) return false;
    const entries = new Map<number, KernelEntry>();
    for (const [id, entry] of this.kernelEntries) {
      const resolved = await Promise.all(
        entry.rule.targets.map(async (given, index) => {
          const target = parseTarget(given);
          const found = target ? await this.destinations(target, this.policyOf(entry.rule)) : { v4: null, v6: null };
          // A name that resolves to nothing now keeps the address it had.
          return found.v4 || found.v6 ? found : entry.resolved[index]!;
        }),
      );
      entries.set(id, { rule: entry.rule, resolved });
    }
    return this.rewriteKernel(entries);
  }

  /** Writes the kernel table for `entries` if that changes what it carries; returns whether it did. */
  private async rewriteKernel(entries: Map<number, KernelEntry>): Promise<boolean> {
    const next = new Map([...entries].map(([id, entry]) => [id, this.kernelRuleOf(entry)]));
    const changed = [...next].some(([id, rule]) => JSON.stringify(rule) !== JSON.stringify(this.kernelRules.get(id)));
    this.kernelEntries = entries;
    if (!changed) return false;
    await this.writeTable([...next.values()]);
    this.kernelRules = next;
    return true;
  }

  /** How each end of a tunnel on this node stands. */
  tunnelReports(): TunnelReport[] {
    return [
      ...[...this.entries].map(([id, { entry }]) => ({ id, ...entry.current })),
      ...[...this.exits].map(([id, { exit }]) => ({ id, ...exit.current })),
    ];
  }

  /** Opens, keeps or closes tunnel ends; an end whose address or keys changed starts over. */
  private async applyTunnels(tunnels: TunnelEnd[]): Promise<void> {
    const wanted = new Map(tunnels.map((end) => [end.id, end]));
    for (const [id, { end, entry }] of this.entries) {
      const next = wanted.get(id);
      if (!next || !sameEnd(end, next)) {
        entry.close();
        this.entries.delete(id);
      }
    }
    for (const [id, { end, exit }] of this.exits) {
      const next = wanted.get(id);
      if (!next || !sameEnd(end, next)) {
        this.exits.delete(id);
        await exit.close();
        this.unkept.push(`tunnel:${end.port}`);
      }
    }
    for (const end of tunnels) {
      if (end.role === 'entry') {
        if (!this.entries.has(end.id) && end.host !== null)
          this.entries.set(end.id, {
            end,
            entry: new TunnelEntries(
              entriesOf({ ...end, host: end.host }),
              () => this.onTunnelChange(),
              policyFor(this.limits, end.local_targets),
            ),
          });
        continue;
      }
      const rules: ExitRule[] = end.rules.map((rule) => ({ ...rule, targets: parseTargets(rule.targets) }));
      const known = this.exits.get(end.id);
      if (known) {
        known.end = end;
        known.exit.setRules(rules);
        const ids = new Set(rules.map((rule) => rule.id));
        for (const id of known.resolved.keys()) if (!ids.has(id)) known.resolved.delete(id);
        continue;
      }
      const exit = new TunnelExit(end, () => this.onTunnelChange(), this.limits);
      exit.setRules(rules);
      const opened: Exit = { end, exit, failure: null, resolved: new Map() };
      this.exits.set(end.id, opened);
      try {
        await this.released();
        await exit.listen(this.host, this.takeInherited(`tunnel:${end.port}`));
        this.keeper?.keep(`tunnel:${end.port}`, exit.listeningHandle!);
      } catch (error) {
        opened.failure = error as NodeJS.ErrnoException;
        exit.fail(exitCannotListen(end.port, opened.failure.code ?? opened.failure.message));
      }
    }
    this.onTunnelChange();
  }

  /** What the exit does with a rule of its tunnel; like a direct rule's listener, its targets are resolved once. */
  private async exitResult({ end, failure, resolved }: Exit, rule: TunnelEnd['rules'][number]): Promise<RuleResult> {
    if (failure) {
      return {
        id: rule.id,
        state: 'failed',
        error: bindError(failure, { listen_port: end.port, protocol: 'tcp' }, `tunnel ${end.id}'s exit `),
      };
    }
    if (rule.enabled && rule.source_address && !ownAddress(rule.source_address))
      return { id: rule.id, state: 'failed', error: sourceUnavailable(rule.source_address) };
    const targets = rule.targets.join(',');
    if (rule.enabled && resolved.get(rule.id) !== targets) {
      if (!(await resolvable(parseTargets(rule.targets)))) {
        return {
          id: rule.id,
          state: 'failed',
          error: ruleError(
            'target_unresolvable',
            `none of ${rule.targets.join(', ')} resolves on the exit node${this.srvWhy(rule)}`,
          ),
        };
      }
      resolved.set(rule.id, targets);
    }
    return { id: rule.id, state: 'applied', error: null };
  }

  /** Why a rule's SRV name gave it no targets, for its error (`: ...`), or nothing. */
  private srvWhy(rule: { targets: string[] }): string {
    const why = rule.targets.length === 1 ? this.srv.problem(rule.targets[0]!) : null;
    return why ? ` (${why})` : '';
  }

  /**
   * What a rule may dial, and from where: the node's policy, but a rule the master holds off local targets never
   * reaches them; from its source_address where it has one.
   */
  private policyOf(
    rule: Pick<ForwardRule, 'local_targets'> & Partial<Pick<ForwardRule, 'source_address'>>,
  ): DialPolicy {
    return policyFor(this.limits, rule.local_targets, rule.source_address ?? null);
  }

  /** The dial functions of a rule: to its targets, or through its tunnel's entry end as it stands when dialling. */
  private dials(rule: ForwardRule, picker: TargetPicker, offset = 0): Dials {
    const tunnelId = rule.tunnel_id;
    const policy = this.policyOf(rule);
    if (tunnelId === null) return directDials(picker, policy, offset);
    return {
      tcp: (onOpen, onFail, client) => {
        const entry = this.entries.get(tunnelId)?.entry;
        if (entry) entry.dialTcp(rule.id)(onOpen, onFail, client);
        else onFail(`tunnel ${tunnelId} is gone`);
      },
      udp: (onReply, onEnd, client) =>
        this.entries.get(tunnelId)?.entry.dialDatagrams(rule.id)(onReply, onEnd, client) ?? null,
    };
  }

  /** Bytes per rule since the previous call; rules with no traffic are left out. */
  drain(): RuleTraffic[] {
    const totals = this.leftover;
    this.leftover = new Map();
    for (const [id, listener] of this.listeners) {
      for (const relay of listener.relays) addTraffic(totals, id, relay.drain());
      const { gate } = listener;
      addTraffic(totals, id, { ...gate.cells.drainCarried(), refused: gate.drainRefused() });
    }
    return [...totals.values()].filter((t) => t.bytes_in > 0 || t.bytes_out > 0 || (t.refused ?? 0) > 0);
  }

  /**
   * Tries each of `targets` from this node, as its relays would reach them (the same policy), all at once: how each
   * answered and how long it took.
   */
  async probe(
    protocol: 'tcp' | 'udp',
    targets: string[],
    timeoutMs: number,
    localTargets = true,
  ): Promise<ProbeResult[]> {
    const policy = policyFor(this.limits, localTargets);
    return Promise.all(
      targets.map(async (given) => {
        const target = parseTarget(given);
        if (!target) return { target: given, reachable: false, ms: null, error: 'not a target' };
        const started = performance.now();
        const outcome =
          protocol === 'tcp'
            ? await probeTarget(target, policy, timeoutMs).then((error) => ({ reachable: error === null, error }))
            : await probeDatagram(target, policy, timeoutMs);
        const ms = outcome.reachable ? Math.round(performance.now() - started) : null;
        return { target: given, ...outcome, ms };
      }),
    );
  }

  /** How the targets of each health-checked rule stand. */
  healthReports(): { id: number; targets: TargetHealth[] }[] {
    return [...this.listeners]
      .filter(([, listener]) => listener.health !== null)
      .map(([id, listener]) => ({ id, targets: listener.health!.report() }));
  }

  /** Ports currently listened on, as `protocol:port` per rule id. */
  listening(): Map<number, string> {
    return new Map([...this.listeners].map(([id, l]) => [id, l.key]));
  }

  async close(): Promise<void> {
    clearTimeout(this.expiryTimer);
    clearInterval(this.quotaWatch);
    this.srv.close();
    for (const id of [...this.listeners.keys()]) await this.stop(id);
    await this.threads?.close();
    await this.applyTunnels([]);
    await this.released();
  }

  private async start(rule: ForwardRule & Tiered): Promise<RuleResult> {
    const targets = parseTargets(rule.targets);
    const existing = this.listeners.get(rule.id);
    if (existing) {
      existing.targets = rule.targets;
      existing.picker.update(targets, rule.strategy, rule.weights, rule.tiers ?? null);
      existing.gate.update(rule);
      this.checkHealth(existing, rule, targets);
      const dials = (offset: number) => this.dials(rule, existing.picker, offset);
      retarget(existing.relays, existing.offsets, dials, rule.proxy_protocol);
      this.tellThreads(rule, targets, existing);
      return { id: rule.id, state: 'applied', error: null };
    }
    // Through a tunnel, the exit resolves the targets.
    if (rule.tunnel_id === null && !(await resolvable(targets))) {
      return {
        id: rule.id,
        state: 'failed',
        error: ruleError(
          'target_unresolvable',
          `none of ${rule.targets.join(', ')} resolves on the node${this.srvWhy(rule)}`,
        ),
      };
    }
    const relays: Relay[] = [];
    const offsets: number[] = [];
    const listener: Listener = {
      key: listenerKey(rule),
      relays,
      offsets,
      gate: new Gate(rule, RuleCells.forThreads(this.countedBy)),
      picker: new TargetPicker(targets, rule.strategy, rule.weights, () => listener.health, rule.tiers ?? null, {
        threads: this.countedBy,
      }),
      health: null,
      targets: rule.targets,
      firstPort: rule.listen_port,
      told: null,
    };
    const { gate, picker } = listener;
    // A range wider than the relay takes is the kernel's alone (see kernelOnly): nothing listens on its ports here.
    const offsetsHeld = portCount(rule) > RELAY_RANGE_PORTS ? 0 : portCount(rule);
    // With threads, every listener can take them beside it: a rule that leaves its tunnel keeps its listener.
    const shared = this.threads !== null;
    const handedOver = new Set<number>();
    let port = rule.listen_port;
    try {
      // A port this agent closed just now is bound again only once no copy of its old socket listens.
      await this.released();
      const others = shared ? await (this.othersListening ??= othersListening(this.host)) : null;
      for (let offset = 0; offset < offsetsHeld; offset++) {
        port = rule.listen_port + offset;
        const dials = this.dials(rule, picker, offset);
        for (const transport of transportsOf(rule.protocol)) {
          const relay = relayOf(transport, dials, this.limits, gate, rule.proxy_protocol, { threads: this.countedBy });
          relays.push(relay);
          offsets.push(offset);
          const inherited = this.takeInherited(`${transport}:${port}`);
          if (inherited) handedOver.add(relays.length - 1);
          else if (others?.[transport].has(port)) throw inUse();
          await relay.listen(this.host, port, inherited, shared);
        }
      }
    } catch (error) {
      await Promise.all(relays.map((relay) => relay.close().catch(() => undefined)));
      const where = { protocol: rule.protocol, listen_port: port };
      return { id: rule.id, state: 'failed', error: bindError(error as NodeJS.ErrnoException, where) };
    }
    // A spent quota ends what the rule carries; new clients meet the gate's refusal.
    gate.onSpent = () => {
      for (const relay of relays) relay.endAll();
    };
    this.checkHealth(listener, rule, targets);
    this.tellThreads(rule, targets, listener, handedOver);
    this.listeners.set(rule.id, listener);
    for (const { key, handle } of socketsOf(listener).filter(listening)) this.keeper?.keep(key, handle);
    return { id: rule.id, state: 'applied', error: null };
  }

  /** Whether the relay's threads carry `rule` too: one straight to its targets (a tunnel's streams live here). */
  private threaded(rule: ForwardRule): boolean {
    return rule.tunnel_id === null;
  }

  /**
   * Tells the relay's threads of `rule` as `listener` carries it here (the relays at `handedOver` on sockets another
   * agent handed over), without waiting: the apply waits for what it told (see `telling`). A port a thread could not
   * listen on is this thread's alone, and said in the vitals; the rule is carried all the same.
   */
  private tellThreads(
    rule: ForwardRule & Tiered,
    targets: Target[],
    listener: Listener,
    handedOver = new Set<number>(),
  ) {
    const threads = this.threads;
    if (!threads || listener.relays.length === 0) return;
    // A rule that went into a tunnel is the main thread's alone from now on.
    if (!this.threaded(rule)) {
      if (listener.told === null) return;
      listener.told = null;
      this.telling.push(threads.tell({ type: 'stop', id: rule.id }).then(() => undefined));
      return;
    }
    // An apply hands every rule over again: the threads hear only of what changed.
    const told = {
      rule: JSON.stringify(rule),
      picker: listener.picker.counts,
      health: listener.health?.shared.buffer ?? null,
    };
    const before = listener.told;
    if (before && before.rule === told.rule && before.picker === told.picker && before.health === told.health) return;
    listener.told = told;
    const ports = listener.relays.map((relay, i) => ({
      transport: transportOf(relay),
      port: listener.firstPort + listener.offsets[i]!,
      offset: listener.offsets[i]!,
      counts: relay.counts.buffer,
    }));
    const sent = threads.tell({
      type: 'rule',
      rule: {
        ...{ rule, targets, host: this.host, cells: listener.gate.cells.buffer, picker: told.picker },
        ...{ health: told.health, listeners: ports },
      },
    });
    this.telling.push(
      sent.then((alone) => {
        // A rule stopped meanwhile has no ports to speak of.
        if (this.listeners.get(rule.id) !== listener) return;
        const handedKeys = new Set([...handedOver].map((i) => `${ports[i]!.transport}:${ports[i]!.port}`));
        for (const { key, code } of alone) this.alone.set(key, handedKeys.has(key) ? HANDED_OVER : code);
      }),
    );
  }

  private takeInherited(key: string): object | undefined {
    const handle = this.inherited.get(key);
    this.inherited.delete(key);
    return handle;
  }

  /** Starts, changes or stops the checks of a listener's targets as its rule says. */
  private checkHealth(listener: Listener, rule: ForwardRule, targets: Target[]): void {
    const check = rule.tunnel_id === null ? rule.health_check : null;
    if (!check) {
      listener.health?.close();
      listener.health = null;
      return;
    }
    // A target that expects a PROXY header is checked with one, saying there is no client (LOCAL, UNKNOWN).
    const none = { address: '', port: 0 };
    const greeting = rule.proxy_protocol === 'none' ? null : proxyHeader(rule.proxy_protocol, none, none);
    const policy = this.policyOf(rule);
    if (listener.health) listener.health.update(check, rule.targets, targets, greeting, policy);
    else
      listener.health = new HealthChecker(
        check,
        rule.targets,
        targets,
        policy,
        (change) => this.onHealthChange(rule.id, change),
        greeting,
      );
  }

  private async stop(id: number): Promise<void> {
    const listener = this.listeners.get(id);
    if (!listener) return;
    this.listeners.delete(id);
    listener.health?.close();
    // The threads' last bytes of the rule are in its cells once they have stopped it.
    if (this.threads && listener.told) await this.threads.tell({ type: 'stop', id });
    const keys = socketsOf(listener).map(({ key }) => key);
    for (const key of keys) this.alone.delete(key);
    await Promise.all(listener.relays.map((relay) => relay.close()));
    for (const relay of listener.relays) addTraffic(this.leftover, id, relay.drain());
    const { gate } = listener;
    addTraffic(this.leftover, id, { ...gate.cells.drainCarried(), refused: gate.drainRefused() });
    this.unkept.push(...keys);
  }
}

/**
 * The ports other programs (and this agent's supervisor, for the sockets it keeps) listen on where a listener on
 * `host` would share them, by transport.
 */
async function othersListening(host: string): Promise<Record<'tcp' | 'udp', Set<number>>> {
  return { tcp: await portsListenedBeside(host, 'tcp'), udp: await portsListenedBeside(host, 'udp') };
}

/** Why a port is relayed by this thread alone: another agent handed its socket over without SO_REUSEPORT. */
const HANDED_OVER = 'handed_over';

/** What binding a port another program listens on fails with. */
function inUse(): NodeJS.ErrnoException {
  return Object.assign(new Error('address already in use'), { code: 'EADDRINUSE' });
}

/** A listener's sockets, by `transport:port`, with each one's handle while it listens. */
function socketsOf(listener: Listener): { key: string; handle: object | undefined }[] {
  return listener.relays.map((relay, i) => ({
    key: `${transportOf(relay)}:${listener.firstPort + listener.offsets[i]!}`,
    handle: relay.listeningHandle,
  }));
}

function listening(socket: { key: string; handle: object | undefined }): socket is { key: string; handle: object } {
  return socket.handle !== undefined;
}

/** Adds `counter` to the rule's entry of `totals`. */
export function addTraffic(
  totals: Map<number, RuleTraffic>,
  id: number,
  counter: { bytes_in: number; bytes_out: number; refused?: number },
): void {
  const current = totals.get(id) ?? { id, bytes_in: 0, bytes_out: 0, refused: 0 };
  current.bytes_in += counter.bytes_in;
  current.bytes_out += counter.bytes_out;
  current.refused = (current.refused ?? 0) + (counter.refused ?? 0);
  totals.set(id, current);
}
