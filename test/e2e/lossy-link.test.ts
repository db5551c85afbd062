// An agent linked to its master over a bad network: every byte 300 ms late, stalls as long as
// a lossy link's retransmissions make them, and the link cut now and then. The node comes back
// online each time, forwards throughout, and its traffic is counted exactly once. (This
// kernel has no netem, CONFIG_NET_SCH_NETEM being unset, so the bad network is a proxy in
// user space between the agent and the master; what TCP makes of packet loss is what it does.)

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { test, type TestContext } from 'node:test';
import { nodeOf, startAgent } from '../agents.ts';
import { call, node, rule, startMaster } from '../helpers.ts';
import { freePort, tcpEcho, tcpRoundTrip, until } from '../net.ts';

/** What the bad network does, as long as `bad` is true. */
interface Weather {
  bad: boolean;
  delayMs: number;
  /** Chance that a chunk waits behind a retransmission, and for how long at most. */
  stallChance: number;
  stallMs: number;
  cuts: number;
}

/**
 * One direction of a connection: chunks arrive in order, each no earlier than its time. One queue drained by one
 * timer at a time: a timer per chunk let two chunks due in the same millisecond swap, which TCP never does.
 */
function delayed(from: Socket, to: Socket, weather: Weather): void {
  const queue: { at: number; chunk: Buffer }[] = [];
  let last = 0;
  let timer: NodeJS.Timeout | null = null;
  const drain = () => {
    timer = null;
    while (queue.length > 0 && queue[0]!.at <= Date.now()) {
      const { chunk } = queue.shift()!;
      if (!to.destroyed) to.write(chunk);
    }
    if (queue.length > 0) timer = setTimeout(drain, queue[0]!.at - Date.now());
  };
  from.on('data', (chunk: Buffer) => {
    let at = Date.now();
    if (weather.bad) {
      at += weather.delayMs;
      if (Math.random() < weather.stallChance) at += Math.random() * weather.stallMs;
    }
    last = Math.max(last, at);
    queue.push({ at: last, chunk });
    timer ??= setTimeout(drain, last - Date.now());
  });
}

/** A proxy to `port` on loopback through the weather; its link is cut every few seconds while it is bad. */
async function badNetwork(t: TestContext, port: number, weather: Weather): Promise<number> {
  const open = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connect(port, '127.0.0.1');
    for (const [socket, other] of [
      [client, upstream],
      [upstream, client],
    ] as const) {
      open.add(socket);
      socket.on('error', () => other.destroy());
      socket.on('close', () => {
        open.delete(socket);
        other.destroy();
      });
      delayed(socket, other, weather);
    }
  }).listen(0, '127.0.0.1');
  await once(server, 'listening');
  // Every other tick, not at random: a coin for each left the link uncut through a whole run now and then.
  let ticks = 0;
  const cutter = setInterval(() => {
    if (!weather.bad || ++ticks % 2 === 1) return;
    weather.cuts += 1;
    for (const socket of open) socket.destroy();
  }, 3000);
  t.after(() => {
    clearInterval(cutter);
    for (const socket of open) socket.destroy();
    server.close();
  });
  return (server.address() as AddressInfo).port;
}

test(
  'through a slow, lossy link that is cut now and then, a node comes back online, forwards, ' +
    'and is counted exactly once',
  { timeout: 120_000 },
  async (t) => {
    const m = await startMaster(t, { localTargets: true });
    await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { agent_report_interval_seconds: 1 } });
    const weather: Weather = { bad: true, delayMs: 300, stallChance: 0.3, stallMs: 1500, cuts: 0 };
    const proxy = await badNetwork(t, Number(new URL(m.url).port), weather);
    const edge = await node(m, 'edge');
    const echo = await tcpEcho(t);
    const listen = await freePort();
    const made = (await rule(m, { node_id: edge.id, listen_port: listen, targets: [`127.0.0.1:${echo}`] })).body;
    startAgent(t, `http://127.0.0.1:${proxy}`, edge.agent_token);
    await until(
      'the node online through the bad link',
      async () => (await nodeOf(m, edge.id)).status === 'online',
      30_000,
    );
    await until(
      'the rule forwarding',
      () =>
        tcpRoundTrip(listen, Buffer.from('x')).then(
          () => true,
          () => false,
        ),
      30_000,
    );

    // Traffic while the weather stays bad: each round trip's bytes cross the node both ways.
    let sent = 1;
    let online = 0;
    let looked = 0;
    for (const until = Date.now() + 20_000; Date.now() < until;) {
      const payload = Buffer.alloc(16 * 1024, sent % 251);
      assert.ok((await tcpRoundTrip(listen, payload)).equals(payload), 'the node forwards throughout');
      sent += payload.length;
      looked += 1;
      if ((await nodeOf(m, edge.id)).status === 'online') online += 1;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    assert.ok(weather.cuts >= 2, `the link was cut ${weather.cuts} times`);

    weather.bad = false;
    await until('the node online again', async () => (await nodeOf(m, edge.id)).status === 'online', 60_000);
    const counted = await until(
      'every byte reported',
      async () => {
        const { traffic } = (await call(m.url, 'GET', `/api/rules/${made.id}`, { token: m.admin })).body;
        // Both ways: a report may fall between a round trip's way in and its way back.
        return traffic.bytes_in >= sent && traffic.bytes_out >= sent && traffic;
      },
      60_000,
    );
    // A little while more: a report sent twice across a cut would show now.
    await new Promise((resolve) => setTimeout(resolve, 3000));
    const { traffic } = (await call(m.url, 'GET', `/api/rules/${made.id}`, { token: m.admin })).body;
    assert.deepEqual(traffic, counted, 'counted once');
    assert.deepEqual(traffic, { bytes_in: sent, bytes_out: sent, refused: 0 });
    t.diagnostic(`${weather.cuts} cuts; online at ${online} of ${looked} looks; ${sent} bytes each way, counted once`);
  },
);
