// The master's end of the agent links: authenticates an agent's upgrade request by its
// node's token, marks the node online, pushes it its whole config whenever that changes,
// and records what it reports: the config version it applied, per-rule outcomes, traffic.
// Every agent is treated as possibly hostile: a message it sends is checked against its own
// node, and whatever it sends ends at worst its own link, never the master.

import { STATUS_CODES, type IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { throttledBy, type Logger } from '../log/log.ts';
import type { Clock } from '../runtime/clock.ts';
import type { Lifecycle } from '../runtime/lifecycle.ts';
import type { Settings } from '../settings/settings.ts';
import type { Store } from '../store/store.ts';
import type { SyncHub } from '../sync/hub.ts';
import { agentTokenNode, hashSecret, sameHash } from '../auth/secrets.ts';
import { DomainError } from '../errors/errors.ts';
import { problemOf } from '../http/problem.ts';
import type { SecretBox } from '../crypto/box.ts';
import {
  appliedMessage,
  healthMessage,
  pathsMessage,
  probeResultMessage,
  upgradeStatusMessage,
  fellBackMessage,
  type FellBackMessage,
  AGENT_FEATURES,
  beyondAgent,
  type UpgradeMessage,
  type UpgradeStatusMessage,
  trafficMessage,
  tunnelStatusMessage,
  vitalsMessage,
  type AppliedMessage,
  type ConfigMessage,
  type PathsMessage,
  type TrafficMessage,
  type TunnelEnd,
  type HealthMessage,
  type ProbeMessage,
  type TunnelStatusMessage,
  type VitalsMessage,
  TUNNEL_PORTS,
  UNNAMED_FEATURES,
  LINK_FEATURES,
} from '../domain/link.ts';
import { vitalsOf, type NetworkTotals } from '../domain/vitals.ts';
import { PIN, pinOf } from '../tls/pin.ts';
import { sourceOf } from '../schema/net.ts';
import { verifyPromotion } from '../tls/promotion.ts';
import {
  controlDefaults,
  forwardRuleOf,
  type Control,
  type ForwardRule,
  type Rule,
  type TargetHealth,
} from '../domain/rules.ts';
import { Coalescer } from './coalesce.ts';
import { TokenBucket } from '../relay/bucket.ts';
import { exitPortTaken } from '../tunnel/wire.ts';
import { SYSTEM_ACTOR } from '../store/audit.ts';
import { restand } from '../store/standing.ts';
import type { Counted } from '../store/users.ts';
import type { MasterMetrics } from '../metrics/metrics.ts';
import {
  AGENT_LINE_BYTES,
  checkMessage,
  keepAlive,
  LINK_PATH,
  LINK_PROTOCOL,
  ProtocolError,
  readMessages,
  send,
  type Message,
} from './wire.ts';
import { MAX_RELEASE_KEYS } from '../release/signature.ts';
import { standbysOf } from '../settings/settings.ts';
import { FailureWindow } from '../auth/failures.ts';
import { TrafficAllowance } from './allowance.ts';

/** The least time between two vitals of a node that are kept (an agent sends one a report interval). */
const VITALS_SPACING_MS = 1000;

/** The controls a config carries (tags are the master's own). */
type WireControl = Exclude<Control, 'tags'>;
type WireRule = Omit<ForwardRule, WireControl | 'weights' | 'listen_port_end' | 'local_targets'> &
  Partial<Pick<ForwardRule, WireControl | 'weights' | 'listen_port_end' | 'local_targets'>>;

/**
 * A rule as a config carries it: a control at its default is left out, as the agent fills it in. A config of 200,000
 * rules is that much smaller, and a rule with none of the controls reads as it did to agents older than them.
 */
function wireRule(rule: ForwardRule): WireRule {
  const wire: WireRule = { ...rule };
  for (const [name, fallback] of Object.entries(controlDefaults)) {
    const key = name as WireControl;
    // Every default is an empty list or a single value: no need to serialise each of 200,000 rules' controls.
    const value = wire[key];
    if (Array.isArray(fallback) ? Array.isArray(value) && value.length === 0 : value === fallback) delete wire[key];
  }
  // Targets all alike, as for agents older than weights; one port, as for agents older than ranges; local targets as
  // the config says, as for agents older than per-rule target policies.
  if (wire.weights === null) delete wire.weights;
  if (wire.local_targets) delete wire.local_targets;
  if (wire.listen_port_end === null) delete wire.listen_port_end;
  return wire;
}

/** Failed link attempts one address may make per minute before it is refused without a look. */
const MAX_FAILED_LINKS_PER_MINUTE = 10;
/** How long a node whose agent broke the protocol is refused, so a hostile agent cannot loop. */
const VIOLATION_COOLDOWN_MS = 60_000;
/** A refused link is written on its node at most this often. */
const REFUSAL_RECORD_MS = 60_000;

/** Answers an upgrade request (an agent's link) with the problem for `error` and closes the connection. */
export function refuse(socket: Socket, error: DomainError, headers: Record<string, string> = {}): void {
  const problem = problemOf(error, null);
  const body = JSON.stringify(problem.body);
  const lines = Object.entries({
    'Content-Type': 'application/problem+json',
    'Content-Length': String(Buffer.byteLength(body)),
    ...problem.headers,
    ...headers,
    Connection: 'close',
  });
  socket.end(
    `HTTP/1.1 ${problem.status} ${STATUS_CODES[problem.status]}\r\n` +
      `${lines.map(([name, value]) => `${name}: ${value}\r\n`).join('')}\r\n${body}`,
  );
}

function pathOf(url: string | undefined): string | null {
  try {
    return new URL(url ?? '/', 'http://localhost').pathname;
  } catch {
    return null;
  }
}

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
  /** The rules whose result for config `version` this link has given since it was last sent one (see `applied`). */
  acknowledged?: { version: number; ids: Set<number> };
}

