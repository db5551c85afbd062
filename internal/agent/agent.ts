// The agent: forwards what its node's config says, from disk at once and from the master
// whenever it pushes a new version; acknowledges what it really applied; reports traffic
// as sequence-numbered deltas kept until the master confirms them.

import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Socket } from 'node:net';
import { inPieces, keepAlive, LINK_PATH, LINK_PROTOCOL, MASTER_LINE_BYTES, readMessages, send, type Message } from '../agentlink/wire.ts';
import { Forwarder, type ForwardRule } from '../forward/forwarder.ts';
import type { Logger } from '../log/log.ts';
import { AgentState, type SavedConfig, type TrafficReport, type TrafficState } from './state.ts';

export interface AgentOptions {
  masterUrl: string;
  token: string;
  stateDir: string;
  listenHost: string;
  version: string;
  log: Logger;
}

const MAX_BACKOFF_MS = 30_000;
/** Past this many unacknowledged reports (a long master outage) they are merged into one: totals are kept, timing is coarser. */
const MAX_PENDING_REPORTS = 500;

export class Agent {
  private readonly forwarder: Forwarder;
  private readonly state: AgentState;
  private config: SavedConfig | null = null;
  private traffic!: TrafficState;
  private socket: Socket | null = null;
  private attempt = 0;
  private stopping = false;
  private applying: Promise<void> = Promise.resolve();
  private reportTimer: NodeJS.Timeout | undefined;
  private retryTimer: NodeJS.Timeout | undefined;

  constructor(private readonly options: AgentOptions) {
    this.forwarder = new Forwarder(options.listenHost);
    this.state = new AgentState(options.stateDir);
  }

  async start(): Promise<void> {
    this.traffic = this.state.loadTraffic();
    const saved = this.state.loadConfig();
    if (saved) {
      this.options.log.info('applying the saved config', { version: saved.version, rules: saved.rules.length });
      await this.apply(saved, false);
    }
    this.scheduleReports(saved?.report_interval_seconds ?? 10);
    this.connect();
  }

  async stop(): Promise<void> {
    this.stopping = true;
    clearInterval(this.reportTimer);
    clearTimeout(this.retryTimer);
    this.report();
    this.socket?.destroy();
    await this.applying;
    await this.forwarder.close();
  }

