// Applies a node's whole rule set and its tunnel ends idempotently: listeners whose port and
// protocol are unchanged stay up (keeping their connections, with targets or tunnel updated
// in place), removed or moved ones close, new ones open; a tunnel end whose address or keys
// are unchanged keeps its session. Each rule's outcome carries a machine code on failure:
// for a rule this node is the exit of, what the exit did with it.

import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { parseTarget } from '../schema/net.ts';
import type { ForwardRule, RuleErrorCode, RuleResult, RuleTraffic } from '../domain/rules.ts';
import type { TunnelEnd } from '../domain/link.ts';
import { TunnelEntry } from '../tunnel/entry.ts';
import { TunnelExit, type ExitRule } from '../tunnel/exit.ts';
import type { TunnelView } from '../tunnel/wire.ts';
import { datagramsTo, dialTargets, type DatagramDial, type TcpDial } from '../relay/dial.ts';
import { DEFAULT_LIMITS, type Limits } from '../relay/limits.ts';
import { TargetPicker, type Target } from '../relay/targets.ts';
import { TcpRelay } from '../relay/tcp.ts';
import { UdpRelay } from '../relay/udp.ts';

type Relay = TcpRelay | UdpRelay;

interface Listener {
  key: string;
  relays: Relay[];
  picker: TargetPicker;
}

/** How one end of a tunnel stands, as the agent reports it. */
export interface TunnelReport extends TunnelView {
  id: number;
}

