// The entry end of a tunnel: keeps one HTTP/2 session over TLS to the exit node (pinning the
// exit's key, presenting its own), reconnecting with backoff, measuring the round trip with
// HTTP/2 PING, and opening a stream per relayed connection or UDP session. Over transport ws
// the same TLS runs inside a WebSocket to the exit, or to the reverse proxy in front of it.

import {
  connect as h2Connect,
  type ClientHttp2Session,
  type ClientHttp2Stream,
  type IncomingHttpHeaders,
  type IncomingHttpStatusHeader,
} from 'node:http2';
import type { Duplex } from 'node:stream';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import type { TunnelTransport } from '../domain/tunnels.ts';
import { guardFor, type DatagramDial, type DatagramSession, type DialPolicy, type TcpDial } from '../relay/dial.ts';
import { contained } from '../relay/faults.ts';
import {
  ALPN,
  Deframer,
  Framer,
  h2Settings,
  MIN_TLS,
  peerRefusal,
  SESSION_MEMORY_MB,
  SESSION_WINDOW,
  streamPath,
  CLIENT_HEADER,
  PROBE_HEADER,
  PROBE_PATH,
  type TunnelView,
} from './wire.ts';
import { parseWebSocketUrl } from '../schema/net.ts';
import { openWebSocket, type WebSocketStream } from './websocket.ts';

export interface EntryConfig {
  id: number;
  /** The exit node's address and tunnel port. */
  host: string;
  port: number;
  cert: string;
  key: string;
  /** The exit's key. */
  peer_pin: string;
  transport: TunnelTransport;
  /** Transport ws: the WebSocket URL to dial (a reverse proxy in front of the exit); null: the exit's own port. */
  via: string | null;
  /** How often the session is PINGed; PING_INTERVAL_MS unless given; 0: when its owner calls ping() (and once up). */
  ping_interval_ms?: number;
}

/** What a probe through the exit found: the time to connect to its probe target, that it reached none, or nothing. */
export type ProbeResult = { ms: number } | 'failed' | null;

const CONNECT_TIMEOUT_MS = 10_000;
const PING_INTERVAL_MS = 5_000;
/** The PINGs loss is counted over: a minute's. A PING unanswered when the next is due counts as lost. */
const LOSS_WINDOW = 12;
const MAX_BACKOFF_MS = 10_000;
const ON_DEMAND_RETRY_MS = 250;
/** Connections held while the session is being set up; more are refused at once. */
const MAX_WAITING = 1_024;

/** How long a released stream may take to finish before it is reset after all. */
const RELEASE_MS = 5_000;

/**
 * Lets go of a stream whose client has gone by ending it, not resetting it: the exit's
 * HTTP/2 stack counts the resets it receives (RST_STREAM rate limit, CVE-2023-44487) and ends
 * a session that sends many, which a busy tunnel whose clients hang up would soon do. What
 * still arrives is discarded; a stream that does not finish in RELEASE_MS is reset after all.
 */
function release(stream: Duplex): void {
  if (stream.destroyed) return;
  stream.resume();
  if (!stream.writableEnded) stream.end();
  const timer = setTimeout(() => stream.destroy(), RELEASE_MS);
  stream.once('close', () => clearTimeout(timer));
}

export class TunnelEntry {
  private session: ClientHttp2Session | null = null;
  /** Streams asked for while a session is being set up; answered when it is up or has failed. */
  private waiting: ((session: ClientHttp2Session | null) => void)[] = [];
  private connecting = false;
  /** The connection to the exit being made or in use: ended with the entry, even mid-handshake. */
  private connection: TLSSocket | null = null;
  /** Transport ws: the WebSocket being opened or carrying the connection, or how to abandon its opening. */
  private carrier: WebSocketStream | (() => void) | null = null;
  private closed = false;
  private attempt = 0;
  private attemptedAt = 0;
  private retryTimer: NodeJS.Timeout | undefined;
  private pingTimer: NodeJS.Timeout | undefined;
  private view: TunnelView = { state: 'down', error: 'connecting to the exit node', rtt_us: null, loss_percent: null };
  /** The last PINGs' outcomes, newest last (true: answered), at most LOSS_WINDOW; and the one out now, by number. */
  private pings: boolean[] = [];
  private pingsSent = 0;
  private pingOut: number | null = null;

