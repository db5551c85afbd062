// Diagnostics from a node: a rule's targets and a host:port, tried by a real agent as its relays would reach them.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { agentInProcess, nodeOf } from './agents.ts';
import { assertProblem, call, mintToken, node, rule, startMaster } from './helpers.ts';
import { closedPort, freePort, tcpEcho, udpEcho, until } from './net.ts';

test("a rule's check says which targets its node reaches (TCP and UDP), with a time or an error code", async (t) => {
  const m = await startMaster(t, { localTargets: true });
  const n = await node(m, 'edge');
  const offline = await rule(m, { node_id: n.id, listen_port: 9000, targets: ['192.0.2.1:80'] });
  assertProblem(await call(m.url, 'POST', `/api/rules/${offline.body.id}/check`, { token: m.admin }), 409, 'conflict');

  await agentInProcess(t, m.url, n.agent_token);
  await until('the node to come online', async () => (await nodeOf(m, n.id)).status === 'online');
  const [tcp, udp, closed] = [await tcpEcho(t), await udpEcho(t), await closedPort()];
  const tcpRule = await rule(m, {
    node_id: n.id,
    listen_port: await freePort(),
    targets: [`127.0.0.1:${tcp}`, `127.0.0.1:${closed}`],
  });
  const checked = await call(m.url, 'POST', `/api/rules/${tcpRule.body.id}/check`, { token: m.admin });
  assert.equal(checked.status, 200, JSON.stringify(checked.body));
  assert.equal(checked.body.node_id, n.id);
  assert.equal(checked.body.protocol, 'tcp');
  const [open, shut] = checked.body.results;
  assert.deepEqual([open.target, open.reachable, open.error], [`127.0.0.1:${tcp}`, true, null]);
  assert.ok(Number.isInteger(open.ms) && open.ms >= 0);
  assert.deepEqual(shut, { target: `127.0.0.1:${closed}`, reachable: false, ms: null, error: 'ECONNREFUSED' });

  const udpRule = await rule(m, {
    node_id: n.id,
    protocol: 'udp',
    listen_port: await freePort(),
    targets: [`127.0.0.1:${udp}`, `127.0.0.1:${closed}`],
  });
  const datagrams = await call(m.url, 'POST', `/api/rules/${udpRule.body.id}/check`, { token: m.admin });
  assert.equal(datagrams.body.protocol, 'udp');
  assert.deepEqual(
    datagrams.body.results.map((r: { reachable: boolean | null; error: string | null }) => [r.reachable, r.error]),
    [
      [true, null],
      [false, 'ECONNREFUSED'],
    ],
  );

  const audit = await call(m.url, 'GET', `/api/audit-logs?action=rule.check&resource_id=${tcpRule.body.id}`, {
    token: m.admin,
  });
  assert.deepEqual(audit.body.items[0].changes.after.results, checked.body.results);
  const reader = await mintToken(m, ['rules:read']);
  assertProblem(
    await call(m.url, 'POST', `/api/rules/${tcpRule.body.id}/check`, { token: reader }),
    403,
    'insufficient_scope',
  );
});

test('a node probes a host:port a rule could have, and nothing a rule could not', async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge', { host: '198.51.100.20' });
  await agentInProcess(t, m.url, n.agent_token);
  await until('the node to come online', async () => (await nodeOf(m, n.id)).status === 'online');
  for (const target of ['127.0.0.1:22', '169.254.169.254:80', '198.51.100.20:22', '[::1]:22']) {
    const answer = await call(m.url, 'POST', `/api/nodes/${n.id}/probe`, { token: m.admin, body: { target } });
    assertProblem(answer, 422, 'validation_failed');
    assert.equal(answer.body.errors[0].pointer, '#/target', target);
  }
  assertProblem(
    await call(m.url, 'POST', `/api/nodes/${n.id}/probe`, { token: m.admin, body: { target: 'nonsense' } }),
    422,
    'validation_failed',
  );
  // A name that resolves nowhere: the node says so, and nothing was dialled.
  const unknown = await call(m.url, 'POST', `/api/nodes/${n.id}/probe`, {
    token: m.admin,
    body: { target: 'no-such-host.invalid:80' },
  });
  assert.equal(unknown.status, 200, JSON.stringify(unknown.body));
  assert.deepEqual(unknown.body.results, [
    { target: 'no-such-host.invalid:80', reachable: false, ms: null, error: 'ENOTFOUND' },
  ]);
});
