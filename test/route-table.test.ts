// Tests generated from the route table, so every route added later is covered without
// anyone remembering to: scope declarations, the scope matrix, and bad input on writes.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { routes } from '../internal/api/routes.ts';
import type { Route } from '../internal/api/route.ts';
import { grants, grantsAll, scopes, type Scope } from '../internal/auth/scopes.ts';
import type { JsonSchema, ObjectSchema } from '../internal/schema/schema.ts';
import { definitions, guardedKeys, type SettingKey } from '../internal/settings/settings.ts';
import { EVERY_ENTRY } from '../internal/store/audit.ts';
import {
  ADMIN_PASSWORD,
  assertProblem,
  call,
  login,
  mintToken,
  node,
  rule,
  snapshot,
  startMaster,
  type Running,
} from './helpers.ts';

const PUBLIC_ROUTES = [
  'POST /api/auth/login',
  'GET /api/auth/methods',
  'GET /api/auth/oidc/login',
  'GET /api/auth/oidc/callback',
  'POST /api/auth/oidc/session',
  'POST /api/auth/passkeys/sign-in/options',
  'POST /api/auth/passkeys/sign-in',
  'GET /api/health',
  'GET /api/openapi.json',
];

/** The newest `limit` audit entries, unfiltered. */
function newestAudit(m: Running, limit: number) {
  return m.app.store.audit.list({ beforeId: Number.MAX_SAFE_INTEGER, limit, ...EVERY_ENTRY });
}

function fill(path: string): string {
  return path.replace(/\{[a-z_]+\}/g, '999999');
}

test('every route declares its access, a verbNoun operationId of its own, and every write an audit action', () => {
  const ids = routes.map((r) => r.operationId);
  assert.deepEqual(ids, [...new Set(ids)], 'operationIds are unique');
  for (const r of routes) {
    assert.match(r.operationId ?? '', /^[a-z]+[A-Z][A-Za-z]*$/, `${r.method} ${r.path} needs a verbNoun operationId`);
    const name = `${r.method} ${r.path}`;
    assert.ok(['public', 'authenticated', 'session'].includes(r.scope) || scopes.includes(r.scope as Scope), name);
    assert.equal(r.scope === 'public', PUBLIC_ROUTES.includes(name), `${name} public?`);
    if (r.method !== 'GET') assert.match(r.action ?? '', /^[a-z_]+\.[a-z_]+$/, `${name} needs an audit action`);
    assert.ok(r.summary.length > 0, `${name} needs a summary`);
  }
});

test(
  'scope matrix: no token 401, a token lacking the scope 403 (a denied write is audited and ' +
    'changes nothing), the scope allows',
  async (t) => {
    const m = await startMaster(t);
    for (const r of routes.filter((x) => x.scope !== 'public')) {
      await t.test(`${r.method} ${r.path} (${r.scope})`, async () => {
        // A stream (server-sent events) is asked to end, so that its answer can be read whole.
        const path = fill(r.path) + (r.responses[200]?.mediaType === 'text/event-stream' ? '?timeout_seconds=1' : '');
        const body = r.method === 'GET' || r.method === 'DELETE' ? undefined : {};
        assertProblem(await call(m.url, r.method, path, { body }), 401, 'unauthorized');

        if (r.scope !== 'authenticated') {
          const wanted = r.scope as Scope;
          // A route for login sessions refuses every API token, even one with every scope.
          const lacking =
            r.scope === 'session' ? ['*' as const] : scopes.filter((s) => s !== '*' && !grants([s], wanted));
          const weak = await mintToken(m, lacking, `lacks ${wanted}`);
          const before = snapshot(m, ['audit_log']);
          const lastAudit = newestAudit(m, 1)[0]!.id;
          const denied = await call(m.url, r.method, path, { token: weak, body });
          assertProblem(denied, 403, 'insufficient_scope');
          assert.match(
            denied.body.detail,
            r.scope === 'session' ? /login session/ : new RegExp(wanted.replace('*', '\\*')),
          );
          assert.equal(snapshot(m, ['audit_log']), before);
          const entries = newestAudit(m, 10).filter((e) => e.id > lastAudit);
          if (r.method === 'GET') {
            assert.deepEqual(entries, []);
          } else {
            assert.equal(entries.length, 1);
            assert.equal(entries[0]!.status, 'denied');
            assert.equal(entries[0]!.action, r.action);
          }
        }

        const enough =
          r.scope === 'session'
            ? await login(m.url, 'admin', ADMIN_PASSWORD)
            : await mintToken(m, r.scope === 'authenticated' ? ['license:read'] : [r.scope as Scope], `has ${r.scope}`);
        const allowed = await call(m.url, r.method, path, { token: enough, body });
        assert.ok(
          ![401, 403].includes(allowed.status),
          `allowed call got ${allowed.status} ${JSON.stringify(allowed.body)}`,
        );
        // A route may end the admin's login sessions (POST /api/auth/logout-others): sign in again for the next one.
        if ((await call(m.url, 'GET', '/api/auth/me', { token: m.admin })).status === 401)
          m.admin = await login(m.url, 'admin', ADMIN_PASSWORD);
      });
    }
  },
);

