import assert from 'node:assert/strict';
import { totpCode } from './totp-codes.ts';
import { test } from 'node:test';
import { routes } from '../internal/api/routes.ts';
import { tenantScopes } from '../internal/auth/scopes.ts';
import { assertProblem, call, login, newTenant, node, rule, snapshot, startMaster, type Running } from './helpers.ts';
import { openEvents } from './sse.ts';

/** A tenant holding every scope a tenant may hold, on a plan of their own; signed in. */
async function tenant(m: Running, username = 'customer') {
  const plan = await call(m.url, 'POST', '/api/plans', {
    token: m.admin,
    body: { name: `${username}-plan`, port_ranges: ['30000-30099'], max_rules: 10 },
  });
  return { ...(await newTenant(m, username, plan.body.id)), plan: plan.body.id as number };
}

const REFUSED =
  'a tenant is refused on every route that does not follow ownership, before their input is read, and nothing changes';

test(REFUSED, async (t) => {
  const m = await startMaster(t);
  const edge = await node(m, 'edge');
  await rule(m, { node_id: edge.id, listen_port: 10001 });
  const { token } = await tenant(m);
  const before = snapshot(m, ['audit_log']);
  const refused = routes.filter((r) => r.scope !== 'public' && !r.tenants);
  for (const r of refused) {
    const path = r.path.replaceAll('{id}', '1');
    const answer = await call(m.url, r.method, path, { token, body: r.method === 'GET' ? undefined : '{"not": valid' });
    assertProblem(answer, 403, 'operators_only');
  }
  assert.equal(snapshot(m, ['audit_log']), before);
  const denied = await call(m.url, 'GET', '/api/audit-logs?status=denied&actor=customer&limit=200', { token: m.admin });
  assert.equal(
    denied.body.items.length,
    refused.filter((r) => r.method !== 'GET').length,
    'each refused write is audited as denied',
  );
  assert.ok(denied.body.items.every((e: { changes: { operators_only: boolean } }) => e.changes.operators_only));
});

const OWN_ACCOUNT =
  'a tenant signs in, says who they are with their plan, changes their password, enrols a second factor and signs out';
test(OWN_ACCOUNT, async (t) => {
  const m = await startMaster(t);
  const customer = await tenant(m);
  const me = await call(m.url, 'GET', '/api/auth/me', { token: customer.token });
  assert.deepEqual(
    [me.body.user.role, me.body.user.plan_id, me.body.user.scopes],
    ['tenant', customer.plan, [...tenantScopes]],
  );
  // What they are granted, and how much of it they use.
  assert.deepEqual(
    [me.body.plan.port_ranges, me.body.plan.max_rules, me.body.usage],
    [['30000-30099'], 10, { rules: 0, traffic: null }],
  );
  const admin = (await call(m.url, 'GET', '/api/auth/me', { token: m.admin })).body;
  const adminSession = admin.token as { id: number };
  assert.deepEqual([admin.plan, admin.usage], [null, null]);
  const changed = await call(m.url, 'POST', '/api/auth/password', {
    token: customer.token,
    body: { current_password: 'customer-password', new_password: 'customer-password-2' },
  });
  assert.equal(changed.status, 200, JSON.stringify(changed.body));
  // Their own second factor, enrolled and turned off by them; the operator's account is untouched.
  const enrolment = await call(m.url, 'POST', '/api/auth/totp', { token: customer.token });
  assert.equal(enrolment.status, 200, JSON.stringify(enrolment.body));
  const confirmed = await call(m.url, 'POST', '/api/auth/totp/confirm', {
    token: customer.token,
    body: { code: totpCode(enrolment.body.secret) },
  });
  assert.equal(confirmed.status, 200, JSON.stringify(confirmed.body));
  assert.equal((await call(m.url, 'GET', '/api/auth/me', { token: m.admin })).body.second_factor.totp, 'off');
  const off = await call(m.url, 'POST', '/api/auth/totp/disable', {
    token: customer.token,
    body: { password: 'customer-password-2' },
  });
  assert.equal(off.status, 204, JSON.stringify(off.body));
  // Their own sessions, and none of anyone else's: the admin's is not found to them.
  const theirs = await call(m.url, 'GET', '/api/auth/sessions', { token: customer.token });
  assert.ok(theirs.body.items.every((session: { id: number }) => session.id !== adminSession.id));
  const admins = await call(m.url, 'DELETE', `/api/auth/sessions/${adminSession.id}`, { token: customer.token });
  assert.equal(admins.status, 404);
  assert.equal((await call(m.url, 'GET', '/api/auth/me', { token: m.admin })).status, 200);
  assert.equal((await call(m.url, 'POST', '/api/auth/logout-others', { token: customer.token })).status, 200);
  assert.equal((await call(m.url, 'POST', '/api/auth/logout', { token: customer.token })).status, 204);
  assertProblem(await call(m.url, 'GET', '/api/auth/me', { token: customer.token }), 401, 'unauthorized');
});

