// Loopback helpers for tests that move real bytes: free ports, echo servers, round trips,
// and waiting for something that happens in another process.

import { createSocket } from 'node:dgram';
import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import type { TestContext } from 'node:test';

/** Polls `probe` until it returns something truthy; throws after `ms`. */
export async function until<T>(
  what: string,
  probe: () => T | undefined | false | Promise<T | undefined | false>,
  ms = 15_000,
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/**
 * A port free now below the ephemeral range (which starts at 32768), for a server started later. A port from the
 * ephemeral range could meanwhile be taken by any process's outgoing connection or listener on port 0: under CI's
 * load it was, and a forwarder's listen failed. Nor is it one a test binds by its number: the README's and the
 * guide's rules (25565, 30000-30499, 31000-31099, 35000-35099, run as pasted by test/e2e/readme.test.ts, whose agent
 * once failed to listen on a port another test had picked) and test/e2e/replication.test.ts's (20000-21000).
 */
export async function freePort(): Promise<number> {
  return freeSpan(1);
}

/** Where free ports are picked (see freePort), and the one port there a test binds by its number. */
const PICKED_FROM = 22_000;
const PICKED_TO = 30_000;
const BOUND_BY_NUMBER = 25_565;

/** The first of `count` consecutive ports free now below the ephemeral range (see freePort). */
export async function freeSpan(count: number): Promise<number> {
  for (;;) {
    const first = PICKED_FROM + Math.floor(Math.random() * (PICKED_TO - PICKED_FROM - count));
    if (first <= BOUND_BY_NUMBER && BOUND_BY_NUMBER < first + count) continue;
    const held: ReturnType<typeof createServer>[] = [];
    try {
      for (let port = first; port < first + count; port++) {
        const server = createServer().listen(port, '127.0.0.1');
        held.push(server);
        await once(server, 'listening');
      }
      return first;
    } catch {
      // one of them is taken: another start
    } finally {
      await Promise.all(held.map((server) => new Promise((resolve) => server.close(resolve))));
    }
  }
}

/**
 * A port nothing listens on, TCP or UDP, and that nothing binding port 0 can take (below the ephemeral range): a
 * target that refuses for the whole test, where a closed port of the ephemeral range may meanwhile become some
 * process's UDP socket and answer.
 */
export async function closedPort(): Promise<number> {
  for (;;) {
    const port = await freePort();
    const socket = createSocket('udp4');
    const bound = await new Promise<boolean>((resolve) => {
      socket.once('error', () => resolve(false));
      socket.bind(port, '127.0.0.1', () => resolve(true));
    });
    try {
      socket.close();
    } catch {
      // A socket whose bind failed may be closed already.
    }
    if (bound) return port;
  }
}

/** A TCP echo server on loopback that honours half-close; returns its port. */
export async function tcpEcho(t: TestContext, host = '127.0.0.1'): Promise<number> {
  // A relay that hangs up on it may reset the connection: that ends the connection, not the test.
  const server = createServer({ allowHalfOpen: true }, (socket) => {
    socket.on('error', () => socket.destroy());
    socket.pipe(socket);
  }).listen(0, host);
  await once(server, 'listening');
  t.after(() => server.close());
  return (server.address() as AddressInfo).port;
}

/** A UDP echo server on loopback; returns its port. */
export async function udpEcho(t: TestContext): Promise<number> {
  const socket = createSocket('udp4');
  socket.on('message', (message, from) => socket.send(message, from.port, from.address));
  socket.bind(0, '127.0.0.1');
  await once(socket, 'listening');
  t.after(() => socket.close());
  return socket.address().port;
}

/** Sends `payload`, half-closes, and collects everything until the far side ends. */
export async function tcpRoundTrip(port: number, payload: Buffer, host = '127.0.0.1'): Promise<Buffer> {
  const socket = connect({ host, port, allowHalfOpen: true });
  const chunks: Buffer[] = [];
  socket.on('data', (chunk) => chunks.push(chunk));
  await once(socket, 'connect');
  socket.end(payload);
  await once(socket, 'end');
  socket.destroy();
  return Buffer.concat(chunks);
}

/** Connects, writes `payload`, and collects what comes back until the far side closes the socket or resets it. */
export async function untilClosed(port: number, payload: string, host = '127.0.0.1'): Promise<Buffer> {
  const socket = connect({ host, port });
  socket.on('error', () => undefined);
  const chunks: Buffer[] = [];
  socket.on('data', (chunk) => chunks.push(chunk));
  await once(socket, 'connect');
  socket.write(payload);
  // Not once(): a reset's error comes before the close, and would reject it.
  await new Promise((resolve) => socket.on('close', resolve));
  return Buffer.concat(chunks);
}

/** 'open', or the error code of a failed connect. */
export function probe(port: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    socket.on('connect', () => {
      socket.destroy();
      resolve('open');
    });
    socket.on('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? 'error'));
  });
}

