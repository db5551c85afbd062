// What a tenant's account and plan do to their rules on a real agent, on a host of its own (its targets are another
// host's, as a tenant's must be): a traffic allowance that stops them once spent, an account that expires, a plan
// whose change reaches the rules written under it. (An allowance that slows them, measured: test/e2e.)

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect } from 'node:net';
import { test } from 'node:test';
import { assertProblem, call, node, startMaster } from './helpers.ts';
import { countingSink, freePort, tcpEcho, tcpRoundTrip, until } from './net.ts';
import { openEvents } from './sse.ts';
import { edgeWorld, sent, tenant, theirRule } from './tenancy.ts';

test("past an allowance with past stop, the tenant's rules stop until the period starts over", async (t) => {
  const world = await edgeWorld(t);
  if (typeof world === 'string') return t.skip(world);
  const { m, edge: n, host, targetHost } = world;
  const sink = await countingSink(t, targetHost);
  const port = await freePort();
  const customer = await tenant(m, {
    node_ids: [n.id],
    port_ranges: [String(port)],
    // A day that starts over within the hour (the master's clock is moved there, within a session's life).
    traffic: { bytes: 64 * 1024, period: 'day', reset_hour: (new Date().getUTCHours() + 1) % 24, past: 'stop' },
  });
  const made = await theirRule(m, customer.token, { node_id: n.id, listen_port: port, targets: [sink.target] });
  await sent(m, customer.token, made.body.id);
  await tcpRoundTrip(port, Buffer.alloc(256 * 1024, 7), host).catch(() => undefined);
  await until('the rule to be stopped on its node', async () => {
    const current = (await call(m.url, 'GET', `/api/rules/${made.body.id}`, { token: customer.token })).body;
    return current.state === 'allowance_exceeded' && current.sync.state === 'applied';
  });
  const refused = await until('the port to refuse', () =>
    tcpRoundTrip(port, Buffer.from('x'), host).then(
      () => false,
      () => true,
    ),
  );
  assert.ok(refused);

  // A new period: the master's clock past the day's end starts it over, and the rule forwards again.
  const spent = (await call(m.url, 'GET', '/api/auth/me', { token: customer.token })).body.usage.traffic;
  assert.ok(spent.spent && spent.used_bytes >= 64 * 1024, JSON.stringify(spent));
  m.advance(Date.parse(spent.resets_at) - m.app.now() + 1000);
  await until('the rule to forward again', async () => {
    const current = (await call(m.url, 'GET', `/api/rules/${made.body.id}`, { token: customer.token })).body;
    return current.state === 'active' && current.sync.state === 'applied';
  });
  const me = (await call(m.url, 'GET', '/api/auth/me', { token: customer.token })).body;
  assert.deepEqual([me.usage.traffic.used_bytes, me.usage.traffic.spent], [0, false]);
  const reset = await call(m.url, 'GET', '/api/audit-logs?action=user.allowance_reset', { token: m.admin });
  assert.equal(reset.body.items.length, 1);
});

