// The HTTP(S) server's lifecycle: time-outs so a slow client cannot hold it, TLS 1.2+ with
// modern AEAD ciphers when it has a certificate (swappable without a restart), and a
// graceful close that stops accepting, lets in-flight requests finish, then ends stragglers.

import { createServer, type IncomingMessage, type Server, type ServerOptions, type ServerResponse } from 'node:http';
import { createServer as createTlsServer, type Server as TlsServer } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { sourceOf } from '../schema/net.ts';

/**
 * Connections one source address (an IPv6 host by its /64) may hold open at once, agent links aside (a fleet behind
 * one NAT address holds one each): past it, new ones from there are closed at once, so one source cannot take every
 * descriptor the master has. Scripts and consoles use a few; a load test, tens.
 */
export const CONNECTIONS_PER_SOURCE = 512;

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

export async function listen(
  handler: (req: IncomingMessage, res: ServerResponse) => Promise<void>,
  host: string,
  port: number,
  tls: TlsCredentials | null = null,
): Promise<Listening> {
  const options: ServerOptions = {
    headersTimeout: 10_000,
    requestTimeout: 30_000,
    keepAliveTimeout: 5_000,
    maxHeaderSize: 16 * 1024,
  };
  const serve = (req: IncomingMessage, res: ServerResponse) => void handler(req, res);
  const server = tls ? createTlsServer({ ...options, ...secureContext(tls) }, serve) : createServer(options, serve);
  server.timeout = 60_000;
  server.maxRequestsPerSocket = 10_000;
  const perSource = new Map<string, number>();
  // By peer address and port, which the TCP socket and a TLS socket over it share.
  const upgraded = new Set<string>();
  const peer = (socket: Socket) => `${socket.remoteAddress}|${socket.remotePort}`;
  const release = (source: string) => {
    const left = (perSource.get(source) ?? 1) - 1;
    if (left > 0) perSource.set(source, left);
    else perSource.delete(source);
  };
  server.on('connection', (socket: Socket) => {
    const source = sourceOf(socket.remoteAddress ?? '');
    const open = perSource.get(source) ?? 0;
    if (open >= CONNECTIONS_PER_SOURCE) return void socket.destroy();
    perSource.set(source, open + 1);
    const key = peer(socket);
    socket.once('close', () => upgraded.delete(key) || release(source));
  });
  // An upgraded connection is an agent's link, counted by the links themselves (one per node).
  server.prependListener('upgrade', (_req: IncomingMessage, socket: Socket) => {
    const key = peer(socket);
    if (upgraded.has(key)) return;
    upgraded.add(key);
    release(sourceOf(socket.remoteAddress ?? ''));
  });
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
        const force = setTimeout(() => server.closeAllConnections(), graceMs);
        server.close(() => {
          clearTimeout(force);
          resolve();
        });
        server.closeIdleConnections();
      });
    },
  };
}
