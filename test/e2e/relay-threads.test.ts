// The relay on several threads: every thread listens on each port (reusePort), the kernel spreads the clients over
// them, and each rule control holds exactly across them: a cap of N admits N, a bandwidth holds, the counters sum to
// the bytes that crossed, a spent quota ends every thread's connections, the health checks' verdicts steer each.

import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { describe, test, type TestContext } from 'node:test';
import type { Worker } from 'node:worker_threads';
import { Forwarder } from '../../internal/forward/forwarder.ts';
import { oneThreadOnly } from '../../internal/forward/relay-threads.ts';
import { tableOf } from '../../internal/kernel/ruleset.ts';
import type { ForwardRule } from '../../internal/domain/rules.ts';
import type { TunnelEnd } from '../../internal/domain/link.ts';
import { selfSigned } from '../../internal/tls/certificate.ts';
import { pinOf } from '../../internal/tls/pin.ts';
import { forwardRule as rule } from '../forwarding.ts';
import { closedPort, countingSink, flood, freePort, tcpEcho, udpEcho, until } from '../net.ts';

const THREADS = 3;

/** A forwarder relaying on THREADS threads, closed after the test. */
function threaded(t: TestContext): Forwarder {
  const forwarder = new Forwarder('127.0.0.1', { allowLocalTargets: true }, 'relay', tableOf(0), THREADS);
  t.after(() => forwarder.close());
  return forwarder;
}

/** Applies `rules`, each to be applied. */
async function applied(forwarder: Forwarder, rules: ForwardRule[]): Promise<void> {
  for (const result of await forwarder.apply(rules)) assert.equal(result.state, 'applied', JSON.stringify(result));
}

/** How many sockets listen on TCP `port` (ss): one a thread. */
function listeners(port: number): number {
  return execFileSync('ss', ['-Htln', `sport = :${port}`], { encoding: 'utf8' })
    .trim()
    .split('\n').length;
}

/** A connection through `port` that sends one byte: whether the echo came back (carried) or it was closed. */
function attempt(port: number): Promise<{ socket: Socket; carried: boolean }> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    socket.on('error', () => undefined);
    socket.once('connect', () => socket.write('x'));
    socket.once('data', () => resolve({ socket, carried: true }));
    socket.once('close', () => resolve({ socket, carried: false }));
  });
}

/** Everything drained from `forwarder` for rule `id` until `done` says it is all. */
async function drained(
  forwarder: Forwarder,
  done: (sum: { bytes_in: number; bytes_out: number; refused: number }) => boolean,
) {
  const sum = { bytes_in: 0, bytes_out: 0, refused: 0 };
  await until('the bytes to be counted', () => {
    for (const counted of forwarder.drain()) {
      sum.bytes_in += counted.bytes_in;
      sum.bytes_out += counted.bytes_out;
      sum.refused += counted.refused ?? 0;
    }
    return done(sum);
  });
  return sum;
}

/**
 * A listening socket made as an agent older than the relay's threads made it (no SO_REUSEPORT), in another process
 * that hands it over as the supervisor does and exits.
 */
