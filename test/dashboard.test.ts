import assert from 'node:assert/strict';
import { test } from 'node:test';
import { maintain } from '../internal/service/maintenance.ts';
import { assertProblem, call, mintToken, node, rule, startMaster } from './helpers.ts';

test('the dashboard counts every resource by state and shows license usage', async (t) => {
  const m = await startMaster(t);
  const a = await node(m, 'a');
  const b = await node(m, 'b');
  await rule(m, { node_id: a.id, listen_port: 1 });
  await rule(m, { node_id: a.id, listen_port: 2, enabled: false });
  await call(m.url, 'POST', '/api/tunnels', {
    token: m.admin,
    body: { name: 't', entry_node_id: a.id, exit_node_id: b.id },
  });
  await call(m.url, 'POST', '/api/users', {
    token: m.admin,
    body: { username: 'off', password: 'some-password-1', disabled: true },
  });
  const token = await mintToken(m, ['dashboard:read']);
  const answer = await call(m.url, 'GET', '/api/dashboard', { token });
  assert.equal(answer.status, 200);
  assert.deepEqual(answer.body, {
    nodes: { total: 2, by_status: { new: 2, installing: 0, online: 0, offline: 0, install_failed: 0 } },
    rules: { total: 2, enabled: 1, by_sync_state: { pending: 2, applied: 0, failed: 0 } },
    tunnels: { total: 1, by_status: { pending: 1, up: 0, down: 0 } },
    users: { total: 2, disabled: 1 },
    tokens: { total: 1 },
    traffic: { bytes_in: 0, bytes_out: 0 },
    license: { edition: 'free', status: 'none', max_nodes: 5, nodes_used: 2 },
  });
});

test(
  'traffic: an empty series before any traffic, then buckets summed per step that reconcile ' + 'with the totals',
  async (t) => {
    const m = await startMaster(t);
    const a = await node(m, 'a');
    const b = await node(m, 'b');
    const r1 = (await rule(m, { node_id: a.id, listen_port: 1 })).body;
    const r2 = (await rule(m, { node_id: b.id, listen_port: 1 })).body;
    const base = Math.floor(Date.UTC(2026, 10, 20, 10, 0, 0) / 1000);
    const range = '?from=2026-11-20T10:00:00Z&to=2026-11-20T12:00:00Z';
    const empty = await call(m.url, 'GET', `/api/dashboard/traffic${range}`, { token: m.admin });
    assert.deepEqual(empty.body, {
      from: '2026-11-20T10:00:00Z',
      to: '2026-11-20T12:00:00Z',
      step: 3600,
      node_id: null,
      rule_id: null,
      points: [],
    });

    m.app.store.write(() => {
      m.app.store.traffic.record(r1.id, a.id, base + 10, 100, 1000);
      m.app.store.traffic.record(r1.id, a.id, base + 50, 1, 2);
      m.app.store.traffic.record(r1.id, a.id, base + 3600 + 5, 10, 20);
      m.app.store.traffic.record(r2.id, b.id, base + 120, 7, 7);
    });
    const hourly = await call(m.url, 'GET', `/api/dashboard/traffic${range}`, { token: m.admin });
    assert.deepEqual(hourly.body.points, [
      { at: '2026-11-20T10:00:00Z', bytes_in: 108, bytes_out: 1009 },
      { at: '2026-11-20T11:00:00Z', bytes_in: 10, bytes_out: 20 },
    ]);
    const perMinute = await call(m.url, 'GET', `/api/dashboard/traffic${range}&step=60&rule_id=${r1.id}`, {
      token: m.admin,
    });
    assert.deepEqual(
      perMinute.body.points.map((p: { at: string; bytes_in: number }) => [p.at, p.bytes_in]),
      [
        ['2026-11-20T10:00:00Z', 101],
        ['2026-11-20T11:00:00Z', 10],
      ],
    );
    const byNode = await call(m.url, 'GET', `/api/dashboard/traffic${range}&node_id=${b.id}`, { token: m.admin });
    assert.deepEqual(byNode.body.points, [{ at: '2026-11-20T10:00:00Z', bytes_in: 7, bytes_out: 7 }]);

    const rule1 = (await call(m.url, 'GET', `/api/rules/${r1.id}`, { token: m.admin })).body;
    assert.deepEqual(rule1.traffic, { bytes_in: 111, bytes_out: 1022, refused: 0 });
    assert.deepEqual((await call(m.url, 'GET', `/api/nodes/${a.id}`, { token: m.admin })).body.traffic, {
      bytes_in: 111,
      bytes_out: 1022,
    });
    assert.deepEqual((await call(m.url, 'GET', '/api/dashboard', { token: m.admin })).body.traffic, {
      bytes_in: 118,
      bytes_out: 1029,
    });
  },
);