  private connect(): void {
    const { log } = this.options;
    const url = new URL(LINK_PATH, this.options.masterUrl);
    const request = url.protocol === 'https:' ? httpsRequest : httpRequest;
    const req = request(url, {
      method: 'GET',
      timeout: 10_000,
      headers: { Connection: 'Upgrade', Upgrade: LINK_PROTOCOL, Authorization: `Bearer ${this.options.token}`, 'X-Agent-Version': this.options.version },
    });
    req.on('upgrade', (_res, socket, head) => this.linked(socket, head));
    req.on('response', (res: IncomingMessage) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk.slice(0, 2000)));
      res.on('end', () => {
        let detail = body;
        try {
          detail = JSON.parse(body).detail ?? body;
        } catch {
          // not a problem document; log it as it came
        }
        log.warn('the master refused the link', { status: res.statusCode, detail });
        this.retry();
      });
    });
    req.on('timeout', () => req.destroy(new Error('timed out connecting to the master')));
    req.on('error', (error) => {
      log.warn('cannot reach the master', { url: url.origin, error: error.message });
      this.retry();
    });
    req.end();
  }

  private retry(): void {
    if (this.stopping) return;
    const ceiling = Math.min(MAX_BACKOFF_MS, 500 * 2 ** this.attempt);
    this.attempt += 1;
    // Jitter spreads a fleet's reconnects after a master restart.
    this.retryTimer = setTimeout(() => this.connect(), ceiling * (0.5 + Math.random() / 2));
  }

  private linked(socket: Socket, head: Buffer): void {
    if (this.stopping) return void socket.destroy();
    this.attempt = 0;
    this.socket = socket;
    if (head.length > 0) socket.unshift(head);
    socket.on('error', (error) => this.options.log.warn('the link failed', { error: error.message }));
    socket.on('close', () => {
      if (this.socket === socket) this.socket = null;
      if (!this.stopping) {
        this.options.log.warn('the link to the master closed; forwarding goes on, reconnecting');
        this.retry();
      }
    });
    keepAlive(socket);
    readMessages(socket, (message) => this.receive(message), MASTER_LINE_BYTES);
    this.options.log.info('linked to the master', { url: new URL(this.options.masterUrl).origin });
    for (const report of this.traffic.pending) send(socket, { type: 'traffic', ...report });
  }

  private receive(message: Message): void {
    if (message.type === 'ping') return send(this.socket!, { type: 'pong' });
    if (message.type === 'config') {
      const config = message as unknown as SavedConfig;
      this.applying = this.applying.then(() => this.apply(config, true)).catch((error: Error) => this.options.log.error('applying the config failed', { error: error.message }));
      return;
    }
    if (message.type === 'traffic_ack') {
      const { stream, seq } = message as unknown as { stream: string; seq: number };
      this.traffic.pending = this.traffic.pending.filter((r) => r.stream !== stream || r.seq > seq);
      this.state.saveTraffic(this.traffic);
    }
  }

  private async apply(config: SavedConfig, acknowledge: boolean): Promise<void> {
    this.forwarder.setLimits({
      ...(config.tcp_idle_timeout_seconds ? { tcpIdleMs: config.tcp_idle_timeout_seconds * 1000 } : {}),
      ...(config.max_connections_per_source ? { maxConnectionsPerSource: config.max_connections_per_source } : {}),
    });
    const results = await this.forwarder.apply(config.rules as ForwardRule[]);
    this.state.saveConfig(config);
    if (config.report_interval_seconds !== this.config?.report_interval_seconds) this.scheduleReports(config.report_interval_seconds);
    this.config = config;
    const failed = results.filter((r) => r.state === 'failed');
    this.options.log.info('applied config', { version: config.version, rules: results.length, failed: failed.length, errors: failed.slice(0, 5).map((r) => ({ id: r.id, ...r.error })) });
    if (!acknowledge || !this.socket) return;
    // The master reads at most MAX_ENTRIES results a message; all but the last say more follow.
    const pieces = inPieces(results);
    pieces.forEach((piece, i) => send(this.socket!, { type: 'applied', version: config.version, results: piece, partial: i < pieces.length - 1 }));
  }

  private scheduleReports(seconds: number): void {
    clearInterval(this.reportTimer);
    this.reportTimer = setInterval(() => this.report(), seconds * 1000);
  }

  /**
   * Counts what crossed the relays since the last report, keeps it until acknowledged, and
   * sends it: one report per MAX_ENTRIES rules, each with its own sequence number.
   */
  private report(): void {
    const drained = this.forwarder.drain();
    if (drained.length === 0) return;
    const traffic = this.traffic;
    const at = Math.floor(Date.now() / 1000);
    let fresh: TrafficReport[] = inPieces(drained).map((rules) => ({ stream: traffic.stream, seq: ++traffic.seq, at, rules }));
    traffic.pending.push(...fresh);
    if (traffic.pending.length > MAX_PENDING_REPORTS) {
      const merged = new Map<number, { id: number; bytes_in: number; bytes_out: number }>();
      for (const r of traffic.pending.flatMap((p) => p.rules)) {
        const m = merged.get(r.id) ?? { id: r.id, bytes_in: 0, bytes_out: 0 };
        m.bytes_in += r.bytes_in;
        m.bytes_out += r.bytes_out;
        merged.set(r.id, m);
      }
      traffic.pending = inPieces([...merged.values()]).map((rules) => ({ stream: traffic.stream, seq: ++traffic.seq, at, rules }));
      fresh = traffic.pending;
    }
    this.state.saveTraffic(traffic);
    if (this.socket) for (const report of fresh) send(this.socket, { type: 'traffic', ...report });
  }
}
