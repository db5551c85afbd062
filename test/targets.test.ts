// What a rule may reach: by default nothing local to its node (loopback, link-local such as cloud metadata, its own
// host) nor the master, on every path a rule is written; the setting allow_local_rule_targets, which needs *, allows
// them to operators' rules, never to a tenant's. Addresses that are no host at all (broadcast, multicast, none) are
// refused whatever the setting, and an address is the same in each of its spellings.

import assert from 'node:assert/strict';
import { lookup } from 'node:dns/promises';
import { connect } from 'node:net';
import { hostname } from 'node:os';
import { test } from 'node:test';
import { agentInProcess, nodeOf, startAgent } from './agents.ts';
import { assertProblem, call, mintToken, newTenant, node, startMaster, type Running } from './helpers.ts';
import { freeSpan, tcpEcho, tcpRoundTrip, until } from './net.ts';
import { localRefusal } from '../internal/relay/dial.ts';
import { namespaces, netnsUnavailable, veth } from './netns.ts';

const LOCAL = [
  '127.0.0.1:22',
  '127.9.9.9:80',
  'localhost:8080',
  'api.localhost:8080',
  'localhost.localdomain:80',
  'ip6-localhost:22',
  'ip6-loopback:22',
  '169.254.169.254:80',
  '[::1]:22',
  '[fe80::1]:80',
  '[::ffff:127.0.0.1]:22',
  '[fd00:ec2::254]:80',
  // The same addresses spelt otherwise: IPv4-mapped in hex, IPv4-compatible, through NAT64's well-known prefix.
  '[::ffff:7f00:1]:22',
  '[::127.0.0.1]:22',
  '[64:ff9b::a9fe:a9fe]:80',
  '[0:0:0:0:0:0:0:1]:22',
  'edge.example.net:22',
  'master.example.net:8443',
];

test('rules may not target what is local to their node, nor the master, on any path a rule is written', async (t) => {
  const m = await startMaster(t);
  await call(m.url, 'PATCH', '/api/settings', {
    token: m.admin,
    body: { install_master_url: 'https://master.example.net:8443' },
  });
  const edge = await node(m, 'edge');
  const other = await node(m, 'other');
  const ok = await call(m.url, 'POST', '/api/rules', {
    token: m.admin,
    body: { name: 'fine', node_id: edge.id, protocol: 'tcp', listen_port: 1000, targets: ['10.0.0.1:80'] },
  });
  assert.equal(ok.status, 201);
  for (const [i, target] of LOCAL.entries()) {
    const body = { name: `r${i}`, node_id: edge.id, protocol: 'tcp', listen_port: 2000 + i, targets: [target] };
    const created = await call(m.url, 'POST', '/api/rules', { token: m.admin, body });
    assertProblem(created, 422, 'validation_failed');
    assert.equal(created.body.errors[0].pointer, '#/targets/0', target);
    assert.match(created.body.errors[0].detail, /allow_local_rule_targets/);
    const replaced = await call(m.url, 'PUT', `/api/rules/${ok.body.id}`, {
      token: m.admin,
      body: { ...body, name: 'fine', listen_port: 1000 },
    });
    assertProblem(replaced, 422, 'validation_failed');
  }
  // Another node's host is a target like any other; the node's own is not.
  const elsewhere = {
    name: 'x',
    node_id: other.id,
    protocol: 'tcp',
    listen_port: 3000,
    targets: ['edge.example.net:22'],
  };
  assert.equal((await call(m.url, 'POST', '/api/rules', { token: m.admin, body: elsewhere })).status, 201);
  const batch = await call(m.url, 'POST', '/api/rules/batch-create', {
    token: m.admin,
    body: { rules: [{ name: 'b', node_id: edge.id, protocol: 'tcp', listen_port: 4000, targets: ['127.0.0.1:22'] }] },
  });
  assertProblem(batch, 422, 'validation_failed');
  assert.equal(batch.body.errors[0].pointer, '#/rules/0/targets/0');
  const imported = await call(m.url, 'POST', '/api/import', {
    token: m.admin,
    body: {
      format: 'portplane-export',
      version: 1,
      nodes: [],
      tunnels: [],
      rules: [
        {
          name: 'i',
          node: 'edge',
          tunnel: null,
          protocol: 'tcp',
          listen_port: 4001,
          targets: ['169.254.169.254:80'],
          strategy: 'round_robin',
          enabled: true,
        },
      ],
    },
  });
  assertProblem(imported, 422, 'validation_failed');
  assert.match(JSON.stringify(imported.body.errors), /link-local/);
  const moved = await call(m.url, 'POST', '/api/rules/batch-update', {
    token: m.admin,
    body: {
      ids: [(await call(m.url, 'GET', '/api/rules?q=x', { token: m.admin })).body.items[0].id],
      changes: { node_id: edge.id },
    },
  });
  assert.equal(moved.body.results[0].outcome, 'invalid', 'moved onto the node it targets: refused');
});

