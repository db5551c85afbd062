// What a standby does with each route, as the route table says (its `standby`): every GET answered from its copy but
// those it refuses, every write refused naming the primary but those it serves. Tried for every route of the table.

import assert from 'node:assert/strict';
import test from 'node:test';
import { routes } from '../internal/api/routes.ts';
import { ADMIN_PASSWORD, call, login, mintToken, startMaster } from './helpers.ts';
import { until } from './net.ts';

test('a standby refuses exactly the routes the table says it leaves to its primary, naming it', async (t) => {
  const primary = await startMaster(t);
  const token = await mintToken(primary, ['replication'], 'standby');
  const standby = await startMaster(t, { follow: { url: primary.url, token } });
  await until(
    'the standby serving',
    async () => (await call(standby.url, 'GET', '/api/health')).body.role === 'standby',
  );
  // Its own session, which it serves (a session of the primary's is the primary's to end).
  const own = await login(standby.url, 'admin', ADMIN_PASSWORD);
  const promote = routes.find((route) => route.path === '/api/replication/promote')!;
  const refused: string[] = [];
  // Its promotion last: it would make it the primary.
  for (const route of [...routes.filter((route) => route !== promote), promote]) {
    // Ids that name nothing, and no body: whatever else it answers, a refusal is read_only.
    const path = route.path.replace(/\{[^}]+\}/g, '999999');
    // A long wait (events, changes) is cut short: a refusal answers at once.
    const query = route.method === 'GET' ? '?timeout_seconds=0&wait_seconds=0' : '';
    const answer = await call(standby.url, route.method, path + query, {
      token: route.path === '/api/auth/logout' ? own : primary.admin,
      body: route.method === 'GET' || route.method === 'DELETE' ? undefined : {},
    });
    if (answer.status === 503 && answer.body?.code === 'read_only') {
      assert.equal(answer.body.primary, primary.url, `${route.method} ${route.path} names the primary`);
      refused.push(`${route.method} ${route.path}`);
    }
  }
  const expected = routes
    .filter((route) => route !== promote)
    .filter((route) => route.standby === 'refuses' || (route.standby !== 'serves' && route.method !== 'GET'))
    .map((route) => `${route.method} ${route.path}`);
  assert.deepEqual(refused, expected);
  assert.ok(expected.includes('GET /api/replication/changes') && !expected.includes('POST /api/auth/login'));
  assert.equal((await call(standby.url, 'GET', '/api/health')).body.role, 'primary', 'the promotion was served');
});
