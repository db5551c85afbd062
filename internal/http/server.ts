// The HTTP(S) server's lifecycle: time-outs so a slow client cannot hold it, TLS 1.2+ with
// modern AEAD ciphers when it has a certificate (swappable without a restart), and a
// graceful close that stops accepting, lets in-flight requests finish, then ends stragglers.

import { createServer, type IncomingMessage, type Server, type ServerOptions, type ServerResponse } from 'node:http';
import { createServer as createTlsServer, type Server as TlsServer } from 'node:https';
import type { AddressInfo } from 'node:net';

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
