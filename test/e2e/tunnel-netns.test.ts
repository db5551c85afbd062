// The tunnel across two "hosts": the entry and exit agents each in a network namespace the
// test makes, joined by a veth pair, with the master in the test's own namespace reached over
// two more. The targets listen on the exit namespace's loopback, so only the exit can reach
// them: whatever arrives there came through the tunnel. Needs root and `ip netns`; skips
// with the reason otherwise (tunnel.test.ts is the loopback variant that always runs).

import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { nodeOf, startAgent, udpRoundTrip } from '../agents.ts';
import { call, node, rule, startMaster } from '../helpers.ts';
import { tcpRoundTrip, until } from '../net.ts';
import { echoIn, namespaces, netnsUnavailable, veth } from '../netns.ts';

const tag = `${process.pid % 100_000}`;
const ENTRY = `pp${tag}e`;
const EXIT = `pp${tag}x`;

/** Two namespaces, each linked to this one, and to each other: 10.213.3.1 (entry) <-> 10.213.3.2 (exit). */
function network(t: TestContext): void {
  namespaces(t, [ENTRY, EXIT]);
  veth(`${ENTRY}a`, null, '10.213.1.1/30', `${ENTRY}b`, ENTRY, '10.213.1.2/30');
  veth(`${EXIT}a`, null, '10.213.2.1/30', `${EXIT}b`, EXIT, '10.213.2.2/30');
  veth(`${ENTRY}t`, ENTRY, '10.213.3.1/30', `${EXIT}t`, EXIT, '10.213.3.2/30');
}

test('across two namespaces, TCP and UDP go entry -> tunnel -> exit -> a target only the exit reaches', async (t) => {
  const reason = netnsUnavailable(`${ENTRY}-probe`);
  if (reason) return t.skip(reason);
  network(t);
  await echoIn(t, EXIT, '127.0.0.1');
  const m = await startMaster(t, { host: '0.0.0.0', insecureHttp: true, localTargets: true });
  const port = new URL(m.url).port;
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { agent_report_interval_seconds: 1 } });
  const entryNode = await node(m, 'entry', { host: '10.213.1.2' });
  const exitNode = await node(m, 'exit', { host: '10.213.3.2' });
  const tunnel = (
    await call(m.url, 'POST', '/api/tunnels', {
      token: m.admin,
      body: { name: 'across', entry_node_id: entryNode.id, exit_node_id: exitNode.id, listen_port: 40100 },
    })
  ).body;
  const inside = (ns: string) => ({
    within: ['ip', 'netns', 'exec', ns],
    listenHost: '0.0.0.0',
    extraArgs: ['--insecure-http'],
  });
  startAgent(t, `http://10.213.1.1:${port}`, entryNode.agent_token, inside(ENTRY));
  startAgent(t, `http://10.213.2.1:${port}`, exitNode.agent_token, inside(EXIT));
  await until('both agents online', async () =>
    (await Promise.all([nodeOf(m, entryNode.id), nodeOf(m, exitNode.id)])).every((n) => n.status === 'online'),
  );
  const through = { node_id: entryNode.id, tunnel_id: tunnel.id };
  const tcp = (await rule(m, { ...through, listen_port: 15001, targets: ['127.0.0.1:7007'] })).body;
  const udp = (await rule(m, { ...through, listen_port: 15002, protocol: 'udp', targets: ['127.0.0.1:7007'] })).body;
  const synced = await call(m.url, 'POST', '/api/rules/batch-sync', {
    token: m.admin,
    body: { ids: [tcp.id, udp.id] },
  });
  assert.deepEqual(synced.body.results, [
    { id: tcp.id, outcome: 'applied' },
    { id: udp.id, outcome: 'applied' },
  ]);

  const payload = Buffer.alloc(512 * 1024, 3);
  assert.ok((await tcpRoundTrip(15001, payload, '10.213.1.2')).equals(payload));
  assert.deepEqual(await udpRoundTrip(15002, ['across', 'hosts'], '10.213.1.2'), ['across', 'hosts']);
  const counted = await until('the traffic to be reported', async () => {
    const traffic = (await call(m.url, 'GET', `/api/rules/${tcp.id}`, { token: m.admin })).body.traffic;
    return traffic.bytes_in === payload.length && traffic;
  });
  assert.deepEqual(counted, { bytes_in: payload.length, bytes_out: payload.length, refused: 0 });
  const up = await until('the tunnel to be up with a round trip', async () => {
    const current = (await call(m.url, 'GET', `/api/tunnels/${tunnel.id}`, { token: m.admin })).body;
    return current.status === 'up' && current.rtt_ms !== null && current;
  });
  assert.ok(up.rtt_ms > 0);
});
