// End to end with real processes on loopback: the master in-process, the agent as a child
// process from source, echo servers as targets.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { nodeOf, startAgent, stopAgent, udpRoundTrip } from './agents.ts';
import { call, node, rule, startMaster } from './helpers.ts';
import { freePort, probe, tcpEcho, tcpRoundTrip, udpEcho, until } from './net.ts';

async function echoServers(t: TestContext): Promise<{ tcp: number; udp: number }> {
  return { tcp: await tcpEcho(t), udp: await udpEcho(t) };
}

test(
  'a rule created through the API forwards real TCP and UDP traffic on the node, and the ' +
    'bytes reach the dashboard',
  async (t) => {
    const m = await startMaster(t, { localTargets: true });
    await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { agent_report_interval_seconds: 1 } });
    const echo = await echoServers(t);
    const n = await node(m, 'edge');
    const stateDir = mkdtempSync(join(tmpdir(), 'portplane-agent-'));
    startAgent(t, m.url, n.agent_token, { stateDir });
    const online = await until('the node to come online', async () => {
      const current = await nodeOf(m, n.id);
      return current.status === 'online' && current;
    });
    assert.equal(online.agent_version, '0.1.0');
    assert.ok(online.last_seen_at);

    const tcpPort = await freePort();
    const udpPort = await freePort();
    const tcpRule = (await rule(m, { node_id: n.id, listen_port: tcpPort, targets: [`127.0.0.1:${echo.tcp}`] })).body;
    const udpRule = (
      await rule(m, { node_id: n.id, listen_port: udpPort, protocol: 'udp', targets: [`127.0.0.1:${echo.udp}`] })
    ).body;
    const synced = await call(m.url, 'POST', `/api/rules/${tcpRule.id}/sync`, { token: m.admin });
    assert.equal(synced.status, 200, JSON.stringify(synced.body));
    assert.equal(synced.body.sync.state, 'applied');
    assert.ok(synced.body.sync.applied_at);
    const batch = await call(m.url, 'POST', '/api/rules/batch-sync', {
      token: m.admin,
      body: { ids: [tcpRule.id, udpRule.id] },
    });
    assert.deepEqual(batch.body.results, [
      { id: tcpRule.id, outcome: 'applied' },
      { id: udpRule.id, outcome: 'applied' },
    ]);

    const payload = Buffer.alloc(256 * 1024, 42);
    assert.ok((await tcpRoundTrip(tcpPort, payload)).equals(payload));
    assert.deepEqual(await udpRoundTrip(udpPort, ['one', 'two', 'three']), ['one', 'three', 'two']);

    const counted = await until('the traffic to be reported', async () => {
      const tcp = (await call(m.url, 'GET', `/api/rules/${tcpRule.id}`, { token: m.admin })).body.traffic;
      const udp = (await call(m.url, 'GET', `/api/rules/${udpRule.id}`, { token: m.admin })).body.traffic;
      return (
        tcp.bytes_in === payload.length &&
        tcp.bytes_out === payload.length &&
        udp.bytes_in === 11 &&
        udp.bytes_out === 11 && { tcp, udp }
      );
    });
    assert.deepEqual(counted.tcp, { bytes_in: payload.length, bytes_out: payload.length, refused: 0 });
    const series = (
      await call(
        m.url,
        'GET',
        `/api/dashboard/traffic?step=60&from=${new Date(Date.now() - 600_000).toISOString()}` +
          `&to=${new Date(Date.now() + 120_000).toISOString()}`,
        { token: m.admin },
      )
    ).body;
    const sum = series.points.reduce((acc: number, p: { bytes_in: number }) => acc + p.bytes_in, 0);
    assert.equal(sum, payload.length + 11, "the buckets add up to the rules' totals, which are the bytes that crossed");
    assert.deepEqual((await nodeOf(m, n.id)).traffic, {
      bytes_in: payload.length + 11,
      bytes_out: payload.length + 11,
    });
  },
);

test("a port in use on the node is a failed sync with the node's own error", async (t) => {
  const m = await startMaster(t, { localTargets: true });
  const echo = await echoServers(t);
  const n = await node(m, 'edge');
  startAgent(t, m.url, n.agent_token);
  await until('online', async () => (await nodeOf(m, n.id)).status === 'online');
  const blocker = createServer().listen(0, '127.0.0.1');
  await once(blocker, 'listening');
  t.after(() => blocker.close());
  const taken = (blocker.address() as AddressInfo).port;
  const created = (await rule(m, { node_id: n.id, listen_port: taken, targets: [`127.0.0.1:${echo.tcp}`] })).body;
  const answer = await call(m.url, 'POST', `/api/rules/${created.id}/sync`, { token: m.admin });
  assert.equal(answer.status, 502, JSON.stringify(answer.body));
  assert.equal(answer.body.code, 'bad_gateway');
  assert.equal(answer.body.rule.sync.state, 'failed');
  assert.equal(answer.body.rule.sync.error.code, 'port_in_use');
  assert.match(answer.body.detail, /already in use/);
});