const UNROUTABLE = [
  '255.255.255.255:9',
  '[::ffff:255.255.255.255]:9',
  '0.0.0.0:80',
  '[::]:80',
  '224.0.0.1:9',
  '239.255.255.250:1900',
  '[ff02::1]:9',
  '240.0.0.1:9',
];

test('no setting lets a rule target what is no host: broadcast, multicast, unspecified, reserved', async (t) => {
  const m = await startMaster(t, { localTargets: true });
  const edge = await node(m, 'edge');
  for (const [i, target] of UNROUTABLE.entries()) {
    const body = { name: `u${i}`, node_id: edge.id, protocol: 'udp', listen_port: 2000 + i, targets: [target] };
    const created = await call(m.url, 'POST', '/api/rules', { token: m.admin, body });
    assertProblem(created, 422, 'validation_failed');
    assert.match(created.body.errors[0].detail, /no host to forward to/, target);
    const probed = await call(m.url, 'POST', `/api/nodes/${edge.id}/probe`, { token: m.admin, body: { target } });
    assertProblem(probed, 422, 'validation_failed');
  }
});

test('the node and the master are known in every spelling of their addresses, and a number is no name', async (t) => {
  const m = await startMaster(t);
  await call(m.url, 'PATCH', '/api/settings', {
    token: m.admin,
    body: { install_master_url: 'https://198.51.100.7:8443' },
  });
  const edge = await node(m, 'edge', { host: '198.51.100.20' });
  const refused = {
    '[::ffff:198.51.100.7]:8443': /is the master/,
    '[::ffff:c633:6407]:8443': /is the master/,
    '[64:ff9b::c633:6407]:8443': /is the master/,
    '[::ffff:198.51.100.20]:22': /is the node itself/,
    '0x7f000001:80': /not a hostname or an IP address/,
    '0x7f.1:80': /not a hostname or an IP address/,
    '0300.0250.0.1:80': /not a hostname or an IP address/,
  };
  for (const [i, [target, why]] of Object.entries(refused).entries()) {
    const body = { name: `s${i}`, node_id: edge.id, protocol: 'tcp', listen_port: 2000 + i, targets: [target] };
    const created = await call(m.url, 'POST', '/api/rules', { token: m.admin, body });
    assertProblem(created, 422, 'validation_failed');
    assert.match(created.body.errors[0].detail, why, target);
  }
  const body = {
    name: 'named',
    node_id: edge.id,
    protocol: 'tcp',
    listen_port: 3000,
    targets: ['0x7f-backend.example:80'],
  };
  assert.equal((await call(m.url, 'POST', '/api/rules', { token: m.admin, body })).status, 201, 'a name with a number');
});

test('allow_local_rule_targets lets rules target the node itself, and needs *', async (t) => {
  const m = await startMaster(t);
  const edge = await node(m, 'edge');
  const settingsWriter = await mintToken(m, ['settings:write', 'settings:read']);
  const refused = await call(m.url, 'PATCH', '/api/settings', {
    token: settingsWriter,
    body: { allow_local_rule_targets: 1 },
  });
  assertProblem(refused, 403, 'insufficient_scope');
  assert.equal(
    (await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { allow_local_rule_targets: 1 } })).status,
    200,
  );
  const body = { name: 'local', node_id: edge.id, protocol: 'tcp', listen_port: 2000, targets: LOCAL.slice(0, 10) };
  assert.equal((await call(m.url, 'POST', '/api/rules', { token: m.admin, body })).status, 201);
});

const MASTER_ANY_WAY =
  "a node's agent refuses the master as a target however written, though the master could not tell";
