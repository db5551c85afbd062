// Live numbers (GET /api/live): a real agent in this process relays real connections, and what its rules carry now
// (open connections, rates) is what the master answers, the busiest first; a tenant sees their own alone, and an
// agent speaking of another node's rules is not listened to.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import { test } from 'node:test';
import { agentInProcess, nodeOf } from './agents.ts';
import { call, mintToken, newTenant, node, rule, startMaster } from './helpers.ts';
import { freePort, tcpEcho, until } from './net.ts';
import { link as rawLink, type RawLink } from './rawlink.ts';
import { send } from '../internal/agentlink/wire.ts';

async function opened(t: Parameters<typeof tcpEcho>[0], port: number, count: number): Promise<Socket[]> {
  const sockets: Socket[] = [];
  for (let i = 0; i < count; i++) {
    const socket = connect({ host: '127.0.0.1', port });
    socket.on('error', () => undefined);
    await once(socket, 'connect');
    sockets.push(socket);
  }
  t.after(() => sockets.forEach((socket) => socket.destroy()));
  return sockets;
}

test("a rule's open connections and rates are what its agent carries now, the busiest first", async (t) => {
  const m = await startMaster(t, { localTargets: true });
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { agent_report_interval_seconds: 1 } });
  const edge = await node(m, 'edge');
  await agentInProcess(t, m.url, edge.agent_token);
  await until('the node online', async () => (await nodeOf(m, edge.id)).status === 'online');
  const echo = await tcpEcho(t);
  const [busyPort, quietPort] = [await freePort(), await freePort()];
  const busy = (
    await rule(m, { name: 'busy', node_id: edge.id, listen_port: busyPort, targets: [`127.0.0.1:${echo}`] })
  ).body;
  const quiet = (
    await rule(m, { name: 'quiet', node_id: edge.id, listen_port: quietPort, targets: [`127.0.0.1:${echo}`] })
  ).body;
  await until('both rules applied', async () => {
    const listed = await call(m.url, 'GET', `/api/rules?node_id=${edge.id}`, { token: m.admin });
    return listed.body.items.every((r: { sync: { state: string } }) => r.sync.state === 'applied');
  });

  const streams = await opened(t, busyPort, 3);
  await opened(t, quietPort, 1);
  const pump = setInterval(() => streams.forEach((socket) => socket.write(Buffer.alloc(32 * 1024, 1))), 100);
  t.after(() => clearInterval(pump));
  const live = await until('the numbers of both rules', async () => {
    const answer = await call(m.url, 'GET', '/api/live', { token: m.admin });
    const [first, second] = answer.body.rules ?? [];
    return first?.id === busy.id && first.open === 3 && first.rate_in > 0 && second?.open === 1 && answer.body;
  });
  assert.equal(live.rules[1].id, quiet.id, 'the busiest first: the quiet one after');
  assert.equal(live.rules[1].rate_in, 0);
  assert.deepEqual(
    live.nodes.map((n: { id: number; open: number }) => [n.id, n.open]),
    [[edge.id, 4]],
  );
  const elsewhere = await call(m.url, 'GET', `/api/live?node_id=${edge.id + 1}`, { token: m.admin });
  assert.deepEqual([elsewhere.body.rules, elsewhere.body.nodes], [[], []], "another node's: none");
  const onEdge = await call(m.url, 'GET', `/api/live?node_id=${edge.id}`, { token: m.admin });
  assert.equal(onEdge.body.rules.length, 2);
  const byOpen = await call(m.url, 'GET', `/api/live?sort=open&ids=${quiet.id}`, { token: m.admin });
  assert.deepEqual(
    byOpen.body.rules.map((r: { id: number }) => r.id),
    [quiet.id],
  );

  clearInterval(pump);
  streams.forEach((socket) => socket.destroy());
  await until('the busy rule idle', async () => {
    const answer = await call(m.url, 'GET', `/api/live?ids=${busy.id}`, { token: m.admin });
    return answer.body.rules.length === 0;
  });

  // A tenant reads none of it: the rules are the operators'.
  const plan = await call(m.url, 'POST', '/api/plans', { token: m.admin, body: { name: 'p', node_ids: [edge.id] } });
  const tenant = await newTenant(m, 'carol', plan.body.id);
  const theirs = await call(m.url, 'GET', '/api/live', { token: tenant.token });
  assert.deepEqual([theirs.body.rules, theirs.body.nodes], [[], []]);
});

test("an agent's word on another node's rules, or on rules gone, is not taken", async (t) => {
  const m = await startMaster(t, { localTargets: true });
  const [a, b] = [await node(m, 'a'), await node(m, 'b')];
  const others = (await rule(m, { name: 'theirs', node_id: b.id, listen_port: 20001, targets: ['127.0.0.1:9'] })).body;
  const own = (await rule(m, { name: 'ours', node_id: a.id, listen_port: 20002, targets: ['127.0.0.1:9'] })).body;
  const agent = (await rawLink(m, a.agent_token)) as RawLink;
  t.after(() => agent.socket.destroy());
  await agent.next('config');
  send(agent.socket, {
    type: 'live',
    round: 1,
    rules: [
      { id: others.id, open: 1_000_000, rate_in: 1e12, rate_out: 1e12 },
      { id: own.id, open: 2, rate_in: 10, rate_out: 20 },
      { id: 999_999, open: 5, rate_in: 5, rate_out: 5 },
    ],
  });
  const live = await until('its own rule live', async () => {
    const answer = await call(m.url, 'GET', '/api/live', { token: m.admin });
    return answer.body.rules.length > 0 && answer.body;
  });
  assert.deepEqual(live.rules, [{ id: own.id, node_id: a.id, open: 2, rate_in: 10, rate_out: 20 }]);
});

