import assert from 'node:assert/strict';
import { once } from 'node:events';
import { Agent, request as httpRequest } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { connect, type Socket } from 'node:net';
import { test } from 'node:test';
import type { Logger } from '../internal/log/log.ts';
import { assertProblem, call, certFiles, login, mintToken, snapshot, startMaster } from './helpers.ts';
import { until } from './net.ts';

test('unknown paths are 404 and wrong methods 405 with Allow, as problem+json', async (t) => {
  const m = await startMaster(t);
  const missing = await call(m.url, 'GET', '/api/nothing-here', { token: m.admin });
  assertProblem(missing, 404, 'not_found');
  assert.equal(missing.body.request_id, missing.headers.get('x-request-id'));
  assert.equal(missing.body.status, 404);
  assert.ok(missing.body.type && missing.body.title && missing.body.detail);

  const wrong = await call(m.url, 'DELETE', '/api/settings', { token: m.admin });
  assertProblem(wrong, 405, 'method_not_allowed');
  assert.equal(wrong.headers.get('allow'), 'GET, HEAD, PATCH');

  const badId = await call(m.url, 'GET', '/api/users/abc', { token: m.admin });
  assertProblem(badId, 404, 'not_found');
});

test('X-Request-Id is echoed when sane and minted otherwise', async (t) => {
  const m = await startMaster(t);
  const echoed = await call(m.url, 'GET', '/api/auth/me', {
    token: m.admin,
    headers: { 'x-request-id': 'job-42.step:1' },
  });
  assert.equal(echoed.headers.get('x-request-id'), 'job-42.step:1');
  const replaced = await call(m.url, 'GET', '/api/auth/me', {
    token: m.admin,
    headers: { 'x-request-id': 'has spaces and <angle>' },
  });
  assert.match(replaced.headers.get('x-request-id')!, /^[0-9a-f-]{36}$/);
});

test('HEAD answers a GET route with its headers and no body', async (t) => {
  const m = await startMaster(t);
  const head = await call(m.url, 'HEAD', '/api/settings', { token: m.admin });
  assert.equal(head.status, 200);
  assert.equal(head.body, '');
  assert.ok(head.headers.get('etag'));
});

test('missing, malformed or unknown bearer tokens are 401 with WWW-Authenticate', async (t) => {
  const m = await startMaster(t);
  for (const authorization of [
    undefined,
    'Basic abc',
    'Bearer',
    'Bearer mst_short',
    `Bearer mst_${'A'.repeat(43)}`,
    `Bearer mat_${'A'.repeat(43)}`,
  ]) {
    const answer = await call(m.url, 'GET', '/api/settings', { headers: authorization ? { authorization } : {} });
    assertProblem(answer, 401, 'unauthorized');
    // RFC 6750: a token that was sent and is not good is named invalid_token; no token at all gets the challenge alone.
    const sentToken = /^Bearer \S/.test(authorization ?? '');
    assert.equal(
      answer.headers.get('www-authenticate'),
      sentToken ? 'Bearer realm="portplane", error="invalid_token"' : 'Bearer realm="portplane"',
      String(authorization),
    );
  }
});

test('a revoked or expired token is 401 invalid_token', async (t) => {
  const m = await startMaster(t);
  const session = await login(m.url, 'admin', 'admin-password-for-tests');
  assert.equal((await call(m.url, 'POST', '/api/auth/logout', { token: session })).status, 204);
  const revoked = await call(m.url, 'GET', '/api/auth/me', { token: session });
  assertProblem(revoked, 401, 'unauthorized');
  assert.equal(revoked.headers.get('www-authenticate'), 'Bearer realm="portplane", error="invalid_token"');
  const expiring = await call(m.url, 'POST', '/api/tokens', {
    token: m.admin,
    body: { name: 'brief', scopes: ['audit:read'], expires_at: new Date(Date.now() + 3_600_000).toISOString() },
  });
  assert.equal(expiring.status, 201, JSON.stringify(expiring.body));
  assert.equal((await call(m.url, 'GET', '/api/auth/me', { token: expiring.body.token })).status, 200);
  m.advance(2 * 3_600_000);
  const expired = await call(m.url, 'GET', '/api/auth/me', { token: expiring.body.token });
  assert.match(expired.body.detail, /expired/);
  assert.equal(expired.headers.get('www-authenticate'), 'Bearer realm="portplane", error="invalid_token"');
});