  constructor(
    readonly config: EntryConfig,
    private readonly onView: (view: TunnelView) => void,
    /** What a WebSocket's URL may reach, as a rule's targets (a tenant's tunnel is held off local addresses). */
    private readonly policy: DialPolicy,
  ) {
    this.connect();
  }

  get current(): TunnelView {
    return this.view;
  }

  /**
   * A TCP dial through the tunnel for `ruleId`: a stream the exit answers once it reached one
   * of the rule's targets, as a direct relay would; the client's bytes flow from then on.
   */
  dialTcp(ruleId: number): TcpDial {
    return (onOpen, onFail, client) =>
      this.withSession((session) => {
        const stream = session && this.request(session, streamPath('tcp', ruleId), client);
        if (!stream) return onFail('the tunnel is down');
        const failed = () => onFail('the exit reached no target');
        stream.once('close', failed);
        stream.once(
          'response',
          contained(
            'tunnel_entry',
            (headers: IncomingHttpHeaders & IncomingHttpStatusHeader) => {
              stream.off('close', failed);
              if (headers[':status'] === 200) onOpen(stream, release);
              else onFail(`the exit answered ${headers[':status']}`);
            },
            () => stream.destroy(),
          ),
        );
      });
  }

  /** A UDP session through the tunnel for `ruleId`, datagrams framed on one stream. */
  dialDatagrams(ruleId: number): DatagramDial {
    return (onReply, onEnd, client) => {
      let stream: ClientHttp2Stream | null = null;
      let framer: Framer | null = null;
      let closed = false;
      const early: Buffer[] = [];
      const deframer = new Deframer();
      this.withSession((session) => {
        stream = session && !closed ? this.request(session, streamPath('udp', ruleId), client) : null;
        if (!stream) return onEnd();
        stream.on(
          'data',
          contained(
            'tunnel_entry',
            (chunk: Buffer) => deframer.push(chunk, onReply),
            () => stream?.destroy(),
          ),
        );
        stream.on('close', onEnd);
        framer = new Framer(stream);
        for (const datagram of early.splice(0)) framer.send(datagram);
      });
      const session: DatagramSession = {
        send(datagram) {
          if (closed) return false;
          if (!framer) {
            if (early.length >= 64) return false;
            early.push(datagram);
            return true;
          }
          return framer.send(datagram);
        },
        close() {
          closed = true;
          if (stream) release(stream);
        },
      };
      return session;
    };
  }

