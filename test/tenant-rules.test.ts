import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { routes } from '../internal/api/routes.ts';
import { assertProblem, call, login, newTenant, node, rule, snapshot, startMaster, type Running } from './helpers.ts';
import { openEvents } from './sse.ts';
import { until } from './net.ts';

// Most of these tests wait on clocks and sockets: they run side by side.
describe("tenants' rules", { concurrency: 4 }, () => {
  /**
   * Two tenants on one plan (nodes tagged eu, ports 30000-30099, 3 rules, 100 connections, 10 new a second), an
   * operator's rule.
   */
  async function world(m: Running) {
    const granted = await node(m, 'granted', { tags: ['eu'] });
    const other = await node(m, 'other');
    const plan = await call(m.url, 'POST', '/api/plans', {
      token: m.admin,
      body: {
        name: 'starter',
        node_tags: ['eu'],
        port_ranges: ['30000-30099'],
        max_rules: 3,
        max_connections: 100,
        max_new_connections_per_second: 10,
      },
    });
    const scopes = ['rules:write', 'tunnels:write', 'nodes:read', 'dashboard:read'];
    const tenant = (username: string) => newTenant(m, username, plan.body.id, { scopes });
    const [alice, bob] = [await tenant('alice'), await tenant('bob')];
    const operators = (await rule(m, { node_id: granted.id, listen_port: 10001 })).body;
    const create = (who: { token: string }, port: number, extra: Record<string, unknown> = {}) =>
      call(m.url, 'POST', '/api/rules', {
        token: who.token,
        body: {
          name: `r${port}`,
          node_id: granted.id,
          protocol: 'tcp',
          listen_port: port,
          targets: ['10.0.0.1:80'],
          ...extra,
        },
      });
    const bobs = (await create(bob, 30050)).body;
    return { granted, other, plan: plan.body, alice, bob, operators, bobs, create };
  }

  test("a tenant's rule is theirs, on the nodes and ports their plan grants, held to its caps", async (t) => {
    const m = await startMaster(t);
    const w = await world(m);
    const made = await w.create(w.alice, 30000);
    assert.equal(made.status, 201, JSON.stringify(made.body));
    assert.deepEqual(
      [made.body.owner_id, made.body.max_connections, made.body.max_new_connections_per_second],
      [w.alice.id, 100, 10],
    );
    const before = snapshot(m, ['audit_log']);
    const refusals: [Record<string, unknown>, RegExp][] = [
      [{ node_id: w.other.id }, new RegExp(`node ${w.other.id} is not granted by your plan 'starter'`)],
      [{ listen_port: 31000 }, /port 31000 is not in your plan 'starter' \(its ports: 30000-30099\)/],
      [{ listen_port: 30090, listen_port_end: 30110 }, /ports 30090-30110 are not in your plan/],
      [{ max_connections: 101 }, /max_connections 101 is over your plan 'starter' cap of 100/],
      [
        { max_new_connections_per_second: 11 },
        /max_new_connections_per_second 11 is over your plan 'starter' cap of 10/,
      ],
    ];
    for (const [extra, detail] of refusals) {
      const answer = await w.create(w.alice, 30001, extra);
      assertProblem(answer, 403, 'not_granted');
      assert.match(answer.body.detail, detail);
    }
    const replaced = await call(m.url, 'PUT', `/api/rules/${made.body.id}`, {
      token: w.alice.token,
      body: { name: 'moved', node_id: w.other.id, protocol: 'tcp', listen_port: 30000, targets: ['10.0.0.1:80'] },
    });
    assertProblem(replaced, 403, 'not_granted');
    assert.equal(snapshot(m, ['audit_log']), before, 'nothing was written');
    // A port another tenant holds is taken, without saying by what; one of her own names her rule.
    const theirs = await w.create(w.alice, 30050);
    assertProblem(theirs, 409, 'conflict');
    assert.equal(theirs.body.detail, `port 30050/tcp on node ${w.granted.id} is taken`);
    assert.equal(theirs.body.conflicting_rule_id, undefined);
    const own = await w.create(w.alice, 30000);
    assertProblem(own, 409, 'conflict');
    assert.equal(own.body.conflicting_rule_id, made.body.id);
    // Three rules each, whatever other tenants of the plan have: alice's third is her last.
    assert.equal((await w.create(w.alice, 30002)).status, 201);
    assert.equal((await w.create(w.alice, 30003)).status, 201);
    const over = await w.create(w.alice, 30004);
    assertProblem(over, 403, 'not_granted');
    assert.match(over.body.detail, /your plan 'starter' allows 3 rules, and you have 3/);
  });

  const ONLY_THEIRS =
    'a tenant sees and changes only their own rules: the rest are not found, lists and filters hold only theirs';
  test(ONLY_THEIRS, async (t) => {
    const m = await startMaster(t);
    const w = await world(m);
    const mine = (await w.create(w.alice, 30000)).body;
    const names = async (path: string) =>
      (await call(m.url, 'GET', path, { token: w.alice.token })).body.items.map((r: { id: number }) => r.id);
    assert.deepEqual(await names('/api/rules?count=true'), [mine.id]);
    assert.deepEqual(await names(`/api/rules?owner_id=${w.bob.id}`), []);
    assert.deepEqual(await names(`/api/rules?node_id=${w.granted.id}`), [mine.id]);
    assert.equal((await call(m.url, 'GET', '/api/rules?count=true', { token: w.alice.token })).body.total, 1);
    const before = snapshot(m, ['audit_log']);
    for (const theirs of [w.operators, w.bobs]) {
      const { id, owner_id: _o, ...fields } = theirs;
      for (const [method, path, body] of [
        ['GET', `/api/rules/${id}`, undefined],
        ['PUT', `/api/rules/${id}`, fields],
        ['DELETE', `/api/rules/${id}`, undefined],
        ['POST', `/api/rules/${id}/sync`, undefined],
        ['POST', `/api/rules/${id}/check`, undefined],
      ] as const) {
        assertProblem(await call(m.url, method, path, { token: w.alice.token, body }), 404, 'not_found');
      }
      for (const [path, body] of [
        ['/api/rules/batch-delete', { ids: [id] }],
        ['/api/rules/batch-update', { ids: [id], changes: { enabled: false } }],
        ['/api/rules/batch-sync', { ids: [id] }],
      ] as const) {
        const answer = await call(m.url, 'POST', path, { token: w.alice.token, body });
        assert.deepEqual(
          answer.body.results.map((r: { outcome: string }) => r.outcome),
          ['not_found'],
          `${path}: ${JSON.stringify(answer.body)}`,
        );
      }
    }
    // A filter selects only theirs, whatever it names.
    for (const filter of [{}, { node_id: w.granted.id }, { owner_id: w.bob.id }]) {
      const answer = await call(m.url, 'POST', '/api/rules/batch-update?dry_run=true', {
        token: w.alice.token,
        body: { filter, changes: { enabled: false } },
      });
      assert.deepEqual(
        answer.body.results.map((r: { id: number }) => r.id),
        'owner_id' in filter ? [] : [mine.id],
        JSON.stringify(filter),
      );
    }
    assert.equal(snapshot(m, ['audit_log']), before, "nothing of anyone else's changed");
    // Her own rule is hers to check: its node is offline, which is what she is told.
    assertProblem(await call(m.url, 'POST', `/api/rules/${mine.id}/check`, { token: w.alice.token }), 409, 'conflict');
    const deleted = await call(m.url, 'POST', '/api/rules/batch-delete', {
      token: w.alice.token,
      body: { filter: {} },
    });
    assert.deepEqual(deleted.body.results, [{ id: mine.id, outcome: 'deleted' }]);
    for (const kept of [w.operators, w.bobs])
      assert.equal((await call(m.url, 'GET', `/api/rules/${kept.id}`, { token: m.admin })).status, 200);
  });

  test('every route that answers tenants is one this file tries across owners', () => {
    const tried = [
      'GET /api/auth/me',
      'POST /api/auth/logout',
      'POST /api/auth/password',
      'POST /api/auth/logout-others',
      'POST /api/auth/totp',
      'POST /api/auth/totp/confirm',
      'POST /api/auth/totp/disable',
      'GET /api/auth/sessions',
      'DELETE /api/auth/sessions/{id}',
      // One's own passkeys: test/passkeys.test.ts tries another user's.
      'POST /api/auth/passkeys/options',
      'POST /api/auth/passkeys',
      'GET /api/auth/passkeys',
      'PATCH /api/auth/passkeys/{id}',
      'DELETE /api/auth/passkeys/{id}',
      // What rules carry now and carried today: test/live.test.ts shows a tenant none of others'.
      'GET /api/live',
      'GET /api/dashboard/busiest',
      'GET /api/audit-logs',
      'GET /api/dashboard',
      'GET /api/dashboard/traffic',
      'GET /api/events',
      'GET /api/tunnels',
      'POST /api/tunnels',
      'GET /api/tunnels/{id}',
      'GET /api/tunnels/{id}/paths',
      'PUT /api/tunnels/{id}',
      'DELETE /api/tunnels/{id}',
      'POST /api/tunnels/batch-delete',
      'GET /api/tokens',
      'POST /api/tokens',
      'GET /api/tokens/{id}',
      'DELETE /api/tokens/{id}',
      'GET /api/nodes',
      'GET /api/nodes/{id}',
      'GET /api/rules',
      'POST /api/rules',
      'GET /api/rules/{id}',
      'PUT /api/rules/{id}',
      'DELETE /api/rules/{id}',
      'POST /api/rules/{id}/sync',
      'POST /api/rules/{id}/check',
      'POST /api/rules/batch-delete',
      'POST /api/rules/batch-create',
      'POST /api/rules/batch-update',
      'POST /api/rules/batch-sync',
    ];
    assert.deepEqual(
      routes
        .filter((r) => r.tenants)
        .map((r) => `${r.method} ${r.path}`)
        .sort(),
      tried.sort(),
      'a route opened to tenants is tried here (and in tenants.test.ts for their own account) before it is',
    );
  });

  test(
    "a tenant's batch of new rules is held to their plan as a " + 'whole: one not granted and none is made',
    async (t) => {
      const m = await startMaster(t);
      const w = await world(m);
      const body = (port: number, extra: Record<string, unknown> = {}) => ({
        name: `b${port}`,
        node_id: w.granted.id,
        protocol: 'tcp',
        listen_port: port,
        targets: ['10.0.0.1:80'],
        ...extra,
      });
      const before = snapshot(m, ['audit_log']);
      const refused = await call(m.url, 'POST', '/api/rules/batch-create', {
        token: w.alice.token,
        body: { rules: [body(30010), body(30011, { node_id: w.other.id })] },
      });
      assertProblem(refused, 422, 'validation_failed');
      assert.deepEqual(
        refused.body.results.map((r: { outcome: string }) => r.outcome),
        ['invalid', 'forbidden'],
      );
      const tooMany = await call(m.url, 'POST', '/api/rules/batch-create', {
        token: w.alice.token,
        body: { rules: [body(30010), body(30011), body(30012), body(30013)] },
      });
      assertProblem(tooMany, 422, 'validation_failed');
      assert.equal(snapshot(m, ['audit_log']), before);
      const made = await call(m.url, 'POST', '/api/rules/batch-create', {
        token: w.alice.token,
        body: { rules: [body(30010), body(30011)] },
      });
      assert.equal(made.status, 201, JSON.stringify(made.body));
    },
  );

  const GRANTED_NODES =
    'a tenant sees the nodes their plan grants, by id or tag, with what their clients need and nothing else';
  test(GRANTED_NODES, async (t) => {
    const m = await startMaster(t);
    const w = await world(m);
    const byId = await node(m, 'named');
    await call(m.url, 'PUT', `/api/plans/${w.plan.id}`, {
      token: m.admin,
      body: { ...w.plan, node_ids: [byId.id] },
    });
    const list = await call(m.url, 'GET', '/api/nodes?count=true', { token: w.alice.token });
    assert.equal(list.status, 200, JSON.stringify(list.body));
    assert.deepEqual(list.body.items, [
      { id: w.granted.id, name: 'granted', host: 'granted.example.net', tags: ['eu'], status: 'new' },
      { id: byId.id, name: 'named', host: 'named.example.net', tags: [], status: 'new' },
    ]);
    assert.equal(list.body.total, 2);
    const sorted = await call(m.url, 'GET', '/api/nodes?sort=-name&q=e', { token: w.alice.token });
    assert.deepEqual(
      sorted.body.items.map((n: { name: string }) => n.name),
      ['named', 'granted'],
    );
    const one = await call(m.url, 'GET', `/api/nodes/${w.granted.id}`, { token: w.alice.token });
    assert.deepEqual(Object.keys(one.body).sort(), ['host', 'id', 'name', 'status', 'tags']);
    assertProblem(await call(m.url, 'GET', `/api/nodes/${w.other.id}`, { token: w.alice.token }), 404, 'not_found');
    for (const path of [`/api/nodes/${w.granted.id}/vitals`, '/api/agent-bundles', '/api/rollouts'])
      assertProblem(await call(m.url, 'GET', path, { token: w.alice.token }), 403, 'operators_only');
  });

  const OWN_TOKENS =
    "a tenant's API tokens are their own: listed, shown and revoked by them alone, others' are not found";
  test(OWN_TOKENS, async (t) => {
    const m = await startMaster(t);
    const customer = await call(m.url, 'POST', '/api/users', {
      token: m.admin,
      body: { username: 'alice', password: 'alice-password', role: 'tenant', scopes: ['rules:read', 'tokens:write'] },
    });
    const session = await login(m.url, 'alice', 'alice-password');
    const made = await call(m.url, 'POST', '/api/tokens', {
      token: session,
      body: { name: 'script', scopes: ['rules:read'] },
    });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const script = made.body.token;
    assert.equal((await call(m.url, 'GET', '/api/rules', { token: script })).status, 200, 'the token works for her');
    const operators = await call(m.url, 'POST', '/api/tokens', {
      token: m.admin,
      body: { name: 'ops', scopes: ['*'] },
    });
    const listed = async (query = '') =>
      (await call(m.url, 'GET', `/api/tokens${query}`, { token: session })).body.items.map(
        (x: { name: string }) => x.name,
      );
    assert.deepEqual(await listed(), ['script']);
    assert.deepEqual(await listed('?user_id=1'), []);
    assert.equal((await call(m.url, 'GET', `/api/tokens/${made.body.id}`, { token: session })).status, 200);
    const before = snapshot(m, ['audit_log']);
    for (const method of ['GET', 'DELETE'])
      assertProblem(
        await call(m.url, method, `/api/tokens/${operators.body.id}`, { token: session }),
        404,
        'not_found',
      );
    assert.equal(snapshot(m, ['audit_log']), before);
    assertProblem(
      await call(m.url, 'POST', '/api/tokens', { token: session, body: { name: 'more', scopes: ['users:read'] } }),
      403,
      'insufficient_scope',
    );
    assert.equal((await call(m.url, 'DELETE', `/api/tokens/${made.body.id}`, { token: session })).status, 204);
    assertProblem(await call(m.url, 'GET', '/api/rules', { token: script }), 401, 'unauthorized');
    assert.equal(customer.body.role, 'tenant');
  });

  const OWN_AUDIT =
    "a tenant reads the audit entries about their own rules and account, and their own refusals, no one else's";
  test(OWN_AUDIT, async (t) => {
    const m = await startMaster(t);
    const w = await world(m);
    const mine = (await w.create(w.alice, 30000)).body;
    // An operator gives her a rule, and changes her account; she is refused an operator's route; she deletes one.
    const given = await rule(m, { node_id: w.granted.id, listen_port: 30001, owner_id: w.alice.id });
    await call(m.url, 'PUT', `/api/users/${w.alice.id}`, {
      token: m.admin,
      body: {
        username: 'alice',
        role: 'tenant',
        plan_id: w.plan.id,
        scopes: ['rules:write', 'nodes:read', 'audit:read'],
      },
    });
    const alice = await login(m.url, 'alice', 'alice-password');
    assertProblem(await call(m.url, 'POST', '/api/nodes', { token: alice, body: {} }), 403, 'operators_only');
    assert.equal((await call(m.url, 'DELETE', `/api/rules/${mine.id}`, { token: alice })).status, 204);
    const read = async (query = '') =>
      (await call(m.url, 'GET', `/api/audit-logs${query}`, { token: alice })).body.items as {
        action: string;
        resource_id: number | null;
        actor_name: string;
        ip: string | null;
        status: string;
      }[];
    // A login's entry names the session it opened, which no one else reads.
    const seen = (await read())
      .map((e) => `${e.action} ${e.action === 'auth.login' ? '' : (e.resource_id ?? '')} ${e.actor_name} ${e.status}`)
      .reverse();
    assert.deepEqual(seen, [
      `user.create ${w.alice.id} admin success`,
      'auth.login  alice success',
      `rule.create ${mine.id} alice success`,
      `rule.create ${given.body.id} admin success`,
      `user.update ${w.alice.id} admin success`,
      'auth.login  alice success',
      'node.create  alice denied',
      `rule.delete ${mine.id} alice success`,
    ]);
    const entries = await read();
    assert.ok(
      entries.filter((e) => e.actor_name === 'admin').every((e) => e.ip === null),
      "no operator's address",
    );
    assert.ok(
      entries.filter((e) => e.actor_name === 'alice').every((e) => e.ip !== null),
      'her own, with hers',
    );
    assert.deepEqual(
      (await read('?resource=rule&action=rule.delete')).map((e) => e.resource_id),
      [mine.id],
    );
  });

  const OWN_TUNNELS =
    "a tenant's tunnels join granted nodes on the plan's ports, carry their own rules, and are theirs alone";
  test(OWN_TUNNELS, async (t) => {
    const m = await startMaster(t);
    const w = await world(m);
    const far = await node(m, 'far', { tags: ['eu'] });
    const tunnel = (who: { token: string }, body: Record<string, unknown>) =>
      call(m.url, 'POST', '/api/tunnels', {
        token: who.token,
        body: { name: 'alice-link', entry_node_id: w.granted.id, exit_node_id: far.id, ...body },
      });
    const made = await tunnel(w.alice, {});
    assert.equal(made.status, 201, JSON.stringify(made.body));
    assert.equal(made.body.owner_id, w.alice.id);
    assert.ok(made.body.listen_port >= 30000 && made.body.listen_port <= 30099, `picked ${made.body.listen_port}`);
    const before = snapshot(m, ['audit_log']);
    for (const [body, detail] of [
      [{ name: 'x', exit_node_id: w.other.id }, /node \d+ is not granted/],
      [{ name: 'y', listen_port: 40000 }, /port 40000 is not in your plan/],
    ] as const) {
      const answer = await tunnel(w.alice, body);
      assertProblem(answer, 403, 'not_granted');
      assert.match(answer.body.detail, detail);
    }
    assert.equal(snapshot(m, ['audit_log']), before);
    // A port bob's rule holds on the exit node is taken, without saying by what.
    await w.create(w.bob, 30070, { node_id: far.id });
    const held = await tunnel(w.alice, { name: 'z', listen_port: 30070 });
    assertProblem(held, 409, 'conflict');
    assert.equal(held.body.detail, `port 30070/tcp on node ${far.id} is taken`);
    assert.equal(held.body.conflicting_rule_id, undefined);
    const through = (who: { token: string }, port: number) => w.create(who, port, { tunnel_id: made.body.id });
    const hers = await through(w.alice, 30005);
    assert.equal(hers.status, 201, JSON.stringify(hers.body));
    assertProblem(await through(w.bob, 30006), 403, 'not_granted');
    // Bob does not see it, by any route.
    const id = made.body.id;
    const { owner_id: _o, ...fields } = made.body;
    assertProblem(await call(m.url, 'GET', `/api/tunnels/${id}`, { token: w.bob.token }), 404, 'not_found');
    assertProblem(await call(m.url, 'GET', `/api/tunnels/${id}/paths`, { token: w.bob.token }), 404, 'not_found');
    assert.equal((await call(m.url, 'GET', `/api/tunnels/${id}/paths`, { token: w.alice.token })).status, 200);
    assertProblem(
      await call(m.url, 'PUT', `/api/tunnels/${id}`, { token: w.bob.token, body: fields }),
      404,
      'not_found',
    );
    assertProblem(await call(m.url, 'DELETE', `/api/tunnels/${id}`, { token: w.bob.token }), 404, 'not_found');
    assert.deepEqual((await call(m.url, 'GET', '/api/tunnels', { token: w.bob.token })).body.items, []);
    const batch = await call(m.url, 'POST', '/api/tunnels/batch-delete?cascade=true', {
      token: w.bob.token,
      body: { ids: [id] },
    });
    assert.deepEqual(batch.body.results, [{ id, outcome: 'not_found', error: batch.body.results[0].error }]);
    // An operator's rule through her tunnel is not hers to delete with it.
    const operators = await rule(m, { node_id: w.granted.id, listen_port: 10002, tunnel_id: id });
    assert.equal(operators.status, 201, JSON.stringify(operators.body));
    const refused = await call(m.url, 'DELETE', `/api/tunnels/${id}?cascade=true`, { token: w.alice.token });
    assertProblem(refused, 409, 'conflict');
    assert.match(refused.body.detail, /carries rules that are not yours/);
    await call(m.url, 'DELETE', `/api/rules/${operators.body.id}`, { token: m.admin });
    assert.equal(
      (await call(m.url, 'DELETE', `/api/tunnels/${id}?cascade=true`, { token: w.alice.token })).status,
      204,
    );
    assertProblem(await call(m.url, 'GET', `/api/rules/${hers.body.id}`, { token: w.alice.token }), 404, 'not_found');
  });

  const OWN_DASHBOARD =
    "a tenant's dashboard counts the nodes granted them, their own rules and tunnels, and their bytes";
  test(OWN_DASHBOARD, async (t) => {
    const m = await startMaster(t);
    const w = await world(m);
    const mine = (await w.create(w.alice, 30000)).body;
    await w.create(w.alice, 30001, { enabled: false });
    m.app.store.write(() => m.app.store.traffic.record(mine.id, w.granted.id, 1_800_000_000, 1000, 2000));
    const board = await call(m.url, 'GET', '/api/dashboard', { token: w.alice.token });
    assert.equal(board.status, 200, JSON.stringify(board.body));
    assert.deepEqual(board.body, {
      nodes: { total: 1, by_status: { new: 1, installing: 0, online: 0, offline: 0, install_failed: 0 } },
      rules: { total: 2, enabled: 1, by_sync_state: { pending: 2, applied: 0, failed: 0 } },
      tunnels: { total: 0, by_status: { pending: 0, up: 0, down: 0 } },
      traffic: { bytes_in: 1000, bytes_out: 2000 },
    });
    // Over time: one rule's of hers; not another's, nor a node's (which carries others' rules too).
    const series = (query: string) => call(m.url, 'GET', `/api/dashboard/traffic?${query}`, { token: w.alice.token });
    const hers = await series(`rule_id=${mine.id}&from=2027-01-15T00:00:00Z&to=2027-01-16T00:00:00Z`);
    assert.equal(hers.status, 200, JSON.stringify(hers.body));
    assert.deepEqual(
      hers.body.points.map((p: { bytes_in: number; bytes_out: number }) => [p.bytes_in, p.bytes_out]),
      [[1000, 2000]],
    );
    assertProblem(await series(`rule_id=${w.bobs.id}`), 404, 'not_found');
    assertProblem(await series(''), 400, 'invalid_query');
    assertProblem(await series(`rule_id=${mine.id}&node_id=${w.granted.id}`), 400, 'invalid_query');
    // An operator's is the whole fleet's, as before.
    const fleet = (await call(m.url, 'GET', '/api/dashboard', { token: m.admin })).body;
    assert.deepEqual([fleet.rules.total, fleet.nodes.total, 'license' in fleet], [4, 2, true]);
  });

  const TUNNEL_EXIT =
    "a tenant's rule through their tunnel stops when the tunnel's exit node is no longer granted, " +
    'and goes on once it is';
  test(TUNNEL_EXIT, async (t) => {
    const m = await startMaster(t);
    const w = await world(m);
    const far = await node(m, 'far', { tags: ['eu'] });
    const tunnel = await call(m.url, 'POST', '/api/tunnels', {
      token: w.alice.token,
      body: { name: 'alice-link', entry_node_id: w.granted.id, exit_node_id: far.id },
    });
    const through = (await w.create(w.alice, 30010, { tunnel_id: tunnel.body.id })).body;
    assert.equal(through.state, 'active');
    const retag = async (tags: string[]) => {
      const answer = await call(m.url, 'PUT', `/api/nodes/${far.id}`, {
        token: m.admin,
        body: { name: 'far', host: 'far', tags },
      });
      assert.equal(answer.status, 200, JSON.stringify(answer.body));
      return (await call(m.url, 'GET', `/api/rules/${through.id}`, { token: w.alice.token })).body;
    };
    const listed = async () =>
      (await call(m.url, 'GET', '/api/nodes?tag=eu', { token: w.alice.token })).body.items.map(
        (n: { id: number }) => n.id,
      );
    assert.equal((await retag([])).state, 'not_granted', 'its traffic would leave at a node the plan no longer grants');
    assert.deepEqual(await listed(), [w.granted.id], 'the node is no longer granted, nor tagged eu');
    assert.equal((await retag(['eu'])).state, 'active');
    assert.deepEqual(await listed(), [w.granted.id, far.id]);
  });

  test("a tick whose owners cannot be read is lost alone: the master and the tenant's stream go on", async (t) => {
    const m = await startMaster(t);
    m.app.events.tickMs = 1000;
    const w = await world(m);
    const mine = (await w.create(w.alice, 30000)).body;
    const stream = await openEvents(m.url, w.alice.token);
    t.after(() => stream.close());
    await stream.next((e) => e.event === 'ready');
    const { rules } = m.app.store;
    const ownersOf = rules.ownersOf.bind(rules);
    rules.ownersOf = () => {
      rules.ownersOf = ownersOf;
      throw new Error('database is locked');
    };
    const moved = [{ id: mine.id, bytes_in: 10, bytes_out: 20, refused: 0 }];
    m.app.sync.reports.emit('traffic', w.granted.id, moved);
    await until('the failing tick to pass', () => rules.ownersOf === ownersOf);
    await new Promise((resolve) => setTimeout(resolve, 1100));
    m.app.sync.reports.emit('traffic', w.granted.id, moved);
    const tick = await stream.next((e) => e.event === 'traffic');
    assert.deepEqual(
      tick.data.data.rules.map((r: { id: number }) => r.id),
      [mine.id],
    );
  });

  const OWN_EVENTS =
    "a tenant's event stream follows their own rules and the nodes granted them; another's, a node not granted, a " +
    "node's vitals and others' traffic never reach it, even as bare envelopes";
  test(OWN_EVENTS, async (t) => {
    const m = await startMaster(t);
    m.app.events.tickMs = 1000;
    const w = await world(m);
    const streams = [await openEvents(m.url, w.alice.token), await openEvents(m.url, w.alice.token, '?data=false')];
    const operators = await openEvents(m.url, m.admin);
    t.after(() => [...streams, operators].forEach((stream) => stream.close()));
    await Promise.all([...streams, operators].map((stream) => stream.next((e) => e.event === 'ready')));

    const renamed = async (id: number, name: string, tags: string[]) => {
      const answer = await call(m.url, 'PUT', `/api/nodes/${id}`, { token: m.admin, body: { name, host: name, tags } });
      assert.equal(answer.status, 200, JSON.stringify(answer.body));
    };
    await rule(m, { node_id: w.granted.id, listen_port: 10002 });
    await w.create(w.bob, 30051);
    await call(m.url, 'DELETE', `/api/rules/${w.bobs.id}`, { token: w.bob.token });
    await renamed(w.other.id, 'other-2', []);
    await renamed(w.granted.id, 'granted-2', ['eu']);
    const mine = (await w.create(w.alice, 30000)).body;
    m.app.sync.reports.emit('traffic', w.granted.id, [
      { id: mine.id, bytes_in: 10, bytes_out: 20, refused: 0 },
      { id: w.operators.id, bytes_in: 1000, bytes_out: 2000, refused: 0 },
    ]);
    m.app.sync.reports.emit('vitals', w.granted.id, { cpu_percent: 1 });
    const tick = await streams[0]!.next((e) => e.event === 'traffic');
    assert.deepEqual(tick.data.data.nodes, [{ id: w.granted.id, bytes_in: 10, bytes_out: 20 }], 'her bytes alone');
    assert.deepEqual(
      tick.data.data.rules.map((r: { id: number }) => r.id),
      [mine.id],
    );
    await operators.next((e) => e.event === 'node.vitals');
    await call(m.url, 'DELETE', `/api/rules/${mine.id}`, { token: w.alice.token });
    for (const [i, stream] of streams.entries()) {
      await stream.next((e) => e.event === 'rule.deleted');
      const seen = stream.events
        .filter((e) => e.event !== 'ready' && e.event !== 'traffic')
        .map((e) => `${e.event} ${e.data.resource_id}`);
      assert.deepEqual(
        seen,
        [`node.updated ${w.granted.id}`, `rule.created ${mine.id}`, `rule.deleted ${mine.id}`],
        `stream ${i}: ${JSON.stringify(seen)}`,
      );
    }
    assert.equal(streams[0]!.events.find((e) => e.event === 'rule.created')!.data.data.id, mine.id);
    assert.equal(streams[1]!.events.find((e) => e.event === 'rule.created')!.data.data, null, 'data=false');
  });

  test('a tenant on no plan is granted nothing: no node to see, no rule to make', async (t) => {
    const m = await startMaster(t);
    const edge = await node(m, 'edge', { tags: ['eu'] });
    await call(m.url, 'POST', '/api/users', {
      token: m.admin,
      body: {
        username: 'drifter',
        password: 'drifter-password',
        role: 'tenant',
        scopes: ['rules:write', 'nodes:read'],
      },
    });
    const token = await login(m.url, 'drifter', 'drifter-password');
    assert.deepEqual((await call(m.url, 'GET', '/api/nodes', { token })).body.items, []);
    assertProblem(await call(m.url, 'GET', `/api/nodes/${edge.id}`, { token }), 404, 'not_found');
    const made = await call(m.url, 'POST', '/api/rules', {
      token,
      body: { name: 'r', node_id: edge.id, protocol: 'tcp', listen_port: 30000, targets: ['10.0.0.1:80'] },
    });
    assertProblem(made, 403, 'not_granted');
    assert.match(made.body.detail, /you are on no plan/);
  });
});