test('traffic: bad ranges and steps are 400 naming the parameter; old buckets are pruned', async (t) => {
  const m = await startMaster(t);
  for (const [query, parameter] of [
    ['?step=90', '?step'],
    ['?step=30', '?step'],
    ['?from=2026-11-20T12:00:00Z&to=2026-11-20T10:00:00Z', '?from'],
    ['?from=2020-01-01T00:00:00Z&step=60', '?step'],
    ['?to=soon', '?to'],
  ] as const) {
    const answer = await call(m.url, 'GET', `/api/dashboard/traffic${query}`, { token: m.admin });
    assertProblem(answer, 400, 'invalid_query');
    assert.equal(answer.body.errors[0].pointer, parameter, query);
  }
  const n = await node(m, 'a');
  const r = (await rule(m, { node_id: n.id, listen_port: 1 })).body;
  const now = Math.floor(Date.now() / 1000);
  m.app.store.write(() => {
    m.app.store.traffic.record(r.id, n.id, now - 40 * 86_400, 5, 5);
    m.app.store.traffic.record(r.id, n.id, now - 60, 1, 1);
  });
  const patched = await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { traffic_retention_days: 30 } });
  assert.equal(patched.status, 200);
  await maintain(m.app);
  const rows = m.app.store.db.prepare('SELECT count(*) AS n FROM traffic_by_rule').get() as { n: number };
  assert.equal(rows.n, 1, 'the 40-day-old minute is gone under a 30-day retention');
});

test("the dashboard's rule counts and traffic, kept as rules change, equal a count of the rules", async (t) => {
  const m = await startMaster(t);
  const a = await node(m, 'a');
  const b = await node(m, 'b');
  const ids: number[] = [];
  for (let port = 1; port <= 6; port++)
    ids.push((await rule(m, { node_id: port <= 3 ? a.id : b.id, listen_port: port })).body.id);
  const at = new Date().toISOString();
  m.app.store.write(() => {
    m.app.store.rules.setSync(ids[0]!, a.id, 'applied', null, at, 'relay');
    m.app.store.rules.setSync(ids[1]!, a.id, 'failed', { code: 'port_in_use', detail: 'taken' }, at);
    m.app.store.rules.setSync(ids[3]!, b.id, 'applied', null, at, 'relay');
    m.app.store.traffic.record(ids[0]!, a.id, Math.floor(Date.now() / 1000), 1000, 2000);
    m.app.store.traffic.record(ids[3]!, b.id, Math.floor(Date.now() / 1000), 5, 7);
  });
  const third = (await call(m.url, 'GET', `/api/rules/${ids[2]}`, { token: m.admin })).body;
  const { name, node_id, protocol, listen_port, targets } = third;
  const disabled = await call(m.url, 'PUT', `/api/rules/${ids[2]}`, {
    token: m.admin,
    body: { name, node_id, protocol, listen_port, targets, enabled: false },
  });
  assert.equal(disabled.status, 200);
  assert.equal((await call(m.url, 'DELETE', `/api/rules/${ids[5]}`, { token: m.admin })).status, 204);
  assert.equal((await call(m.url, 'DELETE', `/api/nodes/${b.id}?cascade=true`, { token: m.admin })).status, 204);
  const counted = m.app.store.db
    .prepare(
      `SELECT count(*) AS total, coalesce(sum(enabled), 0) AS enabled, total(bytes_in) AS bytes_in,
        total(bytes_out) AS bytes_out, sum(sync_state = 'pending') AS pending, sum(sync_state = 'applied') AS applied,
        sum(sync_state = 'failed') AS failed FROM rules`,
    )
    .get() as Record<string, number>;
  const dashboard = (await call(m.url, 'GET', '/api/dashboard', { token: m.admin })).body;
  assert.deepEqual(dashboard.rules, {
    total: counted.total,
    enabled: counted.enabled,
    by_sync_state: { pending: counted.pending, applied: counted.applied, failed: counted.failed },
  });
  assert.deepEqual(dashboard.traffic, { bytes_in: counted.bytes_in, bytes_out: counted.bytes_out });
  assert.deepEqual(dashboard.rules, { total: 3, enabled: 2, by_sync_state: { pending: 1, applied: 1, failed: 1 } });
  assert.deepEqual(dashboard.traffic, { bytes_in: 1000, bytes_out: 2000 });
});
