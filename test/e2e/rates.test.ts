// Rates measured in real time through the relay: a bandwidth_limit holds over seconds, shared by the connections of
// a rule, however many open, and follows the limit as it is raised and lifted.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import { test, type TestContext } from 'node:test';
import { Forwarder } from '../../internal/forward/forwarder.ts';
import { onlineNode } from '../agents.ts';
import { forwardRule } from '../forwarding.ts';
import { call, rule, startMaster } from '../helpers.ts';
import { countingSink, flood, freePort, tcpEcho } from '../net.ts';

/** A relay in this process from a free port to `target`, its bandwidth_limit `rate` (and `limit` to change it). */
async function limitedRelay(t: TestContext, target: string, rate: number) {
  const port = await freePort();
  const forwarder = new Forwarder('127.0.0.1', { allowLocalTargets: true });
  t.after(() => forwarder.close());
  const limit = (to: number | null) => forwarder.apply([forwardRule(1, port, [target], { bandwidth_limit: to })]);
  await limit(rate);
  return { port, limit };
}

/** A client flooding `port` on loopback, ended after `t`. */
function flooding(t: TestContext, port: number, chunkBytes?: number): Socket {
  const socket = flood('127.0.0.1', port, chunkBytes);
  t.after(() => socket.destroy());
  return socket;
}

const TURNS =
  'connections opening while a bandwidth_limit is in use wait their turn: together they never pass the rate';
test(TURNS, async (t) => {
  const sink = await countingSink(t);
  const rate = 64 * 1024;
  const { port } = await limitedRelay(t, sink.target, rate);
  const open = async () => {
    const socket = connect({ host: '127.0.0.1', port });
    socket.on('error', () => undefined);
    t.after(() => socket.destroy());
    await once(socket, 'connect');
    return socket;
  };
  // One connection keeps the rule at its rate...
  await once(flooding(t, port), 'connect');
  await new Promise((resolve) => setTimeout(resolve, 1000));
  // ...when fifty more open and each sends at once.
  const late = await Promise.all(Array.from({ length: 50 }, open));
  const before = sink.arrived();
  for (const socket of late) socket.write(Buffer.alloc(32 * 1024));
  await new Promise((resolve) => setTimeout(resolve, 2000));
  const moved = sink.arrived() - before;
  // Two seconds at the rate, and a burst (16 KiB); a read of each newcomer past the rate would be 800 KiB more.
  t.diagnostic(`${(moved / 1024).toFixed(0)} KiB in 2 s at ${rate / 1024} KiB/s`);
  assert.ok(moved <= 2 * rate + 16 * 1024 + 16 * 1024, `${moved} bytes in 2 s`);
});

const AFTER_BURST =
  'after a burst of 100 connections through a bandwidth_limit, all closed, a new client gets its share within a ' +
  'second plus one burst, and never more than the burst over the limit';
test(AFTER_BURST, async (t) => {
  const echo = await tcpEcho(t);
  const rate = 16 * 1024;
  const { port } = await limitedRelay(t, `127.0.0.1:${echo}`, rate);
  /** A client that sends as fast as it is let and counts what comes back, from the first byte on, by when. */
  const client = () => {
    const socket = flooding(t, port);
    const arrivals: [number, number][] = [];
    const started = performance.now();
    socket.on('data', (data) => arrivals.push([performance.now() - started, data.length]));
    return { socket, arrivals };
  };
  const burst = Array.from({ length: 100 }, client);
  await new Promise((resolve) => setTimeout(resolve, 3000));
  for (const { socket } of burst) socket.destroy();
  const fresh = client();
  await new Promise((resolve) => setTimeout(resolve, 5000));
  const first = fresh.arrivals[0]?.[0];
  const got = fresh.arrivals.reduce((sum, [, bytes]) => sum + bytes, 0);
  t.diagnostic(`the new client's first bytes after ${first?.toFixed(0)} ms; ${got} bytes in 5 s at ${rate} B/s`);
  // Its turn comes within a round of every socket waiting (one burst's time: the 16 KiB minimum at this rate) after
  // its bytes went in, each way.
  assert.ok(first !== undefined && first < 2 * 1000 + 500, `first bytes after ${first} ms`);
  assert.ok(got >= 2 * rate, `${got} bytes in 5 s: the burst's sockets kept the rate`);
  assert.ok(got <= 16 * 1024 + 5 * rate, `${got} bytes in 5 s: past the limit by more than a burst`);
});

const RAISED = 'sockets waiting their turn go on when the bandwidth_limit is raised, and at once when it is lifted';
test(RAISED, async (t) => {
  const sink = await countingSink(t);
  const { port, limit: limited } = await limitedRelay(t, sink.target, 2048);
  // Twenty clients pushing: all but a few wait their turn at 2 KiB/s.
  for (let i = 0; i < 20; i++) flooding(t, port, 16 * 1024);
  const moved = async (ms: number) => {
    const before = sink.arrived();
    await new Promise((resolve) => setTimeout(resolve, ms));
    return sink.arrived() - before;
  };
  // From the first byte on: at most the burst (16 KiB) and the rate (the bucket fills from the apply, a moment before).
  const slow = await moved(4000);
  await limited(1024 * 1024);
  await moved(300);
  const raised = await moved(1000);
  await limited(null);
  const lifted = await moved(1000);
  t.diagnostic(`${slow} bytes in 4 s at 2 KiB/s, ${raised} in a second at 1 MiB/s, ${lifted} unlimited`);
  assert.ok(slow <= 16 * 1024 + 4.5 * 2048, `${slow} bytes in 4 s at 2 KiB/s`);
  assert.ok(raised >= 512 * 1024 && raised <= 1024 * 1024 + 128 * 1024, `${raised} bytes in a second at 1 MiB/s`);
  assert.ok(lifted > 4 * 1024 * 1024, `${lifted} bytes in a second unlimited: the waiting sockets were let go`);
});

test('a 1 MiB/s bandwidth_limit holds within 10% over 5 s, shared by several connections', async (t) => {
  const m = await startMaster(t, { localTargets: true });
  const n = await onlineNode(t, m);
  // The target counts what arrives, from the first byte on.
  const sink = await countingSink(t);
  const port = await freePort();
  const made = await rule(m, {
    node_id: n.id,
    listen_port: port,
    targets: [sink.target],
    bandwidth_limit: 1024 * 1024,
  });
  assert.equal((await call(m.url, 'POST', `/api/rules/${made.body.id}/sync`, { token: m.admin })).status, 200);

  const senders = Array.from({ length: 3 }, () => flood('127.0.0.1', port));
  await new Promise((resolve) => setTimeout(resolve, 5600));
  for (const socket of senders) socket.destroy();
  const inFive = sink.within(5000);
  const expected = 5 * 1024 * 1024;
  t.diagnostic(`${(inFive / 2 ** 20).toFixed(2)} MiB arrived in the first 5 s`);
  assert.ok(
    Math.abs(inFive - expected) <= expected * 0.1,
    `${(inFive / 2 ** 20).toFixed(2)} MiB in 5 s, where 1 MiB/s makes 5 MiB`,
  );
});
