// Applies a node's whole rule set idempotently: listeners whose port and protocol are
// unchanged stay up (keeping their connections, with targets updated in place), removed or
// moved ones close, new ones open. Each rule's outcome carries a machine code on failure.

import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { parseTarget } from '../schema/net.ts';
import type { ForwardRule, RuleErrorCode, RuleResult, RuleTraffic } from '../domain/rules.ts';
import type { Target } from './targets.ts';
import { TcpRelay } from './tcp.ts';
import { UdpRelay } from './udp.ts';

export interface Limits {
  maxConnectionsPerRule: number;
  /** Open connections one client address may hold on one rule; more are closed at once. */
  maxConnectionsPerSource: number;
  /** A relayed TCP connection with no bytes either way for this long is closed. */
  tcpIdleMs: number;
  maxUdpSessionsPerRule: number;
  udpIdleMs: number;
}

export const DEFAULT_LIMITS: Limits = {
  maxConnectionsPerRule: 10_000,
  maxConnectionsPerSource: 256,
  tcpIdleMs: 3_600_000,
  maxUdpSessionsPerRule: 10_000,
  udpIdleMs: 60_000,
};

type Relay = TcpRelay | UdpRelay;

interface Listener {
  key: string;
  relays: Relay[];
}

function listenerKey(rule: ForwardRule): string {
  return `${rule.protocol}:${rule.listen_port}`;
}

/** The master reads details of at most 500 characters; a long list of targets is cut short. */
const MAX_DETAIL = 300;

function ruleError(code: RuleErrorCode, detail: string): NonNullable<RuleResult['error']> {
  return { code, detail: detail.length > MAX_DETAIL ? `${detail.slice(0, MAX_DETAIL - 3)}...` : detail };
}

function bindError(error: NodeJS.ErrnoException, rule: ForwardRule): RuleResult['error'] {
  const where = `port ${rule.listen_port}/${rule.protocol}`;
  if (error.code === 'EADDRINUSE') return ruleError('port_in_use', `${where} is already in use on the node`);
  if (error.code === 'EACCES' || error.code === 'EPERM' || error.code === 'EADDRNOTAVAIL') {
    return ruleError('bind_denied', `the agent may not listen on ${where} (${error.code})`);
  }
  return ruleError('listen_failed', `listening on ${where} failed: ${error.message}`);
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

export class Forwarder {
  private readonly listeners = new Map<number, Listener>();
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

  async apply(rules: ForwardRule[]): Promise<RuleResult[]> {
    const wanted = new Map(rules.filter((r) => r.enabled && r.tunnel_id === null).map((r) => [r.id, r]));
    for (const [id, listener] of this.listeners) {
      const rule = wanted.get(id);
      if (!rule || listenerKey(rule) !== listener.key) await this.stop(id);
    }
    const results: RuleResult[] = [];
    for (const rule of rules) {
      if (rule.tunnel_id !== null && rule.enabled) {
        results.push({
          id: rule.id,
          state: 'failed',
          error: ruleError('tunnel_not_supported', 'this agent does not relay through tunnels yet'),
        });
      } else if (!rule.enabled) {
        results.push({ id: rule.id, state: 'applied', error: null });
      } else {
        results.push(await this.start(rule));
      }
    }
    return results;
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
  }

  private async start(rule: ForwardRule): Promise<RuleResult> {
    const targets = rule.targets.map(parseTarget).filter((t): t is Target => t !== null);
    const existing = this.listeners.get(rule.id);
    if (existing) {
      for (const relay of existing.relays) relay.update(targets, rule.strategy);
      return { id: rule.id, state: 'applied', error: null };
    }
    if (!(await resolvable(targets))) {
      return {
        id: rule.id,
        state: 'failed',
        error: ruleError('target_unresolvable', `none of ${rule.targets.join(', ')} resolves on the node`),
      };
    }
    const relays: Relay[] = [];
    try {
      if (rule.protocol !== 'udp') {
        const tcp = new TcpRelay(targets, rule.strategy, this.limits);
        relays.push(tcp);
        await tcp.listen(this.host, rule.listen_port);
      }
      if (rule.protocol !== 'tcp') {
        const udp = new UdpRelay(targets, rule.strategy, this.limits.maxUdpSessionsPerRule, this.limits.udpIdleMs);
        relays.push(udp);
        await udp.listen(this.host, rule.listen_port);
      }
    } catch (error) {
      await Promise.all(relays.map((relay) => relay.close().catch(() => undefined)));
      return { id: rule.id, state: 'failed', error: bindError(error as NodeJS.ErrnoException, rule) };
    }
    this.listeners.set(rule.id, { key: listenerKey(rule), relays });
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
