// What a node's agent says, written: its link opening and closing, the results of the configs it applied, the traffic
// it counted (quotas and tenants' allowances spent on the way), its rules' health, its tunnels' ends, its forwarding
// paths and vitals. The agent link (agentlink/) decides when a message may write (its budgets, writes held by an
// import); each function here is the write, done now, and what the master does of its own accord because of it (a
// rule stopped, a taken port moved) is audited as the system, with the nodes it changes sent their configs.

import type { Logger } from '../log/log.ts';
import type { AppliedMessage, PathsMessage, TrafficMessage, TunnelStatusMessage } from '../domain/link.ts';
import { TUNNEL_PORTS } from '../domain/link.ts';
import type { Rule, TargetHealth } from '../domain/rules.ts';
import type { Vitals } from '../domain/vitals.ts';
import type { MasterMetrics } from '../metrics/metrics.ts';
import type { FellBack } from '../store/nodes.ts';
import type { Tunnel } from '../store/tunnels.ts';
import type { SwitchReason } from '../domain/tunnels.ts';
import type { Store } from '../store/store.ts';
import type { SyncHub } from '../sync/hub.ts';
import { exitPortTaken } from '../tunnel/wire.ts';
import { theMaster } from './master.ts';
import { spendAllowance } from './standing.ts';
import { writeNow, type Change } from './write.ts';

/** How soon a tunnel's picked port may be moved again after its exit said it was taken (see movePickedPort). */
const PORT_MOVE_SPACING_MS = 10_000;

/** What the master does because of an agent's report is the system's act; each entry names its own action. */
const AGENT = theMaster();

export type TunnelState = Omit<TunnelStatusMessage['tunnels'][number], 'id'>;

/** How a traffic report was taken: counted, already counted (a repeat), or claiming more than the node can relay. */
export type Counting = 'counted' | 'repeated' | 'implausible';

export interface ReportDeps {
  readonly store: Store;
  readonly sync: SyncHub;
  readonly log: Logger;
  readonly metrics: Pick<MasterMetrics, 'kernelDrifts' | 'tunnelExitSwitches'>;
  /** The master's clock, in milliseconds and as stored. */
  now(): number;
  timestamp(): string;
  /** How long traffic is kept, in days: a report is placed no earlier. */
  retentionDays(): number;
}

export class AgentReports {
  /**
   * When each tunnel's picked port was last moved: at most once every PORT_MOVE_SPACING_MS, so an exit that keeps
   * saying its port is taken cannot keep both its tunnel's ends reconfiguring.
   */
  private readonly portMoved = new Map<number, number>();

  constructor(private readonly app: ReportDeps) {}

  /** The node's agent linked (`releaseKeys`: the ids of the release keys it trusts). */
  linked(nodeId: number, agentVersion: string | null, releaseKeys: readonly string[], at: string): void {
    const { store } = this.app;
    store.write(() => store.nodes.setLink(nodeId, 'online', null, agentVersion, at, releaseKeys));
  }

  /**
   * The node's agent is no longer linked, for `why`: the node is offline (last heard at `lastHeard`), and its tunnels'
   * ends down for `tunnelsWhy`.
   */
  unlinked(nodeId: number, why: string, tunnelsWhy: string, lastHeard: string): void {
    const { store } = this.app;
    const now = this.app.timestamp();
    store.write(() => {
      if (!store.nodes.exists(nodeId)) return;
      store.nodes.setLink(nodeId, 'offline', why, null, lastHeard);
      store.tunnels.nodeDown(nodeId, tunnelsWhy, now);
    });
  }

  /** Why a link of the node was refused (the agent cannot see it otherwise): on the node's status_detail. */
  refused(nodeId: number, detail: string): void {
    const { store } = this.app;
    store.write(() => store.nodes.setStatusDetail(nodeId, detail));
  }

