import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { assertProblem, call, login, mintToken, snapshot, startMaster } from './helpers.ts';

test('a created token shows its secret once, works, and lists without it', async (t) => {
  const m = await startMaster(t);
  const created = await call(m.url, 'POST', '/api/tokens', {
    token: m.admin,
    body: { name: 'deploy script', scopes: ['users:read', 'audit:read'] },
  });
  assert.equal(created.status, 201);
  assert.match(created.body.token, /^mst_[A-Za-z0-9_-]{43}$/);
  assert.equal(created.headers.get('location'), `/api/tokens/${created.body.id}`);
  assert.deepEqual(created.body.created_by, { id: 1, username: 'admin' });
  assert.equal(created.body.expires_at, null);

  const me = await call(m.url, 'GET', '/api/auth/me', { token: created.body.token });
  assert.deepEqual(me.body.token.scopes, ['users:read', 'audit:read']);
  assert.equal((await call(m.url, 'GET', '/api/users', { token: created.body.token })).status, 200);

  const list = await call(m.url, 'GET', '/api/tokens', { token: m.admin });
  assert.equal(list.body.items.length, 1);
  assert.equal(list.body.items[0].token, undefined);
  assert.ok(list.body.items[0].last_used_at, 'last use is recorded');

  const one = await call(m.url, 'GET', `/api/tokens/${created.body.id}`, { token: m.admin });
  assert.equal(one.body.token, undefined);
  assert.equal(one.headers.get('etag'), '"1"');
});

test('secrets are stored only as hashes', async (t) => {
  const m = await startMaster(t);
  const secret = await mintToken(m, ['audit:read']);
  m.app.store.db.prepare('PRAGMA wal_checkpoint(FULL)').run();
  const body = secret.slice(4);
  for (const file of readdirSync(m.dataDir)) {
    assert.ok(!readFileSync(join(m.dataDir, file)).includes(body), `${file} contains the secret`);
  }
});

test('a caller cannot grant scopes it does not hold', async (t) => {
  const m = await startMaster(t);
  const narrow = await mintToken(m, ['tokens:write', 'audit:read']);
  const before = snapshot(m, ['audit_log']);
  const answer = await call(m.url, 'POST', '/api/tokens', {
    token: narrow,
    body: { name: 'escalate', scopes: ['audit:read', 'users:write'] },
  });
  assertProblem(answer, 403, 'insufficient_scope');
  assert.match(answer.body.detail, /users:write/);
  assert.equal(snapshot(m, ['audit_log']), before);
  const denied = (await call(m.url, 'GET', '/api/audit-logs?status=denied', { token: m.admin })).body.items;
  assert.deepEqual(
    denied.map((e: { action: string; changes: { reason: string } }) => [
      e.action,
      /users:write/.test(e.changes.reason),
    ]),
    [['token.create', true]],
  );
  // What it holds, and what its write scope implies, it can grant.
  assert.equal(
    (
      await call(m.url, 'POST', '/api/tokens', {
        token: narrow,
        body: { name: 'ok', scopes: ['audit:read', 'tokens:read'] },
      })
    ).status,
    201,
  );
});

test('a token with an expiry stops working when it passes; a past expiry is refused', async (t) => {
  const m = await startMaster(t);
  const expiresAt = new Date(Date.now() + 3_600_000).toISOString();
  const created = await call(m.url, 'POST', '/api/tokens', {
    token: m.admin,
    body: { name: 'hour', scopes: ['audit:read'], expires_at: expiresAt },
  });
  assert.equal(created.status, 201);
  assert.equal(created.body.expires_at, expiresAt.replace(/\.\d+Z$/, 'Z'));
  assert.equal((await call(m.url, 'GET', '/api/audit-logs', { token: created.body.token })).status, 200);
  m.advance(3_601_000);
  assertProblem(await call(m.url, 'GET', '/api/audit-logs', { token: created.body.token }), 401, 'unauthorized');

  const past = await call(m.url, 'POST', '/api/tokens', {
    token: m.admin,
    body: { name: 'past', scopes: ['audit:read'], expires_at: '2020-01-01T00:00:00Z' },
  });
  assertProblem(past, 422, 'validation_failed');
  assert.deepEqual(past.body.errors, [{ pointer: '#/expires_at', detail: 'must be in the future' }]);
});

test('revoking a token takes effect on the next request; If-Match is honoured', async (t) => {
  const m = await startMaster(t);
  const created = await call(m.url, 'POST', '/api/tokens', {
    token: m.admin,
    body: { name: 'short', scopes: ['audit:read'] },
  });
  const id = created.body.id;
  assertProblem(
    await call(m.url, 'DELETE', `/api/tokens/${id}`, { token: m.admin, headers: { 'if-match': '"7"' } }),
    412,
    'precondition_failed',
  );
  assert.equal(
    (await call(m.url, 'DELETE', `/api/tokens/${id}`, { token: m.admin, headers: { 'if-match': '"1"' } })).status,
    204,
  );
  assertProblem(await call(m.url, 'GET', '/api/audit-logs', { token: created.body.token }), 401, 'unauthorized');
  assertProblem(await call(m.url, 'DELETE', `/api/tokens/${id}`, { token: m.admin }), 404, 'not_found');
  const audit = await call(m.url, 'GET', `/api/audit-logs?action=token.delete&resource_id=${id}`, { token: m.admin });
  assert.equal(audit.body.items.length, 1);
});