test(MASTER_ANY_WAY, async (t) => {
  const unavailable = netnsUnavailable('pp-master-probe');
  if (unavailable) return t.skip(unavailable);
  const ns = `pp-mt-${process.pid % 10_000}`;
  namespaces(t, [ns]);
  veth(`${ns}h`, null, '10.215.1.1/30', `${ns}n`, ns, '10.215.1.2/30');
  // The master listens on the node's side of the link; nothing tells it that 10.215.1.1 is itself.
  const m = await startMaster(t, { host: '0.0.0.0', insecureHttp: true });
  const port = Number(new URL(m.url).port);
  const edge = await node(m, 'edge', { host: '10.215.1.2' });
  startAgent(t, `http://10.215.1.1:${port}`, edge.agent_token, {
    within: ['ip', 'netns', 'exec', ns],
    listenHost: '10.215.1.2',
    extraArgs: ['--insecure-http'],
  });
  await until('the node online', async () => (await nodeOf(m, edge.id)).status === 'online');
  for (const target of [`10.215.1.1:${port}`, `[::ffff:10.215.1.1]:${port}`, `[::ffff:ad7:101]:${port}`]) {
    const probed = await call(m.url, 'POST', `/api/nodes/${edge.id}/probe`, { token: m.admin, body: { target } });
    assert.equal(probed.status, 200, JSON.stringify(probed.body));
    assert.equal(probed.body.results[0].reachable, false, target);
    assert.match(probed.body.results[0].error, /is the master, and local targets are not allowed/, target);
  }
});

/** A plan granting nodes tagged eu, ports `first` to `first + 99`, and a tenant on it. */
async function tenantOn(m: Running, first: number, username = 'acme') {
  const plan = await call(m.url, 'POST', '/api/plans', {
    token: m.admin,
    body: { name: `${username}-plan`, node_tags: ['eu'], port_ranges: [`${first}-${first + 99}`] },
  });
  assert.equal(plan.status, 201, JSON.stringify(plan.body));
  return { planId: plan.body.id as number, ...(await newTenant(m, username, plan.body.id)) };
}

const TENANT_NEVER =
  "a tenant's rule never reaches what is local, whoever writes it and with allow_local_rule_targets on: " +
  'created, given, handed over, in a batch';