  /** Rules the node's agent is too old to apply (what each needs): each failed, saying what and what to do. */
  tooOld(nodeId: number, agentVersion: string | null, beyond: readonly [number, string][]): void {
    const { store } = this.app;
    const agent = agentVersion ?? 'of unknown version';
    const at = this.app.timestamp();
    store.write(() => {
      for (const [id, needs] of beyond) {
        const detail = `the agent (${agent}) cannot apply ${needs}: upgrade it (POST /api/rollouts)`;
        store.rules.setSync(id, nodeId, 'failed', { code: 'agent_outdated', detail }, at, null, null);
      }
    });
  }

  /** How the targets of the node's health-checked rules stand; a rule not the node's is ignored. */
  health(nodeId: number, changes: readonly [number, TargetHealth[]][]): void {
    const { store } = this.app;
    store.write(() => {
      for (const [id, targets] of changes) store.rules.setHealth(id, nodeId, targets);
    });
  }

  /** How the node's ends of its tunnels stand; an exit whose port is taken may have it moved (see movePickedPort). */
  tunnels(nodeId: number, changes: readonly [number, TunnelState][]): void {
    const { store } = this.app;
    const at = this.app.timestamp();
    writeNow(this.app, AGENT, (change) => {
      for (const [id, { state, error, rtt_us, loss_percent, exits, chosen, switched }] of changes) {
        const tunnel = store.tunnels.find(id);
        if (!tunnel) continue;
        // The entry's word on its exits, from agents that say (an older one leaves the choice as it was).
        const choice =
          exits && tunnel.entry_node_id === nodeId
            ? { exits, chosen: chosen ?? null, because: this.switchedExit(change, tunnel, chosen ?? null, switched) }
            : undefined;
        store.tunnels.report(id, nodeId, { status: state, error, rtt_us, loss_percent }, at, choice);
        const taken = exitPortTaken(error);
        if (state === 'down' && taken !== null) this.movePickedPort(change, id, nodeId, taken);
      }
    });
  }

  /**
   * Which ways of forwarding the node can use. Drifts the agent put right are counted: it counts since it started, so
   * more than the master last heard is new, and fewer a restarted agent's; at most `maxDrifts` a call (the link calls
   * at most so often), however large the number it sends.
   */
  paths(nodeId: number, kernels: readonly PathsMessage['kernel'][], maxDrifts: number): void {
    const { store } = this.app;
    store.write(() => {
      for (const { available, reason, drifts, last_drift_at, flow_offload } of kernels) {
        const before = store.nodes.find(nodeId)?.kernel_path;
        const heard = before?.drifts ?? 0;
        if (drifts !== undefined && drifts !== heard)
          this.app.metrics.kernelDrifts.inc({}, Math.min(maxDrifts, drifts > heard ? drifts - heard : drifts));
        const drift = drifts === undefined ? {} : { drifts, last_drift_at: last_drift_at ?? null };
        const offload = flow_offload === undefined ? {} : { flow_offload };
        store.nodes.setKernelPath(nodeId, { available, reason: available ? null : reason, ...drift, ...offload });
        // Without its kernel path, the node's relay carries every rule the kernel did: no answer says otherwise.
        if (!available && before?.available !== false) store.rules.relayedByNode(nodeId, reason);
      }
    });
  }

  /** The agent's supervisor went back from a bundle that crash-looped (which the condition agent_crashloop reads). */
  fellBack(nodeId: number, fellBack: FellBack): void {
    const { store } = this.app;
    store.write(() => {
      if (store.nodes.exists(nodeId)) store.nodes.setFellBack(nodeId, fellBack);
    });
  }

  /** The node's latest vitals and its chart's point for the minute, told to event streams once committed. */
  vitals(nodeId: number, vitals: Vitals, atMs: number): void {
    const { store } = this.app;
    store.write(() =>
      store.vitals.record(nodeId, JSON.stringify(vitals), Math.floor(atMs / 1000), {
        cpu_percent: vitals.cpu_percent,
        load1: vitals.load[0]!,
        memory_used_bytes: Math.max(0, vitals.memory.total_bytes - vitals.memory.available_bytes),
        rx_bytes_per_second: vitals.network.rx_bytes_per_second,
        tx_bytes_per_second: vitals.network.tx_bytes_per_second,
      }),
    );
    store.db.afterCommit(() => this.app.sync.reports.emit('vitals', nodeId, vitals));
  }

