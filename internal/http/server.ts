// The HTTP(S) server's lifecycle: time-outs so a slow client cannot hold it, TLS 1.2+ with
// modern AEAD ciphers when it has a certificate (swappable without a restart), and a
// graceful close that stops accepting, lets in-flight requests finish, then ends stragglers.

import { createServer, type IncomingMessage, type Server, type ServerOptions, type ServerResponse } from 'node:http';
import { createServer as createTlsServer, type Server as TlsServer } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { sourceOf } from '../schema/net.ts';
import { OldestFirst } from './oldest-first.ts';

/**
 * Connections that have not yet carried an authenticated request (or become an agent's link) are held apart, so that
 * strangers cannot take the room of those who proved who they are: one source address (an IPv6 host by its /64) may
 * hold UNPROVEN_PER_SOURCE of them (past it, new ones from there are closed at once), and all sources together
 * UNPROVEN_IN_TOTAL (past it, the one that came longest ago is closed for the new one: a client that sends its
 * request within milliseconds gets in whatever idle connections others hold). Proven connections count against
 * neither. Scripts and consoles use a few connections; a load test, tens.
 */
export const UNPROVEN_PER_SOURCE = 512;
export const UNPROVEN_IN_TOTAL = 4096;

/** A connection that has carried no authenticated request yet, counted against its source and in the total. */
interface Stranger {
  socket: Socket;
  source: string;
  /** Proven, or closed: no longer counted. */
  gone: boolean;
  /** Over TLS, the key its TLS socket finds it by until the handshake is done (see `listen`). */
  peer: string | null;
  /** Takes it out of its server's count. */
  prove: (stranger: Stranger) => void;
}

/** Where a connection's socket (its TCP socket, and the TLS socket over it) keeps what it is counted as. */
const STRANGER = Symbol('stranger');
type Counted = Socket & { [STRANGER]?: Stranger };

/** Says that `socket` carried an authenticated request: it no longer counts as a stranger's (see UNPROVEN_IN_TOTAL). */
export function proven(socket: Socket): void {
  const stranger = (socket as Counted)[STRANGER];
  stranger?.prove(stranger);
}

/**
 * How long an idle keep-alive connection is said to stay open (Keep-Alive: timeout=5), and how much longer it is
 * kept: a client's pool drops a connection at about the time said, but a client whose event loop was busy elsewhere
 * learns late, and sends its next request on a connection a server closed a moment before: that request fails with
 * a socket error (a POST, which no client retries, included). Node keeps one second past what it says; ten make a
 * server that never closes what a client may still believe open, TLS or not, unless the client lags by that much.
 */
export const KEEP_ALIVE_ADVERTISED_MS = 5_000;
export const KEEP_ALIVE_GRACE_MS = 10_000;

/** TLS 1.3's suites, then TLS 1.2 with ECDHE and AEAD only (Mozilla's "intermediate"). */
const CIPHERS = [
  'TLS_AES_128_GCM_SHA256',
  'TLS_AES_256_GCM_SHA384',
  'TLS_CHACHA20_POLY1305_SHA256',
  'ECDHE-ECDSA-AES128-GCM-SHA256',
  'ECDHE-RSA-AES128-GCM-SHA256',
  'ECDHE-ECDSA-AES256-GCM-SHA384',
  'ECDHE-RSA-AES256-GCM-SHA384',
  'ECDHE-ECDSA-CHACHA20-POLY1305',
  'ECDHE-RSA-CHACHA20-POLY1305',
].join(':');

export interface TlsCredentials {
  cert: string;
  key: string;
}

function secureContext(tls: TlsCredentials) {
  return { cert: tls.cert, key: tls.key, minVersion: 'TLSv1.2' as const, ciphers: CIPHERS, honorCipherOrder: true };
}

export interface Listening {
  server: Server | TlsServer;
  url: string;
  /** Serves new connections with another certificate (open ones keep theirs). */
  setCredentials(tls: TlsCredentials): void;
  /** Stops accepting and resolves once every connection has ended (forced after `graceMs`). */
  close(graceMs?: number): Promise<void>;
}

/** How long a connection may go without a byte either way while the server is not working on its answer. */
export const IDLE_TIMEOUT_MS = 60_000;

