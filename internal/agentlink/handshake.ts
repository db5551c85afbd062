// Who may open an agent link: an upgrade request to the link's path, with its node's token, from an address and a node
// not refused for a while (too many failed attempts, a protocol broken), speaking this master's protocol, of no newer
// epoch than this master's. What its headers say of the agent (version, release keys, features) is read here, as
// names from known lists only, never stored as sent.

import { STATUS_CODES, type IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { FailureWindow } from '../auth/failures.ts';
import { agentTokenNode, hashSecret, sameHash } from '../auth/secrets.ts';
import { AGENT_FEATURES, LINK_FEATURES, UNNAMED_FEATURES } from '../domain/link.ts';
import { DomainError } from '../errors/errors.ts';
import { problemOf } from '../http/problem.ts';
import type { Logger } from '../log/log.ts';
import { MAX_RELEASE_KEYS } from '../release/signature.ts';
import type { Clock } from '../runtime/clock.ts';
import type { Lifecycle } from '../runtime/lifecycle.ts';
import { sourceOf } from '../schema/net.ts';
import type { AgentReports } from '../service/agent-reports.ts';
import { standbysOf, type Settings } from '../settings/settings.ts';
import type { Node } from '../store/nodes.ts';
import type { Store } from '../store/store.ts';
import { PIN } from '../tls/pin.ts';
import { verifyPromotion } from '../tls/promotion.ts';
import { LINK_PATH, LINK_PROTOCOL } from './wire.ts';

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

/** An agent let in, and what its request said of it. */
export interface Admitted {
  nodeId: number;
  node: Node;
  agentVersion: string | null;
  /** The ids of the release keys its agent trusts (X-Agent-Release-Keys). */
  releaseKeys: string[];
  /** What its agent can do of what rules may ask (X-Agent-Features; see agentFeatures). */
  features: ReadonlySet<string>;
  ip: string;
}

/** What the gate uses of the master. */
export interface GateBackend {
  readonly store: Store;
  readonly reports: AgentReports;
  readonly settings: Settings;
  readonly log: Logger;
  readonly clock: Clock;
  /** Links are refused (503, retried by the agent) while the master starts. */
  readonly lifecycle: Lifecycle;
  /** An agent has heard of a newer epoch than this master's: a standby was promoted, this master no longer serves. */
  readonly fence: (epoch: number, primary: string | null) => void;
}

export class Gate {
  private readonly failedByAddress: FailureWindow;
  /** Nodes refused until the given time, after their agent broke the protocol. */
  private readonly cooldown = new Map<number, number>();
  private readonly refusalRecorded = new Map<string, number>();
  /** Whether an agent's unproven word of a newer primary was logged (once: see admit). */
  private unprovenSaid = false;

  constructor(
    private readonly app: GateBackend,
    /** What each node's links, and each source's refused attempts, may log (see `throttledBy`). */
    private readonly logOf: (key: string) => Logger,
  ) {
    this.failedByAddress = new FailureWindow(app.clock.now);
  }

  /** Refuses the node's links for a while: its agent broke the protocol. */
  coolDown(nodeId: number): void {
    if (this.cooldown.size > 10_000) this.cooldown.clear();
    this.cooldown.set(nodeId, this.app.clock.now() + VIOLATION_COOLDOWN_MS);
  }

  /** Lets an agent's upgrade request in, or refuses it on `socket` (undefined), saying why. */
  admit(req: IncomingMessage, socket: Socket, closing: boolean): Admitted | undefined {
    const { app } = this;
    const no = (error: DomainError, headers?: Record<string, string>) => void refuse(socket, error, headers);
    const ip = socket.remoteAddress ?? 'unknown';
    const path = pathOf(req.url);
    if (path === null) return no(new DomainError('bad_request', 'the request target is not a valid path'));
    if (path !== LINK_PATH) return no(new DomainError('not_found', 'no upgrade here'));
    if (closing) return no(new DomainError('unavailable', 'the master is shutting down', { retryAfterSeconds: 5 }));
    if (app.lifecycle.starting)
      return no(new DomainError('unavailable', 'the master is starting', { retryAfterSeconds: 1 }));
    const wait = this.failedByAddress.retryAfterMs(`a:${sourceOf(ip)}`, MAX_FAILED_LINKS_PER_MINUTE, 60_000);
    if (wait > 0) {
      return no(
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
      return no(
        new DomainError(
          'auth_failed',
          'the agent token is unknown or was replaced; reinstall the agent or give it the current token',
        ),
      );
    }
    const until = this.cooldown.get(nodeId) ?? 0;
    if (until > app.clock.now()) {
      return no(
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
      return no(
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
      return no(
        new DomainError(
          'version_mismatch',
          `this master speaks ${LINK_PROTOCOL}; install the agent that ships with it`,
        ),
        { Upgrade: LINK_PROTOCOL },
      );
    }
    const node = app.store.nodes.find(nodeId);
    if (!node) return no(new DomainError('auth_failed', 'the node no longer exists'));
    return { nodeId, node, agentVersion, releaseKeys, features, ip };
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
    this.app.reports.refused(nodeId, detail);
  }
}
