import assert from 'node:assert/strict';
import { test } from 'node:test';
import { maintain } from '../internal/service/maintenance.ts';
import { assertProblem, call, mintToken, startMaster } from './helpers.ts';

test('audit entries carry who, what, where and the request id, newest first', async (t) => {
  const m = await startMaster(t);
  const created = await call(m.url, 'POST', '/api/tokens', {
    token: m.admin,
    body: { name: 'x', scopes: ['audit:read'] },
    headers: { 'x-request-id': 'req-create-x' },
  });
  const [entry] = (await call(m.url, 'GET', '/api/audit-logs?limit=1', { token: m.admin })).body.items;
  assert.equal(entry.action, 'token.create');
  assert.equal(entry.resource, 'token');
  assert.equal(entry.resource_id, created.body.id);
  assert.equal(entry.status, 'success');
  assert.equal(entry.request_id, 'req-create-x');
  assert.equal(entry.actor_type, 'user');
  assert.equal(entry.actor_name, 'admin');
  assert.equal(entry.ip, '127.0.0.1');
  assert.equal(entry.changes.after.name, 'x');
  assert.equal(entry.changes.after.token, undefined, 'the secret is not in the change');
});

test('a denied write attempt is audited with the scope it lacked, and an API token is named as such', async (t) => {
  const m = await startMaster(t);
  const token = await mintToken(m, ['audit:read']);
  const tokenId = (await call(m.url, 'GET', '/api/auth/me', { token })).body.token.id;
  assertProblem(await call(m.url, 'DELETE', '/api/users/1', { token }), 403, 'insufficient_scope');
  const [entry] = (await call(m.url, 'GET', '/api/audit-logs?status=denied', { token })).body.items;
  assert.deepEqual(
    {
      action: entry.action,
      resource: entry.resource,
      resource_id: entry.resource_id,
      actor_type: entry.actor_type,
      actor_id: entry.actor_id,
      actor_name: entry.actor_name,
      changes: entry.changes,
    },
    {
      action: 'user.delete',
      resource: 'user',
      resource_id: 1,
      actor_type: 'token',
      actor_id: tokenId,
      actor_name: 'admin',
      changes: { required_scope: 'users:write' },
    },
  );
});

test('denied writes spend the write budget, so they cannot flood the audit log', async (t) => {
  const m = await startMaster(t);
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { write_budget_per_minute: 2 } });
  const token = await mintToken(m, ['audit:read']);
  // The budget is the user's: the two writes above spent this window's.
  m.advance(61_000);
  const statuses: number[] = [];
  for (let i = 0; i < 4; i++) statuses.push((await call(m.url, 'DELETE', '/api/users/1', { token })).status);
  assert.deepEqual(statuses, [403, 403, 429, 429]);
  const denied = await call(m.url, 'GET', '/api/audit-logs?status=denied', { token });
  assert.equal(denied.body.items.length, 2);
});

test('audit filters combine and pages follow the cursor', async (t) => {
  const m = await startMaster(t);
  for (let i = 0; i < 4; i++)
    await call(m.url, 'POST', '/api/tokens', { token: m.admin, body: { name: `t${i}`, scopes: ['audit:read'] } });
  const ids = async (query: string) =>
    (await call(m.url, 'GET', `/api/audit-logs${query}`, { token: m.admin })).body.items.map(
      (e: { id: number }) => e.id,
    );
  const all = await ids('?action=token.create');
  assert.equal(all.length, 4);
  assert.deepEqual(
    all,
    [...all].sort((a: number, b: number) => b - a),
  );
  // Token ids share a sequence with the admin's session (id 1), so token 2 is t0, the oldest.
  assert.deepEqual(await ids('?resource=token&resource_id=2'), [all[3]]);
  assert.deepEqual(await ids('?actor=nobody'), []);
  assert.deepEqual(await ids('?actor_type=system'), [1]);
  assert.deepEqual(await ids('?since=2000-01-01T00:00:00Z&until=2001-01-01T00:00:00Z'), []);
  assert.equal((await ids('?since=2000-01-01T00:00:00Z&action=token.create')).length, 4);

  const first = await call(m.url, 'GET', '/api/audit-logs?action=token.create&limit=3', { token: m.admin });
  const rest = await call(
    m.url,
    'GET',
    `/api/audit-logs?action=token.create&limit=3&cursor=${first.body.next_cursor}`,
    { token: m.admin },
  );
  assert.deepEqual(
    [...first.body.items, ...rest.body.items].map((e: { id: number }) => e.id),
    all,
  );
  assert.equal(rest.body.next_cursor, null);
  assertProblem(await call(m.url, 'GET', '/api/audit-logs?status=maybe', { token: m.admin }), 400, 'invalid_query');
  assertProblem(await call(m.url, 'GET', '/api/audit-logs?since=yesterday', { token: m.admin }), 400, 'invalid_query');
});