/**
 * The agent's messages that write state to the database, which its link's budget counts. Traffic reports are not
 * dropped (a report dropped while a later one is counted would be lost): each writes a few rows in place, no event,
 * and claims no more bytes than its allowance. Nor are acknowledgements (a config of 200,000 rules is acknowledged in
 * 400 pieces): each rule's result is taken once per config version.
 */
const WRITING = new Set(['tunnel_status', 'paths', 'health', 'vitals', 'upgrade_status', 'fell_back']);
/**
 * How many messages that write state one agent link may send: WRITES_BURST at once, WRITES_PER_MINUTE after. A
 * well-behaved agent sends its vitals each report interval and its health and tunnel changes (a few, coalesced): far
 * below. Past it a message is dropped, not obeyed, and the link is told (at most every OVER_BUDGET_NOTICE_MS, which
 * the log says too, with how many were dropped meanwhile).
 */
const WRITES_PER_MINUTE = 600;
const WRITES_BURST = 300;
const OVER_BUDGET_NOTICE_MS = 10_000;
/** How soon a tunnel's picked port may be moved again after its exit said it was taken (see movePickedPort). */
const PORT_MOVE_SPACING_MS = 10_000;

type TunnelState = Pick<TunnelStatusMessage['tunnels'][number], 'state' | 'error' | 'rtt_us'>;

/**
 * How often one rule's health, one tunnel end's status or the node's paths may be written: STATE_BURST changes at
 * once, then one each STATE_REFILL_MS, so a flapping value costs a row (and an event) per interval however fast its
 * agent reports it, and the changes of a steady one are written as they come.
 */
const STATE_BURST = 4;
const STATE_REFILL_MS = 2_000;

/** What the agent links use of the master. */
export interface LinkBackend {
  readonly store: Store;
  readonly sync: SyncHub;
  readonly settings: Settings;
  readonly log: Logger;
  readonly clock: Clock;
  /** Opens the tunnels' private keys, sealed at rest, to hand each node its own. */
  readonly box: SecretBox;
  /** Links are refused (503, retried by the agent) while the master starts. */
  readonly lifecycle: Lifecycle;
  /** Counts what agents report that an operator watches for: kernel tables written back after a drift. */
  readonly metrics: Pick<MasterMetrics, 'kernelDrifts'>;
  /** An agent has heard of a newer epoch than this master's: a standby was promoted, this master no longer serves. */
  readonly fence: (epoch: number, primary: string | null) => void;
  /** This master's promotion statement for its epoch (see tls/promotion.ts); null before any, or without a TLS key. */
  readonly promotion: () => string | null;
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
  private readonly failedByAddress: FailureWindow;
  /** Nodes refused until the given time, after their agent broke the protocol. */
  private readonly cooldown = new Map<number, number>();
  /**
   * When each tunnel's picked port was last moved (see movePickedPort): at most once every PORT_MOVE_SPACING_MS, so an
   * exit that keeps saying its port is taken cannot keep both its tunnel's ends reconfiguring.
   */
  private readonly portMoved = new Map<number, number>();
  private readonly refusalRecorded = new Map<string, number>();
  /** Whether an agent's unproven word of a newer primary was logged (once: see upgrade). */
  private unprovenSaid = false;
  private closing = false;
  /** What each node's links, and each source's refused attempts, may log (see `throttledBy`). */
  private readonly logOf: (key: string) => Logger;