export async function listen(
  handler: (req: IncomingMessage, res: ServerResponse) => Promise<void>,
  host: string,
  port: number,
  tls: TlsCredentials | null = null,
  idleTimeoutMs = IDLE_TIMEOUT_MS,
): Promise<Listening> {
  const options: ServerOptions = {
    headersTimeout: 10_000,
    requestTimeout: 30_000,
    keepAliveTimeout: KEEP_ALIVE_ADVERTISED_MS,
    keepAliveTimeoutBuffer: KEEP_ALIVE_GRACE_MS,
    maxHeaderSize: 16 * 1024,
  };
  // The idle timeout is for a client gone quiet (one that stops reading an answer); a request's own upload is bounded
  // by requestTimeout. While the handler works on an answer (an import of a million rules on a slow disk, a write
  // waiting its turn), the silence is the server's: cut at the idle timeout, the client lost the answer of work done.
  // Once the answer is out, Node times the connection itself (keep-alive), and a closed one needs nothing.
  const serve = (req: IncomingMessage, res: ServerResponse) => {
    const socket = req.socket;
    socket.setTimeout(0);
    void handler(req, res).finally(() => {
      if (!socket.destroyed && !res.writableFinished) socket.setTimeout(idleTimeoutMs);
    });
  };
  // A TLS handshake gets what a request's headers get (Node's default is two minutes).
  const server = tls
    ? createTlsServer({ ...options, ...secureContext(tls), handshakeTimeout: options.headersTimeout }, serve)
    : createServer(options, serve);
  server.timeout = idleTimeoutMs;
  server.maxRequestsPerSocket = 10_000;
  const strangers = new OldestFirst<Stranger>();
  let counted = 0;
  const perSource = new Map<string, number>();
  // Over TLS, what the TLS socket's connection is counted as, by peer address and port (which both sockets share).
  const handshaking = tls ? new Map<string, Stranger>() : null;
  const peerOf = (socket: Socket) => `${socket.remoteAddress}|${socket.remotePort}`;
  const prove = (stranger: Stranger) => {
    if (stranger.peer !== null) handshaking!.delete(stranger.peer);
    if (stranger.gone) return;
    stranger.gone = true;
    counted--;
    const left = (perSource.get(stranger.source) ?? 1) - 1;
    if (left > 0) perSource.set(stranger.source, left);
    else perSource.delete(stranger.source);
  };
  server.on('connection', (socket: Socket) => {
    const source = sourceOf(socket.remoteAddress ?? '');
    const open = perSource.get(source) ?? 0;
    if (open >= UNPROVEN_PER_SOURCE) return void socket.destroy();
    if (counted >= UNPROVEN_IN_TOTAL) {
      const longest = strangers.first()!;
      longest.socket.destroy();
      prove(longest);
    }
    const stranger: Stranger = { socket, source, gone: false, peer: handshaking ? peerOf(socket) : null, prove };
    counted++;
    strangers.push(stranger, counted);
    perSource.set(source, open + 1);
    if (stranger.peer !== null) handshaking!.set(stranger.peer, stranger);
    (socket as Counted)[STRANGER] = stranger;
    socket.once('close', () => prove(stranger));
  });
  // Over TLS, a request's socket is the TLS one, over the TCP socket counted above.
  server.on('secureConnection', (socket: Socket) => {
    const stranger = handshaking!.get(peerOf(socket));
    if (!stranger) return;
    handshaking!.delete(stranger.peer!);
    (socket as Counted)[STRANGER] = stranger;
  });
  // An upgraded connection is an agent's link, counted by the links themselves (one per node).
  server.prependListener('upgrade', (_req: IncomingMessage, socket: Socket) => proven(socket));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const shownHost = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    server,
    url: `${tls ? 'https' : 'http'}://${shownHost}:${address.port}`,
    setCredentials(next) {
      if (!('setSecureContext' in server)) throw new Error('this server speaks plain HTTP');
      server.setSecureContext(secureContext(next));
    },
    close(graceMs = 10_000) {
      return new Promise<void>((resolve) => {
        // Past the grace, every connection ends: HTTP's, and strangers' still in a TLS handshake, which HTTP does not
        // know of (they held a close for the handshake's time-out).
        const force = setTimeout(() => {
          server.closeAllConnections();
          for (const stranger of strangers) stranger.socket.destroy();
        }, graceMs);
        server.close(() => {
          clearTimeout(force);
          resolve();
        });
        server.closeIdleConnections();
      });
    },
  };
}