  /**
   * Each rule's result of config `version` as the node's agent applied it; false, writing nothing, for an older config
   * than the node's (it says nothing of rules changed since: a newer config is on its way). A rule of a tunnel that
   * failed at its exit for a port in use, which there can only be the tunnel's own, has the port moved now, with the
   * failure: a sync waiting on the rule then waits for the moved config instead of answering with the failure.
   */
  applied(nodeId: number, version: number, results: AppliedMessage['results'], complete: boolean): boolean {
    const { store } = this.app;
    const current = writeNow(this.app, AGENT, (change) => {
      if (store.nodes.find(nodeId)?.config_version !== version) return false;
      const at = this.app.timestamp();
      for (const { id, state, error, path, reason } of results)
        store.rules.setSync(id, nodeId, state, error, at, path ?? null, reason ?? null);
      const moved = new Set<number>();
      for (const { id, state, error } of results) {
        if (state !== 'failed' || error?.code !== 'port_in_use') continue;
        const tunnelId = store.rules.find(id)?.tunnel_id;
        if (tunnelId === null || tunnelId === undefined || moved.has(tunnelId)) continue;
        moved.add(tunnelId);
        const port = store.tunnels.find(tunnelId)?.exits.find((exit) => exit.node_id === nodeId)?.listen_port;
        if (port !== undefined) this.movePickedPort(change, tunnelId, nodeId, port);
      }
      return true;
    });
    if (current && complete) store.db.afterCommit(() => this.app.sync.applied(nodeId, version));
    return current;
  }

  /**
   * A traffic report of the node's agent: counted once (by its stream's sequence), placed at the time the agent counted
   * it (never in the future nor before retention), spending rules' quotas and tenants' allowances. `plausible` is
   * asked, before anything is written, whether the node could have relayed that many bytes. Once committed, the
   * report is told to event streams, and `counted` is called either way (the agent forgets a report once told).
   */
  traffic(nodeId: number, report: TrafficMessage, plausible: (bytes: number) => boolean): Counting {
    const { store } = this.app;
    const bytes = report.rules.reduce((sum, rule) => sum + rule.bytes_in + rule.bytes_out, 0);
    const nowSeconds = Math.floor(this.app.now() / 1000);
    const oldest = nowSeconds - this.app.retentionDays() * 86_400;
    const counting = writeNow(this.app, AGENT, (change): Counting => {
      const counted = store.traffic.streamSeq(nodeId, report.stream);
      if (report.seq <= counted) return 'repeated';
      if (!plausible(bytes)) return 'implausible';
      const at = Math.max(oldest, Math.min(report.at, nowSeconds));
      for (const rule of report.rules)
        store.traffic.record(rule.id, nodeId, at, rule.bytes_in, rule.bytes_out, rule.refused);
      for (const rule of store.rules.spendQuotas(report.rules.map((r) => r.id))) this.quotaSpent(change, rule);
      for (const owner of store.users.countTraffic(report.rules, nodeId))
        if (!owner.traffic_spent) spendAllowance(this.app, change, owner.id, owner.plan_id, owner.traffic_used);
      store.traffic.advanceStream(nodeId, report.stream, counted, report.seq, this.app.timestamp());
      store.nodes.seen(nodeId, this.app.timestamp());
      return 'counted';
    });
    if (counting === 'counted') store.db.afterCommit(() => this.app.sync.reports.emit('traffic', nodeId, report.rules));
    return counting;
  }

  /** Inside the write that spent it: records that `rule`'s quota stopped it, and sends its nodes the change. */
  private quotaSpent(change: Change, rule: Rule): void {
    change.audit({
      action: 'rule.quota_exceeded',
      resource: 'rule',
      resource_id: rule.id,
      changes: { before: { state: 'active' }, after: { state: rule.state, quota_usage: rule.quota_usage } },
    });
    change.touchNode(rule.node_id);
    // Through a tunnel, the rule is applied at its exits too.
    const exits = rule.tunnel_id === null ? [] : (this.app.store.tunnels.find(rule.tunnel_id)?.exit_node_ids ?? []);
    for (const exit of exits) change.touchNode(exit);
  }