test("an expired tenant's rules stop and their tokens stop working; extended, both come back", async (t) => {
  const world = await edgeWorld(t);
  if (typeof world === 'string') return t.skip(world);
  const { m, edge: n, targetHost } = world;
  const sink = await countingSink(t, targetHost);
  const port = await freePort();
  const expiresAt = new Date(m.app.now() + 3_600_000).toISOString().replace(/\.\d+Z$/, 'Z');
  const customer = await tenant(m, { node_ids: [n.id], port_ranges: [String(port)] }, { expires_at: expiresAt });
  const apiToken = await call(m.url, 'POST', '/api/tokens', {
    token: customer.token,
    body: { name: 'script', scopes: ['rules:read'] },
  });
  const made = await theirRule(m, customer.token, { node_id: n.id, listen_port: port, targets: [sink.target] });
  await sent(m, customer.token, made.body.id);
  // Their event stream too lasts only as long as the account.
  const stream = await openEvents(m.url, customer.token);
  t.after(() => stream.close());
  await stream.next((e) => e.event === 'ready');

  m.advance(3_600_000);
  assert.match((await stream.next((e) => e.event === 'revoked')).data.detail, /revoked or expired/);
  await stream.ended;
  await until('the rule to stop on its node', async () => {
    const current = (await call(m.url, 'GET', `/api/rules/${made.body.id}`, { token: m.admin })).body;
    return current.state === 'account_expired' && current.sync.state === 'applied';
  });
  for (const token of [customer.token, apiToken.body.token]) {
    const answer = await call(m.url, 'GET', '/api/rules', { token });
    assertProblem(answer, 401, 'unauthorized');
    assert.match(answer.body.detail, /account expired/);
  }
  const again = await call(m.url, 'POST', '/api/auth/login', {
    body: { username: 'customer', password: 'customer-password' },
  });
  assertProblem(again, 401, 'unauthorized');
  const user = (await call(m.url, 'GET', `/api/users/${customer.id}`, { token: m.admin })).body;
  assert.equal(user.expired, true);

  const { expired: _e, usage: _u, ...writable } = user;
  const extended = await call(m.url, 'PUT', `/api/users/${customer.id}`, {
    token: m.admin,
    body: { ...writable, expires_at: null },
  });
  assert.equal(extended.status, 200, JSON.stringify(extended.body));
  assert.equal(extended.body.expired, false);
  assert.equal((await call(m.url, 'GET', '/api/rules', { token: apiToken.body.token })).status, 200);
  await until('the rule to forward again', async () => {
    const current = (await call(m.url, 'GET', `/api/rules/${made.body.id}`, { token: m.admin })).body;
    return current.state === 'active' && current.sync.state === 'applied';
  });
});

const PLAN_CHANGE =
  "a plan's change reaches its tenants' rules: a lowered cap is enforced on the node, a port range or node tag " +
  'taken away stops the rule, given back it forwards again';

test(PLAN_CHANGE, async (t) => {
  const world = await edgeWorld(t, { tags: ['eu'] });
  if (typeof world === 'string') return t.skip(world);
  const { m, edge: n, host, targetHost } = world;
  const sink = await countingSink(t, targetHost);
  const port = await freePort();
  const grants = { node_tags: ['eu'], port_ranges: [String(port)], max_connections: 10 };
  const customer = await tenant(m, grants);
  const made = await theirRule(m, customer.token, { node_id: n.id, listen_port: port, targets: [sink.target] });
  assert.equal(made.body.max_connections, 10, "the plan's cap, filled in where the rule has none");
  await sent(m, customer.token, made.body.id);

  const plan = async (changes: Record<string, unknown>) => {
    const current = (await call(m.url, 'GET', `/api/plans/${customer.plan.id}`, { token: m.admin })).body;
    const { id: _i, version: _v, created_at: _c, updated_at: _u, ...fields } = current;
    const put = await call(m.url, 'PUT', `/api/plans/${customer.plan.id}`, {
      token: m.admin,
      body: { ...fields, ...changes },
    });
    assert.equal(put.status, 200, JSON.stringify(put.body));
  };
  const ruleNow = async () => (await call(m.url, 'GET', `/api/rules/${made.body.id}`, { token: m.admin })).body;

  await plan({ max_connections: 1 });
  const capped = await until('the lowered cap to reach the node', async () => {
    const current = await ruleNow();
    return current.sync.state === 'applied' && current.plan_limits?.max_connections === 1 && current;
  });
  assert.equal(capped.max_connections, 10, "the rule's own field stays as its writer left it");
  const holding = connect({ host, port });
  t.after(() => holding.destroy());
  await once(holding, 'connect');
  holding.write('x');
  await until('the held connection to reach the target', () => sink.within(60_000) > 0);
  const second = await new Promise<string>((resolve) => {
    const socket = connect({ host, port });
    socket.on('error', () => resolve('refused'));
    socket.on('close', () => resolve('closed'));
    socket.setTimeout(2000, () => {
      socket.destroy();
      resolve('open');
    });
  });
  assert.equal(second, 'closed', 'a second connection past the cap of 1 is turned away');
  holding.destroy();

  await plan({ max_connections: 1, port_ranges: [String(port + 1)] });
  await until('the rule to stop: its port is no longer granted', async () => {
    const current = await ruleNow();
    return current.state === 'not_granted' && current.sync.state === 'applied';
  });
  await plan({ max_connections: 1, port_ranges: [String(port)] });
  await until('the rule to forward again', async () => (await ruleNow()).state === 'active');

  const edge = (await call(m.url, 'GET', `/api/nodes/${n.id}`, { token: m.admin })).body;
  const retag = (tags: string[]) =>
    call(m.url, 'PUT', `/api/nodes/${n.id}`, {
      token: m.admin,
      body: { name: edge.name, host: edge.host, ssh_port: edge.ssh_port, ssh_user: edge.ssh_user, tags },
    });
  assert.equal((await retag(['us'])).status, 200);
  await until('the rule to stop: its node is no longer granted', async () => (await ruleNow()).state === 'not_granted');
  assert.equal((await retag(['eu'])).status, 200);
  await until('the rule to forward again', async () => {
    const current = await ruleNow();
    return current.state === 'active' && current.sync.state === 'applied';
  });
  const audit = await call(m.url, 'GET', '/api/audit-logs?resource=plan', { token: m.admin });
  assert.ok(audit.body.items.length >= 3);
});