  constructor(private readonly app: LinkBackend) {
    this.failedByAddress = new FailureWindow(app.clock.now);
    this.logOf = throttledBy(app.log, app.clock.now);
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
    if (this.links.size > 0)
      this.app.store.write(() => {
        for (const nodeId of this.links.keys()) {
          this.app.store.nodes.setLink(
            nodeId,
            'offline',
            'the master shut down',
            null,
            this.app.sync.heardAt(nodeId) ?? now,
          );
          this.app.store.tunnels.nodeDown(nodeId, 'the master shut down', now);
        }
      });
    for (const [nodeId, link] of this.links) {
      this.links.delete(nodeId);
      this.app.sync.disconnect(nodeId);
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
    const ip = socket.remoteAddress ?? 'unknown';
    const path = pathOf(req.url);
    if (path === null) return refuse(socket, new DomainError('bad_request', 'the request target is not a valid path'));
    if (path !== LINK_PATH) return refuse(socket, new DomainError('not_found', 'no upgrade here'));
    if (this.closing)
      return refuse(socket, new DomainError('unavailable', 'the master is shutting down', { retryAfterSeconds: 5 }));
    if (app.lifecycle.starting)
      return refuse(socket, new DomainError('unavailable', 'the master is starting', { retryAfterSeconds: 1 }));
    const wait = this.failedByAddress.retryAfterMs(`a:${sourceOf(ip)}`, MAX_FAILED_LINKS_PER_MINUTE, 60_000);
    if (wait > 0) {
      return refuse(
        socket,
        new DomainError('rate_limited', 'too many failed link attempts from this address', {
          retryAfterSeconds: wait / 1000,
        }),
      );
    }
    const token = /^Bearer +(\S+)$/i.exec(req.headers.authorization ?? '')?.[1] ?? '';
    const nodeId = agentTokenNode(token);
    const stored = nodeId === null ? undefined : app.store.nodes.agentTokenHash(nodeId);
    if (nodeId === null || !stored || !sameHash(stored, hashSecret(token))) {
      this.failedByAddress.record(`a:${sourceOf(ip)}`, 60_000);
      if (nodeId !== null && stored)
        this.noteRefusal(
          nodeId,
          `auth_failed: an agent from ${ip} presented a wrong token at ${app.clock.timestamp()}`,
        );
      this.logOf(`a:${sourceOf(ip)}`).warn('agent link refused', { reason: 'auth_failed', node_id: nodeId, ip });
      return refuse(
        socket,
        new DomainError(
          'auth_failed',
          'the agent token is unknown or was replaced; reinstall the agent or give it the current token',
        ),
      );
    }
    const until = this.cooldown.get(nodeId) ?? 0;
    if (until > app.clock.now()) {
      return refuse(
        socket,
        new DomainError('rate_limited', "this node's agent broke the link protocol; see the node's status_detail", {
          retryAfterSeconds: (until - app.clock.now()) / 1000,
        }),
      );
    }
    const agentVersion =
      String(req.headers['x-agent-version'] ?? '')
        .replace(/[^\x20-\x7e]/g, '?')
        .slice(0, 32) || null;
    // Ids only, and a few: what is not one is left out, never stored.
    const releaseKeys = String(req.headers['x-agent-release-keys'] ?? '')
      .split(',')
      .filter((id) => PIN.test(id))
      .slice(0, MAX_RELEASE_KEYS);
    // Names only, of features this master knows; an agent that names none is older than the list (see agentFeatures).
    const named = req.headers['x-agent-features'];
    const features = new Set(
      named === undefined
        ? UNNAMED_FEATURES
        : String(named)
            .split(',')
            .filter((name) => AGENT_FEATURES.includes(name) || LINK_FEATURES.includes(name)),
    );
    // An agent that heard a newer epoch than this master's says a standby was promoted since. Its word alone fences
    // nothing (a compromised node could stop a primary, and send clients' writes where it likes): only the promoted
    // master's statement does, signed by a key whose pin this master holds for a peer (standby_masters), which then
    // names that peer. The link is refused either way: the agent follows the newer primary.
    const heard = Number(req.headers['x-agent-epoch']);
    const epoch = app.store.epoch.current();
    if (Number.isSafeInteger(heard) && heard > epoch && heard < 2 ** 31) {
      const peers = standbysOf(app.settings.get('standby_masters')).filter((peer) => peer.pin !== null);
      const proof = verifyPromotion(
        String(req.headers['x-agent-promotion'] ?? ''),
        new Set(peers.map((peer) => peer.pin!)),
      );
      if (proof && proof.epoch > epoch) app.fence(proof.epoch, peers.find((peer) => peer.pin === proof.pin)!.url);
      else if (!this.unprovenSaid) {
        this.unprovenSaid = true;
        app.log.warn('an agent says a newer primary took over, with no statement signed by a peer: not fenced', {
          node_id: nodeId,
          epoch: heard,
          why:
            peers.length === 0
              ? 'standby_masters gives no pin of a peer, so agents cannot fence this master'
              : "its statement is missing, malformed, or not signed by a key among standby_masters' pins",
        });
      }
      return refuse(
        socket,
        new DomainError('read_only', `this master is of epoch ${epoch}; a primary of epoch ${heard} took over`),
      );
    }
    if (req.headers.upgrade !== LINK_PROTOCOL) {
      const spoken = String(req.headers.upgrade ?? 'nothing')
        .replace(/[^\x20-\x7e]/g, '?')
        .slice(0, 64);
      this.noteRefusal(
        nodeId,
        `version_mismatch: the agent (${agentVersion ?? 'unknown version'}) speaks ${spoken}, the master ` +
          `${LINK_PROTOCOL}`,
      );
      this.logOf(`n:${nodeId}`).warn('agent link refused', {
        reason: 'version_mismatch',
        node_id: nodeId,
        agent_version: agentVersion,
      });
      return refuse(
        socket,
        new DomainError(
          'version_mismatch',
          `this master speaks ${LINK_PROTOCOL}; install the agent that ships with it`,
        ),
        { Upgrade: LINK_PROTOCOL },
      );
    }
    const node = app.store.nodes.find(nodeId);
    if (!node) return refuse(socket, new DomainError('auth_failed', 'the node no longer exists'));

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
      writes: new TokenBucket(WRITES_PER_MINUTE / 60, WRITES_BURST, app.clock.now),
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
    const { store, clock } = this.app;
    const writer =
      <V>(what: string, write: (changes: [number, V][]) => void) =>
      (changes: [number, V][]) =>
        this.writeWhenWritable(nodeId, `writing a node's ${what} failed`, () => write(changes));
    return {
      health: new Coalescer(
        STATE_BURST,
        STATE_REFILL_MS,
        clock.now,
        writer('health', (changes: [number, TargetHealth[]][]) => {
          for (const [id, targets] of changes) store.rules.setHealth(id, nodeId, targets);
        }),
      ),
      tunnels: new Coalescer(
        STATE_BURST,
        STATE_REFILL_MS,
        clock.now,
        writer('tunnel status', (changes: [number, TunnelState][]) => {
          const at = clock.timestamp();
          for (const [id, { state, error, rtt_us }] of changes) {
            store.tunnels.report(id, nodeId, { status: state, error, rtt_us }, at);
            const taken = exitPortTaken(error);
            if (state === 'down' && taken !== null) this.movePickedPort(id, nodeId, taken);
          }
        }),
      ),
      paths: new Coalescer(
        STATE_BURST,
        STATE_REFILL_MS,
        clock.now,
        writer('paths', (changes: [number, PathsMessage['kernel']][]) => {
          for (const [, { available, reason, drifts, last_drift_at, flow_offload }] of changes) {
            // The agent counts since it started: more than the master last heard is new; fewer, a restarted agent's. An
            // agent reports each drift it put right, and a write is at most every STATE_REFILL_MS: a node's agent adds
            // at most STATE_BURST a write to the metric, however large the number it sends.
            const before = store.nodes.find(nodeId)?.kernel_path;
            const heard = before?.drifts ?? 0;
            if (drifts !== undefined && drifts !== heard)
              this.app.metrics.kernelDrifts.inc({}, Math.min(STATE_BURST, drifts > heard ? drifts - heard : drifts));
            const drift = drifts === undefined ? {} : { drifts, last_drift_at: last_drift_at ?? null };
            const offload = flow_offload === undefined ? {} : { flow_offload };
            store.nodes.setKernelPath(nodeId, { available, reason: available ? null : reason, ...drift, ...offload });
            // Without its kernel path, the node's relay carries every rule the kernel did: no answer says otherwise.
            if (!available && before?.available !== false) store.rules.relayedByNode(nodeId, reason);
          }
        }),
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
    // Taking over when the old link closes may come while an import or batch is being written.
    app.store.db.whenWritable(() =>
      app.store.write(() => app.store.nodes.setLink(nodeId, 'online', null, link.agentVersion, at, link.releaseKeys)),
    );
    this.logOf(`n:${nodeId}`).info('agent connected', {
      node_id: nodeId,
      agent_version: link.agentVersion,
      ip: link.ip,
    });
  }

  /**
   * Writes why a link was refused on its node, each reason at most once a REFUSAL_RECORD_MS,
   * so a flood of refusals does not become a flood of writes.
   */
  private noteRefusal(nodeId: number, detail: string): void {
    const now = this.app.clock.now();
    const key = `${nodeId}:${detail.slice(0, detail.indexOf(':'))}`;
    if ((this.refusalRecorded.get(key) ?? 0) > now - REFUSAL_RECORD_MS) return;
    if (this.refusalRecorded.size > 10_000) this.refusalRecorded.clear();
    this.refusalRecorded.set(key, now);
    this.app.store.write(() => this.app.store.nodes.setStatusDetail(nodeId, detail));
  }

  /** Ends a link whose agent broke the protocol, says why on the node, and refuses the node for a while. */
  private violation(link: Link, what: string): void {
    if (link.endedBecause) return;
    link.endedBecause = `protocol_violation: ${what}`;
    this.logOf(`n:${link.nodeId}`).warn('agent broke the link protocol; closing its link', {
      node_id: link.nodeId,
      reason: what,
    });
    if (this.cooldown.size > 10_000) this.cooldown.clear();
    this.cooldown.set(link.nodeId, this.app.clock.now() + VIOLATION_COOLDOWN_MS);
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
    this.app.sync.disconnect(nodeId);
    if (this.closing) return;
    this.logOf(`n:${nodeId}`).info('agent disconnected', { node_id: nodeId });
    const why = link.endedBecause ?? 'the agent link closed';
    const now = this.app.clock.timestamp();
    const { store } = this.app;
    this.writeWhenWritable(nodeId, 'recording a closed link failed', () => {
      // A new link of the node may have opened meanwhile (an import was being written): it is not offline.
      if (this.links.has(nodeId) || !store.nodes.exists(nodeId)) return;
      store.nodes.setLink(nodeId, 'offline', why, null, lastHeard);
      store.tunnels.nodeDown(nodeId, `the agent of node ${nodeId} is not linked to the master: ${why}`, now);
    });
  }

  /**
   * Writes what a link's event says once writes are let through (an import or batch may hold them). Called from a
   * socket event or a timer, with nothing above it: a write that fails (a full disk) is logged and ends there.
   */
  private writeWhenWritable(nodeId: number, failed: string, write: () => void): void {
    const { store } = this.app;
    store.db.whenWritable(() => {
      try {
        store.write(write);
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
      const node = this.app.store.nodes.find(nodeId);
      if (!node) return void link.socket.destroy();
      const { settings } = this.app;
      const forward = this.forwardingOf();
      const beyond: [number, string][] = [];
      const config: Omit<ConfigMessage, 'rules'> & { rules: WireRule[] } = {
        type: 'config',
        epoch: this.app.store.epoch.current(),
        promotion: this.app.promotion(),
        version: node.config_version,
        report_interval_seconds: settings.get('agent_report_interval_seconds'),
        tcp_idle_timeout_seconds: settings.get('tcp_idle_timeout_seconds'),
        max_connections_per_source: settings.get('max_connections_per_source'),
        allow_local_targets: settings.get('allow_local_rule_targets') === 1,
        next_master_pin: settings.get('tls_next_pin') || null,
        masters: standbysOf(settings.get('standby_masters')),
        rules: [],
        tunnels: this.tunnelEnds(nodeId, link.features, forward, beyond),
      };
      for (const rule of this.app.store.rules.forNode(nodeId)) {
        const carried = forward(rule);
        const needs = beyondAgent(carried, link.features);
        if (needs === null) config.rules.push(wireRule(carried));
        else beyond.push([rule.id, needs]);
      }
      send(link.socket, config);
      if (beyond.length > 0) this.tooOld(link, beyond);
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

  /** Rules not sent to the link's agent, too old for what each needs: each fails, saying what and what to do. */
  private tooOld(link: Link, beyond: [number, string][]): void {
    const { store, clock } = this.app;
    const agent = link.agentVersion ?? 'of unknown version';
    const at = clock.timestamp();
    // A write that fails is tried again with the next config.
    this.writeWhenWritable(link.nodeId, 'recording rules an agent is too old for failed', () => {
      for (const [id, needs] of beyond) {
        const detail = `the agent (${agent}) cannot apply ${needs}: upgrade it (POST /api/rollouts)`;
        store.rules.setSync(id, link.nodeId, 'failed', { code: 'agent_outdated', detail }, at, null, null);
      }
    });
  }

  /**
   * What a config says of each rule: its fields, and for a tenant's rule where operators' may reach local targets,
   * that it may not (a tenant's role looked up once a config).
   */
  private forwardingOf(): (rule: Rule) => ForwardRule {
    const { store, settings } = this.app;
    if (settings.get('allow_local_rule_targets') !== 1) return forwardRuleOf;
    const tenants = new Map<number, boolean>();
    const isTenant = (owner: number) => {
      let tenant = tenants.get(owner);
      if (tenant === undefined) tenants.set(owner, (tenant = store.users.find(owner)?.role === 'tenant'));
      return tenant;
    };
    return (rule) => (isTenant(rule.owner_id) ? { ...forwardRuleOf(rule), local_targets: false } : forwardRuleOf(rule));
  }

  /**
   * The node's part of each of its tunnels: its own key pair, the other end's pin, and at the exit the rules (those
   * its agent can apply: the others go to `beyond`).
   */
  private tunnelEnds(
    nodeId: number,
    features: ReadonlySet<string>,
    forward: (rule: Rule) => ForwardRule,
    beyond: [number, string][],
  ): TunnelEnd[] {
    const { store, box } = this.app;
    return store.tunnels.endsOf(nodeId).map((row) => {
      const entry = row.entry_node_id === nodeId;
      return {
        id: row.id,
        role: entry ? 'entry' : 'exit',
        host: entry ? row.exit_host : null,
        port: row.listen_port,
        cert: entry ? row.entry_cert : row.exit_cert,
        key: box.open(entry ? row.entry_key : row.exit_key),
        peer_pin: pinOf(entry ? row.exit_cert : row.entry_cert),
        rules: entry
          ? []
          : (store.rules
              .forTunnel(row.id)
              .map(forward)
              .filter((rule) => {
                const needs = beyondAgent(rule, features);
                if (needs !== null) beyond.push([rule.id, needs]);
                return needs === null;
              })
              // local_targets only where false, as agents older than it read the rest.
              .map(({ id, protocol, targets, strategy, weights, enabled, local_targets }) =>
                local_targets
                  ? { id, protocol, targets, strategy, weights, enabled }
                  : { id, protocol, targets, strategy, weights, enabled, local_targets },
              ) as TunnelEnd['rules']),
      };
    });
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
    const { store } = this.app;
    this.writeWhenWritable(nodeId, 'recording an agent that went back failed', () => {
      if (store.nodes.exists(nodeId)) store.nodes.setFellBack(nodeId, fellBack);
    });
  }

  /** Which ways of forwarding the node can use, as its agent says. */
  private paths(link: Link, message: PathsMessage): void {
    link.paths.offer([[link.nodeId, message.kernel]]);
  }

  private applied(link: Link, ack: AppliedMessage): void {
    const { nodeId } = link;
    const twice = repeated(ack.results);
    if (twice !== undefined) throw new ProtocolError(`applied message names rule ${twice} twice`);
    const { store } = this.app;
    // A config's result for a rule is taken once per config sent: an agent repeating its acknowledgement with states
    // that flip cannot make a write (and an event) of each; a large config's pieces name each rule once.
    if (link.acknowledged?.version !== ack.version) link.acknowledged = { version: ack.version, ids: new Set() };
    const acknowledged = link.acknowledged.ids;
    const results = ack.results.filter((result) => !acknowledged.has(result.id));
    const current = store.write(() => {
      const node = store.nodes.find(nodeId);
      // An acknowledgement of an older config says nothing about rules changed since: a newer config is on its way.
      if (!node || node.config_version !== ack.version) return false;
      for (const result of results) acknowledged.add(result.id);
      for (const result of results)
        store.rules.setSync(
          result.id,
          nodeId,
          result.state,
          result.error,
          this.app.clock.timestamp(),
          result.path ?? null,
          result.reason ?? null,
        );
      this.moveTakenExits(nodeId, results);
      return true;
    });
    if (current && !ack.partial) store.db.afterCommit(() => this.app.sync.applied(nodeId, ack.version));
  }

  /** How the node's ends of its tunnels stand; a tunnel the node is no end of is ignored. */
  private tunnelStatus(link: Link, message: TunnelStatusMessage): void {
    const twice = repeated(message.tunnels);
    if (twice !== undefined) throw new ProtocolError(`tunnel_status names tunnel ${twice} twice`);
    link.tunnels.offer(message.tunnels.map(({ id, state, error, rtt_us }) => [id, { state, error, rtt_us }]));
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
    const { store } = this.app;
    store.write(() =>
      store.vitals.record(link.nodeId, JSON.stringify(vitals), Math.floor(now / 1000), {
        cpu_percent: vitals.cpu_percent,
        load1: vitals.load[0]!,
        memory_used_bytes: Math.max(0, vitals.memory.total_bytes - vitals.memory.available_bytes),
        rx_bytes_per_second: vitals.network.rx_bytes_per_second,
        tx_bytes_per_second: vitals.network.tx_bytes_per_second,
      }),
    );
    store.db.afterCommit(() => this.app.sync.reports.emit('vitals', link.nodeId, vitals));
  }

  /**
   * Inside a write: a rule of a tunnel failed at its exit node `nodeId` for a port in use, which there can only be the
   * tunnel's own. The port moves now, with the failure, and not when the tunnel's status next comes: a sync waiting on
   * the rule then waits for the moved config (see pushRules) instead of answering with the failure.
   */
  private moveTakenExits(nodeId: number, results: AppliedMessage['results']): void {
    const tunnels = new Set<number>();
    for (const { id, state, error } of results) {
      if (state !== 'failed' || error?.code !== 'port_in_use') continue;
      const tunnelId = this.app.store.rules.find(id)?.tunnel_id;
      if (tunnelId === null || tunnelId === undefined || tunnels.has(tunnelId)) continue;
      tunnels.add(tunnelId);
      const tunnel = this.app.store.tunnels.find(tunnelId);
      if (tunnel) this.movePickedPort(tunnelId, nodeId, tunnel.listen_port);
    }
  }

  /**
   * Inside a write: the exit node `nodeId` of tunnel `id` cannot listen on `taken`, which something else holds there.
   * A port the master picked is moved to the next one free in its books (audited as tunnel.port_moved) and both ends
   * are sent the change; a port someone gave stays, and the tunnel shows why it is down.
   */
  private movePickedPort(id: number, nodeId: number, taken: number): void {
    const { store, clock } = this.app;
    const tunnel = store.tunnels.find(id);
    if (!tunnel || tunnel.exit_node_id !== nodeId || tunnel.listen_port !== taken) return;
    const now = clock.now();
    if (now - (this.portMoved.get(id) ?? -Infinity) < PORT_MOVE_SPACING_MS) return;
    for (const [other, at] of this.portMoved) if (now - at >= PORT_MOVE_SPACING_MS) this.portMoved.delete(other);
    this.portMoved.set(id, now);
    const { min, max } = TUNNEL_PORTS;
    const port =
      store.tunnels.freePort(nodeId, Math.min(taken + 1, max), max) ?? store.tunnels.freePort(nodeId, min, max);
    if (port === null || port === taken || !store.tunnels.movePort(id, port, clock.timestamp())) return;
    for (const ruleId of store.rules.idsOfTunnel(id)) store.rules.markPending(ruleId);
    store.audit.record(
      SYSTEM_ACTOR,
      {
        action: 'tunnel.port_moved',
        resource: 'tunnel',
        resource_id: id,
        status: 'success',
        changes: { before: { listen_port: taken }, after: { listen_port: port } },
      },
      clock.timestamp(),
    );
    for (const end of [tunnel.entry_node_id, tunnel.exit_node_id]) {
      store.nodes.bumpConfig(end);
      store.db.afterCommit(() => this.app.sync.configChanged(end));
    }
    this.logOf(`n:${nodeId}`).warn("a tunnel's exit port was taken on its node: moved", {
      tunnel_id: id,
      node_id: nodeId,
      from: taken,
      to: port,
    });
  }

  /** Inside the write that spent it: records that `rule`'s quota stopped it, and sends its nodes the change. */
  private quotaSpent(rule: Rule): void {
    const { store } = this.app;
    store.audit.record(
      SYSTEM_ACTOR,
      {
        action: 'rule.quota_exceeded',
        resource: 'rule',
        resource_id: rule.id,
        status: 'success',
        changes: { before: { state: 'active' }, after: { state: rule.state, quota_usage: rule.quota_usage } },
      },
      this.app.clock.timestamp(),
    );
    const exit = rule.tunnel_id === null ? undefined : store.tunnels.find(rule.tunnel_id)?.exit_node_id;
    for (const nodeId of exit === undefined ? [rule.node_id] : [rule.node_id, exit]) {
      store.nodes.bumpConfig(nodeId);
      store.db.afterCommit(() => this.app.sync.configChanged(nodeId));
    }
  }

  /**
   * Inside the write that counted it: once a tenant's traffic reaches their plan's allowance, their rules stop or slow
   * (store/standing.ts), audited as user.allowance_exceeded, and their nodes are sent the change.
   */
  private spend(owner: Counted): void {
    const { store } = this.app;
    const allowance = owner.plan_id === null ? null : store.plans.find(owner.plan_id)?.traffic;
    if (!allowance || owner.traffic_used < allowance.bytes) return;
    const at = this.app.clock.timestamp();
    for (const nodeId of restand(store, owner.id, at)) {
      store.nodes.bumpConfig(nodeId);
      store.db.afterCommit(() => this.app.sync.configChanged(nodeId));
    }
    // A report that comes after its period ended counts into the period the clock starts over: not spent after all.
    if (!store.users.find(owner.id)?.usage.traffic?.spent) return;
    store.audit.record(
      SYSTEM_ACTOR,
      {
        action: 'user.allowance_exceeded',
        resource: 'user',
        resource_id: owner.id,
        status: 'success',
        changes: { after: { traffic: store.users.find(owner.id)?.usage.traffic, past: allowance.past } },
      },
      at,
    );
  }

  private traffic(link: Link, report: TrafficMessage): void {
    const { nodeId } = link;
    const twice = repeated(report.rules);
    if (twice !== undefined) throw new ProtocolError(`traffic report ${report.seq} names rule ${twice} twice`);
    const bytes = report.rules.reduce((sum, rule) => sum + rule.bytes_in + rule.bytes_out, 0);
    const { store } = this.app;
    const nowSeconds = Math.floor(this.app.clock.now() / 1000);
    const oldest = nowSeconds - this.app.settings.get('traffic_retention_days') * 86_400;
    const fresh = store.write(() => {
      const counted = store.traffic.streamSeq(nodeId, report.stream);
      if (report.seq <= counted) return false;
      if (!link.allowance.take(bytes)) {
        throw new ProtocolError(
          `traffic report ${report.seq} claims ${bytes} bytes, more than the node could have relayed since it ` +
            `last reported`,
        );
      }
      // Reports are placed at the time the agent counted them, but never in the future nor before retention.
      const at = Math.max(oldest, Math.min(report.at, nowSeconds));
      for (const rule of report.rules)
        store.traffic.record(rule.id, nodeId, at, rule.bytes_in, rule.bytes_out, rule.refused);
      for (const rule of store.rules.spendQuotas(report.rules.map((r) => r.id))) this.quotaSpent(rule);
      for (const owner of store.users.countTraffic(report.rules, nodeId)) if (!owner.traffic_spent) this.spend(owner);
      store.traffic.advanceStream(nodeId, report.stream, counted, report.seq, this.app.clock.timestamp());
      store.nodes.seen(nodeId, this.app.clock.timestamp());
      return true;
    });
    // The agent forgets a report once acknowledged, so the ack waits until the counts are durable.
    store.committed().then(
      () => {
        send(link.socket, { type: 'traffic_ack', stream: report.stream, seq: report.seq });
        if (fresh) this.app.sync.reports.emit('traffic', nodeId, report.rules);
      },
      () => undefined,
    );
  }
}