test('the busiest today are the rules and nodes that carried the most bytes since midnight UTC', async (t) => {
  const m = await startMaster(t, { localTargets: true });
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { agent_report_interval_seconds: 1 } });
  const [edge, west] = [await node(m, 'edge'), await node(m, 'west')];
  await agentInProcess(t, m.url, edge.agent_token);
  await until('the node online', async () => (await nodeOf(m, edge.id)).status === 'online');
  const echo = await tcpEcho(t);
  const ports = [await freePort(), await freePort()];
  for (const [i, name] of ['big', 'small'].entries())
    await rule(m, { name, node_id: edge.id, listen_port: ports[i]!, targets: [`127.0.0.1:${echo}`] });
  await until('the rules applied', async () => {
    const listed = await call(m.url, 'GET', `/api/rules?node_id=${edge.id}`, { token: m.admin });
    return listed.body.items.every((r: { sync: { state: string } }) => r.sync.state === 'applied');
  });
  // A tenant's rule on a node whose agent is this test (a tenant's rule reaches no local target to carry bytes to).
  const plan = await call(m.url, 'POST', '/api/plans', {
    token: m.admin,
    body: { name: 'p', node_ids: [west.id], port_ranges: ['20000-20009'] },
  });
  const tenant = await newTenant(m, 'carol', plan.body.id);
  const carols = await call(m.url, 'POST', '/api/rules', {
    token: tenant.token,
    body: { name: 'carols', protocol: 'tcp', node_id: west.id, listen_port: 20000, targets: ['192.0.2.1:80'] },
  });
  assert.equal(carols.status, 201, JSON.stringify(carols.body));
  const westAgent = (await rawLink(m, west.agent_token)) as RawLink;
  t.after(() => westAgent.socket.destroy());
  await westAgent.next('config');
  let seq = 0;
  const report = async (atMs: number, bytesIn: number, bytesOut: number) => {
    const rules = [{ id: carols.body.id, bytes_in: bytesIn, bytes_out: bytesOut }];
    send(westAgent.socket, { type: 'traffic', stream: 's', seq: ++seq, at: Math.floor(atMs / 1000), rules });
    await westAgent.next('traffic_ack');
  };
  await report(m.app.clock.now(), 50_000, 40_000);

  /** Sends `bytes` through the rule on `port` and reads them back. */
  const carry = async (port: number, bytes: number) => {
    const [socket] = await opened(t, port, 1);
    let back = 0;
    socket!.on('data', (chunk: Buffer) => (back += chunk.length));
    socket!.write(Buffer.alloc(bytes, 7));
    await until(`${bytes} bytes back`, () => back === bytes);
    socket!.destroy();
  };
  await carry(ports[0]!, 300_000);
  await carry(ports[1]!, 20_000);
  const busiest = await until('every rule counted', async () => {
    const answer = await call(m.url, 'GET', '/api/dashboard/busiest', { token: m.admin });
    return answer.body.rules?.length === 3 && answer.body.rules[2].bytes_in === 20_000 && answer.body;
  });
  assert.equal(busiest.day, new Date(m.app.clock.now()).toISOString().slice(0, 10));
  assert.deepEqual(
    busiest.rules.map((r: { name: string; bytes_in: number; bytes_out: number }) => [r.name, r.bytes_in, r.bytes_out]),
    [
      ['big', 300_000, 300_000],
      ['carols', 50_000, 40_000],
      ['small', 20_000, 20_000],
    ],
  );
  assert.deepEqual(busiest.nodes, [
    { id: edge.id, name: 'edge', bytes_in: 320_000, bytes_out: 320_000 },
    { id: west.id, name: 'west', bytes_in: 50_000, bytes_out: 40_000 },
  ]);
  const top = await call(m.url, 'GET', '/api/dashboard/busiest?limit=1', { token: m.admin });
  assert.deepEqual(
    top.body.rules.map((r: { name: string }) => r.name),
    ['big'],
  );
  // A tenant: their own rule, and no node (its bytes are every owner's).
  const theirs = await call(m.url, 'GET', '/api/dashboard/busiest', { token: tenant.token });
  assert.deepEqual([theirs.body.rules.map((r: { name: string }) => r.name), theirs.body.nodes], [['carols'], []]);

  // The next day starts from nothing: its first report starts a row again, and one of the day before adds nothing.
  // Tokens of no expiry: a day moved on ends login sessions.
  const operatorToken = await mintToken(m, ['rules:read', 'nodes:read']);
  const minted = await call(m.url, 'POST', '/api/tokens', {
    token: tenant.token,
    body: { name: 'carol', scopes: ['rules:read'] },
  });
  const yesterday = m.app.clock.now();
  m.advance(86_400_000 - (yesterday % 86_400_000) + 1000);
  const fresh = await call(m.url, 'GET', '/api/dashboard/busiest', { token: operatorToken });
  assert.deepEqual([fresh.body.rules, fresh.body.nodes], [[], []]);
  await report(m.app.clock.now(), 10_000, 5_000);
  await report(yesterday, 1_000_000, 1_000_000);
  const next = await call(m.url, 'GET', '/api/dashboard/busiest', { token: minted.body.token });
  assert.deepEqual(
    next.body.rules.map((r: { name: string; bytes_in: number; bytes_out: number }) => [
      r.name,
      r.bytes_in,
      r.bytes_out,
    ]),
    [['carols', 10_000, 5_000]],
  );
});