test('entries older than audit_retention_days are pruned', async (t) => {
  const m = await startMaster(t);
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { audit_retention_days: 1 } });
  const before = (await call(m.url, 'GET', '/api/audit-logs', { token: m.admin })).body.items.length;
  assert.ok(before >= 3);
  m.advance(2 * 24 * 3600 * 1000);
  await maintain(m.app);
  const fresh = await call(m.url, 'POST', '/api/auth/login', {
    body: { username: 'admin', password: 'admin-password-for-tests' },
  });
  const after = await call(m.url, 'GET', '/api/audit-logs', { token: fresh.body.token });
  assert.deepEqual(
    after.body.items.map((e: { action: string }) => e.action),
    ['auth.login'],
  );
});

test('a change and its audit entry commit together or not at all', async (t) => {
  const m = await startMaster(t);
  const { store } = m.app;
  const users = store.users.count();
  assert.throws(() =>
    store.write(() => {
      store.users.insert({ username: 'ghost', password_hash: 'x', scopes: [], disabled: false }, m.app.timestamp());
      // An audit row the schema refuses: the user insert before it must roll back with it.
      store.audit.record(
        { actor_type: 'nobody' as 'system', actor_id: null, actor_name: 'x', ip: null, request_id: null },
        { action: 'user.create', resource: 'user', resource_id: null, status: 'success' },
        m.app.timestamp(),
      );
    }),
  );
  assert.equal(store.users.count(), users);
  assert.throws(() => store.write(() => Promise.resolve()), /synchronous/);
});

const MOVED_CLOCK =
  'a moved clock moves the audit log and the event journal alike, on the API path and the import worker';
test(MOVED_CLOCK, async (t) => {
  const m = await startMaster(t);
  const token = await mintToken(m, ['*']);
  const years = 5 * 365 * 24 * 3600 * 1000;
  m.advance(years);
  const node = { name: 'moved', host: 'moved.example.net', ssh_port: 22, ssh_user: 'root', tags: [] };
  const created = await call(m.url, 'POST', '/api/nodes', { token, body: node });
  assert.equal(created.status, 201);
  const rule = { name: 'web', node: 'moved', protocol: 'tcp', listen_port: 80, targets: ['192.0.2.1:80'] };
  const doc = { format: 'portplane-export', version: 1, nodes: [{ ...node, name: 'edge' }], tunnels: [], rules: [] };
  const imported = await call(m.url, 'POST', '/api/import', { token, body: { ...doc, rules: [rule] } });
  assert.equal(imported.status, 200, JSON.stringify(imported.body));
  const audited = (await call(m.url, 'GET', '/api/audit-logs?resource=node', { token })).body.items;
  const journal = m.app.store.events.page({
    after: 0,
    limit: 100,
    resources: '["node", "rule"]',
    types: null,
    node_id: null,
    resource_id: null,
  });
  const auditAt = (action: string, id: number) =>
    audited.find((e: { action: string; resource_id: number }) => e.action === action && e.resource_id === id)?.at;
  const journalAt = (type: string, id: number) => journal.find((e) => e.type === type && e.resource_id === id)?.at;
  const now = Date.now() + years;
  for (const at of [auditAt('node.create', created.body.id), journalAt('node.created', created.body.id)])
    assert.ok(Math.abs(Date.parse(at) - now) < 60_000, `${at} is the master's time, ${new Date(now).toISOString()}`);
  // The worker's write is one job at one time: its rows, its audit entry and its journal entries alike.
  const importEntry = (await call(m.url, 'GET', '/api/audit-logs?action=rule.create', { token })).body.items[0];
  const ruleId = imported.body.rules[0].id;
  assert.equal(journalAt('rule.created', ruleId), importEntry.at);
  assert.equal(journalAt('node.created', imported.body.nodes[0].id), importEntry.at);
  assert.equal((await call(m.url, 'GET', `/api/rules/${ruleId}`, { token })).body.created_at, importEntry.at);
});
