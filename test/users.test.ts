import assert from 'node:assert/strict';
import { test } from 'node:test';
import { assertProblem, call, login, mintToken, snapshot, startMaster } from './helpers.ts';

test('users: create, get with ETag, GET | PUT round trip, delete', async (t) => {
  const m = await startMaster(t);
  const created = await call(m.url, 'POST', '/api/users', {
    token: m.admin,
    body: { username: 'alice', password: 'alice-password', scopes: ['nodes:read'] },
  });
  assert.equal(created.status, 201);
  assert.equal(created.headers.get('location'), `/api/users/${created.body.id}`);
  assert.deepEqual(Object.keys(created.body).sort(), [
    'created_at',
    'disabled',
    'expired',
    'expires_at',
    'id',
    'plan_id',
    'role',
    'scopes',
    'updated_at',
    'usage',
    'username',
    'version',
  ]);
  assert.deepEqual(created.body.usage, { rules: 0, traffic: null });

  const got = await call(m.url, 'GET', `/api/users/${created.body.id}`, { token: m.admin });
  assert.equal(got.headers.get('etag'), '"1"');
  const edited = { ...got.body, scopes: ['nodes:read', 'rules:read'] };
  const put = await call(m.url, 'PUT', `/api/users/${created.body.id}`, {
    token: m.admin,
    body: edited,
    headers: { 'if-match': got.headers.get('etag')! },
  });
  assert.equal(put.status, 200);
  assert.deepEqual(put.body.scopes, ['nodes:read', 'rules:read']);
  assert.equal(put.headers.get('etag'), '"2"');
  assert.match(await login(m.url, 'alice', 'alice-password'), /^mss_/, 'an absent password keeps the old one');

  const stale = await call(m.url, 'PUT', `/api/users/${created.body.id}`, {
    token: m.admin,
    body: edited,
    headers: { 'if-match': '"1"' },
  });
  assertProblem(stale, 412, 'precondition_failed');
  assert.equal(stale.headers.get('etag'), '"2"');

  assert.equal((await call(m.url, 'DELETE', `/api/users/${created.body.id}`, { token: m.admin })).status, 204);
  assertProblem(await call(m.url, 'GET', `/api/users/${created.body.id}`, { token: m.admin }), 404, 'not_found');
});

test('passwords are write-only and stored as scrypt hashes', async (t) => {
  const m = await startMaster(t);
  const created = await call(m.url, 'POST', '/api/users', {
    token: m.admin,
    body: { username: 'bob', password: 'bobs-secret-pass' },
  });
  assert.ok(!JSON.stringify(created.body).includes('bobs-secret-pass'));
  const row = m.app.store.db.prepare('SELECT password_hash FROM users WHERE username = ?').get('bob') as {
    password_hash: string;
  };
  assert.match(row.password_hash, /^scrypt\$32768\$8\$1\$/);
  const audit = await call(m.url, 'GET', '/api/audit-logs?action=user.create', { token: m.admin });
  assert.equal(audit.body.items[0].changes.after.password, '[redacted]');
});

test('usernames are unique ignoring case; the 409 names the holder', async (t) => {
  const m = await startMaster(t);
  const taken = await call(m.url, 'POST', '/api/users', {
    token: m.admin,
    body: { username: 'Admin', password: 'another-password' },
  });
  assertProblem(taken, 409, 'conflict');
  assert.equal(taken.body.conflicting_id, 1);
});

test('unknown fields, short passwords and bad usernames are 422 listing every field', async (t) => {
  const m = await startMaster(t);
  const before = snapshot(m);
  const answer = await call(m.url, 'POST', '/api/users', {
    token: m.admin,
    body: { username: ' spaced', password: 'short', scopes: ['nodes:read', 'bogus'], admin: true },
  });
  assertProblem(answer, 422, 'validation_failed');
  assert.deepEqual(answer.body.errors.map((e: { pointer: string }) => e.pointer).sort(), [
    '#/admin',
    '#/password',
    '#/scopes/1',
    '#/username',
  ]);
  assert.equal(snapshot(m), before);
});

test('the last enabled holder of * cannot be deleted, disabled or stripped of it', async (t) => {
  const m = await startMaster(t);
  const before = snapshot(m);
  assertProblem(await call(m.url, 'DELETE', '/api/users/1', { token: m.admin }), 409, 'conflict');
  assertProblem(
    await call(m.url, 'PUT', '/api/users/1', {
      token: m.admin,
      body: { username: 'admin', scopes: ['*'], disabled: true },
    }),
    409,
    'conflict',
  );
  assertProblem(
    await call(m.url, 'PUT', '/api/users/1', { token: m.admin, body: { username: 'admin', scopes: ['users:write'] } }),
    409,
    'conflict',
  );
  assert.equal(snapshot(m), before);

  // With a second superuser, the first may go.
  await call(m.url, 'POST', '/api/users', {
    token: m.admin,
    body: { username: 'root2', password: 'root2-password', scopes: ['*'] },
  });
  assert.equal(
    (await call(m.url, 'PUT', '/api/users/1', { token: m.admin, body: { username: 'admin', scopes: ['users:read'] } }))
      .status,
    200,
  );
});