/** GET `path` exactly as given: fetch and URL would resolve dot segments before sending. */
function rawGet(base: string, path: string, token: string): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${base}/`, { path, headers: { authorization: `Bearer ${token}` } }, (res) => {
      let text = '';
      res.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text) }));
    });
    req.on('error', reject).end();
  });
}

test('dot segments and encoded slashes in a path are refused, never resolved to another route', async (t) => {
  const m = await startMaster(t);
  for (const path of [
    '/api/nodes/%2e%2e/users',
    '/api/nodes/%2E%2E/users',
    '/api/nodes/../users',
    '/api/nodes/./1',
    '/api/nodes/.%2e/users',
    '/api/nodes%2f..%2fusers',
    '/api/users%2F1',
    '//api/users',
    '/api/nodes/..%5cusers',
  ]) {
    const answer = await rawGet(m.url, path, m.admin);
    assert.equal(answer.status, 400, path);
    assert.equal(answer.body.code, 'bad_request', path);
  }
  // What looks like a dot segment but is not one routes as sent.
  assert.equal((await rawGet(m.url, '/api/users?q=..', m.admin)).status, 200);
  assert.equal((await rawGet(m.url, '/api/nodes/.x', m.admin)).status, 404);
});

test('bodies: wrong media type 415, broken JSON 400, too large 413, none of them change anything', async (t) => {
  const m = await startMaster(t);
  const before = snapshot(m);
  const body = JSON.stringify({ name: 'x', scopes: ['audit:read'] });
  assertProblem(
    await call(m.url, 'POST', '/api/tokens', { token: m.admin, body, headers: { 'content-type': 'text/plain' } }),
    415,
    'unsupported_media_type',
  );
  assertProblem(await call(m.url, 'POST', '/api/tokens', { token: m.admin, body: '{"name": ' }), 400, 'invalid_json');
  assertProblem(
    await call(m.url, 'POST', '/api/tokens', { token: m.admin, body: `{"name":"${'x'.repeat(1024 * 1024)}"}` }),
    413,
    'payload_too_large',
  );
  assertProblem(await call(m.url, 'POST', '/api/tokens', { token: m.admin }), 422, 'validation_failed');
  assertProblem(
    await call(m.url, 'POST', '/api/auth/logout', { token: m.admin, body: { surprise: 1 } }),
    422,
    'validation_failed',
  );
  assert.equal(snapshot(m), before);
});

test('a chunked body over the limit is cut off with 413', async (t) => {
  const m = await startMaster(t);
  const url = new URL(m.url);
  const status = await new Promise<number>((resolve, reject) => {
    const req = httpRequest(
      {
        host: url.hostname,
        port: url.port,
        method: 'POST',
        path: '/api/tokens',
        headers: { authorization: `Bearer ${m.admin}`, 'content-type': 'application/json' },
      },
      (res) => {
        res.resume();
        resolve(res.statusCode!);
      },
    );
    req.on('error', reject);
    const chunk = Buffer.alloc(64 * 1024, 0x20);
    let sent = 0;
    const pump = () => {
      while (sent < 2 * 1024 * 1024) {
        sent += chunk.length;
        if (!req.write(chunk)) return void req.once('drain', pump);
      }
      req.end();
    };
    pump();
  });
  assert.equal(status, 413);
});

test('query parameters: unknown, repeated or out of range are 400 invalid_query', async (t) => {
  const m = await startMaster(t);
  for (const query of [
    '?colour=red',
    '?limit=0',
    '?limit=1001',
    '?limit=ten',
    '?limit=1&limit=2',
    '?cursor=bogus',
    '?disabled=yes',
  ]) {
    const answer = await call(m.url, 'GET', `/api/users${query}`, { token: m.admin });
    assertProblem(answer, 400, 'invalid_query');
    assert.ok(answer.body.errors.length >= 1, query);
  }
});

test(
  'Idempotency-Key: a retried POST gets the stored response, its secret redacted, and ' + 'creates nothing twice',
  async (t) => {
    const m = await startMaster(t);
    const send = (body: unknown) =>
      call(m.url, 'POST', '/api/tokens', { token: m.admin, body, headers: { 'idempotency-key': 'create-ci-token-1' } });
    const first = await send({ name: 'ci', scopes: ['audit:read'] });
    assert.equal(first.status, 201);
    const retry = await send({ name: 'ci', scopes: ['audit:read'] });
    assert.equal(retry.status, 201);
    assert.equal(retry.headers.get('idempotent-replayed'), 'true');
    // The secret is shown once; what is kept for replays (and so on disk) never holds it.
    assert.deepEqual(retry.body, { ...first.body, token: '[redacted]' });
    const stored = m.app.store.db.prepare('SELECT body FROM idempotency_keys').all() as { body: Uint8Array }[];
    assert.ok(stored.every((row) => !Buffer.from(row.body).toString().includes(first.body.token)));
    assert.equal(retry.headers.get('location'), first.headers.get('location'));

    const list = await call(m.url, 'GET', '/api/tokens', { token: m.admin });
    assert.equal(list.body.items.filter((token: { name: string }) => token.name === 'ci').length, 1);

    assertProblem(await send({ name: 'other', scopes: ['audit:read'] }), 422, 'idempotency_key_reused');
    assertProblem(
      await call(m.url, 'POST', '/api/tokens', {
        token: m.admin,
        body: {},
        headers: { 'idempotency-key': 'bad key with spaces' },
      }),
      422,
      'validation_failed',
    );

    // Keys belong to the token that used them: another token's same key is a new request.
    const other = await mintToken(m, ['tokens:write', 'audit:read']);
    const fresh = await call(m.url, 'POST', '/api/tokens', {
      token: other,
      body: { name: 'ci', scopes: ['audit:read'] },
      headers: { 'idempotency-key': 'create-ci-token-1' },
    });
    assert.equal(fresh.status, 201);
    assert.notEqual(fresh.body.id, first.body.id);
  },
);

test('Idempotency-Key: a retry while the first request is still running is 409', async (t) => {
  const m = await startMaster(t);
  const body = { username: 'slowpoke', password: 'long-enough-password' };
  const headers = { 'idempotency-key': 'make-slowpoke' };
  // Creating a user hashes a password with scrypt, so the first request is still in flight.
  const [a, b] = await Promise.all([
    call(m.url, 'POST', '/api/users', { token: m.admin, body, headers }),
    call(m.url, 'POST', '/api/users', { token: m.admin, body, headers }),
  ]);
  assert.deepEqual([a.status, b.status].sort(), [201, 409]);
  const replay = await call(m.url, 'POST', '/api/users', { token: m.admin, body, headers });
  assert.equal(replay.status, 201);
  assert.equal(replay.headers.get('idempotent-replayed'), 'true');
});

test(
  "Idempotency-Key: refusals are not stored, and a node's agent token and command are " + 'redacted in replays',
  async (t) => {
    const m = await startMaster(t);
    const send = (name: string) =>
      call(m.url, 'POST', '/api/nodes', {
        token: m.admin,
        body: { name, host: 'edge.example.net' },
        headers: { 'idempotency-key': 'node-1' },
      });
    assertProblem(
      await call(m.url, 'POST', '/api/nodes', {
        token: m.admin,
        body: { name: 'bad name!', host: 'x' },
        headers: { 'idempotency-key': 'node-1' },
      }),
      422,
      'validation_failed',
    );
    const created = await send('edge');
    assert.equal(created.status, 201, 'the 422 left no stored answer behind');
    const replay = await send('edge');
    assert.equal(replay.headers.get('idempotent-replayed'), 'true');
    assert.match(created.body.agent_command, /AGENT_TOKEN='mat_/);
    assert.deepEqual(replay.body, { ...created.body, agent_token: '[redacted]', agent_command: '[redacted]' });
  },
);

test('Idempotency-Key: a 429 is not stored, so the same retry acts once the budget allows', async (t) => {
  const m = await startMaster(t);
  const token = await mintToken(m, ['tokens:write', 'audit:read']);
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { write_budget_per_minute: 1 } });
  m.advance(61_000);
  const send = (key: string) =>
    call(m.url, 'POST', '/api/tokens', {
      token,
      body: { name: key, scopes: ['audit:read'] },
      headers: { 'idempotency-key': key },
    });
  assert.equal((await send('first')).status, 201);
  assertProblem(await send('second'), 429, 'rate_limited');
  m.advance(61_000);
  const retried = await send('second');
  assert.equal(retried.status, 201);
  assert.equal(retried.headers.get('idempotent-replayed'), null);
});

test(
  'the write budget paces each user, over all its tokens and sessions, with RateLimit ' +
    'headers and 429 + Retry-After',
  async (t) => {
    const m = await startMaster(t);
    const ops = { username: 'ops', password: 'ops-password-long', scopes: ['tokens:write'] };
    assert.equal((await call(m.url, 'POST', '/api/users', { token: m.admin, body: ops })).status, 201);
    const session = await login(m.url, ops.username, ops.password);
    const token = (
      await call(m.url, 'POST', '/api/tokens', { token: session, body: { name: 'script', scopes: ['tokens:write'] } })
    ).body.token;
    assert.equal(
      (await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { write_budget_per_minute: 3 } })).status,
      200,
    );

    const read = await call(m.url, 'GET', '/api/tokens', { token });
    assert.equal(read.headers.get('ratelimit-policy'), '"writes";q=3;w=60');
    assert.match(
      read.headers.get('ratelimit')!,
      /^"writes";r=2;t=\d+$/,
      "the token's creation by the same user spent one",
    );

    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) {
      const answer = await call(m.url, 'POST', '/api/tokens', {
        token,
        body: { name: `t${i}`, scopes: ['tokens:read'] },
      });
      statuses.push(answer.status);
      if (answer.status === 429) {
        assertProblem(answer, 429, 'rate_limited');
        assert.ok(Number(answer.headers.get('retry-after')) >= 1);
        assert.match(answer.headers.get('ratelimit')!, /^"writes";r=0;t=\d+$/);
      }
    }
    assert.deepEqual(statuses, [201, 201, 429]);
    // The user's other credentials share the budget, and logging in again does not renew it.
    assert.equal(
      (await call(m.url, 'POST', '/api/tokens', { token: session, body: { name: 'x', scopes: ['tokens:read'] } }))
        .status,
      429,
    );
    const again = await login(m.url, ops.username, ops.password);
    assert.equal(
      (await call(m.url, 'POST', '/api/tokens', { token: again, body: { name: 'x', scopes: ['tokens:read'] } })).status,
      429,
    );
    // Reads are not writes; another user has a budget of its own.
    assert.equal((await call(m.url, 'GET', '/api/tokens', { token })).status, 200);
    assert.equal(
      (await call(m.url, 'POST', '/api/tokens', { token: m.admin, body: { name: 'x', scopes: ['tokens:read'] } }))
        .status,
      201,
    );

    m.advance(61_000);
    assert.equal(
      (await call(m.url, 'POST', '/api/tokens', { token, body: { name: 'later', scopes: ['tokens:read'] } })).status,
      201,
    );
  },
);

test('while draining, requests get 503 with Retry-After', async (t) => {
  const m = await startMaster(t);
  m.app.draining = true;
  const answer = await call(m.url, 'GET', '/api/settings', { token: m.admin });
  m.app.draining = false;
  assertProblem(answer, 503, 'unavailable');
  assert.equal(answer.headers.get('retry-after'), '5');
});

test('hostile bodies get clear errors and never crash the server', async (t) => {
  const m = await startMaster(t);
  const bodies = [
    'null',
    '[]',
    '"text"',
    '123',
    '{"name":{"__proto__":{"admin":true}},"scopes":["*"]}',
    '{"__proto__":{"x":1},"name":"n","scopes":["*"]}',
    `${'['.repeat(100000)}${']'.repeat(100000)}`,
    '{"name":"\\u0000","scopes":["audit:read"],"expires_at":"2099-13-45T99:99:99Z"}',
    '{"name":"n","scopes":["audit:read"],"expires_at":1e400}',
  ];
  for (const body of bodies) {
    const answer = await call(m.url, 'POST', '/api/tokens', { token: m.admin, body });
    assert.ok([400, 422].includes(answer.status), `${body.slice(0, 40)} -> ${answer.status}`);
  }
  assert.equal((await call(m.url, 'GET', '/api/auth/me', { token: m.admin })).status, 200);
});

test('a body with more problems than a 422 lists gets the first 1,000 and a detail saying so', async (t) => {
  const m = await startMaster(t);
  // Every unknown key is a problem: a whole document of them, in an object and in every item of an array.
  const unknown = Object.fromEntries(Array.from({ length: 50_000 }, (_, i) => [`k${i}`, 0]));
  const rules = Array.from({ length: 2000 }, () => ({ x: 1 }));
  for (const [path, body] of [
    ['/api/nodes', { name: 'n', host: 'n.example', ...unknown }],
    ['/api/import', { format: 'portplane-export', version: 1, nodes: [], tunnels: [], rules }],
  ] as const) {
    const answer = await call(m.url, 'POST', path, { token: m.admin, body });
    assertProblem(answer, 422, 'validation_failed');
    assert.equal(answer.body.errors.length, 1000, path);
    assert.equal(answer.body.detail, 'more than 1000 fields are invalid; the first 1000 are listed', path);
  }
});

test('Idempotency-Key: a response too large to keep replays as 409 saying the request was carried out', async (t) => {
  const m = await startMaster(t);
  const document = {
    format: 'portplane-export',
    version: 1,
    nodes: [{ name: 'big', host: 'big.example.net', ssh_port: 22, ssh_user: 'root', tags: [] }],
    tunnels: [],
    rules: Array.from({ length: 5000 }, (_, i) => ({
      name: `r${i}`,
      node: 'big',
      protocol: 'tcp',
      listen_port: i + 1,
      targets: ['10.0.0.1:80'],
    })),
  };
  const send = () =>
    call(m.url, 'POST', '/api/import', {
      token: m.admin,
      body: document,
      headers: { 'idempotency-key': 'big-import' },
    });
  const first = await send();
  assert.equal(first.status, 200);
  assert.ok(JSON.stringify(first.body).length > 256 * 1024);
  const retry = await send();
  assertProblem(retry, 409, 'conflict');
  assert.match(retry.body.detail, /carried out \(status 200\).*too large to keep/);
  assert.equal(retry.headers.get('idempotent-replayed'), 'true');
  assert.equal((await call(m.url, 'GET', '/api/rules?limit=1', { token: m.admin })).body.items[0].name, 'r0');
  assert.equal(
    (m.app.store.db.prepare('SELECT count(*) AS n FROM rules').get() as { n: number }).n,
    5000,
    'imported once',
  );
});

test(
  'every API answer says no-store and nosniff: successes, secrets shown once, problems, ' + 'health, metrics',
  async (t) => {
    const m = await startMaster(t);
    const answers = [
      await call(m.url, 'GET', '/api/health'),
      await call(m.url, 'GET', '/api/metrics', { token: m.admin }),
      await call(m.url, 'GET', '/api/nodes', { token: m.admin }),
      await call(m.url, 'POST', '/api/tokens', {
        token: m.admin,
        body: { name: 'shown-once', scopes: ['audit:read'] },
      }),
      await call(m.url, 'POST', '/api/auth/login', { body: { username: 'admin', password: 'wrong-password' } }),
      await call(m.url, 'GET', '/api/nowhere'),
      await call(m.url, 'GET', '/api/openapi.json'),
    ];
    for (const answer of answers) {
      assert.equal(answer.headers.get('cache-control'), 'no-store', String(answer.status));
      assert.equal(answer.headers.get('x-content-type-options'), 'nosniff', String(answer.status));
    }
  },
);

const TOO_DEEP = 'a body nested deeper than 16 is refused before it is parsed, the public login and an import included';
test(TOO_DEEP, async (t) => {
  const m = await startMaster(t);
  const deep = '['.repeat(500_000) + ']'.repeat(500_000);
  // The master runs in this process: what its JSON.parse is given is seen here.
  const parsed: number[] = [];
  const parse = JSON.parse;
  JSON.parse = (text: string, ...rest: []) => (parsed.push(text.length), parse(text, ...rest));
  t.after(() => (JSON.parse = parse));
  for (const [path, token] of [
    ['/api/auth/login', undefined],
    ['/api/import', m.admin],
    ['/api/rules/batch-create', m.admin],
  ] as const) {
    const answer = await call(m.url, 'POST', path, { token, body: deep });
    assertProblem(answer, 400, 'invalid_json');
    assert.match(answer.body.detail, /deeper than 16/, path);
  }
  assert.deepEqual(
    parsed.filter((length) => length === deep.length),
    [],
    'none of them was parsed',
  );
  const nested17 = JSON.stringify({ username: 'admin', password: '['.repeat(15) + ']'.repeat(15) });
  assert.equal(
    (await call(m.url, 'POST', '/api/auth/login', { body: nested17 })).status,
    401,
    'brackets inside a string are not nesting',
  );
});

test('a client that leaves mid-upload is logged at info, without a stack, and nothing is answered', async (t) => {
  const lines: { level: string; msg: string; fields?: Record<string, unknown> }[] = [];
  const log = Object.fromEntries(
    (['info', 'warn', 'error'] as const).map((level) => [
      level,
      (msg: string, fields?: Record<string, unknown>) => lines.push({ level, msg, fields }),
    ]),
  ) as unknown as Logger;
  const m = await startMaster(t, { log });
  const { port } = new URL(m.url);
  const socket = connect(Number(port), '127.0.0.1');
  await once(socket, 'connect');
  socket.write(
    `POST /api/nodes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${m.admin}\r\n` +
      'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"name": "half',
  );
  await new Promise((resolve) => setTimeout(resolve, 100));
  socket.destroy();
  await until('the abandoned request to be logged', () => lines.some((l) => l.msg === 'request abandoned'));
  const abandoned = lines.find((l) => l.msg === 'request abandoned')!;
  assert.equal(abandoned.level, 'info');
  assert.doesNotMatch(JSON.stringify(abandoned), /\n\s+at /, 'no stack');
  assert.deepEqual(
    lines.filter((l) => l.level !== 'info'),
    [],
  );
});

test('Idempotency-Key: a dry run changes nothing, so nothing is kept for it; its retry runs again', async (t) => {
  const m = await startMaster(t);
  const edge = (await call(m.url, 'POST', '/api/nodes', { token: m.admin, body: { name: 'e', host: 'e.example.net' } }))
    .body;
  const send = () =>
    call(m.url, 'POST', '/api/rules/batch-create?dry_run=true', {
      token: m.admin,
      headers: { 'idempotency-key': 'preview' },
      body: { rules: [{ name: 'r', node_id: edge.id, protocol: 'tcp', listen_port: 80, targets: ['10.0.0.1:80'] }] },
    });
  assert.equal((await send()).status, 200);
  const again = await send();
  assert.equal(again.status, 200);
  assert.equal(again.headers.get('idempotent-replayed'), null);
  assert.equal((m.app.store.db.prepare('SELECT count(*) AS n FROM idempotency_keys').get() as { n: number }).n, 0);
});

test(
  'one source address holds at most 512 connections that carried no authenticated request; other addresses are ' +
    'served meanwhile',
  async (t) => {
    const m = await startMaster(t);
    const { port } = new URL(m.url);
    const open = (localAddress: string) => {
      const socket = connect({ host: '127.0.0.1', port: Number(port), localAddress });
      socket.on('error', () => undefined);
      return socket;
    };
    const idle = Array.from({ length: 512 }, () => open('127.0.0.3'));
    t.after(() => idle.forEach((socket) => socket.destroy()));
    await Promise.all(idle.map((socket) => once(socket, 'connect')));
    /** Whether a health check from `localAddress` is answered. */
    const answered = async (localAddress: string) => {
      const socket = open(localAddress);
      socket.write(`GET /api/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
      let text = '';
      socket.on('data', (chunk: Buffer) => (text += chunk.toString()));
      await new Promise((resolve) => socket.on('close', resolve));
      return text.startsWith('HTTP/1.1 200');
    };
    assert.equal(await answered('127.0.0.3'), false, 'the 513th from one address is closed at once');
    assert.equal(await answered('127.0.0.2'), true);
    idle.splice(0, 10).forEach((socket) => socket.destroy());
    await until('room again', () => answered('127.0.0.3'));
    // Before the master closes, which would wait for them.
    idle.forEach((socket) => socket.destroy());
  },
);

