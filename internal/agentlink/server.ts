// The master's end of the agent links: authenticates an agent's upgrade request by its
// node's token, marks the node online, pushes it its whole config whenever that changes,
// and records what it reports: the config version it applied, per-rule outcomes, traffic.

import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { App } from '../api/app.ts';
import { agentTokenNode, hashSecret, sameHash } from '../auth/secrets.ts';
import { array, integer, nullable, object, oneOf, string, validate, type Infer } from '../schema/schema.ts';
import { keepAlive, LINK_PATH, LINK_PROTOCOL, readMessages, send, type Message } from './wire.ts';

const COUNT = integer({ min: 0, max: Number.MAX_SAFE_INTEGER });
const ID = integer({ min: 1, max: Number.MAX_SAFE_INTEGER });

const appliedMessage = object({
  type: oneOf(['applied']),
  version: COUNT,
  results: array(
    object({
      id: ID,
      state: oneOf(['applied', 'failed']),
      error: nullable(object({ code: string({ min: 1, max: 64 }), detail: string({ max: 1000 }) })),
    }),
    { max: 1_000_000 },
  ),
});

const trafficMessage = object({
  type: oneOf(['traffic']),
  stream: string({ min: 1, max: 64 }),
  seq: ID,
  at: COUNT,
  rules: array(object({ id: ID, bytes_in: COUNT, bytes_out: COUNT }), { max: 1_000_000 }),
});

function refuse(socket: Socket, status: number, reason: string, code: string, detail: string, headers = ''): void {
  const body = JSON.stringify({ type: `urn:portplane:problem:${code}`, title: reason, status, code, detail });
  socket.end(`HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/problem+json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${headers}Connection: close\r\n\r\n${body}`);
}

export class AgentLinks {
  private readonly links = new Map<number, Socket>();
  private closing = false;

  constructor(private readonly app: App) {
    app.sync.changes.on('config', (nodeId: number) => this.pushConfig(nodeId));
  }

  get connected(): number {
    return this.links.size;
  }

