// Node vitals: what a real agent says of its node (CPU, load, memory, interfaces, its own version and uptime) shows on
// the node, in its history, in the metrics and on event streams; what a hostile one says is held to the same bounds.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { test } from 'node:test';
import { maintain } from '../internal/service/maintenance.ts';
import { send } from '../internal/agentlink/wire.ts';
import { parseNetDev } from '../internal/agent/vitals.ts';
import { oneThreadOnly } from '../internal/forward/relay-threads.ts';
import { agentInProcess, nodeOf } from './agents.ts';
import { call, mintToken, node, startMaster } from './helpers.ts';
import { link, type RawLink } from './rawlink.ts';
import { until } from './net.ts';
import { openEvents } from './sse.ts';

test("a node's vitals appear within two report intervals, with its history, metrics and live events", async (t) => {
  const m = await startMaster(t);
  const interval = 1;
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { agent_report_interval_seconds: interval } });
  const n = await node(m, 'edge');
  const watcher = await openEvents(m.url, await mintToken(m, ['nodes:read']), `?types=node.vitals&node_id=${n.id}`);
  t.after(() => watcher.close());
  await watcher.next((e) => e.event === 'ready');
  await agentInProcess(t, m.url, n.agent_token, { extraArgs: ['--relay-workers', '2'] });
  const linkedAt = await until('the node to come online', async () => {
    const seen = await nodeOf(m, n.id);
    return seen.status === 'online' && Date.now();
  });

  // The second report has a network rate: it is counted from the first.
  const vitals = await until(
    'vitals with rates',
    async () => {
      const seen = (await nodeOf(m, n.id)).vitals;
      return seen?.network.rx_bytes_per_second !== null && seen;
    },
    2 * interval * 1000 + 1000,
  );
  assert.ok(Date.now() - linkedAt <= 2 * interval * 1000 + 1000);
  assert.equal(vitals.load.length, 3);
  assert.ok(vitals.memory.total_bytes > 0 && vitals.memory.available_bytes <= vitals.memory.total_bytes);
  assert.ok(vitals.cpu_percent === null || (vitals.cpu_percent >= 0 && vitals.cpu_percent <= 100));
  assert.ok(
    vitals.interfaces.some((i: { name: string }) => i.name === 'lo'),
    'the loopback interface is counted',
  );
  assert.equal(vitals.agent.version, (await nodeOf(m, n.id)).agent_version);
  assert.ok(vitals.agent.uptime_seconds >= 0);
  // The agent's relay threads, all running where the runtime has reusePort.
  const unsupported = oneThreadOnly();
  assert.deepEqual(vitals.agent.relay, { threads: unsupported ? 1 : 2, asked: 2, reason: unsupported });
  assert.ok(vitals.network.rx_bytes_per_second >= 0);

  const history = await call(m.url, 'GET', `/api/nodes/${n.id}/vitals`, { token: m.admin });
  assert.equal(history.status, 200);
  assert.equal(history.body.step, 60);
  assert.ok(history.body.points.length >= 1);
  assert.ok(history.body.points.at(-1).memory_used_bytes > 0);

  // Six gauges from one read of every node's vitals per scrape.
  const { vitals: store } = m.app.store;
  const latest = store.latest.bind(store);
  let reads = 0;
  store.latest = () => (reads++, latest());
  const metrics = await call(m.url, 'GET', '/api/metrics', { token: m.admin });
  store.latest = latest;
  assert.equal(reads, 1);
  assert.match(metrics.body, new RegExp(`portplane_node_memory_total_bytes\\{node_id="${n.id}",node="edge"\\} \\d+`));
  assert.match(metrics.body, /portplane_node_network_bytes\{node_id="\d+",node="edge",interface="lo",direction="rx"\}/);

  const live = await watcher.next((e) => e.event === 'node.vitals');
  assert.deepEqual(live.data.node_ids, [n.id]);
  assert.equal(live.id, null, 'live events move no resume point');
  assert.deepEqual(Object.keys(live.data.data).sort(), Object.keys(vitals).sort());
});