function wrongValueFor(schema: JsonSchema): unknown {
  const type = Array.isArray(schema.type) ? schema.type[0] : schema.type;
  switch (type) {
    case 'string':
      return 12345;
    case 'integer':
      return 'not a number';
    case 'boolean':
      return 'yes';
    case 'array':
      return { not: 'an array' };
    default:
      return ['not', 'an', 'object'];
  }
}

function bodyCases(r: Route): { name: string; body: unknown; pointers: string[] }[] {
  const schema = r.body as ObjectSchema<Record<string, never>>;
  const properties = (schema.json.properties ?? {}) as Record<string, JsonSchema>;
  const required = (schema.json.required ?? []) as string[];
  const cases: { name: string; body: unknown; pointers: string[] }[] = [
    { name: 'an array', body: [], pointers: ['#'] },
    { name: 'a JSON string', body: '"text"', pointers: ['#'] },
    { name: 'an unknown field', body: { zz_unknown: 1 }, pointers: ['#/zz_unknown'] },
  ];
  if (required.length > 0) cases.push({ name: 'no fields', body: {}, pointers: required.map((key) => `#/${key}`) });
  for (const [key, property] of Object.entries(properties)) {
    cases.push({ name: `${key} of the wrong type`, body: { [key]: wrongValueFor(property) }, pointers: [`#/${key}`] });
  }
  return cases;
}

test('bad input on every write route is 422 naming each bad field, and changes nothing', async (t) => {
  const m = await startMaster(t);
  for (const r of routes.filter((x) => x.body)) {
    await t.test(`${r.method} ${r.path}`, async () => {
      for (const c of bodyCases(r)) {
        const before = snapshot(m);
        const answer = await call(m.url, r.method, fill(r.path), { token: m.admin, body: c.body });
        assertProblem(answer, 422, 'validation_failed');
        const pointers = answer.body.errors.map((e: { pointer: string }) => e.pointer);
        for (const pointer of c.pointers)
          assert.ok(pointers.includes(pointer), `${c.name}: ${pointer} not in ${pointers}`);
        assert.equal(snapshot(m), before, c.name);
      }
    });
  }
});

/** Makes two nodes, a tunnel between them, a rule on the entry node and a rule through the tunnel. */
async function forwardingSetup(m: Running): Promise<{ nodeId: number; tunnelId: number }> {
  const [entry, exit] = [await node(m, 'entry'), await node(m, 'exit')];
  const tunnel = await call(m.url, 'POST', '/api/tunnels', {
    token: m.admin,
    body: { name: 'through', entry_node_id: entry.id, exit_node_id: exit.id },
  });
  assert.equal(tunnel.status, 201);
  assert.equal((await rule(m, { node_id: entry.id, listen_port: 80 })).status, 201);
  assert.equal((await rule(m, { node_id: entry.id, listen_port: 81, tunnel_id: tunnel.body.id })).status, 201);
  return { nodeId: entry.id, tunnelId: tunnel.body.id };
}