function listenerKey(rule: ForwardRule): string {
  return `${rule.protocol}:${rule.listen_port}`;
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

function sameEnd(a: TunnelEnd, b: TunnelEnd): boolean {
  return (
    a.role === b.role &&
    a.host === b.host &&
    a.port === b.port &&
    a.cert === b.cert &&
    a.key === b.key &&
    a.peer_pin === b.peer_pin
  );
}

function parseTargets(targets: string[]): Target[] {
  return targets.map(parseTarget).filter((t): t is Target => t !== null);
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
  private readonly entries = new Map<number, { end: TunnelEnd; entry: TunnelEntry }>();
  private readonly exits = new Map<number, Exit>();
  /** Called whenever how a tunnel end stands changes (state, error, round trip). */
  onTunnelChange: () => void = () => undefined;
  /** Traffic of listeners closed since the last drain, so no byte is lost at a reconfigure. */
  private leftover = new Map<number, RuleTraffic>();

  /** Shared with every relay, so a change applies to their next connection. */
  private readonly limits: Limits;

  constructor(
    private readonly host: string,
    limits: Partial<Limits> = {},
  ) {
    this.limits = { ...DEFAULT_LIMITS, ...limits };
  }

  setLimits(limits: Partial<Limits>): void {
    Object.assign(this.limits, limits);
  }

  async apply(rules: ForwardRule[], tunnels: TunnelEnd[] = []): Promise<RuleResult[]> {
    await this.applyTunnels(tunnels);
    const wanted = new Map(rules.filter((r) => r.enabled).map((r) => [r.id, r]));
    for (const [id, listener] of this.listeners) {
      const rule = wanted.get(id);
      if (!rule || listenerKey(rule) !== listener.key) await this.stop(id);
    }
    const results: RuleResult[] = [];
    for (const rule of rules) {
      if (!rule.enabled) results.push({ id: rule.id, state: 'applied', error: null });
      else if (rule.tunnel_id !== null && !this.entries.has(rule.tunnel_id)) {
        await this.stop(rule.id);
        results.push({
          id: rule.id,
          state: 'failed',
          error: ruleError('tunnel_missing', `tunnel ${rule.tunnel_id} does not start at this node`),
        });
      } else results.push(await this.start(rule));
    }
    for (const exit of this.exits.values()) {
      for (const rule of exit.end.rules) results.push(await this.exitResult(exit, rule));
    }
    return results;
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
      }
    }
    for (const end of tunnels) {
      if (end.role === 'entry') {
        if (!this.entries.has(end.id) && end.host !== null)
          this.entries.set(end.id, {
            end,
            entry: new TunnelEntry({ ...end, host: end.host }, () => this.onTunnelChange()),
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
        await exit.listen(this.host);
      } catch (error) {
        opened.failure = error as NodeJS.ErrnoException;
        exit.fail(`cannot listen on port ${end.port}/tcp: ${opened.failure.code ?? opened.failure.message}`);
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
    const targets = rule.targets.join(',');
    if (rule.enabled && resolved.get(rule.id) !== targets) {
      if (!(await resolvable(parseTargets(rule.targets)))) {
        return {
          id: rule.id,
          state: 'failed',
          error: ruleError('target_unresolvable', `none of ${rule.targets.join(', ')} resolves on the exit node`),
        };
      }
      resolved.set(rule.id, targets);
    }
    return { id: rule.id, state: 'applied', error: null };
  }

  /** The dial functions of a rule: to its targets, or through its tunnel's entry end as it stands when dialling. */
  private dials(rule: ForwardRule, picker: TargetPicker): { tcp: TcpDial; udp: DatagramDial } {
    const tunnelId = rule.tunnel_id;
    if (tunnelId === null) return { tcp: dialTargets(picker, this.limits), udp: datagramsTo(picker, this.limits) };
    return {
      tcp: (onOpen, onFail) => {
        const entry = this.entries.get(tunnelId)?.entry;
        if (entry) entry.dialTcp(rule.id)(onOpen, onFail);
        else onFail(`tunnel ${tunnelId} is gone`);
      },
      udp: (onReply, onEnd) => this.entries.get(tunnelId)?.entry.dialDatagrams(rule.id)(onReply, onEnd) ?? null,
    };
  }

  /** Bytes per rule since the previous call; rules with no traffic are left out. */
  drain(): RuleTraffic[] {
    const totals = this.leftover;
    this.leftover = new Map();
    for (const [id, listener] of this.listeners) {
      for (const relay of listener.relays) add(totals, id, relay.drain());
    }
    return [...totals.values()].filter((t) => t.bytes_in > 0 || t.bytes_out > 0);
  }

  /** Ports currently listened on, as `protocol:port` per rule id. */
  listening(): Map<number, string> {
    return new Map([...this.listeners].map(([id, l]) => [id, l.key]));
  }

  async close(): Promise<void> {
    for (const id of [...this.listeners.keys()]) await this.stop(id);
    await this.applyTunnels([]);
  }

  private async start(rule: ForwardRule): Promise<RuleResult> {
    const targets = parseTargets(rule.targets);
    const existing = this.listeners.get(rule.id);
    if (existing) {
      existing.picker.update(targets, rule.strategy);
      const dials = this.dials(rule, existing.picker);
      for (const relay of existing.relays) relay.dial = relay instanceof TcpRelay ? dials.tcp : dials.udp;
      return { id: rule.id, state: 'applied', error: null };
    }
    // Through a tunnel, the exit resolves the targets.
    if (rule.tunnel_id === null && !(await resolvable(targets))) {
      return {
        id: rule.id,
        state: 'failed',
        error: ruleError('target_unresolvable', `none of ${rule.targets.join(', ')} resolves on the node`),
      };
    }
    const relays: Relay[] = [];
    const picker = new TargetPicker(targets, rule.strategy);
    const dials = this.dials(rule, picker);
    try {
      if (rule.protocol !== 'udp') {
        const tcp = new TcpRelay(dials.tcp, this.limits);
        relays.push(tcp);
        await tcp.listen(this.host, rule.listen_port);
      }
      if (rule.protocol !== 'tcp') {
        const udp = new UdpRelay(dials.udp, this.limits);
        relays.push(udp);
        await udp.listen(this.host, rule.listen_port);
      }
    } catch (error) {
      await Promise.all(relays.map((relay) => relay.close().catch(() => undefined)));
      return { id: rule.id, state: 'failed', error: bindError(error as NodeJS.ErrnoException, rule) };
    }
    this.listeners.set(rule.id, { key: listenerKey(rule), relays, picker });
    return { id: rule.id, state: 'applied', error: null };
  }

  private async stop(id: number): Promise<void> {
    const listener = this.listeners.get(id);
    if (!listener) return;
    this.listeners.delete(id);
    for (const relay of listener.relays) add(this.leftover, id, relay.drain());
    await Promise.all(listener.relays.map((relay) => relay.close()));
  }
}

function add(totals: Map<number, RuleTraffic>, id: number, counter: { bytes_in: number; bytes_out: number }): void {
  const current = totals.get(id) ?? { id, bytes_in: 0, bytes_out: 0 };
  current.bytes_in += counter.bytes_in;
  current.bytes_out += counter.bytes_out;
  totals.set(id, current);
}
