import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Scope } from '../internal/auth/scopes.ts';
import { assertProblem, call, login, node, rule, snapshot, startMaster, type Running } from './helpers.ts';

/** A user made by the admin, signed in: their id and a session token. */
async function user(m: Running, username: string, scopes: Scope[]) {
  const made = await call(m.url, 'POST', '/api/users', {
    token: m.admin,
    body: { username, password: `${username}-password-long`, scopes },
  });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  return { id: made.body.id as number, token: await login(m.url, username, `${username}-password-long`) };
}

const GIVE_REFUSED = 'giving a rule or tunnel to another user needs users:write besides, and changes nothing without';
const FOLLOWS = 'what a user creates is theirs; a change keeps its owner unless owner_id names another; lists filter';

test(FOLLOWS, async (t) => {
  const m = await startMaster(t);
  const me = (await call(m.url, 'GET', '/api/auth/me', { token: m.admin })).body.user.id as number;
  const edge = await node(m, 'edge');
  const ops = await user(m, 'ops', ['rules:write', 'tunnels:write', 'nodes:read']);
  const mine = await rule(m, { node_id: edge.id, listen_port: 10001 });
  assert.equal(mine.body.owner_id, me);
  const theirs = await call(m.url, 'POST', '/api/rules', {
    token: ops.token,
    body: { name: 'ops-rule', node_id: edge.id, protocol: 'tcp', listen_port: 10002, targets: ['10.0.0.1:80'] },
  });
  assert.equal(theirs.status, 201, JSON.stringify(theirs.body));
  assert.equal(theirs.body.owner_id, ops.id);
  // A replace without owner_id (a script that PUTs what it read, less what it does not know) keeps the owner.
  const { id, owner_id: _owner, ...fields } = theirs.body;
  const replaced = await call(m.url, 'PUT', `/api/rules/${id}`, {
    token: m.admin,
    body: { ...fields, name: 'renamed' },
  });
  assert.equal(replaced.status, 200, JSON.stringify(replaced.body));
  assert.equal(replaced.body.owner_id, ops.id);
  // The admin (with users:write) hands it back; the audit entry says from whom to whom.
  const handed = await call(m.url, 'PUT', `/api/rules/${id}`, {
    token: m.admin,
    body: { ...fields, name: 'renamed', owner_id: me },
  });
  assert.equal(handed.body.owner_id, me);
  const audit = await call(m.url, 'GET', `/api/audit-logs?resource=rule&resource_id=${id}&action=rule.update`, {
    token: m.admin,
  });
  assert.deepEqual(audit.body.items[0].changes, { before: { owner_id: ops.id }, after: { owner_id: me } });
  const tunnel = await call(m.url, 'POST', '/api/tunnels', {
    token: ops.token,
    body: { name: 'ops-tunnel', entry_node_id: edge.id, exit_node_id: (await node(m, 'exit')).id },
  });
  assert.equal(tunnel.body.owner_id, ops.id);
  const owned = async (path: string, owner: number) =>
    (await call(m.url, 'GET', `${path}?owner_id=${owner}`, { token: m.admin })).body.items.map(
      (item: { name: string }) => item.name,
    );
  assert.deepEqual(await owned('/api/rules', me), ['r', 'renamed']);
  assert.deepEqual(await owned('/api/rules', ops.id), []);
  assert.deepEqual(await owned('/api/tunnels', ops.id), ['ops-tunnel']);
  assert.deepEqual(await owned('/api/tunnels', me), []);
});

test(GIVE_REFUSED, async (t) => {
  const m = await startMaster(t);
  const edge = await node(m, 'edge');
  const exit = await node(m, 'exit');
  const ops = await user(m, 'ops', ['rules:write', 'tunnels:write']);
  const other = await user(m, 'other', []);
  const made = await call(m.url, 'POST', '/api/rules', {
    token: ops.token,
    body: { name: 'mine', node_id: edge.id, protocol: 'tcp', listen_port: 10001, targets: ['10.0.0.1:80'] },
  });
  const tunnel = await call(m.url, 'POST', '/api/tunnels', {
    token: ops.token,
    body: { name: 't', entry_node_id: edge.id, exit_node_id: exit.id },
  });
  const { id, owner_id: _o, ...fields } = made.body;
  // Refusals are audited (as denied); nothing else is written.
  const before = snapshot(m, ['audit_log']);
  const attempts: [string, string, unknown][] = [
    ['POST', '/api/rules', { ...fields, listen_port: 10002, owner_id: other.id }],
    ['PUT', `/api/rules/${id}`, { ...fields, owner_id: other.id }],
    ['POST', '/api/rules/batch-create', { rules: [{ ...fields, listen_port: 10003, owner_id: other.id }] }],
    // A batch update handing rules over needs it whoever they go to: the caller takes them from their owner.
    ['POST', '/api/rules/batch-update', { ids: [id], changes: { owner_id: ops.id } }],
    ['POST', '/api/tunnels', { name: 't2', entry_node_id: edge.id, exit_node_id: exit.id, owner_id: other.id }],
    [
      'PUT',
      `/api/tunnels/${tunnel.body.id}`,
      { name: 't', entry_node_id: edge.id, exit_node_id: exit.id, owner_id: other.id },
    ],
  ];
  for (const [method, path, body] of attempts) {
    const answer = await call(m.url, method, path, { token: ops.token, body });
    assertProblem(answer, 403, 'insufficient_scope');
    assert.match(answer.body.detail, /users:write/, `${method} ${path}`);
  }
  assert.equal(snapshot(m, ['audit_log']), before);
  // With users:write, to a user that does not exist: 422 naming the field.
  const nobody = await call(m.url, 'POST', '/api/rules', {
    token: m.admin,
    body: { ...fields, listen_port: 10004, owner_id: 999_999 },
  });
  assertProblem(nobody, 422, 'validation_failed');
  assert.equal(nobody.body.errors[0].pointer, '#/owner_id');
});

