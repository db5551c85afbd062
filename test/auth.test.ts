import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ADMIN_PASSWORD, assertProblem, call, login, mintToken, startMaster } from './helpers.ts';

test('login returns a session token with the user\'s scopes that expires after session_ttl_seconds', async (t) => {
  const m = await startMaster(t);
  const answer = await call(m.url, 'POST', '/api/auth/login', { body: { username: 'admin', password: ADMIN_PASSWORD } });
  assert.equal(answer.status, 200);
  assert.match(answer.body.token, /^mss_[A-Za-z0-9_-]{43}$/);
  assert.deepEqual(answer.body.user, { id: 1, username: 'admin', scopes: ['*'] });
  const ttl = Date.parse(answer.body.expires_at) - Date.now();
  assert.ok(ttl > 43_100_000 && ttl <= 43_200_000, `ttl ${ttl}`);

  const me = await call(m.url, 'GET', '/api/auth/me', { token: answer.body.token });
  assert.equal(me.status, 200);
  assert.deepEqual(me.body.user, { id: 1, username: 'admin', scopes: ['*'] });
  assert.equal(me.body.token.kind, 'session');
  assert.equal(me.body.token.expires_at, answer.body.expires_at);

  m.advance(43_200_000 + 1000);
  const expired = await call(m.url, 'GET', '/api/auth/me', { token: answer.body.token });
  assertProblem(expired, 401, 'unauthorized');
  assert.match(expired.body.detail, /expired/);
});

test('usernames are matched ignoring case', async (t) => {
  const m = await startMaster(t);
  assert.match(await login(m.url, 'ADMIN', ADMIN_PASSWORD), /^mss_/);
});

test('a wrong password or unknown user is 401 with the same message, and audited as failed', async (t) => {
  const m = await startMaster(t);
  const wrong = await call(m.url, 'POST', '/api/auth/login', { body: { username: 'admin', password: 'not-the-password' } });
  const unknown = await call(m.url, 'POST', '/api/auth/login', { body: { username: 'nobody', password: 'not-the-password' } });
  assertProblem(wrong, 401, 'unauthorized');
  assertProblem(unknown, 401, 'unauthorized');
  assert.equal(wrong.body.detail, unknown.body.detail);

  const audit = await call(m.url, 'GET', '/api/audit-logs?action=auth.login&status=failed', { token: m.admin });
  assert.deepEqual(audit.body.items.map((e: { actor_name: string; actor_type: string }) => [e.actor_name, e.actor_type]), [['nobody', 'anonymous'], ['admin', 'anonymous']]);
  assert.ok(!JSON.stringify(audit.body).includes('not-the-password'));
});

test('failed logins are throttled per user: 429 with Retry-After, even for the right password, until the window passes', async (t) => {
  const m = await startMaster(t);
  for (let i = 0; i < 5; i++) {
    assert.equal((await call(m.url, 'POST', '/api/auth/login', { body: { username: 'admin', password: `guess-number-${i}` } })).status, 401);
  }
  const blocked = await call(m.url, 'POST', '/api/auth/login', { body: { username: 'admin', password: ADMIN_PASSWORD } });
  assertProblem(blocked, 429, 'rate_limited');
  const retryAfter = Number(blocked.headers.get('retry-after'));
  assert.ok(retryAfter > 0 && retryAfter <= 900, `Retry-After ${retryAfter}`);

  m.advance(900_000);
  assert.match(await login(m.url, 'admin', ADMIN_PASSWORD), /^mss_/);
});

test('failed logins are throttled per address across usernames', async (t) => {
  const m = await startMaster(t);
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { login_max_failures_per_address: 3 } });
  for (const username of ['a', 'b', 'c']) {
    assert.equal((await call(m.url, 'POST', '/api/auth/login', { body: { username, password: 'wrong-password' } })).status, 401);
  }
  assertProblem(await call(m.url, 'POST', '/api/auth/login', { body: { username: 'admin', password: ADMIN_PASSWORD } }), 429, 'rate_limited');
});

test('logout ends the session at once; API tokens cannot log out', async (t) => {
  const m = await startMaster(t);
  const session = await login(m.url, 'admin', ADMIN_PASSWORD);
  assert.equal((await call(m.url, 'POST', '/api/auth/logout', { token: session })).status, 204);
  assertProblem(await call(m.url, 'GET', '/api/auth/me', { token: session }), 401, 'unauthorized');

  const api = await mintToken(m, ['audit:read']);
  assertProblem(await call(m.url, 'POST', '/api/auth/logout', { token: api }), 409, 'conflict');
  assert.equal((await call(m.url, 'GET', '/api/auth/me', { token: api })).status, 200);

  const audit = await call(m.url, 'GET', '/api/audit-logs?action=auth.logout', { token: m.admin });
  assert.equal(audit.body.items.length, 1);
});

test('a disabled user cannot log in', async (t) => {
  const m = await startMaster(t);
  const created = await call(m.url, 'POST', '/api/users', { token: m.admin, body: { username: 'eve', password: 'eve-password-1', disabled: true } });
  assert.equal(created.status, 201);
  assertProblem(await call(m.url, 'POST', '/api/auth/login', { body: { username: 'eve', password: 'eve-password-1' } }), 401, 'unauthorized');
});