/** A target on `host` that counts the bytes it receives, from the first on, by when they came. */
export async function countingSink(t: TestContext, host = '127.0.0.1') {
  let first = 0;
  const arrivals: [number, number][] = [];
  const server = createServer((socket) => {
    socket.on('data', (chunk) => {
      first ||= performance.now();
      arrivals.push([performance.now() - first, chunk.length]);
    });
    socket.on('error', () => undefined);
  }).listen(0, host);
  await once(server, 'listening');
  t.after(() => server.close());
  return {
    target: `${host}:${(server.address() as AddressInfo).port}`,
    /** Bytes arrived within the first `ms` since counting started over. */
    within: (ms: number) => arrivals.filter(([at]) => at < ms).reduce((sum, [, bytes]) => sum + bytes, 0),
    /** Bytes arrived since counting started over. */
    arrived: () => arrivals.reduce((sum, [, bytes]) => sum + bytes, 0),
    restart: () => {
      first = 0;
      arrivals.length = 0;
    },
  };
}

/** A connection to `host`:`port` that writes `chunkBytes` at a time as fast as it is let; destroyed by the caller. */
export function flood(host: string, port: number, chunkBytes = 64 * 1024): Socket {
  const chunk = Buffer.alloc(chunkBytes, 1);
  const socket = connect({ host, port });
  socket.on('error', () => undefined);
  const push = () => {
    while (!socket.destroyed && socket.write(chunk));
  };
  socket.on('connect', push).on('drain', push);
  return socket;
}

/**
 * A TCP proxy on loopback to `port`: each client-to-server chunk goes through `tamper` and is kept in `forwarded`; the
 * way back can be held (its bytes wait, in order) and released. What a test puts between two ends it watches or spoils.
 */
export async function tcpProxy(
  t: TestContext,
  port: number,
  tamper: (chunk: Buffer, index: number) => Buffer = (chunk) => chunk,
) {
  const forwarded: Buffer[] = [];
  let held = false;
  const waiting: { client: Socket; chunk: Buffer }[] = [];
  const server = createServer((client) => {
    const upstream = connect({ host: '127.0.0.1', port });
    let index = 0;
    client.on('data', (chunk) => {
      const sent = tamper(chunk, index++);
      forwarded.push(sent);
      upstream.write(sent);
    });
    upstream.on('data', (chunk: Buffer) => (held ? waiting.push({ client, chunk }) : client.write(chunk)));
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
  }).listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => server.close());
  return {
    port: (server.address() as AddressInfo).port,
    forwarded,
    hold: () => void (held = true),
    release: () => {
      held = false;
      for (const { client, chunk } of waiting.splice(0)) if (!client.destroyed) client.write(chunk);
    },
  };
}

/**
 * A link impaired in user space, as this kernel has no netem: a TCP proxy to `host`:`port` (listening on `listen`)
 * that holds each chunk, both ways, `delay` ms (changed with `setDelay`; order kept), and with `stall` a chunk in
 * `every` for `ms` more (TCP loses nothing: a loss shows as such a stall, longer than a PING's round), counts what it
 * carried, and can be cut (`cut`: every connection ended and new ones refused until `mend`).
 */
export async function impairedLink(
  t: TestContext,
  port: number,
  delay = 0,
  { host = '127.0.0.1', listen = '127.0.0.1', stall = { every: 0, ms: 0 } } = {},
) {
  let delayMs = delay;
  let chunks = 0;
  let bytes = 0;
  let cut = false;
  const open = new Set<Socket>();
  const delayed = (to: Socket) => {
    const queue: { at: number; chunk: Buffer }[] = [];
    let timer: NodeJS.Timeout | undefined;
    const drain = () => {
      timer = undefined;
      const now = performance.now();
      while (queue.length > 0 && queue[0]!.at <= now) to.write(queue.shift()!.chunk);
      if (queue.length > 0) timer = setTimeout(drain, queue[0]!.at - now);
    };
    to.on('close', () => clearTimeout(timer));
    return (chunk: Buffer) => {
      bytes += chunk.length;
      if (to.destroyed) return;
      const stalled = stall.every > 0 && ++chunks % stall.every === 0 ? stall.ms : 0;
      const at = Math.max(performance.now() + delayMs + stalled, queue.at(-1)?.at ?? 0);
      queue.push({ at, chunk });
      timer ??= setTimeout(drain, at - performance.now());
    };
  };
  const server = createServer((client) => {
    if (cut) return void client.destroy();
    const upstream = connect({ host, port });
    for (const socket of [client, upstream]) open.add(socket);
    client.on('data', delayed(upstream));
    upstream.on('data', delayed(client));
    const end = () => {
      for (const socket of [client, upstream]) {
        socket.destroy();
        open.delete(socket);
      }
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
  }).listen(0, listen);
  await once(server, 'listening');
  t.after(() => {
    for (const socket of open) socket.destroy();
    server.close();
  });
  return {
    port: (server.address() as AddressInfo).port,
    setDelay: (ms: number) => void (delayMs = ms),
    get bytes() {
      return bytes;
    },
    cut: () => {
      cut = true;
      for (const socket of open) socket.destroy();
    },
    mend: () => void (cut = false),
  };
}