for (const over of ['HTTP', 'HTTPS'] as const)
  test(
    `strangers' idle connections, 4096 at most in all, never crowd out a new client nor a known caller's connection ` +
      `(${over})`,
    { timeout: 60_000 },
    async (t) => {
      // Over HTTPS a request comes on the TLS socket, over the TCP socket the stranger was counted by.
      const m = await startMaster(t, over === 'HTTPS' ? { tls: certFiles() } : {});
      const { port } = new URL(m.url);
      const request = over === 'HTTPS' ? httpsRequest : httpRequest;
      // A known caller's keep-alive connection: its first request is authenticated.
      const known =
        over === 'HTTPS'
          ? new HttpsAgent({ keepAlive: true, maxSockets: 1, rejectUnauthorized: false })
          : new Agent({ keepAlive: true, maxSockets: 1 });
      t.after(() => known.destroy());
      let knownSocket: Socket | undefined;
      const get = (agent: Agent | undefined, path: string, token?: string) =>
        new Promise<number>((resolve, reject) => {
          const headers = token ? { authorization: `Bearer ${token}` } : {};
          const req = request(`${m.url}${path}`, { agent, headers, rejectUnauthorized: false });
          if (agent) req.on('socket', (socket) => (knownSocket ??= socket));
          req.on('response', (res) => {
            res.resume();
            res.on('end', () => resolve(res.statusCode!));
          });
          req.on('error', reject);
          req.end();
        });
      assert.equal(await get(known, '/api/nodes', m.admin), 200);
      const first = knownSocket!;
      const idle: Socket[] = [];
      // Closed before the master is (whatever the test finds): a close waits for them past its grace otherwise.
      try {
        for (let host = 10; host < 19; host++) {
          const batch = Array.from({ length: 480 }, () => {
            const socket = connect({ host: '127.0.0.1', port: Number(port), localAddress: `127.0.0.${host}` });
            socket.on('error', () => undefined);
            return socket;
          });
          idle.push(...batch);
          await Promise.all(batch.map((socket) => once(socket, 'connect').catch(() => undefined)));
          // Let the master take them off its accept queue (512 deep).
          await new Promise((resolve) => setTimeout(resolve, 100));
          // The known caller goes on using its connection (idle for the keep-alive time-out, 5 s, the master would
          // close it, and under load these batches take longer).
          assert.equal(await get(known, '/api/nodes', m.admin), 200);
        }
        const open = () => idle.filter((socket) => !socket.destroyed).length;
        await until('the oldest strangers closed', () => open() <= 4096);
        assert.ok(open() > 4000, `${open()} of ${idle.length} idle connections still open`);
        assert.equal(await get(undefined, '/api/health'), 200, 'a new client gets in');
        assert.equal(first.destroyed, false, "the known caller's connection, the oldest of all, is still open");
        assert.equal(await get(known, '/api/nodes', m.admin), 200);
      } finally {
        idle.forEach((socket) => socket.destroy());
      }
    },
  );