const GRANTS_ON_AGENT =
  'a tenant granted node A, ports 30000-30099 and 10 rules: ten forward through its agent; node B, port 31000 and ' +
  'an eleventh rule are refused, each naming the grant';

test(GRANTS_ON_AGENT, async (t) => {
  const world = await edgeWorld(t);
  if (typeof world === 'string') return t.skip(world);
  const { m, edge: a, host, targetHost } = world;
  const b = await node(m, 'b');
  const echo = await tcpEcho(t, targetHost);
  const customer = await tenant(m, { node_ids: [a.id], port_ranges: ['30000-30099'], max_rules: 10 });
  const body = (nodeId: number, port: number) => ({
    node_id: nodeId,
    listen_port: port,
    targets: [`${targetHost}:${echo}`],
  });
  const made = [];
  for (let port = 30000; port < 30010; port++) made.push((await theirRule(m, customer.token, body(a.id, port))).body);
  for (const rule of [made[0], made[9]]) await sent(m, customer.token, rule.id);
  for (const port of [30000, 30009]) {
    const payload = Buffer.from(`through ${port}`);
    assert.ok((await tcpRoundTrip(port, payload, host)).equals(payload), `port ${port} forwards`);
  }
  const refused = async (extra: Record<string, unknown>, grant: RegExp) => {
    const answer = await call(m.url, 'POST', '/api/rules', {
      token: customer.token,
      body: { name: 'more', protocol: 'tcp', ...body(a.id, 30010), ...extra },
    });
    assertProblem(answer, 403, 'not_granted');
    assert.match(answer.body.detail, grant);
  };
  // With room for one more, another node or port is refused for what it is; with ten, an eleventh for the count.
  await call(m.url, 'DELETE', `/api/rules/${made[5].id}`, { token: customer.token });
  await refused({ node_id: b.id }, new RegExp(`node ${b.id} is not granted by your plan 'customers'`));
  await refused({ listen_port: 31000 }, /port 31000 is not in your plan 'customers' \(its ports: 30000-30099\)/);
  await theirRule(m, customer.token, body(a.id, 30005));
  await refused({}, /your plan 'customers' allows 10 rules, and you have 10/);
  assert.equal((await call(m.url, 'GET', '/api/rules?count=true', { token: customer.token })).body.total, 10);
});

const PLAN_LIMITS_MOVED =
  "an allowance lowered below this period's use stops a tenant's rules at once and raised gives them back; max_rules " +
  "lowered keeps their rules and refuses a new one; an account expiry is a tenant's alone";