/** A valid value other than the default, for every setting. */
function anotherValue(key: SettingKey): unknown {
  const fallback = definitions[key].default;
  if (typeof fallback === 'number') return fallback + 1;
  return {
    install_dir: '/opt/elsewhere',
    install_service_name: 'other-agent',
    install_master_url: 'https://192.0.2.1:8443',
    tls_next_pin: `sha256/${'A'.repeat(43)}=`,
    replication_mode: 'sync',
    standby_masters: 'https://127.0.0.1:1',
    public_url: 'https://console.example.com',
    oidc_issuer: 'https://idp.example.com',
    oidc_client_id: 'another-client',
    oidc_client_secret: 'another-secret',
    oidc_scopes: 'openid email',
    oidc_username_claim: 'email',
    oidc_groups_claim: 'roles',
    oidc_provisioning: [{ group: 'ops', role: 'operator' }],
    oidc_name: 'Another',
    password_login: 'operators',
  }[key as string];
}

/** Another user, to give things to. */
async function otherUser(m: Running): Promise<number> {
  const made = await call(m.url, 'POST', '/api/users', {
    token: m.admin,
    body: { username: 'other', password: 'other-password-long' },
  });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  return made.body.id;
}

/** Rule `id` as written, given to user `owner`. */
async function ruleGiven(m: Running, id: number, owner: number) {
  const {
    id: _id,
    owner_id: _owner,
    ...fields
  } = (await call(m.url, 'GET', `/api/rules/${id}`, { token: m.admin })).body;
  return { ...fields, owner_id: owner };
}

type Effect = { scope: Scope; make: (m: Running) => Promise<{ path: string; body?: unknown }> };

