// The master's end of the agent links: lets an agent in (handshake.ts), marks its node online, pushes it its whole
// config whenever that changes (config.ts), and hands what it reports to the service to write
// (service/agent-reports.ts) within the link's budgets: a write budget per link, a coalescer per rule, tunnel or node,
// traffic no larger than the node could have relayed. Every agent is treated as possibly hostile: a message it sends is
// checked against its own node, and whatever it sends ends at worst its own link, never the master.

import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { throttledBy, type Logger } from '../log/log.ts';
import type { SyncHub } from '../sync/hub.ts';
import { DomainError } from '../errors/errors.ts';
import {
  appliedMessage,
  healthMessage,
  pathsMessage,
  probeResultMessage,
  upgradeStatusMessage,
  fellBackMessage,
  type FellBackMessage,
  type UpgradeMessage,
  type UpgradeStatusMessage,
  trafficMessage,
  liveMessage,
  tunnelStatusMessage,
  vitalsMessage,
  type AppliedMessage,
  type PathsMessage,
  type TrafficMessage,
  type LiveMessage,
  type HealthMessage,
  type ProbeMessage,
  type TunnelStatusMessage,
  type VitalsMessage,
} from '../domain/link.ts';
import { vitalsOf, type NetworkTotals } from '../domain/vitals.ts';
import { type TargetHealth } from '../domain/rules.ts';
import { Coalescer } from './coalesce.ts';
import { configFor, type ConfigSource } from './config.ts';
import { Gate, refuse, type GateBackend } from './handshake.ts';
import { TokenBucket } from '../relay/bucket.ts';
import type { TunnelState } from '../service/agent-reports.ts';
import {
  AGENT_LINE_BYTES,
  checkMessage,
  keepAlive,
  LINK_PROTOCOL,
  ProtocolError,
  readMessages,
  send,
  type Message,
} from './wire.ts';
import { TrafficAllowance } from './allowance.ts';

/** The least time between two vitals of a node that are kept (an agent sends one a report interval). */
const VITALS_SPACING_MS = 1000;

/** The first id that occurs a second time, if any. */
function repeated(entries: readonly { id: number }[]): number | undefined {
  const seen = new Set<number>();
  for (const { id } of entries) {
    if (seen.has(id)) return id;
    seen.add(id);
  }
  return undefined;
}

interface Link {
  nodeId: number;
  socket: Socket;
  agentVersion: string | null;
  /** The ids of the release keys its agent trusts (X-Agent-Release-Keys). */
  releaseKeys: string[];
  /** What its agent can do of what rules may ask (X-Agent-Features; see agentFeatures). */
  features: ReadonlySet<string>;
  ip: string;
  allowance: TrafficAllowance;
  /** Why the master ended this link, written on the node when it closes. */
  endedBecause?: string;
  /** The network totals of the last vitals kept, which the next one's rates are counted from. */
  vitals?: NetworkTotals;
  /** What it reports as state, written within a budget per rule, tunnel or node (see STATE_BURST, coalesce.ts). */
  health: Coalescer<TargetHealth[]>;
  tunnels: Coalescer<TunnelState>;
  paths: Coalescer<PathsMessage['kernel']>;
  /** The messages that write state it may still send (see WRITING), those dropped since it was last told, and when. */
  writes: TokenBucket;
  dropped: number;
  toldOverBudgetAt?: number;
  /**
   * The result taken of each rule for config `version` since the link was last sent one, as text, and how many were
   * taken (see `applied`).
   */
  acknowledged?: { version: number; taken: Map<number, { result: string; times: number }> };
}

/**
 * The agent's messages that write state to the database, which its link's budget counts. Traffic reports are not
 * dropped (a report dropped while a later one is counted would be lost): each writes a few rows in place, no event,
 * and claims no more bytes than its allowance. Nor are acknowledgements (a config of 200,000 rules is acknowledged in
 * 400 pieces): each rule's result is taken once per config version, and again only where it changed, at most
 * RESULTS_PER_CONFIG times in all.
 */
const WRITING = new Set(['tunnel_status', 'paths', 'health', 'vitals', 'upgrade_status', 'fell_back', 'live']);
/**
 * The results of one rule taken for one config sent, at most: its first, and changes the agent finds on its own while
 * the config stands (an SRV name's records gone, say), so that an agent flipping a rule's state writes a few times.
 */