test(TENANT_NEVER, async (t) => {
  const m = await startMaster(t, { localTargets: true });
  const edge = await node(m, 'edge', { tags: ['eu'] });
  const acme = await tenantOn(m, 30000);
  const rule = (i: number, target: string) => ({
    name: `t${i}`,
    node_id: edge.id,
    protocol: 'tcp',
    listen_port: 30000 + i,
    targets: [target],
  });
  for (const [i, target] of [
    '127.0.0.1:22',
    '169.254.169.254:80',
    'localhost.localdomain:80',
    'edge.example.net:22',
  ].entries()) {
    const own = await call(m.url, 'POST', '/api/rules', { token: acme.token, body: rule(i, target) });
    assertProblem(own, 422, 'validation_failed');
    assert.match(own.body.errors[0].detail, /a tenant's rules never reach such targets/, target);
    const given = await call(m.url, 'POST', '/api/rules', {
      token: m.admin,
      body: { ...rule(i, target), owner_id: acme.id },
    });
    assertProblem(given, 422, 'validation_failed');
  }
  const batch = await call(m.url, 'POST', '/api/rules/batch-create', {
    token: acme.token,
    body: { rules: [rule(10, '10.0.0.1:80'), rule(11, '[::1]:22')] },
  });
  assertProblem(batch, 422, 'validation_failed');
  assert.equal(batch.body.errors[0].pointer, '#/rules/1/targets/0');
  // The operator's own may; given to the tenant, it may not.
  const ops = await call(m.url, 'POST', '/api/rules', { token: m.admin, body: rule(50, '127.0.0.1:22') });
  assert.equal(ops.status, 201, JSON.stringify(ops.body));
  const handed = await call(m.url, 'PUT', `/api/rules/${ops.body.id}`, {
    token: m.admin,
    body: { ...rule(50, '127.0.0.1:22'), owner_id: acme.id },
  });
  assertProblem(handed, 422, 'validation_failed');
  const batchHanded = await call(m.url, 'POST', '/api/rules/batch-update', {
    token: m.admin,
    body: { ids: [ops.body.id], changes: { owner_id: acme.id } },
  });
  assert.equal(batchHanded.body.results[0].outcome, 'invalid', JSON.stringify(batchHanded.body));
  const theirs = await call(m.url, 'GET', `/api/rules?owner_id=${acme.id}&count=true`, { token: m.admin });
  assert.equal(theirs.body.total, 0, 'nothing refused was written');
});

/** Whether every address `name` resolves to here is one a node refuses as its own (loopback, its interfaces'). */
async function resolvesToItself(name: string): Promise<boolean> {
  const found = await lookup(name, { all: true }).catch(() => []);
  return found.length > 0 && found.every(({ address }) => localRefusal(address) !== null);
}

/** What a connection to `port` gets back for `payload` before it closes (a refused dial closes it with nothing). */
async function answer(port: number, payload: string): Promise<string> {
  const socket = connect({ host: '127.0.0.1', port });
  socket.on('error', () => undefined);
  const chunks: Buffer[] = [];
  socket.on('data', (chunk) => {
    chunks.push(chunk);
    if (Buffer.concat(chunks).length >= payload.length) socket.destroy();
  });
  await new Promise((resolve) => socket.on('connect', resolve).on('close', resolve));
  socket.write(payload);
  await new Promise((resolve) => socket.on('close', resolve));
  return Buffer.concat(chunks).toString();
}

const NODE_HOLDS =
  "a node holds a tenant's rule off what a name resolves to locally, beside an operator's rule that reaches it, " +
  'and a rule whose owner becomes a tenant at once';
test(NODE_HOLDS, async (t) => {
  // A name the master cannot tell is local: this machine's own, which resolves to itself here.
  const name = hostname();
  if (!(await resolvesToItself(name)) || /localhost/i.test(name))
    return t.skip(`this machine's name (${name}) does not resolve to an address of its own`);
  const m = await startMaster(t, { localTargets: true });
  const first = await freeSpan(100);
  const edge = await node(m, 'edge', { tags: ['eu'] });
  await agentInProcess(t, m.url, edge.agent_token);
  await until('the node online', async () => (await nodeOf(m, edge.id)).status === 'online');
  const acme = await tenantOn(m, first);
  const echo = await tcpEcho(t);
  const target = `${name}:${echo}`;
  const body = (port: number) => ({
    name: `r${port}`,
    node_id: edge.id,
    protocol: 'tcp',
    listen_port: port,
    targets: [target],
  });
  const written = [
    await call(m.url, 'POST', '/api/rules', { token: m.admin, body: body(first) }),
    await call(m.url, 'POST', '/api/rules', { token: acme.token, body: body(first + 1) }),
  ];
  for (const made of written) assert.equal(made.status, 201, 'the master cannot tell the name is local');
  const applied = async (id: number) =>
    (await call(m.url, 'GET', `/api/rules/${id}`, { token: m.admin })).body.sync.state === 'applied';
  await until('both applied', async () => (await applied(written[0]!.body.id)) && (await applied(written[1]!.body.id)));
  assert.equal((await tcpRoundTrip(first, Buffer.from('operator'))).toString(), 'operator');
  assert.equal(await answer(first + 1, 'tenant'), '', "the tenant's rule reached nothing");
  // Its check tries the target as its relay would: held off it too.
  const checks = await Promise.all([
    call(m.url, 'POST', `/api/rules/${written[0]!.body.id}/check`, { token: m.admin }),
    call(m.url, 'POST', `/api/rules/${written[1]!.body.id}/check`, { token: acme.token }),
  ]);
  assert.deepEqual(
    checks.map((c) => c.body.results[0].reachable),
    [true, false],
    JSON.stringify(checks.map((c) => c.body)),
  );
  assert.equal(checks[1]!.body.results[0].error, 'ETARGETREFUSED');

  // The operator's rule's owner becomes a tenant: its node is told at once, and it reaches nothing either.
  const admin = (await call(m.url, 'GET', '/api/auth/me', { token: m.admin })).body.user;
  const bob = await call(m.url, 'POST', '/api/users', {
    token: m.admin,
    body: { username: 'bob', password: 'bob-password-1', role: 'operator', scopes: ['rules:write'] },
  });
  assert.equal(bob.status, 201, JSON.stringify(bob.body));
  assert.notEqual(bob.body.id, admin.id);
  const moved = await call(m.url, 'PUT', `/api/rules/${written[0]!.body.id}`, {
    token: m.admin,
    body: { ...body(first), owner_id: bob.body.id },
  });
  assert.equal(moved.status, 200, JSON.stringify(moved.body));
  await until('applied again', () => applied(written[0]!.body.id));
  assert.equal((await tcpRoundTrip(first, Buffer.from('still'))).toString(), 'still');
  const demoted = await call(m.url, 'PUT', `/api/users/${bob.body.id}`, {
    token: m.admin,
    body: { username: 'bob', role: 'tenant', plan_id: acme.planId, scopes: ['rules:write'] },
  });
  assert.equal(demoted.status, 200, JSON.stringify(demoted.body));
  await until("the node told the rule's owner is a tenant", async () => (await answer(first, 'late')) === '');
});