  /**
   * Inside a write: when the entry's choice of exit is not what the tunnel shows, the words for why it moved (audited
   * as tunnel.exit_switched, the system's act, and counted); null when it did not move. The entry's reason and scores
   * are taken as said, of exits the tunnel has.
   */
  private switchedExit(
    change: Change,
    tunnel: Tunnel,
    chosen: number | null,
    switched: TunnelState['switched'],
  ): string | null {
    const known = (node: number | null | undefined) =>
      node != null && tunnel.exit_node_ids.includes(node) ? node : null;
    const to = known(chosen);
    if (to === tunnel.chosen_exit_node_id) return null;
    const from = tunnel.chosen_exit_node_id;
    // The entry's account of the move where it is of this move (it may have moved while the master did not hear).
    const said = switched && known(switched.to) === to ? switched : null;
    const because = switchWords(said ? known(said.from) : from, to, said);
    change.audit({
      action: 'tunnel.exit_switched',
      resource: 'tunnel',
      resource_id: tunnel.id,
      changes: { before: { chosen_exit_node_id: from }, after: { chosen_exit_node_id: to, because } },
    });
    this.app.metrics.tunnelExitSwitches.inc({ reason: switched?.reason ?? 'unknown' });
    return because;
  }

  /**
   * Inside a write: the exit node `nodeId` of tunnel `id` cannot listen on `taken`, which something else holds there.
   * A port the master picked is moved to the next one free in its books (audited as tunnel.port_moved) and both ends
   * are sent the change; a port someone gave stays, and the tunnel shows why it is down.
   */
  private movePickedPort(change: Change, id: number, nodeId: number, taken: number): void {
    const { store } = this.app;
    const tunnel = store.tunnels.find(id);
    if (!tunnel || tunnel.exits.find((exit) => exit.node_id === nodeId)?.listen_port !== taken) return;
    const now = this.app.now();
    if (now - (this.portMoved.get(id) ?? -Infinity) < PORT_MOVE_SPACING_MS) return;
    for (const [other, at] of this.portMoved) if (now - at >= PORT_MOVE_SPACING_MS) this.portMoved.delete(other);
    this.portMoved.set(id, now);
    const { min, max } = TUNNEL_PORTS;
    const port =
      store.tunnels.freePort(nodeId, Math.min(taken + 1, max), max) ?? store.tunnels.freePort(nodeId, min, max);
    if (port === null || port === taken || !store.tunnels.movePort(id, nodeId, port, this.app.timestamp())) return;
    for (const ruleId of store.rules.idsOfTunnel(id)) store.rules.markPending(ruleId);
    change.audit({
      action: 'tunnel.port_moved',
      resource: 'tunnel',
      resource_id: id,
      changes: {
        before: { exit_node_id: nodeId, listen_port: taken },
        after: { exit_node_id: nodeId, listen_port: port },
      },
    });
    change.touchNode(tunnel.entry_node_id);
    change.touchNode(nodeId);
    this.app.log.warn("a tunnel's exit port was taken on its node: moved", {
      tunnel_id: id,
      node_id: nodeId,
      from: taken,
      to: port,
    });
  }
}

const REASONS: Record<SwitchReason, string> = {
  first_up: 'the first exit up',
  exit_down: 'the chosen exit went down',
  lower_latency: 'a lower score for long enough',
  preferred_back: 'an earlier exit back up for long enough',
};

/** Why an entry's choice moved from exit node `from` to `to`, in words, with the scores it said it went by. */
function switchWords(from: number | null, to: number | null, switched: TunnelState['switched']): string {
  const node = (id: number | null, score: number | null | undefined) =>
    id === null ? 'none' : `node ${id}${score == null ? '' : ` (score ${score} ms)`}`;
  const move = `${node(from, switched?.from_score_ms)} -> ${node(to, switched?.to_score_ms)}`;
  if (to === null) return `${move}: no exit is up`;
  return switched ? `${move}: ${REASONS[switched.reason]}` : move;
}
