// A user's own account: change the password with the current one, end the other sessions.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ADMIN_PASSWORD, assertProblem, call, login, mintToken, snapshot, startMaster } from './helpers.ts';

test('a user changes their own password with the current one; their other sessions end, this one stays', async (t) => {
  const m = await startMaster(t);
  await call(m.url, 'POST', '/api/users', {
    token: m.admin,
    body: { username: 'ops', password: 'first-password', scopes: ['nodes:read'] },
  });
  const here = await login(m.url, 'ops', 'first-password');
  const laptop = await login(m.url, 'ops', 'first-password');
  const script = await mintToken(m, ['nodes:read'], 'admin script');
  const change = (current: string, next: string) =>
    call(m.url, 'POST', '/api/auth/password', {
      token: here,
      body: { current_password: current, new_password: next },
    });

  const before = snapshot(m, ['audit_log', 'tokens']);
  const wrong = await change('not-it', 'second-password');
  assertProblem(wrong, 422, 'validation_failed');
  assert.equal(wrong.body.errors[0].pointer, '#/current_password');
  assert.equal(snapshot(m, ['audit_log', 'tokens']), before, 'a wrong current password changes nothing');
  assertProblem(await change('first-password', 'short'), 422, 'validation_failed');

  const changed = await change('first-password', 'second-password');
  assert.equal(changed.status, 200, JSON.stringify(changed.body));
  assert.deepEqual(changed.body, { sessions_ended: 1 });
  assert.equal((await call(m.url, 'GET', '/api/auth/me', { token: here })).status, 200, 'this session stays');
  assert.equal((await call(m.url, 'GET', '/api/auth/me', { token: laptop })).status, 401, 'the other one ended');
  assert.equal((await call(m.url, 'GET', '/api/auth/me', { token: script })).status, 200, "others' tokens stay");
  assert.equal(
    (await call(m.url, 'POST', '/api/auth/login', { body: { username: 'ops', password: 'first-password' } })).status,
    401,
  );
  await login(m.url, 'ops', 'second-password');

  const audit = await call(m.url, 'GET', '/api/audit-logs?action=auth.password', { token: m.admin });
  assert.deepEqual(
    audit.body.items.map((e: { status: string }) => e.status),
    ['success', 'failed'],
  );
  assert.equal(JSON.stringify(audit.body).includes('second-password'), false, 'the new password is not in the log');

  // Wrong guesses are throttled as failed logins are.
  for (let i = 0; i < 6; i++) await change(`guess-${i}`, 'third-password');
  assertProblem(await change('second-password', 'third-password'), 429, 'rate_limited');
});

const OWN_SESSIONS =
  'a user ends every other login session of theirs; an API token can neither sign its owner out nor touch the password';
test(OWN_SESSIONS, async (t) => {
  const m = await startMaster(t);
  const [a, b, c] = [await login(m.url, 'admin', ADMIN_PASSWORD), await login(m.url, 'admin', ADMIN_PASSWORD), m.admin];
  const ended = await call(m.url, 'POST', '/api/auth/logout-others', { token: a });
  assert.deepEqual(ended.body, { sessions_ended: 2 });
  assert.deepEqual(
    await Promise.all([a, b, c].map(async (token) => (await call(m.url, 'GET', '/api/auth/me', { token })).status)),
    [200, 401, 401],
  );
  const minted = await call(m.url, 'POST', '/api/tokens', {
    token: a,
    body: { name: 'script', scopes: ['audit:read'] },
  });
  const script = minted.body.token;
  const other = await login(m.url, 'admin', ADMIN_PASSWORD);
  assertProblem(await call(m.url, 'POST', '/api/auth/logout-others', { token: script }), 403, 'insufficient_scope');
  // Wrong guesses through a token would lock its owner's login: a token may not guess at all.
  for (let i = 0; i < 8; i++)
    assertProblem(
      await call(m.url, 'POST', '/api/auth/password', {
        token: script,
        body: { current_password: 'a wrong guess', new_password: 'long-enough-password' },
      }),
      403,
      'insufficient_scope',
    );
  assert.equal((await call(m.url, 'GET', '/api/auth/me', { token: other })).status, 200, 'the session lives on');
  assert.ok(await login(m.url, 'admin', ADMIN_PASSWORD), 'and the owner can still sign in');
});