/** How to make each declared side effect happen: the requests that do it. Every route declaring one needs an entry. */
const SIDE_EFFECTS: Record<string, Effect[]> = {
  'PATCH /api/settings': guardedKeys.map((key) => ({
    scope: '*',
    make: async (m) => {
      // Turning sync on waits for a standby that this master has not got: briefly, so the test is about the scope.
      if (key === 'replication_mode') {
        const body = { replication_sync_timeout_seconds: 1 };
        assert.equal((await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body })).status, 200);
      }
      return { path: '/api/settings', body: { [key]: anotherValue(key) } };
    },
  })),
  'DELETE /api/nodes/{id}': [
    {
      scope: 'rules:write',
      make: async (m) => ({ path: `/api/nodes/${(await forwardingSetup(m)).nodeId}?cascade=true` }),
    },
    {
      scope: 'tunnels:write',
      make: async (m) => ({ path: `/api/nodes/${(await forwardingSetup(m)).nodeId}?cascade=true` }),
    },
  ],
  'POST /api/nodes/batch-delete': ['rules:write' as const, 'tunnels:write' as const].map((scope) => ({
    scope,
    make: async (m: Running) => ({
      path: '/api/nodes/batch-delete?cascade=true',
      body: { ids: [(await forwardingSetup(m)).nodeId] },
    }),
  })),
  'DELETE /api/tunnels/{id}': [
    {
      scope: 'rules:write',
      make: async (m) => ({ path: `/api/tunnels/${(await forwardingSetup(m)).tunnelId}?cascade=true` }),
    },
  ],
  'POST /api/tunnels/batch-delete': [
    {
      scope: 'rules:write',
      make: async (m) => ({
        path: '/api/tunnels/batch-delete?cascade=true',
        body: { ids: [(await forwardingSetup(m)).tunnelId] },
      }),
    },
  ],
  'PUT /api/tunnels/{id}': [
    {
      scope: 'rules:write',
      make: async (m) => {
        const { tunnelId } = await forwardingSetup(m);
        const tunnel = (await call(m.url, 'GET', `/api/tunnels/${tunnelId}`, { token: m.admin })).body;
        const elsewhere = await node(m, 'elsewhere');
        const { name, entry_node_id, transport } = tunnel;
        return {
          path: `/api/tunnels/${tunnelId}`,
          body: { name, entry_node_id, exit_node_id: elsewhere.id, transport },
        };
      },
    },
    {
      scope: 'users:write',
      make: async (m) => {
        const { tunnelId } = await forwardingSetup(m);
        const tunnel = (await call(m.url, 'GET', `/api/tunnels/${tunnelId}`, { token: m.admin })).body;
        const { name, entry_node_id, exit_node_id, transport } = tunnel;
        return {
          path: `/api/tunnels/${tunnelId}`,
          body: { name, entry_node_id, exit_node_id, transport, owner_id: await otherUser(m) },
        };
      },
    },
  ],
  'POST /api/tunnels': [
    {
      scope: 'users:write',
      make: async (m) => {
        const [entry, exit] = [await node(m, 'entry'), await node(m, 'exit')];
        return {
          path: '/api/tunnels',
          body: { name: 'given', entry_node_id: entry.id, exit_node_id: exit.id, owner_id: await otherUser(m) },
        };
      },
    },
  ],
  'POST /api/rules': [
    {
      scope: 'users:write',
      make: async (m) => {
        const entry = await node(m, 'entry');
        const owner_id = await otherUser(m);
        const body = { name: 'given', node_id: entry.id, protocol: 'tcp', listen_port: 90, targets: ['10.0.0.1:80'] };
        return { path: '/api/rules', body: { ...body, owner_id } };
      },
    },
  ],
  'PUT /api/rules/{id}': [
    {
      scope: 'users:write',
      make: async (m) => {
        const made = await rule(m, { node_id: (await node(m, 'entry')).id, listen_port: 90 });
        return { path: `/api/rules/${made.body.id}`, body: await ruleGiven(m, made.body.id, await otherUser(m)) };
      },
    },
  ],
  'POST /api/rules/batch-create': [
    {
      scope: 'users:write',
      make: async (m) => {
        const entry = await node(m, 'entry');
        const owner_id = await otherUser(m);
        const body = { name: 'given', node_id: entry.id, protocol: 'tcp', listen_port: 90, targets: ['10.0.0.1:80'] };
        return { path: '/api/rules/batch-create', body: { rules: [{ ...body, owner_id }] } };
      },
    },
  ],
  'POST /api/rules/batch-update': [
    {
      scope: 'users:write',
      make: async (m) => {
        const made = await rule(m, { node_id: (await node(m, 'entry')).id, listen_port: 90 });
        return {
          path: '/api/rules/batch-update',
          body: { ids: [made.body.id], changes: { owner_id: await otherUser(m) } },
        };
      },
    },
  ],
  'POST /api/nodes/{id}/install-ssh': [{ scope: '*', make: async (m) => installElsewhere(m, 'install-ssh') }],
  'POST /api/nodes/{id}/reinstall': [{ scope: '*', make: async (m) => installElsewhere(m, 'reinstall') }],
};

/** An install that sends the agent to an address the operator did not set (nothing listens at either). */
async function installElsewhere(m: Running, verb: string) {
  const target = await node(m, 'target', { host: '127.0.0.1', ssh_port: 1 });
  return { path: `/api/nodes/${target.id}/${verb}`, body: { master_url: 'http://127.0.0.1:9' } };
}