async function handedOver(port: number): Promise<object> {
  const script =
    "const s = require('node:net').createServer().listen({ host: '127.0.0.1', port: Number(process.argv.at(-1)), " +
    "exclusive: true }, () => process.send({ type: 'listener' }, s._handle, () => process.exit(0)));";
  const child = spawn(process.execPath, ['-e', script, String(port)], {
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  const [, handle] = (await once(child, 'message')) as [unknown, object];
  return handle;
}

describe('the relay on several threads', { skip: oneThreadOnly() ?? false, concurrency: 3 }, () => {
  test('a cap of N connections spread over the threads admits exactly N, and counts the rest refused', async (t) => {
    const echo = await tcpEcho(t);
    const port = await freePort();
    const forwarder = threaded(t);
    await applied(forwarder, [rule(1, port, [`127.0.0.1:${echo}`], { max_connections: 10 })]);
    assert.equal(listeners(port), THREADS, 'each thread listens on the port');
    const attempts = await Promise.all(Array.from({ length: 60 }, () => attempt(port)));
    t.after(() => attempts.forEach(({ socket }) => socket.destroy()));
    assert.equal(attempts.filter(({ carried }) => carried).length, 10);
    const counted = await drained(forwarder, (sum) => sum.refused >= 50);
    assert.equal(counted.refused, 50);
    // The places come back as connections end, whichever thread held them.
    attempts.forEach(({ socket }) => socket.destroy());
    await until('the places to be given back', async () => (await forwarder.openByRule()).size === 0);
    const again = await Promise.all(Array.from({ length: 10 }, () => attempt(port)));
    t.after(() => again.forEach(({ socket }) => socket.destroy()));
    assert.equal(again.filter(({ carried }) => carried).length, 10);
  });

  test(
    'a relay thread that ends leaves the port to the others, gives back the places its connections held, and the ' +
      'vitals count it and say why',
    async (t) => {
      const echo = await tcpEcho(t);
      const port = await freePort();
      const ended: (Error | null)[] = [];
      // Every client comes from 127.0.0.1: the per-source cap is as full as the rule's.
      const limits = { allowLocalTargets: true, maxConnectionsPerSource: 30 };
      const forwarder = new Forwarder('127.0.0.1', limits, 'relay', tableOf(0), THREADS, (error) => ended.push(error));
      t.after(() => forwarder.close());
      await applied(forwarder, [rule(1, port, [`127.0.0.1:${echo}`], { max_connections: 30 })]);
      assert.equal(listeners(port), THREADS);
      const held = await Promise.all(Array.from({ length: 30 }, () => attempt(port)));
      t.after(() => held.forEach(({ socket }) => socket.destroy()));
      assert.equal(held.filter(({ carried }) => carried).length, 30);
      assert.equal((await attempt(port)).carried, false, 'full');
      // A thread's every callback is contained, so nothing but its end from outside makes it end.
      const pool = (forwarder as unknown as { threads: { threads: Set<{ worker: Worker }> } }).threads;
      await [...pool.threads][0]!.worker.terminate();
      await until('the thread to be counted out', () => ended.length === 1);
      assert.equal(listeners(port), THREADS - 1, 'its socket closed with it');
      const { threads, asked, reason } = forwarder.relayThreads;
      assert.deepEqual({ threads, asked }, { threads: THREADS - 1, asked: THREADS });
      assert.match(reason ?? '', /a relay thread ended/);
      // Its clients' connections closed with it (the kernel spread the 30 over every thread), their places with them.
      const lost = await until('its clients cut, and the places they held given back', async () => {
        const cut = held.filter(({ socket }) => socket.closed).length;
        return cut > 0 && ((await forwarder.openByRule()).get(1) ?? 0) === 30 - cut && cut;
      });
      const again = await Promise.all(Array.from({ length: lost + 5 }, () => attempt(port)));
      t.after(() => again.forEach(({ socket }) => socket.destroy()));
      assert.equal(again.filter(({ carried }) => carried).length, lost, 'the places it held, to the others');
      // A change is told to the threads left, and applied: nothing waits for the one that ended.
      await applied(forwarder, [rule(1, port, [`127.0.0.1:${echo}`], { max_connections: 50 })]);
    },
  );

  test('the counters sum to the bytes that crossed every thread, TCP and UDP', async (t) => {
    const [tcpTarget, udpTarget] = [await tcpEcho(t), await udpEcho(t)];
    const [tcpPort, udpPort] = [await freePort(), await freePort()];
    const forwarder = threaded(t);
    await applied(forwarder, [
      rule(1, tcpPort, [`127.0.0.1:${tcpTarget}`]),
      rule(2, udpPort, [`127.0.0.1:${udpTarget}`], { protocol: 'udp' }),
    ]);
    let sent = 0;
    await Promise.all(
      Array.from({ length: 24 }, async (_, i) => {
        const payload = Buffer.alloc(1000 + i * 777, i);
        sent += payload.length;
        const socket = connect({ host: '127.0.0.1', port: tcpPort, allowHalfOpen: true });
        let back = 0;
        socket.on('data', (chunk: Buffer) => (back += chunk.length));
        await once(socket, 'connect');
        socket.end(payload);
        await once(socket, 'end');
        socket.destroy();
        assert.equal(back, payload.length);
      }),
    );
    let datagrams = 0;
    await Promise.all(
      Array.from({ length: 12 }, async (_, i) => {
        const socket = createSocket('udp4');
        socket.connect(udpPort, '127.0.0.1');
        await once(socket, 'connect');
        const datagram = Buffer.alloc(100 + i, i);
        socket.send(datagram);
        await once(socket, 'message');
        datagrams += datagram.length;
        socket.close();
      }),
    );
    const sums = new Map<number, { bytes_in: number; bytes_out: number }>();
    await until('every byte to be counted', () => {
      for (const { id, bytes_in, bytes_out } of forwarder.drain()) {
        const sum = sums.get(id) ?? { bytes_in: 0, bytes_out: 0 };
        sums.set(id, { bytes_in: sum.bytes_in + bytes_in, bytes_out: sum.bytes_out + bytes_out });
      }
      return sums.get(1)?.bytes_out === sent && sums.get(2)?.bytes_out === datagrams;
    });
    // Counted once each: what is drained later adds nothing.
    await new Promise((resolve) => setTimeout(resolve, 600));
    for (const { id, bytes_in, bytes_out } of forwarder.drain()) {
      const sum = sums.get(id)!;
      sums.set(id, { bytes_in: sum.bytes_in + bytes_in, bytes_out: sum.bytes_out + bytes_out });
    }
    assert.deepEqual(sums.get(1), { bytes_in: sent, bytes_out: sent });
    assert.deepEqual(sums.get(2), { bytes_in: datagrams, bytes_out: datagrams });
  });

  test('a bandwidth limit holds within 10% over connections spread across the threads', async (t) => {
    const sink = await countingSink(t);
    const port = await freePort();
    const forwarder = threaded(t);
    const rate = 2 * 1024 * 1024;
    await applied(forwarder, [rule(1, port, [sink.target], { bandwidth_limit: rate })]);
    const floods = Array.from({ length: 9 }, () => flood('127.0.0.1', port));
    t.after(() => floods.forEach((socket) => socket.destroy()));
    // Past the first burst, over three seconds.
    await new Promise((resolve) => setTimeout(resolve, 500));
    sink.restart();
    await until('some bytes to arrive', () => sink.arrived() > 0);
    await new Promise((resolve) => setTimeout(resolve, 3000));
    const perSecond = sink.within(3000) / 3;
    assert.ok(Math.abs(perSecond - rate) <= rate * 0.1, `${perSecond} bytes a second, limit ${rate}`);
  });

  test("a quota spent through one thread ends every thread's connections", async (t) => {
    const echo = await tcpEcho(t);
    const port = await freePort();
    const forwarder = threaded(t);
    const quota = { bytes: 64 * 1024, used: 0, direction: 'both', period_start: new Date().toISOString() } as const;
    await applied(forwarder, [rule(1, port, [`127.0.0.1:${echo}`], { quota })]);
    const idle = await Promise.all(Array.from({ length: 12 }, () => attempt(port)));
    t.after(() => idle.forEach(({ socket }) => socket.destroy()));
    assert.ok(idle.every(({ carried }) => carried));
    const spender = flood('127.0.0.1', port);
    t.after(() => spender.destroy());
    await until('every idle connection ended', () => idle.every(({ socket }) => socket.closed), 5000);
    assert.equal((await attempt(port)).carried, false, 'a new client is refused');
  });

  test('a port handed over by an agent older than the threads is relayed on one thread, and said so', async (t) => {
    const echo = await tcpEcho(t);
    const [port, fresh] = [await freePort(), await freePort()];
    const forwarder = threaded(t);
    forwarder.inherit(new Map([[`tcp:${port}`, (await handedOver(port)) as { close(): unknown }]]));
    await applied(forwarder, [rule(1, port, [`127.0.0.1:${echo}`]), rule(2, fresh, [`127.0.0.1:${echo}`])]);
    assert.equal(listeners(port), 1, 'the handed-over socket alone');
    assert.equal(listeners(fresh), THREADS);
    const attempts = await Promise.all(Array.from({ length: 10 }, () => attempt(port)));
    t.after(() => attempts.forEach(({ socket }) => socket.destroy()));
    assert.ok(attempts.every(({ carried }) => carried));
    assert.deepEqual(forwarder.relayThreads, {
      threads: THREADS,
      asked: THREADS,
      reason:
        "1 ports handed over by an agent older than the relay's threads are relayed on one thread until their " +
        'rules are opened anew',
    });
    // Opened anew on another port, the rule is every thread's again.
    await applied(forwarder, [rule(1, await freePort(), [`127.0.0.1:${echo}`]), rule(2, fresh, [`127.0.0.1:${echo}`])]);
    assert.deepEqual(forwarder.relayThreads, { threads: THREADS, asked: THREADS, reason: null });
  });

  test('a port another program listens on, with SO_REUSEPORT too, is port_in_use rather than shared', async (t) => {
    const echo = await tcpEcho(t);
    const [taken, beside, udpTaken] = [await freePort(), await freePort(), await freePort()];
    const listen = async (port: number, host: string) => {
      const other = createServer().listen({ port, host, reusePort: true });
      await once(other, 'listening');
      t.after(() => other.close());
    };
    await listen(taken, '127.0.0.1');
    // On another address of the node: a listener on 127.0.0.1 shares nothing with it.
    await listen(beside, '127.0.0.2');
    const datagrams = createSocket({ type: 'udp4', reusePort: true });
    datagrams.bind(udpTaken, '0.0.0.0');
    await once(datagrams, 'listening');
    t.after(() => datagrams.close());
    const forwarder = threaded(t);
    const results = await forwarder.apply([
      rule(1, taken, [`127.0.0.1:${echo}`]),
      rule(2, beside, [`127.0.0.1:${echo}`]),
      rule(3, udpTaken, [`127.0.0.1:${echo}`], { protocol: 'udp' }),
    ]);
    assert.deepEqual(
      results.map(({ state, error }) => [state, error?.code ?? null]),
      [
        ['failed', 'port_in_use'],
        ['applied', null],
        ['failed', 'port_in_use'],
      ],
    );
    assert.equal(listeners(beside), 1 + THREADS);
  });

  test("a rule moved into a tunnel leaves the threads, and back out is every thread's again", async (t) => {
    // Each target answers with its name: straight to `direct`, through the tunnel's exit to `tunnelled`.
    const named = async (name: string) => {
      const server = createServer((socket) => socket.end(name)).listen(0, '127.0.0.1');
      await once(server, 'listening');
      t.after(() => server.close());
      return `127.0.0.1:${(server.address() as AddressInfo).port}`;
    };
    const [direct, tunnelled] = [await named('direct'), await named('tunnelled')];
    const [port, tunnelPort] = [await freePort(), await freePort()];
    const [exitKeys, entryKeys] = [selfSigned([], { commonName: 'exit' }), selfSigned([], { commonName: 'entry' })];
    const ends: Omit<TunnelEnd, 'role' | 'host' | 'cert' | 'key' | 'peer_pin'> = {
      ...{ id: 7, port: tunnelPort, rules: [], transport: 'tls', via: null, local_targets: true, exits: null },
      ...{ exit_strategy: 'failover', switching: null, probe_target: null },
    };
    const exit = new Forwarder('127.0.0.1', { allowLocalTargets: true });
    t.after(() => exit.close());
    const exitRule = { ...rule(1, port, [tunnelled]), listen_port_end: null };
    await exit.apply(
      [],
      [{ ...ends, role: 'exit', host: null, ...exitKeys, peer_pin: pinOf(entryKeys.cert), rules: [exitRule] }],
    );
    const entry = threaded(t);
    const entryEnd = {
      ...ends,
      role: 'entry',
      host: '127.0.0.1',
      ...entryKeys,
      peer_pin: pinOf(exitKeys.cert),
    } as const;
    const answers = async () => {
      const got = await Promise.all(
        Array.from({ length: 20 }, async () => {
          const socket = connect({ host: '127.0.0.1', port });
          let text = '';
          socket.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
          await once(socket, 'close');
          return text;
        }),
      );
      return [...new Set(got)];
    };
    await entry.apply([rule(1, port, [direct])], [entryEnd]);
    assert.equal(listeners(port), THREADS);
    assert.deepEqual(await answers(), ['direct']);
    await entry.apply([rule(1, port, [direct], { tunnel_id: 7 })], [entryEnd]);
    await until('the tunnel up', () => entry.tunnelReports().find((r) => r.id === 7)?.state === 'up');
    assert.equal(listeners(port), 1, 'the main thread alone');
    assert.deepEqual(await answers(), ['tunnelled']);
    await entry.apply([rule(1, port, [direct])], [entryEnd]);
    assert.equal(listeners(port), THREADS);
    assert.deepEqual(await answers(), ['direct']);
  });

  test("the health checks' verdicts steer every thread's picks", async (t) => {
    const [down, up] = [await closedPort(), await tcpEcho(t)];
    const port = await freePort();
    const forwarder = threaded(t);
    const check = { interval_seconds: 1, timeout_ms: 500, fall: 1, rise: 10 };
    await applied(forwarder, [
      rule(1, port, [`127.0.0.1:${down}`, `127.0.0.1:${up}`], { strategy: 'failover', health_check: check }),
    ]);
    await until('the first target to be down', () =>
      forwarder.healthReports().some(({ targets }) => targets[0]?.status === 'down'),
    );
    // It listens again, and stays down for ten good checks: no thread sends it a client meanwhile. The checks' own
    // connections send nothing; a client's sends its byte.
    let reached = 0;
    const server = createServer((socket) => {
      socket.on('error', () => undefined);
      socket.once('data', () => {
        reached++;
        socket.destroy();
      });
    }).listen(down, '127.0.0.1');
    await once(server, 'listening');
    t.after(() => server.close());
    assert.equal((server.address() as AddressInfo).port, down);
    const attempts = await Promise.all(Array.from({ length: 30 }, () => attempt(port)));
    t.after(() => attempts.forEach(({ socket }) => socket.destroy()));
    assert.equal(attempts.filter(({ carried }) => carried).length, 30);
    assert.equal(reached, 0);
  });
});