test(PLAN_LIMITS_MOVED, async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const customer = await tenant(m, {
    node_ids: [n.id],
    port_ranges: ['30000-30099'],
    max_rules: 3,
    traffic: { bytes: 10_000, period: 'month', past: 'stop' },
  });
  const made: { id: number }[] = [];
  for (const port of [30000, 30001])
    made.push(
      (await theirRule(m, customer.token, { node_id: n.id, listen_port: port, targets: ['10.0.0.1:80'] })).body,
    );
  // 6,000 bytes counted as a node's report counts them.
  const { store } = m.app;
  store.write(() => store.users.countTraffic([{ id: made[0]!.id, bytes_in: 2_000, bytes_out: 4_000 }], n.id));
  const plan = async (changes: Record<string, unknown>) => {
    const {
      id: _i,
      version: _v,
      created_at: _c,
      updated_at: _u,
      ...fields
    } = (await call(m.url, 'GET', `/api/plans/${customer.plan.id}`, { token: m.admin })).body;
    const put = await call(m.url, 'PUT', `/api/plans/${customer.plan.id}`, {
      token: m.admin,
      body: { ...fields, ...changes },
    });
    assert.equal(put.status, 200, JSON.stringify(put.body));
    const me = (await call(m.url, 'GET', '/api/auth/me', { token: customer.token })).body;
    const states = await Promise.all(
      made.map(async (r) => (await call(m.url, 'GET', `/api/rules/${r.id}`, { token: customer.token })).body.state),
    );
    return { traffic: me.usage.traffic, states };
  };
  const lowered = await plan({ traffic: { bytes: 5_000, period: 'month', past: 'stop' } });
  assert.deepEqual([lowered.traffic.used_bytes, lowered.traffic.spent], [6_000, true], 'the count is kept');
  assert.deepEqual(lowered.states, ['allowance_exceeded', 'allowance_exceeded']);
  const raised = await plan({ traffic: { bytes: 20_000, period: 'month', past: 'stop' } });
  assert.deepEqual([raised.traffic.used_bytes, raised.traffic.spent], [6_000, false]);
  assert.deepEqual(raised.states, ['active', 'active']);

  await plan({ max_rules: 1 });
  assert.equal((await call(m.url, 'GET', '/api/rules?count=true', { token: customer.token })).body.total, 2);
  const more = await call(m.url, 'POST', '/api/rules', {
    token: customer.token,
    body: { name: 'more', protocol: 'tcp', node_id: n.id, listen_port: 30002, targets: ['10.0.0.1:80'] },
  });
  assertProblem(more, 403, 'not_granted');
  assert.match(more.body.detail, /allows 1 rules, and you have 2/);

  // Made an operator, nothing of a plan holds their rules any more (found through the rules held, not all theirs).
  assert.deepEqual((await plan({ traffic: { bytes: 5_000, period: 'month', past: 'stop' } })).states, [
    'allowance_exceeded',
    'allowance_exceeded',
  ]);
  const user = (await call(m.url, 'GET', `/api/users/${customer.id}`, { token: m.admin })).body;
  const promoted = await call(m.url, 'PUT', `/api/users/${customer.id}`, {
    token: m.admin,
    body: { username: user.username, role: 'operator', plan_id: null, scopes: ['rules:read'] },
  });
  assert.equal(promoted.status, 200, JSON.stringify(promoted.body));
  for (const r of made) {
    const now = (await call(m.url, 'GET', `/api/rules/${r.id}`, { token: m.admin })).body;
    assert.deepEqual([now.state, now.plan_limits], ['active', null]);
  }

  const operator = await call(m.url, 'POST', '/api/users', {
    token: m.admin,
    body: { username: 'ops', password: 'ops-password-long', expires_at: '2099-01-01T00:00:00Z' },
  });
  assertProblem(operator, 422, 'validation_failed');
  assert.equal(operator.body.errors[0].pointer, '#/expires_at');
});