const RESULTS_PER_CONFIG = 4;
/**
 * How many messages that write state one agent link may send: WRITES_BURST at once, WRITES_PER_MINUTE after. A
 * well-behaved agent sends its vitals each report interval and its health and tunnel changes (a few, coalesced): far
 * below. Past it a message is dropped, not obeyed, and the link is told (at most every OVER_BUDGET_NOTICE_MS, which
 * the log says too, with how many were dropped meanwhile).
 */
const WRITES_PER_MINUTE = 600;
const WRITES_BURST = 300;
const OVER_BUDGET_NOTICE_MS = 10_000;

/**
 * How often one rule's health, one tunnel end's status or the node's paths may be written: STATE_BURST changes at
 * once, then one each STATE_REFILL_MS, so a flapping value costs a row (and an event) per interval however fast its
 * agent reports it, and the changes of a steady one are written as they come.
 */
const STATE_BURST = 4;
const STATE_REFILL_MS = 2_000;

/** What the agent links use of the master. */
export interface LinkBackend extends GateBackend, ConfigSource {
  readonly sync: SyncHub;
}

export class AgentLinks {
  private readonly links = new Map<number, Link>();
  /**
   * A node's second link, kept beside the one it has until its agent is heard on it. A handshake can reach the
   * master after its agent gave up on it (a master slow to answer, an agent that timed out and linked again): taking
   * over at once, such a link ended the node's working one, then failed writing to an agent that was gone: the
   * bench's fleet of 10,000 on a contended host made 15,000 links, 2,700 of them such handshakes.
   */
  private readonly pending = new Map<number, Link>();
  private readonly gate: Gate;
  private closing = false;
  /** What each node's links, and each source's refused attempts, may log (see `throttledBy`). */
  private readonly logOf: (key: string) => Logger;

  constructor(private readonly app: LinkBackend) {
    this.logOf = throttledBy(app.log, app.clock.now);
    this.gate = new Gate(app, this.logOf);
    app.sync.changes.on('config', (nodeId: number) => this.pushConfig(nodeId));
    app.sync.probes.on('probe', (nodeId: number, message: ProbeMessage) => {
      const link = this.links.get(nodeId);
      if (link) this.probe(link, message);
    });
    app.sync.upgrades.on('upgrade', (nodeId: number, { soak_seconds, ...message }: UpgradeMessage) => {
      const link = this.links.get(nodeId);
      // An agent whose supervisor does not soak would refuse the field; the master holds the soak all the same.
      if (link) send(link.socket, link.features.has('soak') ? { ...message, soak_seconds } : message);
    });
  }

  get connected(): number {
    return this.links.size;
  }

  /** For the HTTP server's 'upgrade' event. Whatever the request holds, it ends this connection at worst. */
  readonly handleUpgrade = (req: IncomingMessage, socket: Socket, head: Buffer): void => {
    socket.on('error', () => socket.destroy());
    // Opening a link writes (the node goes online): while an import or batch is being written, the agent waits.
    this.app.store.db.whenWritable(() => {
      if (!socket.destroyed) this.openLink(req, socket, head);
    });
  };

  private openLink(req: IncomingMessage, socket: Socket, head: Buffer): void {
    try {
      this.upgrade(req, socket, head);
    } catch (error) {
      this.app.log.error('agent link failed', { error: (error as Error)?.stack ?? String(error) });
      if (!socket.destroyed && socket.writable)
        refuse(socket, new DomainError('internal', 'the link could not be opened; see the master log'));
      socket.destroy();
    }
  }

  /** Ends every link, recording the nodes as offline first (the store closes right after). */
  close(): void {
    this.closing = true;
    const now = this.app.clock.timestamp();
    // Nothing to record without links (a standby has none, and writes nothing).
    for (const nodeId of this.links.keys()) {
      const why = 'the master shut down';
      this.app.reports.unlinked(nodeId, why, why, this.app.sync.heardAt(nodeId) ?? now);
    }
    for (const [nodeId, link] of this.links) {
      this.links.delete(nodeId);
      this.app.sync.disconnect(nodeId, this.app.clock.now());
      link.socket.destroy();
    }
    for (const link of this.pending.values()) link.socket.destroy();
    this.pending.clear();
  }

  /** Ends every link (this master was fenced): each agent links again elsewhere, to the newer primary. */
  cutAll(): void {
    for (const link of [...this.links.values(), ...this.pending.values()]) link.socket.destroy();
  }

