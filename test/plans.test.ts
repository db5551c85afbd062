import assert from 'node:assert/strict';
import { test } from 'node:test';
import { assertProblem, call, mintToken, newTenant, node, snapshot, startMaster } from './helpers.ts';

const PLAN = {
  name: 'starter',
  node_tags: ['eu'],
  port_ranges: ['30000-30099', '31000'],
  max_rules: 10,
  max_connections: 100,
  bandwidth_limit: 1_048_576,
  traffic: { bytes: 1_073_741_824, period: 'month', past: 'slow', slow_to: 262_144 },
};

test('a plan is written, read, listed, replaced and deleted, each write audited', async (t) => {
  const m = await startMaster(t);
  const edge = await node(m, 'edge');
  const made = await call(m.url, 'POST', '/api/plans', { token: m.admin, body: { ...PLAN, node_ids: [edge.id] } });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  assert.deepEqual(made.body.traffic, {
    bytes: 1_073_741_824,
    period: 'month',
    reset_day: 1,
    reset_hour: 0,
    past: 'slow',
    slow_to: 262_144,
  });
  const id = made.body.id;
  assert.deepEqual((await call(m.url, 'GET', `/api/plans/${id}`, { token: m.admin })).body, made.body);
  const listed = await call(m.url, 'GET', '/api/plans?count=true', { token: m.admin });
  assert.deepEqual([listed.body.total, listed.body.items.map((p: { name: string }) => p.name)], [1, ['starter']]);
  const replaced = await call(m.url, 'PUT', `/api/plans/${id}`, {
    token: m.admin,
    headers: { 'if-match': made.headers.get('etag')! },
    body: { ...PLAN, max_rules: 20, traffic: null },
  });
  assert.equal(replaced.status, 200, JSON.stringify(replaced.body));
  assert.deepEqual([replaced.body.max_rules, replaced.body.traffic, replaced.body.node_ids], [20, null, []]);
  const stale = await call(m.url, 'PUT', `/api/plans/${id}`, {
    token: m.admin,
    headers: { 'if-match': made.headers.get('etag')! },
    body: PLAN,
  });
  assertProblem(stale, 412, 'precondition_failed');
  assert.equal((await call(m.url, 'DELETE', `/api/plans/${id}`, { token: m.admin })).status, 204);
  assertProblem(await call(m.url, 'GET', `/api/plans/${id}`, { token: m.admin }), 404, 'not_found');
  const audit = await call(m.url, 'GET', '/api/audit-logs?resource=plan', { token: m.admin });
  assert.deepEqual(
    audit.body.items.map((e: { action: string }) => e.action),
    ['plan.delete', 'plan.update', 'plan.create'],
  );
  assert.deepEqual(audit.body.items[1].changes.after, { max_rules: 20, node_ids: [], traffic: null });
});

test('a plan that grants what cannot be is 422 naming each field, and nothing is written', async (t) => {
  const m = await startMaster(t);
  await call(m.url, 'POST', '/api/plans', { token: m.admin, body: { name: 'taken' } });
  const before = snapshot(m);
  const cases: [unknown, string[]][] = [
    [
      { ...PLAN, port_ranges: ['0', '30099-30000', '70000', '1-2-3', 'x'] },
      [0, 1, 2, 3, 4].map((i) => `/port_ranges/${i}`),
    ],
    [{ ...PLAN, node_ids: [999] }, ['/node_ids/0']],
    [{ ...PLAN, traffic: { bytes: 1, past: 'slow' } }, ['/traffic/slow_to']],
    [{ ...PLAN, traffic: { bytes: 1, past: 'stop', slow_to: 262_144 } }, ['/traffic/slow_to']],
    [{ ...PLAN, traffic: { bytes: 1, period: 'none' } }, ['/traffic/period']],
    [{ ...PLAN, bandwidth_limit: 1 }, ['/bandwidth_limit']],
    [{ ...PLAN, max_rules: -1 }, ['/max_rules']],
  ];
  for (const [body, pointers] of cases) {
    const answer = await call(m.url, 'POST', '/api/plans', { token: m.admin, body });
    assertProblem(answer, 422, 'validation_failed');
    assert.deepEqual(
      answer.body.errors.map((e: { pointer: string }) => e.pointer),
      pointers.map((p) => `#${p}`),
      JSON.stringify(body),
    );
  }
  assertProblem(await call(m.url, 'POST', '/api/plans', { token: m.admin, body: { name: 'TAKEN' } }), 409, 'conflict');
  assert.equal(snapshot(m), before);
});

test('plans are read with users:read and written with users:write', async (t) => {
  const m = await startMaster(t);
  const reader = await mintToken(m, ['users:read']);
  const made = await call(m.url, 'POST', '/api/plans', { token: m.admin, body: { name: 'p' } });
  assert.equal((await call(m.url, 'GET', '/api/plans', { token: reader })).status, 200);
  assert.equal((await call(m.url, 'GET', `/api/plans/${made.body.id}`, { token: reader })).status, 200);
  assertProblem(
    await call(m.url, 'POST', '/api/plans', { token: reader, body: { name: 'q' } }),
    403,
    'insufficient_scope',
  );
  const rules = await mintToken(m, ['rules:write']);
  assertProblem(await call(m.url, 'GET', '/api/plans', { token: rules }), 403, 'insufficient_scope');
});

test("a plan's tenants are listed and counted by the users list's plan_id", async (t) => {
  const m = await startMaster(t);
  const made = await call(m.url, 'POST', '/api/plans', { token: m.admin, body: PLAN });
  const other = await call(m.url, 'POST', '/api/plans', { token: m.admin, body: { ...PLAN, name: 'other' } });
  for (const [username, plan] of [
    ['alice', made.body.id],
    ['bob', made.body.id],
    ['carol', other.body.id],
  ] as const)
    await newTenant(m, username, plan);
  const listed = await call(m.url, 'GET', `/api/users?plan_id=${made.body.id}&count=true&sort=username`, {
    token: m.admin,
  });
  assert.equal(listed.body.total, 2);
  assert.deepEqual(
    listed.body.items.map((user: { username: string }) => user.username),
    ['alice', 'bob'],
  );
});
