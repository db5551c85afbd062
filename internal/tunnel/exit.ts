// The exit end of a tunnel: listens on the tunnel's port, lets in only the peer presenting
// the entry's key, and answers each stream by dialling the targets of the rule it names:
// only rules bound to this tunnel, whatever else a peer sends. Everything it refuses is
// kept as the tunnel's last error, which the agent reports to the master.

import { createServer as createHttpServer, type IncomingMessage } from 'node:http';
import { performServerHandshake, type Http2Session, type ServerHttp2Stream } from 'node:http2';
import type { IncomingHttpHeaders } from 'node:http2';
import { isIP, type Server as NetServer, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { createSecureContext, createServer, TLSSocket, type Server } from 'node:tls';
import { parseTarget, sourceOf } from '../schema/net.ts';
import { datagramsTo, dialTargets, policyFor, splice, type DialPolicy } from '../relay/dial.ts';
import { TargetPicker, type Target } from '../relay/targets.ts';
import { contained } from '../relay/faults.ts';
import { carries, type Protocol, type Strategy } from '../domain/rules.ts';
import {
  ALPN,
  Deframer,
  Framer,
  h2Settings,
  MIN_TLS,
  parseStreamPath,
  peerRefusal,
  SESSION_MEMORY_MB,
  SESSION_WINDOW,
  type TunnelView,
  CLIENT_HEADER,
  PROBE_HEADER,
  PROBE_PATH,
} from './wire.ts';
import type { TunnelTransport } from '../domain/tunnels.ts';
import { acceptWebSocket, notFound } from './websocket.ts';

/** A connection's peer, the same for its TCP socket and the TLS socket over it. */
function peerKey(socket: Socket): string {
  return `${socket.remoteAddress}|${socket.remotePort}`;
}

export interface ExitConfig {
  id: number;
  port: number;
  /** tls: the entry's TLS on the port itself; ws: the same TLS inside a WebSocket, which a reverse proxy may carry. */
  transport: TunnelTransport;
  cert: string;
  key: string;
  /** The entry's key. */
  peer_pin: string;
  /** What a probe connects to (host:port); absent or null: the first target of the first enabled TCP rule. */
  probe_target?: string | null;
  /** False: the probe target is held off what is local to the node (a tenant's tunnel), as a rule's targets. */
  local_targets?: boolean;
}

export interface ExitRule {
  id: number;
  protocol: Protocol;
  targets: Target[];
  strategy: Strategy;
  weights: number[] | null;
  enabled: boolean;
  /** False: held off what is local to the node, whatever the node's policy (see policyFor). */
  local_targets: boolean;
  /** Each target's priority, an SRV name's records' (see TargetPicker); absent: all alike. */
  tiers?: readonly number[];
  /** The exit node's address to dial the targets from; absent or null: as routing picks. */
  source_address?: string | null;
}

/** Connections in all, at most: the authenticated few and the handshakes under way, with room to spare. */
const MAX_CONNECTIONS = 256;
/**
 * Handshakes under way, at most: past it the one that began longest ago is dropped for the new one, so idle
 * connections cannot keep the entry out (its handshake takes milliseconds); and, over TLS, at most PENDING_PER_SOURCE
 * from one source address (an IPv6 host by its /64). Each has HANDSHAKE_TIMEOUT_MS to finish (through a WebSocket,
 * that much for the upgrade and as much again for the TLS inside). A WebSocket's connections all come from the reverse
 * proxy in front, so there is no cap per source: it would let anyone behind the same proxy keep the entry out.
 */
const MAX_PENDING = 64;
const PENDING_PER_SOURCE = 4;
const HANDSHAKE_TIMEOUT_MS = 3_000;
/** The least time between two probes of one session: a round is a second at the least. */
const PROBE_SPACING_MS = 500;
/** How long a probe's connection to its target may take to close after the exit's FIN before it is reset. */
const PROBE_LINGER_MS = 2_000;
/** Authenticated sessions kept at once; the entry keeps one, the rest are leftovers of reconnects. */
const MAX_SESSIONS = 4;

export class TunnelExit {
  /** The TLS server: listening on the port (transport tls) or handed nothing but its settings (ws). */
  private readonly server: Server;
  /** What listens on the port: the TLS server, or an HTTP server whose WebSocket upgrades carry the TLS. */
  private readonly listener: NetServer;
  private readonly rules = new Map<number, { rule: ExitRule; picker: TargetPicker }>();
  private readonly sessions = new Set<Http2Session>();
  /**
   * When each session's last probe began, while one is under way or PROBE_SPACING_MS after: one at a time and at most
   * so often, so that an entry (its rounds are a second apart at the least) cannot make the exit dial in a flood.
   */
  private readonly probing = new WeakMap<Http2Session, number>();
  /** Connections whose handshake is under way, by address and port, oldest first. */
  private readonly pending = new Map<string, Socket>();
  private view: TunnelView = {
    state: 'down',
    error: 'waiting for the entry node to connect',
    rtt_us: null,
    loss_percent: null,
  };

  constructor(
    readonly config: ExitConfig,
    private readonly onView: (view: TunnelView) => void,
    /** What the exit may dial for its rules (the node's, shared). */
    private readonly policy: DialPolicy,
  ) {
    this.server = createServer({
      cert: config.cert,
      key: config.key,
      requestCert: true,
      // The pin is the trust: the entry's certificate is its own; it is checked before anything is read.
      rejectUnauthorized: false,
      minVersion: MIN_TLS,
      ALPNProtocols: ALPN,
      handshakeTimeout: HANDSHAKE_TIMEOUT_MS,
    });
    this.server.maxConnections = MAX_CONNECTIONS;
    this.listener = config.transport === 'ws' ? this.webSocketListener() : this.server;
    if (config.transport === 'tls') this.server.on('connection', (socket: Socket) => this.admit(socket, true));
    this.server.on(
      'secureConnection',
      contained(
        'tunnel_exit',
        (socket: TLSSocket) => {
          this.pending.delete(peerKey(socket));
          this.accept(socket, socket.remoteAddress ?? 'unknown');
        },
        (error, socket) => this.dropped(socket, error),
      ),
    );
    this.server.on('tlsClientError', (error, socket) => {
      this.refuse(`a TLS handshake from ${socket.remoteAddress ?? 'a peer that left'} failed: ${error.message}`);
      socket.destroy();
    });
  }

  get current(): TunnelView {
    return this.view;
  }

  /**
   * Resolves once listening, on the tunnel's port or on `inherited` (a listening socket an agent handed over, see
   * TcpRelay.listen); rejects with the bind error (EADDRINUSE, EACCES, ...).
   */
  listen(host: string, inherited?: object): Promise<void> {
    return new Promise((resolve, reject) => {
      const listening = () => {
        this.listener.off('error', reject);
        this.listener.on('error', () => undefined);
        resolve();
      };
      this.listener.once('error', reject);
      if (inherited) this.listener.listen(inherited, listening);
      else this.listener.listen({ host, port: this.config.port, exclusive: true }, listening);
    });
  }

  /** The listening socket's handle, for the agent taking over (see TcpRelay.listeningHandle). */
  get listeningHandle(): object | undefined {
    return (this.listener as unknown as { _handle?: object })._handle;
  }

  /** Takes no more tunnel connections; those open go on. */
  stopAccepting(): void {
    if (this.listener.listening) this.listener.close();
  }

  /** How many tunnel connections it carries now. */
  get carrying(): number {
    return this.sessions.size;
  }

  /** The rules bound to this tunnel; open streams keep going, new ones see the new set. */
  setRules(rules: ExitRule[]): void {
    const wanted = new Map(rules.map((rule) => [rule.id, rule]));
    for (const id of this.rules.keys()) if (!wanted.has(id)) this.rules.delete(id);
    for (const rule of rules) {
      const existing = this.rules.get(rule.id);
      if (existing) {
        existing.rule = rule;
        existing.picker.update(rule.targets, rule.strategy, rule.weights, rule.tiers ?? null);
      } else {
        const picker = new TargetPicker(rule.targets, rule.strategy, rule.weights, () => null, rule.tiers ?? null);
        this.rules.set(rule.id, { rule, picker });
      }
    }
  }

  /** Says why the tunnel cannot be served (its port could not be bound). */
  fail(why: string): void {
    this.report({ state: 'down', error: why });
  }

  close(): Promise<void> {
    for (const session of this.sessions) session.destroy();
    for (const socket of this.pending.values()) socket.destroy();
    return new Promise((resolve) => (this.listener.listening ? this.listener.close(() => resolve()) : resolve()));
  }

  private report(change: Partial<TunnelView>): void {
    this.view = { ...this.view, ...change };
    this.onView(this.view);
  }

  private refuse(why: string): void {
    this.report({ error: `${why} (${new Date().toISOString()})` });
  }

  /** Ends a connection or stream whose handler failed, noting it on the tunnel (the fault is counted). */
  private dropped(opened: { destroy(): void }, error: unknown): void {
    opened.destroy();
    this.refuse(`dropped a connection that failed: ${(error as Error)?.message ?? String(error)}`);
  }

  /**
   * The port's HTTP server for transport ws: a WebSocket upgrade is answered and the entry's TLS read from inside it
   * by a TLSSocket of the exit's own (the TLS server's settings); plain requests get a 404.
   */
  private webSocketListener(): NetServer {
    const { cert, key } = this.config;
    const context = createSecureContext({ cert, key, minVersion: MIN_TLS });
    const http = createHttpServer(
      { headersTimeout: HANDSHAKE_TIMEOUT_MS, requestTimeout: HANDSHAKE_TIMEOUT_MS, maxHeaderSize: 8192 },
      notFound,
    );
    http.maxConnections = MAX_CONNECTIONS;
    http.on('connection', (socket: Socket) => this.admit(socket, false));
    http.on('clientError', (_error, socket: Duplex) => socket.destroy());
    http.on(
      'upgrade',
      contained(
        'tunnel_exit',
        (request: IncomingMessage, socket: Socket, head: Buffer) => {
          const from = `${socket.remoteAddress ?? 'a peer that left'} (a WebSocket)`;
          const carrier = acceptWebSocket(request, socket, head);
          if (!carrier) return this.refuse(`refused a request from ${from} that was no WebSocket upgrade`);
          carrier.on('error', () => carrier.destroy());
          const tls = new TLSSocket(carrier, {
            isServer: true,
            secureContext: context,
            requestCert: true,
            rejectUnauthorized: false,
            ALPNProtocols: ALPN,
            handshakeTimeout: HANDSHAKE_TIMEOUT_MS,
          } as ConstructorParameters<typeof TLSSocket>[1]);
          let secured = false;
          tls.on('error', (error) => {
            if (!secured) this.refuse(`a TLS handshake from ${from} failed: ${error.message}`);
            tls.destroy();
          });
          tls.once('secure', () => {
            secured = true;
            this.pending.delete(peerKey(socket));
            // What a TLS server does for the sockets it makes (onServerSocketSecure): HTTP/2 waits for it.
            (tls as { secureConnecting?: boolean }).secureConnecting = false;
            this.accept(tls, from);
          });
        },
        (error, _request, socket) => this.dropped(socket as Socket, error),
      ),
    );
    return http;
  }

  /** Lets a new connection start its handshake, within MAX_PENDING (and PENDING_PER_SOURCE, when `perSource`). */
  private admit(socket: Socket, perSource: boolean): void {
    const source = sourceOf(socket.remoteAddress ?? '');
    let fromSource = 0;
    if (perSource)
      for (const other of this.pending.values()) if (sourceOf(other.remoteAddress ?? '') === source) fromSource += 1;
    if (fromSource >= PENDING_PER_SOURCE) return void socket.destroy();
    if (this.pending.size >= MAX_PENDING) this.pending.values().next().value!.destroy();
    const key = peerKey(socket);
    this.pending.set(key, socket);
    socket.once('close', () => this.pending.get(key) === socket && this.pending.delete(key));
  }

  private accept(socket: TLSSocket, from: string): void {
    socket.on('error', () => socket.destroy());
    const refusal = peerRefusal(socket, this.config.peer_pin);
    if (refusal) {
      socket.destroy();
      return this.refuse(`refused a peer from ${from}: ${refusal}`);
    }
    const session = performServerHandshake(socket, { settings: h2Settings, maxSessionMemory: SESSION_MEMORY_MB });
    this.sessions.add(session);
    if (this.sessions.size > MAX_SESSIONS) [...this.sessions][0]!.destroy();
    try {
      session.setLocalWindowSize(SESSION_WINDOW);
    } catch {
      // a session that died at once: its close event reports it
    }
    this.report({ state: 'up', error: null });
    session.on('error', (error) => this.refuse(`the session from ${from} failed: ${error.message}`));
    session.on(
      'stream',
      contained(
        'tunnel_exit',
        (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => this.stream(stream, headers, from),
        (error, stream) => this.dropped(stream, error),
      ),
    );
    session.on('close', () => {
      this.sessions.delete(session);
      if (this.sessions.size === 0)
        this.report({ state: 'down', error: this.view.error ?? `the session from ${from} closed` });
    });
  }

  private stream(stream: ServerHttp2Stream, headers: IncomingHttpHeaders, from: string): void {
    stream.on('error', () => stream.destroy());
    if (headers[':method'] === 'POST' && headers[':path'] === PROBE_PATH) return this.probe(stream);
    const asked = parseStreamPath(headers[':path']);
    const bound = asked ? this.rules.get(asked.ruleId) : undefined;
    if (
      headers[':method'] !== 'POST' ||
      !asked ||
      !bound ||
      !bound.rule.enabled ||
      !carries(bound.rule.protocol, asked.kind)
    ) {
      const what = `${String(headers[':method'])} ${String(headers[':path'] ?? headers[':authority'])}`.slice(0, 80);
      this.refuse(`refused a stream from ${from} for ${JSON.stringify(what)}: not an enabled rule of this tunnel`);
      return respond(stream, 403, true);
    }
    // The entry's word for who the client is: hashed for source_hash, nothing more, and only if it is an address.
    const claimed = headers[CLIENT_HEADER];
    const client = typeof claimed === 'string' && isIP(claimed) ? claimed : '';
    const policy = policyFor(this.policy, bound.rule.local_targets, bound.rule.source_address ?? null);
    if (asked.kind === 'tcp') {
      dialTargets(bound.picker, policy)(
        (upstream) => {
          if (stream.destroyed) return void upstream.destroy();
          respond(stream, 200, false);
          splice(stream, upstream);
        },
        () => respond(stream, 502, true),
        client,
      );
      return;
    }
    const framer = new Framer(stream);
    const session = datagramsTo(bound.picker, policy)(
      (reply) => void framer.send(reply),
      () => stream.end(),
      client,
    );
    if (!session) return respond(stream, 502, true);
    respond(stream, 200, false);
    const deframer = new Deframer();
    stream.on(
      'data',
      contained(
        'tunnel_exit',
        (chunk: Buffer) => deframer.push(chunk, (datagram) => session.send(datagram)),
        (error) => this.dropped(stream, error),
      ),
    );
    // The entry ends a UDP session's stream when the session expires: end ours too.
    stream.on('end', () => stream.end());
    stream.on('close', () => session.close());
  }

  /** Answers a probe: how long a connect to the probe target took (PROBE_PATH says how). */
  private probe(stream: ServerHttp2Stream): void {
    const session = stream.session;
    const started = performance.now();
    const last = session && this.probing.get(session);
    if (!session || last === Infinity || (last !== undefined && started - last < PROBE_SPACING_MS))
      return respond(stream, 429, true);
    const dial = this.probeDial();
    if (!dial) return respond(stream, 204, true);
    this.probing.set(session, Infinity);
    dialTargets(dial.picker, dial.policy)(
      (upstream) => {
        // Closed as a client would that has nothing to say: a FIN, what the target sends read and dropped, and a
        // reset only if it does not close in turn (a reset at once would be an error in many a target's log).
        upstream.resume();
        upstream.end();
        const reset = setTimeout(() => upstream.destroy(), PROBE_LINGER_MS);
        upstream.once('close', () => clearTimeout(reset));
        upstream.on('error', () => upstream.destroy());
        this.probing.set(session, started);
        const micros = Math.round((performance.now() - started) * 1000);
        if (stream.destroyed || stream.headersSent) return;
        try {
          stream.respond({ ':status': 200, [PROBE_HEADER]: String(micros) }, { endStream: true });
        } catch {
          stream.destroy();
        }
      },
      () => {
        this.probing.set(session, started);
        respond(stream, 502, true);
      },
      '',
    );
  }

  /**
   * What a probe dials: the tunnel's probe target, or the first target of the first enabled rule that carries TCP, as
   * that rule would dial it (from its source address, held off what it is held off), on a picker of its own so that
   * probes leave the rule's turns and counts alone.
   */
  private probeDial(): { picker: TargetPicker; policy: DialPolicy } | null {
    const named = this.config.probe_target ? parseTarget(this.config.probe_target) : null;
    if (named)
      return {
        picker: new TargetPicker([named], 'failover'),
        policy: policyFor(this.policy, this.config.local_targets),
      };
    for (const { rule } of this.rules.values()) {
      if (!rule.enabled || !carries(rule.protocol, 'tcp') || rule.targets.length === 0) continue;
      return {
        picker: new TargetPicker([rule.targets[0]!], 'failover'),
        policy: policyFor(this.policy, rule.local_targets, rule.source_address ?? null),
      };
    }
    return null;
  }
}

function respond(stream: ServerHttp2Stream, status: number, end: boolean): void {
  if (stream.destroyed || stream.headersSent) return;
  try {
    stream.respond({ ':status': status }, { endStream: end });
  } catch {
    stream.destroy();
  }
}