  private upgrade(req: IncomingMessage, socket: Socket, head: Buffer): void {
    const { app } = this;
    const admitted = this.gate.admit(req, socket, this.closing);
    if (!admitted) return;
    const { nodeId, node, agentVersion, releaseKeys, features, ip } = admitted;

    socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: ${LINK_PROTOCOL}\r\nConnection: Upgrade\r\n\r\n`);
    if (head.length > 0) socket.unshift(head);
    const countedAt = Date.parse(app.store.traffic.countedAt(nodeId) ?? node.created_at);
    const link: Link = {
      nodeId,
      socket,
      agentVersion,
      releaseKeys,
      features,
      ip,
      allowance: new TrafficAllowance(app.clock.now, countedAt),
      ...this.stateWriters(nodeId),
      writes: TokenBucket.of(WRITES_PER_MINUTE / 60, WRITES_BURST, app.clock.now),
      dropped: 0,
    };
    if (this.links.has(nodeId)) {
      this.pending.get(nodeId)?.socket.destroy();
      this.pending.set(nodeId, link);
    } else this.takeOver(link);
    keepAlive(socket);
    // What an agent reports is written; while an import or batch is being written, it waits its turn.
    const { db } = app.store;
    readMessages(
      socket,
      (message) => this.receive(link, message),
      AGENT_LINE_BYTES,
      () => (db.writesHeld ? db.writable() : null),
    );
    socket.on('error', (error: NodeJS.ErrnoException) => {
      if (error instanceof ProtocolError) this.violation(link, error.message);
      else if (link.endedBecause) return;
      // A system call failing on the socket (the agent reset it, or went before its config was written) is the
      // network's doing, not the master's: after a restart a whole fleet's stale handshakes end so.
      else if (error.syscall)
        this.logOf(`n:${nodeId}`).info('agent link lost', { node_id: nodeId, error: error.code ?? error.message });
      else
        this.logOf(`n:${nodeId}`).error('agent link failed', { node_id: nodeId, error: error.stack ?? error.message });
    });
    socket.on('close', () => {
      for (const reports of [link.health, link.tunnels, link.paths]) reports.close();
      this.disconnected(link);
    });
    this.pushConfigTo(link);
  }

  /**
   * The writers of what a node's agent reports as state, each coalesced (see Coalescer). They run from timers too:
   * while an import or batch holds writes they wait their turn, and a write that fails (a full disk) is logged and
   * dropped: the agent reports again.
   */
  private stateWriters(nodeId: number): Pick<Link, 'health' | 'tunnels' | 'paths'> {
    const { reports, clock } = this.app;
    const writer =
      <V>(what: string, write: (changes: [number, V][]) => void) =>
      (changes: [number, V][]) =>
        this.writeWhenWritable(nodeId, `writing a node's ${what} failed`, () => write(changes));
    return {
      health: new Coalescer(
        STATE_BURST,
        STATE_REFILL_MS,
        clock.now,
        writer('health', (changes: [number, TargetHealth[]][]) => reports.health(nodeId, changes)),
      ),
      tunnels: new Coalescer(
        STATE_BURST,
        STATE_REFILL_MS,
        clock.now,
        writer('tunnel status', (changes: [number, TunnelState][]) => reports.tunnels(nodeId, changes)),
      ),
      // A write is at most every STATE_REFILL_MS: a node's agent adds at most STATE_BURST drifts a write to the metric.
      paths: new Coalescer(
        STATE_BURST,
        STATE_REFILL_MS,
        clock.now,
        writer('paths', (changes: [number, PathsMessage['kernel']][]) =>
          reports.paths(
            nodeId,
            changes.map(([, kernel]) => kernel),
            STATE_BURST,
          ),
        ),
      ),
    };
  }

  /** `link` becomes its node's link: the one it had (if any) ends, and the node is online. */
  private takeOver(link: Link): void {
    const { app } = this;
    const { nodeId } = link;
    if (this.pending.get(nodeId) === link) this.pending.delete(nodeId);
    const old = this.links.get(nodeId);
    this.links.set(nodeId, link);
    old?.socket.destroy();
    const at = app.clock.timestamp();
    app.sync.connect(nodeId, at);
    // Taking over when the old link closes may come while an import or batch is being written; a write that fails (a
    // full disk) is logged, and the link goes on.
    this.writeWhenWritable(nodeId, 'recording a linked agent failed', () =>
      app.reports.linked(nodeId, link.agentVersion, link.releaseKeys, at),
    );
    this.logOf(`n:${nodeId}`).info('agent connected', {
      node_id: nodeId,
      agent_version: link.agentVersion,
      ip: link.ip,
    });
  }