  /** For the HTTP server's 'upgrade' event. */
  readonly handleUpgrade = (req: IncomingMessage, socket: Socket, head: Buffer): void => {
    socket.on('error', () => socket.destroy());
    const { app } = this;
    if (new URL(req.url ?? '/', 'http://localhost').pathname !== LINK_PATH) return refuse(socket, 404, 'Not Found', 'not_found', 'no upgrade here');
    if (this.closing) return refuse(socket, 503, 'Service Unavailable', 'unavailable', 'the master is shutting down', 'Retry-After: 5\r\n');
    const token = /^Bearer +(\S+)$/i.exec(req.headers.authorization ?? '')?.[1] ?? '';
    const nodeId = agentTokenNode(token);
    const stored = nodeId === null ? undefined : app.store.nodes.agentTokenHash(nodeId);
    if (nodeId === null || !stored || !sameHash(stored, hashSecret(token))) {
      if (nodeId !== null && stored) app.store.nodes.setStatusDetail(nodeId, `auth_failed: an agent from ${socket.remoteAddress} presented a wrong token at ${app.timestamp()}`);
      app.log.warn('agent link refused', { reason: 'auth_failed', node_id: nodeId, ip: socket.remoteAddress });
      return refuse(socket, 401, 'Unauthorized', 'auth_failed', 'the agent token is unknown or was replaced; reinstall the agent or give it the current token');
    }
    const agentVersion = String(req.headers['x-agent-version'] ?? '').slice(0, 32) || null;
    if (req.headers.upgrade !== LINK_PROTOCOL) {
      app.store.nodes.setStatusDetail(nodeId, `version_mismatch: the agent (${agentVersion ?? 'unknown version'}) speaks ${req.headers.upgrade ?? 'nothing'}, the master ${LINK_PROTOCOL}`);
      app.log.warn('agent link refused', { reason: 'version_mismatch', node_id: nodeId, agent_version: agentVersion });
      return refuse(socket, 426, 'Upgrade Required', 'version_mismatch', `this master speaks ${LINK_PROTOCOL}; install the agent that ships with it`, `Upgrade: ${LINK_PROTOCOL}\r\n`);
    }

    socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: ${LINK_PROTOCOL}\r\nConnection: Upgrade\r\n\r\n`);
    if (head.length > 0) socket.unshift(head);
    this.links.get(nodeId)?.destroy();
    this.links.set(nodeId, socket);
    app.sync.connect(nodeId);
    app.store.nodes.setLink(nodeId, 'online', null, agentVersion, app.timestamp());
    app.log.info('agent connected', { node_id: nodeId, agent_version: agentVersion, ip: socket.remoteAddress });
    keepAlive(socket);
    readMessages(socket, (message) => this.receive(nodeId, socket, message));
    socket.on('close', () => this.disconnected(nodeId, socket));
    this.pushConfig(nodeId);
  };

  /** Ends every link, recording the nodes as offline first (the store closes right after). */
  close(): void {
    this.closing = true;
    const now = this.app.timestamp();
    this.app.store.write(() => {
      for (const nodeId of this.links.keys()) this.app.store.nodes.setLink(nodeId, 'offline', 'the master shut down', null, now);
    });
    for (const [nodeId, socket] of this.links) {
      this.links.delete(nodeId);
      this.app.sync.disconnect(nodeId);
      socket.destroy();
    }
  }

  private disconnected(nodeId: number, socket: Socket): void {
    if (this.links.get(nodeId) !== socket) return;
    this.links.delete(nodeId);
    this.app.sync.disconnect(nodeId);
    if (this.app.store.nodes.find(nodeId)) this.app.store.nodes.setLink(nodeId, 'offline', 'the agent link closed', null, this.app.timestamp());
    this.app.log.info('agent disconnected', { node_id: nodeId });
  }

  private pushConfig(nodeId: number): void {
    const socket = this.links.get(nodeId);
    if (!socket) return;
    const node = this.app.store.nodes.find(nodeId);
    if (!node) {
      socket.destroy();
      return;
    }
    const rules = this.app.store.rules.forNode(nodeId).map(({ id, protocol, listen_port, targets, strategy, enabled, tunnel_id }) => ({ id, protocol, listen_port, targets, strategy, enabled, tunnel_id }));
    send(socket, { type: 'config', version: node.config_version, report_interval_seconds: this.app.settings.get('agent_report_interval_seconds'), rules });
  }

  private receive(nodeId: number, socket: Socket, message: Message): void {
    if (message.type === 'ping') return send(socket, { type: 'pong' });
    if (message.type === 'pong') return;
    if (message.type === 'applied') return this.applied(nodeId, socket, message);
    if (message.type === 'traffic') return this.traffic(nodeId, socket, message);
    this.app.log.warn('agent sent an unknown message', { node_id: nodeId, type: message.type.slice(0, 32) });
  }

  private checked<T>(nodeId: number, socket: Socket, schema: { check: (...a: any[]) => T }, message: Message): T | null {
    const { value, errors } = validate(schema as never, message);
    if (errors.length === 0) return value as T;
    this.app.log.warn('agent sent a malformed message; closing its link', { node_id: nodeId, type: message.type, errors: errors.slice(0, 3) });
    socket.destroy();
    return null;
  }

  private applied(nodeId: number, socket: Socket, message: Message): void {
    const ack = this.checked<Infer<typeof appliedMessage>>(nodeId, socket, appliedMessage, message);
    if (!ack) return;
    const { store } = this.app;
    const current = store.write(() => {
      const node = store.nodes.find(nodeId);
      // An acknowledgement of an older config says nothing about rules changed since: a newer config is on its way.
      if (!node || node.config_version !== ack.version) return false;
      for (const result of ack.results) store.rules.setSync(result.id, nodeId, result.state, result.error, this.app.timestamp());
      return true;
    });
    if (current) store.db.afterCommit(() => this.app.sync.applied(nodeId, ack.version));
  }

  private traffic(nodeId: number, socket: Socket, message: Message): void {
    const report = this.checked<Infer<typeof trafficMessage>>(nodeId, socket, trafficMessage, message);
    if (!report) return;
    const { store } = this.app;
    const nowSeconds = Math.floor(this.app.now() / 1000);
    store.write(() => {
      const cursor = store.nodes.trafficStream(nodeId);
      if (!cursor || (cursor.stream === report.stream && report.seq <= cursor.seq)) return;
      // Reports are placed at the time the agent counted them, but never in the future.
      const at = Math.min(report.at, nowSeconds);
      for (const rule of report.rules) store.traffic.record(rule.id, nodeId, at, rule.bytes_in, rule.bytes_out);
      store.nodes.setTrafficStream(nodeId, report.stream, report.seq, this.app.timestamp());
    });
    // The agent forgets a report once acknowledged, so the ack waits until the counts are durable.
    store.committed().then(
      () => send(socket, { type: 'traffic_ack', stream: report.stream, seq: report.seq }),
      () => undefined,
    );
  }
}