test(
  'forwarding survives the master going away; the agent reconnects when it returns; deleting ' +
    'the rule closes the port',
  async (t) => {
    const first = await startMaster(t, { localTargets: true });
    const port = Number(new URL(first.url).port);
    const echo = await echoServers(t);
    const n = await node(first, 'edge');
    const stateDir = mkdtempSync(join(tmpdir(), 'portplane-agent-'));
    const agent = startAgent(t, first.url, n.agent_token, { stateDir });
    await until('online', async () => (await nodeOf(first, n.id)).status === 'online');
    const listen = await freePort();
    const created = (await rule(first, { node_id: n.id, listen_port: listen, targets: [`127.0.0.1:${echo.tcp}`] }))
      .body;
    assert.equal((await call(first.url, 'POST', `/api/rules/${created.id}/sync`, { token: first.admin })).status, 200);

    await first.close();
    assert.equal((await tcpRoundTrip(listen, Buffer.from('still here'))).toString(), 'still here');

    // The agent restarts while the master is down: it forwards from its saved config.
    assert.equal(await stopAgent(agent), 0);
    const again = startAgent(t, first.url, n.agent_token, { stateDir });
    await until(
      'the restarted agent to listen',
      async () => (await tcpRoundTrip(listen, Buffer.from('x')).catch(() => Buffer.alloc(0))).toString() === 'x',
    );

    const second = await startMaster(t, { dataDir: first.dataDir, port });
    await until('the agent to reconnect', async () => (await nodeOf(second, n.id)).status === 'online', 20_000);
    assert.equal((await call(second.url, 'DELETE', `/api/rules/${created.id}`, { token: second.admin })).status, 204);
    await until('the port to close', async () => (await probe(listen)) === 'ECONNREFUSED');
    assert.equal(await stopAgent(again), 0);
    const offline = await until('the master to notice the agent left', async () => {
      const current = await nodeOf(second, n.id);
      return current.status === 'offline' && current;
    });
    assert.equal(offline.status_detail, 'the agent link closed');
  },
);

test('a wrong agent token is refused and recorded on the node', async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const forged = n.agent_token.replace(/_[A-Za-z0-9_-]{43}$/, `_${'A'.repeat(43)}`);
  startAgent(t, m.url, forged);
  const refused = await until('the refusal to be recorded', async () => {
    const current = await nodeOf(m, n.id);
    return current.status_detail?.startsWith('auth_failed') && current;
  });
  assert.equal(refused.status, 'new');
});

test('an agent whose saved state is damaged sets it aside, says so, and rebuilds it from the master', async (t) => {
  const m = await startMaster(t, { localTargets: true });
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { agent_report_interval_seconds: 1 } });
  const echo = await echoServers(t);
  const n = await node(m, 'edge');
  const port = await freePort();
  const made = (await rule(m, { node_id: n.id, listen_port: port, targets: [`127.0.0.1:${echo.tcp}`] })).body;
  const stateDir = mkdtempSync(join(tmpdir(), 'portplane-agent-'));
  writeFileSync(join(stateDir, 'config.json'), '{"version": 3, "rules": "all of them"');
  writeFileSync(join(stateDir, 'traffic.json'), '{"stream": 5, "seq": -1}');
  writeFileSync(join(stateDir, 'pins.json'), '[1, 2, 3]');
  const agent = startAgent(t, m.url, n.agent_token, { stateDir });
  await until('the node to come online', async () => (await nodeOf(m, n.id)).status === 'online');
  const payload = Buffer.alloc(64 * 1024, 7);
  assert.ok((await until('the rule to forward', () => tcpRoundTrip(port, payload).catch(() => null)))!.equals(payload));
  await until('the bytes reported', async () => {
    const traffic = (await call(m.url, 'GET', `/api/rules/${made.id}`, { token: m.admin })).body.traffic;
    return traffic.bytes_in === payload.length && traffic.bytes_out === payload.length;
  });
  const warned = agent.output
    .join('')
    .split('\n')
    .filter((line) => line.includes('a saved file was damaged'));
  assert.deepEqual(warned.map((line) => (JSON.parse(line) as { file: string }).file.split('/').pop()).sort(), [
    'config.json',
    'traffic.json',
  ]);
  assert.ok(
    readdirSync(stateDir).some((name) => name.startsWith('config.json.damaged-')),
    'kept aside, not deleted',
  );
  assert.deepEqual(JSON.parse(readFileSync(join(stateDir, 'config.json'), 'utf8')).rules[0].id, made.id, 'rebuilt');
});