  /** Ends a link whose agent broke the protocol, says why on the node, and refuses the node for a while. */
  private violation(link: Link, what: string): void {
    if (link.endedBecause) return;
    link.endedBecause = `protocol_violation: ${what}`;
    this.logOf(`n:${link.nodeId}`).warn('agent broke the link protocol; closing its link', {
      node_id: link.nodeId,
      reason: what,
    });
    this.gate.coolDown(link.nodeId);
    // A second link the agent opened before must not carry on in its place, past the cool-down.
    const other = this.links.get(link.nodeId) === link ? this.pending.get(link.nodeId) : this.links.get(link.nodeId);
    this.pending.delete(link.nodeId);
    if (other) {
      other.endedBecause = link.endedBecause;
      other.socket.destroy();
    }
    link.socket.destroy();
  }

  private disconnected(link: Link): void {
    const { nodeId } = link;
    if (this.pending.get(nodeId) === link) this.pending.delete(nodeId);
    if (this.links.get(nodeId) !== link) return;
    this.links.delete(nodeId);
    // A newer link not heard on yet carries on: its agent made it last.
    const newer = this.pending.get(nodeId);
    if (newer && !this.closing) return this.takeOver(newer);
    const lastHeard = this.app.sync.heardAt(nodeId) ?? this.app.clock.timestamp();
    this.app.sync.disconnect(nodeId, this.app.clock.now());
    if (this.closing) return;
    this.logOf(`n:${nodeId}`).info('agent disconnected', { node_id: nodeId });
    const why = link.endedBecause ?? 'the agent link closed';
    this.writeWhenWritable(nodeId, 'recording a closed link failed', () => {
      // A new link of the node may have opened meanwhile (an import was being written): it is not offline.
      if (this.links.has(nodeId)) return;
      const tunnelsWhy = `the agent of node ${nodeId} is not linked to the master: ${why}`;
      this.app.reports.unlinked(nodeId, why, tunnelsWhy, lastHeard);
    });
  }

  /**
   * Writes what a link's event says once writes are let through (an import or batch may hold them). Called from a
   * socket event or a timer, with nothing above it: a write that fails (a full disk) is logged and ends there.
   */
  private writeWhenWritable(nodeId: number, failed: string, write: () => void): void {
    this.app.store.db.whenWritable(() => {
      try {
        write();
      } catch (error) {
        this.logOf(`n:${nodeId}`).error(failed, { node_id: nodeId, error: (error as Error)?.stack ?? String(error) });
      }
    });
  }

  /** To the node's link and to a second one waiting to take over, each of which its agent must apply. */
  private pushConfig(nodeId: number): void {
    for (const link of [this.links.get(nodeId), this.pending.get(nodeId)]) if (link) this.pushConfigTo(link);
  }

  private pushConfigTo(link: Link): void {
    const { nodeId } = link;
    try {
      const made = configFor(this.app, nodeId, link.features);
      if (!made) return void link.socket.destroy();
      send(link.socket, made.config);
      if (made.beyond.length > 0) this.tooOld(link, made.beyond);
      // Each config sent invites one result per rule (a settings change sends the same version again).
      link.acknowledged = undefined;
    } catch (error) {
      this.app.log.error('pushing a config failed; closing the link', {
        node_id: nodeId,
        error: (error as Error)?.stack ?? String(error),
      });
      link.socket.destroy();
    }
  }

  /** Rules not sent to the link's agent, too old for what each needs: each fails (tried again with the next config). */
  private tooOld(link: Link, beyond: [number, string][]): void {
    this.writeWhenWritable(link.nodeId, 'recording rules an agent is too old for failed', () =>
      this.app.reports.tooOld(link.nodeId, link.agentVersion, beyond),
    );
  }

  /**
   * Sends a probe as its agent reads it: `local_targets` only where it narrows the config's, and to an agent too old to
   * hold it (see agentFeatures) not at all: each target is answered as not tried, saying why.
   */
  private probe(link: Link, { local_targets, ...message }: ProbeMessage): void {
    if (local_targets) return send(link.socket, message);
    if (link.features.has('target_policy')) return send(link.socket, { ...message, local_targets });
    const error =
      `the agent (${link.agentVersion ?? 'of unknown version'}) cannot hold a tenant's rule off local targets: ` +
      'upgrade it (POST /api/rollouts)';
    this.app.sync.probed(
      link.nodeId,
      message.id,
      message.targets.map((target) => ({ target, reachable: false, ms: null, error })),
    );
  }