test(
  'side effects: a route that may act beyond its own scope (cascades, guarded settings) is ' +
    'refused without that scope, changes nothing and is audited as denied',
  async (t) => {
    const declaring = routes.filter((r) => (r.alsoNeeds ?? []).length > 0);
    assert.deepEqual(
      declaring.map((r) => `${r.method} ${r.path}`).sort(),
      Object.keys(SIDE_EFFECTS).sort(),
      'every declared side effect has a request that makes it happen',
    );
    for (const r of declaring) {
      for (const effect of r.alsoNeeds!) {
        await t.test(`${r.method} ${r.path} also needs ${effect.scope}`, async (tt) => {
          const requests = SIDE_EFFECTS[`${r.method} ${r.path}`]!.filter((e) => e.scope === effect.scope);
          assert.ok(requests.length > 0, `a request makes ${effect.scope} needed`);
          for (const request of requests) {
            const m = await startMaster(tt);
            const made = await request.make(m);
            const lacking = scopes.filter((s) => s !== '*' && !grants([s], effect.scope));
            assert.ok(grantsAll(lacking, [r.scope as Scope]), "the weak token holds the route's own scope");
            const weak = await mintToken(m, lacking, `lacks ${effect.scope}`);
            const before = snapshot(m, ['audit_log']);
            const denied = await call(m.url, r.method, made.path, { token: weak, body: made.body });
            if (denied.status === 200) {
              assert.deepEqual(
                denied.body.results.map((x: { outcome: string }) => x.outcome),
                ['forbidden'],
                JSON.stringify(denied.body),
              );
            } else {
              assertProblem(denied, 403, 'insufficient_scope');
              assert.equal(denied.body.required_scope, effect.scope);
            }
            assert.equal(
              snapshot(m, ['audit_log']),
              before,
              `${JSON.stringify(made.body ?? made.path)} changed nothing`,
            );
            const audit = await call(m.url, 'GET', `/api/audit-logs?status=denied&action=${r.action}`, {
              token: m.admin,
            });
            assert.equal(audit.body.items.length, 1, JSON.stringify(audit.body.items));
            assert.equal(audit.body.items[0].changes.required_scope, effect.scope);

            const strong = await mintToken(m, [...lacking, effect.scope], `has ${effect.scope}`);
            const allowed = await call(m.url, r.method, made.path, { token: strong, body: made.body });
            assert.ok(
              [200, 201, 202, 204].includes(allowed.status),
              `${allowed.status} ${JSON.stringify(allowed.body)}`,
            );
            for (const result of allowed.body?.results ?? [])
              assert.ok(['deleted', 'updated', 'created'].includes(result.outcome), JSON.stringify(result));
            assert.notEqual(snapshot(m, ['audit_log']), before, 'with the scope, the side effect happens');
          }
        });
      }
    }
  },
);

test('routing: another method on a known path is 405 with Allow, before the body is read', async (t) => {
  const m = await startMaster(t);
  const methodsOf = new Map<string, Set<string>>();
  for (const r of routes) methodsOf.set(r.path, (methodsOf.get(r.path) ?? new Set()).add(r.method));
  for (const [path, methods] of methodsOf) {
    const allow = [...methods, ...(methods.has('GET') ? ['HEAD'] : [])].sort().join(', ');
    for (const method of ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'].filter((x) => !methods.has(x))) {
      const answer = await call(m.url, method, fill(path), {
        token: m.admin,
        ...(method === 'GET' ? {} : { body: 'not json at all' }),
      });
      assertProblem(answer, 405, 'method_not_allowed');
      assert.equal(answer.headers.get('allow'), allow, `${method} ${path}`);
    }
  }
});

test('an id that is not a whole number from 1 is 404 before the token or the body is looked at', async (t) => {
  const m = await startMaster(t);
  for (const r of routes.filter((x) => x.path.includes('{id}'))) {
    for (const id of ['0', '-1', 'abc', '1.5', '1e3', '007', '99999999999999999', '%20']) {
      const answer = await call(m.url, r.method, r.path.replace('{id}', id), {
        ...(r.method === 'GET' ? {} : { body: 'null' }),
      });
      assertProblem(answer, 404, 'not_found');
    }
  }
});

test('a JSON body that is not an object, or none where fields are required, is 422 on every write', async (t) => {
  const m = await startMaster(t);
  const before = snapshot(m, ['audit_log', 'tokens']);
  for (const r of routes.filter((x) => x.method !== 'GET')) {
    const name = `${r.method} ${r.path}`;
    for (const raw of ['null', '[]', '7', '"text"', 'true']) {
      const answer = await call(m.url, r.method, fill(r.path), { token: m.admin, body: raw });
      assertProblem(answer, 422, 'validation_failed');
      assert.equal(answer.body.errors[0].pointer, '#', `${name} with ${raw}`);
    }
    const required = ((r.body?.json.required as string[] | undefined) ?? []).length > 0;
    if (required || r.body?.json.minProperties !== undefined) {
      const answer = await call(m.url, r.method, fill(r.path), { token: m.admin });
      assertProblem(answer, 422, 'validation_failed');
    }
  }
  assert.equal(snapshot(m, ['audit_log', 'tokens']), before, 'nothing changed');
});