test('sessions are not API tokens: they are not listed or revocable through /api/tokens', async (t) => {
  const m = await startMaster(t);
  const me = await call(m.url, 'GET', '/api/auth/me', { token: m.admin });
  assertProblem(await call(m.url, 'GET', `/api/tokens/${me.body.token.id}`, { token: m.admin }), 404, 'not_found');
  assertProblem(await call(m.url, 'DELETE', `/api/tokens/${me.body.token.id}`, { token: m.admin }), 404, 'not_found');
  assert.deepEqual((await call(m.url, 'GET', '/api/tokens', { token: m.admin })).body.items, []);
});

test("a token's effective scopes shrink when its owner loses scopes", async (t) => {
  const m = await startMaster(t);
  const user = await call(m.url, 'POST', '/api/users', {
    token: m.admin,
    body: { username: 'ops', password: 'ops-password-1', scopes: ['tokens:write', 'audit:read'] },
  });
  const session = await login(m.url, 'ops', 'ops-password-1');
  const token = (
    await call(m.url, 'POST', '/api/tokens', { token: session, body: { name: 'ops audit', scopes: ['audit:read'] } })
  ).body.token;
  assert.equal((await call(m.url, 'GET', '/api/audit-logs', { token })).status, 200);

  const updated = await call(m.url, 'PUT', `/api/users/${user.body.id}`, {
    token: m.admin,
    body: { username: 'ops', scopes: ['tokens:write'] },
  });
  assert.equal(updated.status, 200);
  assertProblem(await call(m.url, 'GET', '/api/audit-logs', { token }), 403, 'insufficient_scope');
  assert.deepEqual((await call(m.url, 'GET', '/api/auth/me', { token })).body.token.scopes, []);
});

test('token lists page with limit and cursor and filter by owner', async (t) => {
  const m = await startMaster(t);
  for (let i = 0; i < 5; i++) await mintToken(m, ['audit:read'], `t${i}`);
  const first = await call(m.url, 'GET', '/api/tokens?limit=2', { token: m.admin });
  assert.deepEqual(
    first.body.items.map((x: { name: string }) => x.name),
    ['t0', 't1'],
  );
  const second = await call(m.url, 'GET', `/api/tokens?limit=2&cursor=${first.body.next_cursor}`, { token: m.admin });
  assert.deepEqual(
    second.body.items.map((x: { name: string }) => x.name),
    ['t2', 't3'],
  );
  const third = await call(m.url, 'GET', `/api/tokens?limit=2&cursor=${second.body.next_cursor}`, { token: m.admin });
  assert.deepEqual(
    third.body.items.map((x: { name: string }) => x.name),
    ['t4'],
  );
  assert.equal(third.body.next_cursor, null);
  assert.equal((await call(m.url, 'GET', '/api/tokens?user_id=1', { token: m.admin })).body.items.length, 5);
  assert.equal((await call(m.url, 'GET', '/api/tokens?user_id=2', { token: m.admin })).body.items.length, 0);
});

test(
  'tokens:write revokes only tokens whose owner holds no scope the caller lacks; any token ' + 'may revoke itself',
  async (t) => {
    const m = await startMaster(t);
    const ops = { username: 'ops', password: 'ops-password-long', scopes: ['tokens:write', 'rules:read'] };
    assert.equal((await call(m.url, 'POST', '/api/users', { token: m.admin, body: ops })).status, 201);
    const opsSession = await login(m.url, ops.username, ops.password);
    const mine = (
      await call(m.url, 'POST', '/api/tokens', { token: opsSession, body: { name: 'mine', scopes: ['rules:read'] } })
    ).body;
    const admins = (
      await call(m.url, 'POST', '/api/tokens', {
        token: m.admin,
        body: { name: 'admin deploy', scopes: ['rules:read'] },
      })
    ).body;

    const before = snapshot(m, ['audit_log']);
    const refused = await call(m.url, 'DELETE', `/api/tokens/${admins.id}`, { token: opsSession });
    assertProblem(refused, 403, 'insufficient_scope');
    assert.equal(snapshot(m, ['audit_log']), before);
    assert.equal(
      (await call(m.url, 'GET', `/api/audit-logs?action=token.delete&status=denied`, { token: m.admin })).body.items
        .length,
      1,
    );
    assert.equal(
      (await call(m.url, 'GET', '/api/auth/me', { token: admins.token })).status,
      200,
      "the admin's token still works",
    );

    assert.equal((await call(m.url, 'DELETE', `/api/tokens/${mine.id}`, { token: opsSession })).status, 204);
    // A token holding nothing but tokens:write, of a user holding more, can still revoke itself.
    const narrow = (
      await call(m.url, 'POST', '/api/tokens', { token: m.admin, body: { name: 'narrow', scopes: ['tokens:write'] } })
    ).body;
    assertProblem(
      await call(m.url, 'DELETE', `/api/tokens/${admins.id}`, { token: narrow.token }),
      403,
      'insufficient_scope',
    );
    assert.equal((await call(m.url, 'DELETE', `/api/tokens/${narrow.id}`, { token: narrow.token })).status, 204);
    assert.equal((await call(m.url, 'GET', '/api/auth/me', { token: narrow.token })).status, 401);
  },
);