test('hostile vitals are bounded: out-of-range values end the link, a flood is a write a second', async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const raw = (await link(m, n.agent_token)) as RawLink;
  await raw.next('config');
  const good = {
    type: 'vitals',
    cpu_percent: 12.345,
    load: [0.5, 0.25, 0.125],
    memory_total_bytes: 1000,
    memory_available_bytes: 400,
    interfaces: [{ name: 'eth0', rx_bytes: 10, tx_bytes: 20 }],
    uptime_seconds: 5,
  };
  const writes = () => m.app.store.db.changeStatementsRun;
  const before = writes();
  for (let i = 0; i < 200; i++) send(raw.socket, { ...good, uptime_seconds: i });
  const shown = await until('the vitals kept', async () => (await nodeOf(m, n.id)).vitals);
  assert.equal(shown.cpu_percent, 12.3);
  assert.deepEqual(shown.network, { rx_bytes_per_second: null, tx_bytes_per_second: null });
  // Messages are taken in order: once the master answers a ping, it has taken all 200.
  send(raw.socket, { type: 'ping' });
  await raw.next('pong');
  await m.app.store.committed();
  assert.ok(writes() - before <= 10, `200 vitals in a burst made ${writes() - before} changes`);
  assert.equal((await nodeOf(m, n.id)).vitals.agent.uptime_seconds, 0, 'the ones after the first were ignored');

  send(raw.socket, { ...good, interfaces: [{ name: 'eth0; rm -rf /', rx_bytes: 1, tx_bytes: 1 }] });
  await once(raw.socket, 'close');
  // (A node whose agent broke the protocol waits before it may link again: another node tries the next.)
  const other = await node(m, 'other');
  const again = (await link(m, other.agent_token)) as RawLink;
  await again.next('config');
  send(again.socket, { ...good, cpu_percent: 100.5 });
  await once(again.socket, 'close');
  assert.equal((await nodeOf(m, other.id)).vitals, null, 'nothing of a refused message was kept');
  assert.equal((await nodeOf(m, n.id)).vitals.cpu_percent, 12.3, 'nothing of a refused message was kept');
  // The history is kept as traffic is: past traffic_retention_days, the maintenance prunes it (last: the admin's
  // session does not outlive the clock moved so far).
  const history = () => m.app.store.vitals.series(n.id, 0, 2 ** 40, 60).length;
  assert.equal(history(), 1);
  m.advance((m.app.settings.get('traffic_retention_days') + 1) * 86_400_000);
  await maintain(m.app);
  await m.app.store.committed();
  assert.equal(history(), 0);
});

test("an agent's word on its relay threads is bounded like the rest of its vitals", async (t) => {
  const m = await startMaster(t);
  const vitals = {
    ...{ type: 'vitals', cpu_percent: 1, load: [0, 0, 0], memory_total_bytes: 1000, memory_available_bytes: 400 },
    ...{ interfaces: [], uptime_seconds: 5 },
  };
  // A node whose agent broke the protocol waits before it may link again: each case has a node of its own.
  for (const [i, relay] of [
    { threads: 0, asked: 1, reason: null },
    { threads: 65, asked: 1, reason: null },
    { threads: 2, asked: 2, reason: 'x'.repeat(301) },
    { threads: 2, asked: 2, reason: null, extra: true },
  ].entries()) {
    const hostile = await node(m, `hostile-${i}`);
    const raw = (await link(m, hostile.agent_token)) as RawLink;
    await raw.next('config');
    send(raw.socket, { ...vitals, relay });
    await once(raw.socket, 'close');
    assert.equal((await nodeOf(m, hostile.id)).vitals, null, 'nothing of a refused message was kept');
  }
  const n = await node(m, 'edge');
  const raw = (await link(m, n.agent_token)) as RawLink;
  await raw.next('config');
  send(raw.socket, { ...vitals, relay: { threads: 1, asked: 4, reason: 'Node.js 20.20.2 has no reusePort' } });
  const shown = await until('the vitals kept', async () => (await nodeOf(m, n.id)).vitals);
  assert.deepEqual(shown.agent.relay, { threads: 1, asked: 4, reason: 'Node.js 20.20.2 has no reusePort' });
});

test('/proc/net/dev is read per interface, and a line that is not one is skipped', () => {
  // As the kernel writes it, with its columns' spacing shortened.
  const text = [
    'Inter-|   Receive                                                |  Transmit',
    ' face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier',
    '    lo:  123456     100    0    0    0     0          0         0   123456     100    0    0    0     0       0 0',
    '  eth0: 987654321  5000    0    0    0     0          0         0 12345678    4000    0    0    0     0       0 0',
    'garbage line',
    '  bad name!: 1 2 3 4 5 6 7 8 9 10',
  ].join('\n');
  assert.deepEqual(parseNetDev(text), [
    { name: 'lo', rx_bytes: 123456, tx_bytes: 123456 },
    { name: 'eth0', rx_bytes: 987654321, tx_bytes: 12345678 },
  ]);
});