  /**
   * Asks the exit to connect to its probe target and say how long that took: null when the session is down, the exit
   * has no target (or is older than probes) or no answer came within `timeoutMs` (a slow path is the PINGs' to tell);
   * 'failed' when the exit says it reached none.
   */
  probe(timeoutMs: number): Promise<ProbeResult> {
    const session = this.session;
    if (!session || session.closed || session.destroyed) return Promise.resolve(null);
    return new Promise((resolve) => {
      let stream: ClientHttp2Stream;
      try {
        stream = session.request({ ':method': 'POST', ':path': PROBE_PATH }, { endStream: true });
      } catch {
        return resolve(null);
      }
      const timer = setTimeout(() => done(null), timeoutMs);
      const done = (result: ProbeResult) => {
        clearTimeout(timer);
        stream.destroy();
        resolve(result);
      };
      stream.on('error', () => done(null));
      stream.on('close', () => done(null));
      stream.once('response', (headers) => {
        const micros = Number(headers[PROBE_HEADER]);
        if (headers[':status'] === 200 && Number.isSafeInteger(micros) && micros >= 0) done({ ms: micros / 1000 });
        else done(headers[':status'] === 502 ? 'failed' : null);
      });
      stream.resume();
    });
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.retryTimer);
    clearInterval(this.pingTimer);
    this.session?.destroy();
    this.connection?.destroy();
    this.dropCarrier();
    this.answer(null);
  }

  /** Opens a stream; a refusal by the exit is noted on the tunnel and ends the stream without a reset. */
  /** A stream for `path`, telling the exit the client's address (what its source_hash goes by). */
  private request(session: ClientHttp2Session, path: string, client: string): ClientHttp2Stream | null {
    try {
      const headers = { ':method': 'POST', ':path': path, [CLIENT_HEADER]: client };
      const stream = session.request(headers, { endStream: false });
      stream.on('response', (headers) => {
        const status = headers[':status'];
        if (status === 403) this.report({ error: `the exit refused ${path} (403): it has no such rule` });
        if (status !== 200) release(stream);
      });
      stream.on('error', () => stream.destroy());
      return stream;
    } catch {
      return null;
    }
  }

  /**
   * Hands `use` the session, waiting for one being set up. While the tunnel is down, a new
   * connection brings the next attempt forward rather than waiting out the backoff, to at
   * most one attempt per ON_DEMAND_RETRY_MS, so a flood of clients against a dead exit stays
   * a trickle of connects.
   */
  private withSession(use: (session: ClientHttp2Session | null) => void): void {
    if (this.session && !this.session.closed && !this.session.destroyed) return use(this.session);
    if (this.closed || this.waiting.length >= MAX_WAITING) return use(null);
    if (!this.connecting) {
      clearTimeout(this.retryTimer);
      const wait = Math.max(0, this.attemptedAt + ON_DEMAND_RETRY_MS - Date.now());
      this.retryTimer = setTimeout(() => this.connect(), wait);
    }
    this.waiting.push(use);
  }

  /** Hands the session to each waiting dial; one that fails fails alone (its flow ends as it would without one). */
  private answer(session: ClientHttp2Session | null): void {
    for (const use of this.waiting.splice(0)) contained('tunnel_entry', use, () => undefined)(session);
  }

  private report(change: Partial<TunnelView>): void {
    this.view = { ...this.view, ...change };
    this.onView(this.view);
  }

  /** Where the entry dials, in words: the exit's address, or the WebSocket URL it reaches the exit through. */
  private get where(): string {
    const { host, port, transport } = this.config;
    return transport === 'ws' ? `through ${this.webSocketUrl().href}` : `at ${host}:${port}`;
  }

  private webSocketUrl(): URL {
    const { host, port, via } = this.config;
    return parseWebSocketUrl(via ?? `ws://${host.includes(':') ? `[${host}]` : host}:${port}/`)!;
  }

  private dropCarrier(): void {
    const carrier = this.carrier;
    this.carrier = null;
    if (typeof carrier === 'function') carrier();
    else carrier?.destroy();
  }

  private connect(): void {
    if (this.closed) return;
    this.connecting = true;
    this.attemptedAt = Date.now();
    if (this.config.transport === 'tls') return this.handshake(null);
    const url = this.webSocketUrl();
    // A via is the tunnel owner's to name, and is held to what their rules' targets may reach; the exit is a node's.
    const guard: ReturnType<typeof guardFor> = this.config.via
      ? guardFor(url.hostname.replace(/^\[|\]$/g, ''), this.policy)
      : { refused: null };
    if (guard.refused) return this.lost(`not dialling the exit node ${this.where}: ${guard.refused}`);
    const timer = setTimeout(() => {
      this.dropCarrier();
      this.lost(`cannot reach the exit node ${this.where}: timed out connecting`);
    }, CONNECT_TIMEOUT_MS);
    this.carrier = openWebSocket(
      url,
      (carrier) => {
        clearTimeout(timer);
        this.carrier = carrier;
        carrier.on('error', () => carrier.destroy());
        this.handshake(carrier);
      },
      (why) => {
        clearTimeout(timer);
        this.carrier = null;
        this.lost(`cannot reach the exit node ${this.where}: ${why}`);
      },
      guard.lookup,
    );
  }

  /** The TLS handshake with the exit, on its port or inside `carrier`, the WebSocket to it. */
  private handshake(carrier: WebSocketStream | null): void {
    const { host, port, cert, key, peer_pin } = this.config;
    const socket = tlsConnect({
      ...(carrier ? { socket: carrier } : { host, port }),
      cert,
      key,
      // The pin is the trust: the exit's certificate is its own, no CA is involved.
      rejectUnauthorized: false,
      minVersion: MIN_TLS,
      ALPNProtocols: ALPN,
    });
    this.connection = socket;
    socket.once('close', () => {
      if (this.connection === socket) this.connection = null;
      if (carrier && this.carrier === carrier) this.dropCarrier();
    });
    socket.setTimeout(CONNECT_TIMEOUT_MS, () => socket.destroy(new Error('timed out connecting')));
    const failed = (error: Error) => this.lost(`cannot reach the exit node ${this.where}: ${error.message}`);
    socket.once('error', failed);
    socket.once('secureConnect', () => {
      socket.off('error', failed);
      socket.setTimeout(0);
      const refusal = peerRefusal(socket, peer_pin);
      if (refusal) {
        socket.on('error', () => undefined);
        socket.destroy();
        return this.lost(`refusing the exit node ${this.where}: ${refusal}`);
      }
      this.open(socket);
    });
  }

  private open(socket: ReturnType<typeof tlsConnect>): void {
    const { host, port } = this.config;
    const session = h2Connect(`https://${host.includes(':') ? `[${host}]` : host}:${port}`, {
      createConnection: () => socket,
      settings: h2Settings,
      maxSessionMemory: SESSION_MEMORY_MB,
    });
    let why = 'the session to the exit node closed';
    session.on('error', (error) => (why = `the session to the exit node failed: ${error.message}`));
    // A session that has not settled yet does not always notice its connection failing: end it here.
    socket.on('error', (error) => {
      why = `the session to the exit node failed: ${error.message}`;
      session.destroy();
    });
    socket.on('close', () => session.destroy());
    session.on('goaway', () => (why = 'the exit node ended the session'));
    session.once('connect', () => {
      if (this.closed) return void session.destroy();
      session.setLocalWindowSize(SESSION_WINDOW);
      this.session = session;
      this.connecting = false;
      this.attempt = 0;
      this.report({ state: 'up', error: null });
      void this.ping();
      const interval = this.config.ping_interval_ms ?? PING_INTERVAL_MS;
      if (interval > 0) this.pingTimer = setInterval(() => void this.ping(), interval);
      this.answer(session);
    });
    session.once('close', () => {
      clearInterval(this.pingTimer);
      if (this.session === session) this.session = null;
      this.lost(why);
    });
  }

  /**
   * PINGs the session; resolves once it is answered or failed (at once while the session is down). A PING still
   * unanswered when the next goes counts as lost.
   */
  ping(): Promise<void> {
    const session = this.session;
    if (!session) return Promise.resolve();
    if (this.pingOut !== null) this.counted(false);
    const sent = ++this.pingsSent;
    this.pingOut = sent;
    return new Promise((resolve) => {
      try {
        session.ping((error, ms) => {
          resolve();
          // An answer after the next PING went is counted lost already.
          if (this.session !== session || this.pingOut !== sent) return;
          this.pingOut = null;
          if (error) return;
          this.counted(true);
          this.report({ rtt_us: Math.round(ms * 1000), loss_percent: this.loss() });
        });
      } catch {
        // a session closing meanwhile: its close event reports it
        resolve();
      }
    });
  }

  /** Counts a PING's outcome; a lost one is reported at once (an answered one with its round trip). */
  private counted(answered: boolean): void {
    this.pings.push(answered);
    if (this.pings.length > LOSS_WINDOW) this.pings.shift();
    if (!answered) this.report({ loss_percent: this.loss() });
  }

  private loss(): number {
    const lost = this.pings.filter((answered) => !answered).length;
    return Math.round((lost / this.pings.length) * 1000) / 10;
  }

  private lost(reason: string): void {
    this.connecting = false;
    this.answer(null);
    if (this.closed) return;
    this.pings = [];
    this.pingOut = null;
    this.report({ state: 'down', error: reason, rtt_us: null, loss_percent: null });
    const ceiling = Math.min(MAX_BACKOFF_MS, 250 * 2 ** this.attempt);
    this.attempt += 1;
    this.retryTimer = setTimeout(() => this.connect(), ceiling * (0.5 + Math.random() / 2));
  }
}