test('a user who owns rules or tunnels is not deleted until they are given to someone else', async (t) => {
  const m = await startMaster(t);
  const edge = await node(m, 'edge');
  const ops = await user(m, 'ops', ['rules:write']);
  const made = await call(m.url, 'POST', '/api/rules', {
    token: ops.token,
    body: { name: 'mine', node_id: edge.id, protocol: 'tcp', listen_port: 10001, targets: ['10.0.0.1:80'] },
  });
  const refused = await call(m.url, 'DELETE', `/api/users/${ops.id}`, { token: m.admin });
  assertProblem(refused, 409, 'conflict');
  assert.match(refused.body.detail, /owns 1 rule\(s\) and 0 tunnel\(s\)/);
  const me = (await call(m.url, 'GET', '/api/auth/me', { token: m.admin })).body.user.id as number;
  const handed = await call(m.url, 'POST', '/api/rules/batch-update', {
    token: m.admin,
    body: { filter: { owner_id: ops.id }, changes: { owner_id: me } },
  });
  assert.deepEqual(
    handed.body.results.map((r: { outcome: string }) => r.outcome),
    ['updated'],
  );
  assert.equal((await call(m.url, 'DELETE', `/api/users/${ops.id}`, { token: m.admin })).status, 204);
  assert.equal((await call(m.url, 'GET', `/api/rules/${made.body.id}`, { token: m.admin })).body.owner_id, me);
});

test('an export names owners by username, and an import gives each rule and tunnel to the user it names', async (t) => {
  const m = await startMaster(t);
  const edge = await node(m, 'edge');
  const exit = await node(m, 'exit');
  const ops = await user(m, 'ops', ['rules:write', 'tunnels:write']);
  await call(m.url, 'POST', '/api/rules', {
    token: ops.token,
    body: { name: 'theirs', node_id: edge.id, protocol: 'tcp', listen_port: 10001, targets: ['10.0.0.1:80'] },
  });
  await call(m.url, 'POST', '/api/tunnels', {
    token: ops.token,
    body: { name: 'their-tunnel', entry_node_id: edge.id, exit_node_id: exit.id },
  });
  await rule(m, { name: 'admins', node_id: edge.id, listen_port: 10002 });
  const exported = (await call(m.url, 'GET', '/api/export', { token: m.admin })).body;
  assert.deepEqual(
    exported.rules.map((r: { name: string; owner: string }) => [r.name, r.owner]),
    [
      ['theirs', 'ops'],
      ['admins', 'admin'],
    ],
  );
  assert.equal(exported.tunnels[0].owner, 'ops');

  const other = await startMaster(t);
  const missing = await call(other.url, 'POST', '/api/import', { token: other.admin, body: exported });
  assertProblem(missing, 422, 'validation_failed');
  assert.ok(
    missing.body.errors.some((e: { pointer: string }) => e.pointer === '#/rules/0/owner'),
    JSON.stringify(missing.body.errors),
  );
  const opsThere = await user(other, 'ops', []);
  const imported = await call(other.url, 'POST', '/api/import', { token: other.admin, body: exported });
  assert.equal(imported.status, 200, JSON.stringify(imported.body));
  const owners = (await call(other.url, 'GET', '/api/rules', { token: other.admin })).body.items.map(
    (r: { name: string; owner_id: number }) => [r.name, r.owner_id],
  );
  const adminThere = (await call(other.url, 'GET', '/api/auth/me', { token: other.admin })).body.user.id;
  assert.deepEqual(owners, [
    ['theirs', opsThere.id],
    ['admins', adminThere],
  ]);
  const tunnels = (await call(other.url, 'GET', '/api/tunnels', { token: other.admin })).body.items;
  assert.equal(tunnels[0].owner_id, opsThere.id);
  // Imported again: each is there already, whoever the document names (an older document names no one).
  const again = await call(other.url, 'POST', '/api/import', {
    token: other.admin,
    body: { ...exported, rules: exported.rules.map(({ owner: _o, ...r }: { owner: string }) => r) },
  });
  assert.deepEqual(
    again.body.rules.map((r: { outcome: string }) => r.outcome),
    ['exists', 'exists'],
  );
});