  private receive(link: Link, message: Message): void {
    // Heard on its second link, the agent is there: that link takes over.
    if (this.pending.get(link.nodeId) === link) this.takeOver(link);
    else if (this.links.get(link.nodeId) === link) this.app.sync.heard(link.nodeId, this.app.clock.timestamp());
    if (message.type === 'ping') return send(link.socket, { type: 'pong' });
    if (message.type === 'pong') return;
    if (WRITING.has(message.type) && !link.writes.tryTake(1)) return this.overBudget(link);
    if (message.type === 'applied') return this.applied(link, checkMessage(appliedMessage, message));
    if (message.type === 'traffic') return this.traffic(link, checkMessage(trafficMessage, message));
    if (message.type === 'tunnel_status') return this.tunnelStatus(link, checkMessage(tunnelStatusMessage, message));
    if (message.type === 'paths') return this.paths(link, checkMessage(pathsMessage, message));
    if (message.type === 'health') return this.health(link, checkMessage(healthMessage, message));
    if (message.type === 'vitals') return this.vitals(link, checkMessage(vitalsMessage, message));
    if (message.type === 'upgrade_status') return this.upgradeStatus(link, checkMessage(upgradeStatusMessage, message));
    if (message.type === 'fell_back') return this.fellBack(link, checkMessage(fellBackMessage, message));
    if (message.type === 'live') return this.live(link, checkMessage(liveMessage, message));
    if (message.type === 'probe_result') {
      const { id, results } = checkMessage(probeResultMessage, message);
      if (this.app.sync.probed(link.nodeId, id, results) === 'mismatched')
        throw new ProtocolError(`probe_result ${id} does not answer each target asked, in order`);
      return;
    }
    this.logOf(`n:${link.nodeId}`).warn('agent sent an unknown message', {
      node_id: link.nodeId,
      type: message.type.slice(0, 32),
    });
  }

  /** A message dropped because its link wrote too much (see WRITES_PER_MINUTE): nothing it asked is done. */
  private overBudget(link: Link): void {
    link.dropped++;
    const now = this.app.clock.now();
    if (link.toldOverBudgetAt !== undefined && now - link.toldOverBudgetAt < OVER_BUDGET_NOTICE_MS) return;
    link.toldOverBudgetAt = now;
    const { dropped } = link;
    link.dropped = 0;
    const detail =
      `this link sent more than ${WRITES_PER_MINUTE} messages that write in a minute (a burst of ` +
      `${WRITES_BURST}): ${dropped} dropped since the last notice and not acted on; send less`;
    send(link.socket, { type: 'over_budget', detail });
    this.logOf(`n:${link.nodeId}`).warn('agent over its write budget: messages dropped', {
      node_id: link.nodeId,
      dropped,
    });
  }

  /**
   * What the agent says of an upgrade: taken only from a node upgrading in that rollout (the rollout reads it on its
   * next turn, one per node), so no agent can make a write of it otherwise.
   */
  private upgradeStatus(link: Link, message: UpgradeStatusMessage): void {
    const { nodeId } = link;
    this.logOf(`n:${nodeId}`).info('agent upgrade', {
      node_id: nodeId,
      rollout_id: message.rollout_id,
      state: message.state,
      detail: message.detail,
    });
    if (message.state !== 'restarting' && this.app.store.rollouts.isUpgrading(nodeId, message.rollout_id))
      this.app.sync.upgradeReported(nodeId, message);
  }

  /**
   * The agent's supervisor went back from a bundle that crash-looped: kept on the node (the version it went back to
   * being the one this link runs, whatever the message says), which the alert condition agent_crashloop reads.
   */
  private fellBack(link: Link, message: FellBackMessage): void {
    const { nodeId } = link;
    const fellBack = {
      from_version: message.from_version,
      to_version: link.agentVersion ?? 'unknown',
      exits: message.exits,
      within_seconds: message.within_seconds,
      at: this.app.clock.timestamp(),
    };
    this.logOf(`n:${nodeId}`).warn('the agent went back from a bundle that crash-looped', {
      node_id: nodeId,
      ...fellBack,
    });
    this.writeWhenWritable(nodeId, 'recording an agent that went back failed', () =>
      this.app.reports.fellBack(nodeId, fellBack),
    );
  }