test('deleting or disabling a user ends its sessions and revokes its tokens', async (t) => {
  const m = await startMaster(t);
  for (const how of ['disable', 'delete'] as const) {
    const user = await call(m.url, 'POST', '/api/users', {
      token: m.admin,
      body: { username: `u-${how}`, password: 'user-password-1', scopes: ['tokens:write', 'audit:read'] },
    });
    const session = await login(m.url, `u-${how}`, 'user-password-1');
    const token = (
      await call(m.url, 'POST', '/api/tokens', { token: session, body: { name: 'mine', scopes: ['audit:read'] } })
    ).body.token;
    const change =
      how === 'disable'
        ? await call(m.url, 'PUT', `/api/users/${user.body.id}`, {
            token: m.admin,
            body: { username: `u-${how}`, scopes: ['audit:read'], disabled: true },
          })
        : await call(m.url, 'DELETE', `/api/users/${user.body.id}`, { token: m.admin });
    assert.ok(change.status === 200 || change.status === 204, how);
    assertProblem(await call(m.url, 'GET', '/api/auth/me', { token: session }), 401, 'unauthorized');
    assertProblem(await call(m.url, 'GET', '/api/auth/me', { token }), 401, 'unauthorized');
    assert.equal(
      (m.app.store.db.prepare('SELECT count(*) AS n FROM tokens WHERE user_id = ?').get(user.body.id) as { n: number })
        .n,
      0,
    );
  }
});

test("a new password ends the user's sessions but keeps its API tokens", async (t) => {
  const m = await startMaster(t);
  const user = await call(m.url, 'POST', '/api/users', {
    token: m.admin,
    body: { username: 'carol', password: 'carol-password', scopes: ['tokens:write', 'audit:read'] },
  });
  const session = await login(m.url, 'carol', 'carol-password');
  const token = (
    await call(m.url, 'POST', '/api/tokens', { token: session, body: { name: 'mine', scopes: ['audit:read'] } })
  ).body.token;
  await call(m.url, 'PUT', `/api/users/${user.body.id}`, {
    token: m.admin,
    body: { username: 'carol', password: 'carol-new-password', scopes: ['tokens:write', 'audit:read'] },
  });
  assertProblem(await call(m.url, 'GET', '/api/auth/me', { token: session }), 401, 'unauthorized');
  assert.equal((await call(m.url, 'GET', '/api/auth/me', { token })).status, 200);
  assert.match(await login(m.url, 'carol', 'carol-new-password'), /^mss_/);
});

test('users:write cannot escalate: no granting scopes it lacks, no changing more privileged users', async (t) => {
  const m = await startMaster(t);
  const manager = await mintToken(m, ['users:write']);
  const before = snapshot(m, ['audit_log']);
  assertProblem(
    await call(m.url, 'POST', '/api/users', {
      token: manager,
      body: { username: 'mallory', password: 'mallory-password', scopes: ['*'] },
    }),
    403,
    'insufficient_scope',
  );
  assertProblem(
    await call(m.url, 'PUT', '/api/users/1', {
      token: manager,
      body: { username: 'admin', password: 'taken-over-password', scopes: [] },
    }),
    403,
    'insufficient_scope',
  );
  assertProblem(await call(m.url, 'DELETE', '/api/users/1', { token: manager }), 403, 'insufficient_scope');
  // Nothing changes; each refusal is audited as a denied write.
  assert.equal(snapshot(m, ['audit_log']), before);
  const denied = (await call(m.url, 'GET', '/api/audit-logs?status=denied', { token: m.admin })).body.items;
  assert.deepEqual(
    denied.map((e: { action: string }) => e.action),
    ['user.delete', 'user.update', 'user.create'],
  );
  const ok = await call(m.url, 'POST', '/api/users', {
    token: manager,
    body: { username: 'helper', password: 'helper-password', scopes: ['users:read'] },
  });
  assert.equal(ok.status, 201);
});

test('user lists filter by q and disabled and page by cursor', async (t) => {
  const m = await startMaster(t);
  for (const [username, disabled] of [
    ['web-1', false],
    ['web-2', true],
    ['db-1', false],
  ] as const) {
    await call(m.url, 'POST', '/api/users', {
      token: m.admin,
      body: { username, password: 'some-password-1', disabled },
    });
  }
  const names = async (query: string) =>
    (await call(m.url, 'GET', `/api/users${query}`, { token: m.admin })).body.items.map(
      (u: { username: string }) => u.username,
    );
  assert.deepEqual(await names('?q=WEB'), ['web-1', 'web-2']);
  assert.deepEqual(await names('?disabled=true'), ['web-2']);
  assert.deepEqual(await names('?q=web&disabled=false'), ['web-1']);
  const page = await call(m.url, 'GET', '/api/users?limit=3', { token: m.admin });
  assert.equal(page.body.items.length, 3);
  assert.deepEqual(await names(`?limit=3&cursor=${page.body.next_cursor}`), ['db-1']);
});
