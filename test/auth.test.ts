import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ADMIN_PASSWORD, assertProblem, call, login, mintToken, startMaster } from './helpers.ts';

test("login returns a session token with the user's scopes that expires after session_ttl_seconds", async (t) => {
  const m = await startMaster(t);
  const answer = await call(m.url, 'POST', '/api/auth/login', {
    body: { username: 'admin', password: ADMIN_PASSWORD },
  });
  assert.equal(answer.status, 200);
  assert.match(answer.body.token, /^mss_[A-Za-z0-9_-]{43}$/);
  assert.deepEqual(answer.body.user, {
    id: 1,
    username: 'admin',
    role: 'operator',
    plan_id: null,
    scopes: ['*'],
    expires_at: null,
  });
  const ttl = Date.parse(answer.body.expires_at) - Date.now();
  assert.ok(ttl > 43_100_000 && ttl <= 43_200_000, `ttl ${ttl}`);

  const me = await call(m.url, 'GET', '/api/auth/me', { token: answer.body.token });
  assert.equal(me.status, 200);
  assert.deepEqual(me.body.user, {
    id: 1,
    username: 'admin',
    role: 'operator',
    plan_id: null,
    scopes: ['*'],
    expires_at: null,
  });
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
  const wrong = await call(m.url, 'POST', '/api/auth/login', {
    body: { username: 'admin', password: 'not-the-password' },
  });
  const unknown = await call(m.url, 'POST', '/api/auth/login', {
    body: { username: 'nobody', password: 'not-the-password' },
  });
  assertProblem(wrong, 401, 'unauthorized');
  assertProblem(unknown, 401, 'unauthorized');
  assert.equal(wrong.body.detail, unknown.body.detail);

  const audit = await call(m.url, 'GET', '/api/audit-logs?action=auth.login&status=failed', { token: m.admin });
  assert.deepEqual(
    audit.body.items.map((e: { actor_name: string; actor_type: string }) => [e.actor_name, e.actor_type]),
    [
      ['nobody', 'anonymous'],
      ['admin', 'anonymous'],
    ],
  );
  assert.ok(!JSON.stringify(audit.body).includes('not-the-password'));
});

test(
  'failed logins per user are slowed progressively: 429 with Retry-After, even for the right ' +
    'password, never a lockout',
  async (t) => {
    const m = await startMaster(t);
    for (let i = 0; i < 5; i++) {
      assert.equal(
        (await call(m.url, 'POST', '/api/auth/login', { body: { username: 'admin', password: `guess-number-${i}` } }))
          .status,
        401,
      );
    }
    const waits: number[] = [];
    for (let i = 0; i < 4; i++) {
      const blocked = await call(m.url, 'POST', '/api/auth/login', {
        body: { username: 'admin', password: ADMIN_PASSWORD },
      });
      assertProblem(blocked, 429, 'rate_limited');
      waits.push(Number(blocked.headers.get('retry-after')));
      // The stranger waits its turn and guesses wrong again: the next wait doubles.
      m.advance(waits[i]! * 1000);
      assert.equal(
        (await call(m.url, 'POST', '/api/auth/login', { body: { username: 'admin', password: `more-guesses-${i}` } }))
          .status,
        401,
      );
    }
    assert.deepEqual(waits, [1, 2, 4, 8]);
    // However long the guessing went on, the right password gets in after at most a minute's wait.
    for (let i = 0; i < 20; i++) {
      m.advance(60_000);
      await call(m.url, 'POST', '/api/auth/login', { body: { username: 'admin', password: `even-more-${i}` } });
    }
    const blocked = await call(m.url, 'POST', '/api/auth/login', {
      body: { username: 'admin', password: ADMIN_PASSWORD },
    });
    assert.ok(Number(blocked.headers.get('retry-after')) <= 60);
    m.advance(60_000);
    assert.match(await login(m.url, 'admin', ADMIN_PASSWORD), /^mss_/);
  },
);

test('concurrent guesses are reserved before hashing: 40 at once against a limit of 5 check 5 passwords', async (t) => {
  const m = await startMaster(t);
  const answers = await Promise.all(
    Array.from({ length: 40 }, (_, i) =>
      call(m.url, 'POST', '/api/auth/login', { body: { username: 'admin', password: `parallel-guess-${i}` } }),
    ),
  );
  const statuses = answers.map((a) => a.status);
  assert.equal(statuses.filter((s) => s === 401).length, 5, statuses.join(','));
  assert.equal(statuses.filter((s) => s === 429).length, 35);
  const failed = await call(m.url, 'GET', '/api/audit-logs?action=auth.login&status=failed', { token: m.admin });
  assert.equal(failed.body.items.length, 5, 'five passwords were checked');
});

test(
  'a flood of logins is turned away past a few concurrent password checks, and the API keeps ' + 'answering',
  async (t) => {
    const m = await startMaster(t);
    await call(m.url, 'PATCH', '/api/settings', {
      token: m.admin,
      body: { login_max_failures: 1000, login_max_failures_per_address: 100_000 },
    });
    const flood = Promise.all(
      Array.from({ length: 60 }, (_, i) =>
        call(m.url, 'POST', '/api/auth/login', { body: { username: `user-${i}`, password: 'wrong-password' } }),
      ),
    );
    const meanwhile = await call(m.url, 'GET', '/api/settings', { token: m.admin });
    assert.equal(meanwhile.status, 200);
    const answers = await flood;
    const busy = answers.filter((a) => a.status === 429);
    assert.ok(
      busy.length > 0 &&
        busy.every((a) => /too many passwords/.test(a.body.detail) && a.headers.get('retry-after') === '1'),
      JSON.stringify(answers.map((a) => a.status)),
    );
    assert.equal(answers.filter((a) => a.status === 401).length + busy.length, 60);
    // Turned-away attempts count as no failure: the throttle saw only what was checked.
    const checked = (
      await call(m.url, 'GET', '/api/audit-logs?action=auth.login&status=failed&limit=1000', { token: m.admin })
    ).body.items.length;
    assert.equal(checked, 60 - busy.length);
  },
);

test('failed logins are throttled per address across usernames', async (t) => {
  const m = await startMaster(t);
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { login_max_failures_per_address: 3 } });
  for (const username of ['a', 'b', 'c']) {
    assert.equal(
      (await call(m.url, 'POST', '/api/auth/login', { body: { username, password: 'wrong-password' } })).status,
      401,
    );
  }
  assertProblem(
    await call(m.url, 'POST', '/api/auth/login', { body: { username: 'admin', password: ADMIN_PASSWORD } }),
    429,
    'rate_limited',
  );
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
  const created = await call(m.url, 'POST', '/api/users', {
    token: m.admin,
    body: { username: 'eve', password: 'eve-password-1', disabled: true },
  });
  assert.equal(created.status, 201);
  assertProblem(
    await call(m.url, 'POST', '/api/auth/login', { body: { username: 'eve', password: 'eve-password-1' } }),
    401,
    'unauthorized',
  );
});