const HOLDS = 'a tenant holds only the scopes of what they can own, a plan holds tenants only, and a held plan stays';
test(HOLDS, async (t) => {
  const m = await startMaster(t);
  const plan = (await call(m.url, 'POST', '/api/plans', { token: m.admin, body: { name: 'p' } })).body.id;
  const before = snapshot(m);
  const cases: [Record<string, unknown>, string[]][] = [
    [{ role: 'tenant', scopes: ['rules:write', 'settings:read', '*'] }, ['#/scopes/1', '#/scopes/2']],
    [{ role: 'operator', plan_id: plan }, ['#/plan_id']],
    [{ role: 'tenant', plan_id: 999 }, ['#/plan_id']],
    [{ role: 'owner' }, ['#/role']],
  ];
  for (const [fields, pointers] of cases) {
    const answer = await call(m.url, 'POST', '/api/users', {
      token: m.admin,
      body: { username: 'someone', password: 'someone-password', ...fields },
    });
    assertProblem(answer, 422, 'validation_failed');
    assert.deepEqual(
      answer.body.errors.map((e: { pointer: string }) => e.pointer),
      pointers,
      JSON.stringify(fields),
    );
  }
  assert.equal(snapshot(m), before);
  const customer = await call(m.url, 'POST', '/api/users', {
    token: m.admin,
    body: { username: 'customer', password: 'customer-password', role: 'tenant', plan_id: plan },
  });
  assert.deepEqual([customer.body.role, customer.body.plan_id], ['tenant', plan]);
  const held = await call(m.url, 'DELETE', `/api/plans/${plan}`, { token: m.admin });
  assertProblem(held, 409, 'conflict');
  assert.match(held.body.detail, /holds 1 user/);
  // An operator turned tenant keeps no scope a tenant may not hold.
  const ops = await call(m.url, 'POST', '/api/users', {
    token: m.admin,
    body: { username: 'ops', password: 'ops-password-long', scopes: ['settings:write'] },
  });
  const turned = await call(m.url, 'PUT', `/api/users/${ops.body.id}`, {
    token: m.admin,
    body: { username: 'ops', role: 'tenant', scopes: ['settings:write'] },
  });
  assertProblem(turned, 422, 'validation_failed');
});

test('a user made a tenant loses at once what they could reach as an operator: their event stream ends', async (t) => {
  const m = await startMaster(t);
  const made = await call(m.url, 'POST', '/api/users', {
    token: m.admin,
    body: { username: 'ops', password: 'ops-password-long', scopes: ['rules:read'] },
  });
  const token = await login(m.url, 'ops', 'ops-password-long');
  const stream = await openEvents(m.url, token);
  t.after(() => stream.close());
  const turned = await call(m.url, 'PUT', `/api/users/${made.body.id}`, {
    token: m.admin,
    body: { username: 'ops', role: 'tenant', scopes: ['rules:read'] },
  });
  assert.equal(turned.status, 200, JSON.stringify(turned.body));
  const revoked = await stream.next((frame) => frame.event === 'revoked');
  assert.match(revoked.data.detail, /or their role/);
  await stream.ended;
  assertProblem(await call(m.url, 'GET', '/api/settings', { token }), 403, 'operators_only');
  assertProblem(await call(m.url, 'GET', '/api/users', { token }), 403, 'operators_only');
  assert.deepEqual((await call(m.url, 'GET', '/api/rules', { token })).body.items, [], 'rules: their own, none');
});