  /** Which ways of forwarding the node can use, as its agent says. */
  private paths(link: Link, message: PathsMessage): void {
    link.paths.offer([[link.nodeId, message.kernel]]);
  }

  private applied(link: Link, ack: AppliedMessage): void {
    const twice = repeated(ack.results);
    if (twice !== undefined) throw new ProtocolError(`applied message names rule ${twice} twice`);
    // A config's result for a rule is taken once per config sent, and again only where it changed, a few times: an
    // agent repeating its acknowledgement with states that flip cannot make a write (and an event) of each; a large
    // config's pieces name each rule once.
    if (link.acknowledged?.version !== ack.version) link.acknowledged = { version: ack.version, taken: new Map() };
    const taken = link.acknowledged.taken;
    const texts = new Map(ack.results.map((result) => [result.id, JSON.stringify(result)]));
    const results = ack.results.filter((result) => {
      const before = taken.get(result.id);
      return !before || (before.result !== texts.get(result.id) && before.times < RESULTS_PER_CONFIG);
    });
    if (this.app.reports.applied(link.nodeId, ack.version, results, !ack.partial))
      for (const result of results)
        taken.set(result.id, { result: texts.get(result.id)!, times: (taken.get(result.id)?.times ?? 0) + 1 });
  }

  /** How the node's ends of its tunnels stand; a tunnel the node is no end of is ignored. */
  private tunnelStatus(link: Link, message: TunnelStatusMessage): void {
    const twice = repeated(message.tunnels);
    if (twice !== undefined) throw new ProtocolError(`tunnel_status names tunnel ${twice} twice`);
    link.tunnels.offer(message.tunnels.map(({ id, ...state }) => [id, state]));
  }

  /** How the targets of the node's health-checked rules stand; a rule not the node's is ignored. */
  private health(link: Link, message: HealthMessage): void {
    const twice = repeated(message.rules);
    if (twice !== undefined) throw new ProtocolError(`health names rule ${twice} twice`);
    link.health.offer(message.rules.map(({ id, targets }) => [id, targets]));
  }

  /**
   * How the node is doing: kept as its latest vitals and its chart's point for the minute, then told to event streams.
   * An agent sends them once a report interval; any faster are ignored, so a hostile one cannot make a write of each.
   */
  private vitals(link: Link, message: VitalsMessage): void {
    const now = this.app.clock.now();
    if (link.vitals && now - link.vitals.atMs < VITALS_SPACING_MS) return;
    const { vitals, totals } = vitalsOf(message, link.vitals ?? null, now, link.agentVersion);
    link.vitals = totals;
    this.app.reports.vitals(link.nodeId, vitals, now);
  }

  /**
   * What the node's rules carry now: kept for those the node carries (a rule of another node, or one gone, is left
   * out: an agent speaks of its own), in memory alone.
   */
  private live(link: Link, message: LiveMessage): void {
    const twice = repeated(message.rules);
    if (twice !== undefined) throw new ProtocolError(`live round ${message.round} names rule ${twice} twice`);
    const places = this.app.store.rules.placesOf(message.rules.map((rule) => rule.id));
    const own = message.rules.flatMap((rule) => {
      const place = places.get(rule.id);
      return place?.node_id === link.nodeId ? [{ ...rule, ...place }] : [];
    });
    if (this.app.sync.live.take(link.nodeId, message.round, own, this.app.clock.now()))
      this.app.sync.reports.emit('live', link.nodeId);
  }

  private traffic(link: Link, report: TrafficMessage): void {
    const twice = repeated(report.rules);
    if (twice !== undefined) throw new ProtocolError(`traffic report ${report.seq} names rule ${twice} twice`);
    let claimed = 0;
    const counting = this.app.reports.traffic(link.nodeId, report, (bytes) => link.allowance.take((claimed = bytes)));
    if (counting === 'implausible') {
      throw new ProtocolError(
        `traffic report ${report.seq} claims ${claimed} bytes, more than the node could have relayed since it ` +
          `last reported`,
      );
    }
    // The agent forgets a report once acknowledged, so the ack waits until the counts are durable.
    this.app.store.committed().then(
      () => send(link.socket, { type: 'traffic_ack', stream: report.stream, seq: report.seq }),
      () => undefined,
    );
  }
}
