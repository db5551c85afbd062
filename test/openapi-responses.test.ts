// Every operation in the route table is called for real here, and every response is held
// against the schema the served OpenAPI document gives for its status.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { routes } from '../internal/api/routes.ts';
import { call, type CallOptions } from './helpers.ts';
import { startMaster } from './helpers.ts';
import { check, inlineRefs } from './json-schema.ts';

test('real responses of every operation match the OpenAPI document', async (t) => {
  const m = await startMaster(t);
  const doc = inlineRefs((await call(m.url, 'GET', '/api/openapi.json')).body);
  const seen = new Set<string>();

  async function hit(method: string, pattern: string, path: string, options: CallOptions = {}) {
    const answer = await call(m.url, method, path, { token: m.admin, ...options });
    const operation = doc.paths[pattern]?.[method.toLowerCase()];
    assert.ok(operation, `${method} ${pattern} is not in the document`);
    const documented = operation.responses[String(answer.status)];
    assert.ok(
      documented,
      `${method} ${path} answered ${answer.status}, which is not documented: ${JSON.stringify(answer.body)}`,
    );
    const content = documented.content ?? {};
    const media = Object.keys(content)[0];
    if (media) {
      assert.equal(answer.headers.get('content-type'), media, `${method} ${path}`);
      assert.deepEqual(check(content[media].schema, answer.body), [], `${method} ${path} -> ${answer.status}`);
    } else {
      assert.equal(answer.body, '', `${method} ${path} -> ${answer.status} should have no body`);
    }
    // Every documented kind of header the server sent is documented for this answer.
    for (const name of ['ETag', 'Location', 'RateLimit', 'RateLimit-Policy', 'Retry-After', 'Idempotent-Replayed']) {
      if (answer.headers.get(name) !== null)
        assert.ok(documented.headers?.[name], `${method} ${path} -> ${answer.status} sent ${name}, undocumented`);
    }
    seen.add(`${method} ${pattern}`);
    return answer;
  }

  const login = await hit('POST', '/api/auth/login', '/api/auth/login', {
    body: { username: 'admin', password: 'admin-password-for-tests' },
  });
  await hit('GET', '/api/auth/me', '/api/auth/me');
  await hit('GET', '/api/openapi.json', '/api/openapi.json');
  await hit('GET', '/api/health', '/api/health');
  await hit('GET', '/api/backup', '/api/backup');
  await hit('GET', '/api/metrics', '/api/metrics');
  await hit('GET', '/api/license', '/api/license');
  await hit('GET', '/api/settings', '/api/settings');
  await hit('PATCH', '/api/settings', '/api/settings', { body: { sync_wait_seconds: 0 } });
  await hit('PATCH', '/api/settings', '/api/settings', { body: { sync_wait_seconds: 'x' } });

  const token = await hit('POST', '/api/tokens', '/api/tokens', {
    body: { name: 'ci', scopes: ['audit:read'], expires_at: '2099-01-01T00:00:00Z' },
  });
  await hit('GET', '/api/tokens', '/api/tokens');
  await hit('GET', '/api/tokens/{id}', `/api/tokens/${token.body.id}`);
  await hit('DELETE', '/api/tokens/{id}', `/api/tokens/${token.body.id}`);
  await hit('GET', '/api/tokens/{id}', `/api/tokens/${token.body.id}`);

  const user = await hit('POST', '/api/users', '/api/users', {
    body: { username: 'ops', password: 'ops-password-1', scopes: ['nodes:read'] },
  });
  await hit('GET', '/api/users', '/api/users?q=ops');
  await hit('GET', '/api/users/{id}', `/api/users/${user.body.id}`);
  await hit('PUT', '/api/users/{id}', `/api/users/${user.body.id}`, { body: { ...user.body, disabled: true } });
  await hit('DELETE', '/api/users/{id}', `/api/users/${user.body.id}`);
  await hit('DELETE', '/api/users/{id}', '/api/users/1');

  const a = await hit('POST', '/api/nodes', '/api/nodes', {
    body: { name: 'a', host: '192.0.2.10', ssh_password: 'pw-for-node' },
  });
  const b = await hit('POST', '/api/nodes', '/api/nodes', { body: { name: 'b', host: 'b.example.net' } });
  await hit('GET', '/api/nodes', '/api/nodes');
  await hit('GET', '/api/nodes/{id}', `/api/nodes/${a.body.id}`);
  await hit('PUT', '/api/nodes/{id}', `/api/nodes/${a.body.id}`, { body: { ...a.body, tags: ['x'] } });
  // Port 1 on loopback refuses at once: the install is accepted (202), then fails in the background.
  const c = await hit('POST', '/api/nodes', '/api/nodes', { body: { name: 'c', host: '127.0.0.1', ssh_port: 1 } });
  await hit('POST', '/api/nodes/{id}/install-ssh', `/api/nodes/${c.body.id}/install-ssh`, {
    body: { master_url: 'http://127.0.0.1:9' },
  });
  await hit('POST', '/api/nodes/{id}/reinstall', `/api/nodes/${c.body.id}/reinstall`);
  await hit('POST', '/api/nodes/{id}/install-ssh', `/api/nodes/${a.body.id}/install-ssh`, {
    body: { master_url: 'not a url' },
  });

  const tunnel = await hit('POST', '/api/tunnels', '/api/tunnels', {
    body: { name: 'a-b', entry_node_id: a.body.id, exit_node_id: b.body.id },
  });
  await hit('GET', '/api/tunnels', '/api/tunnels');
  await hit('GET', '/api/tunnels/{id}', `/api/tunnels/${tunnel.body.id}`);
  await hit('PUT', '/api/tunnels/{id}', `/api/tunnels/${tunnel.body.id}`, { body: { ...tunnel.body, name: 'a-to-b' } });

  const ruleBody = { name: 'web', node_id: a.body.id, protocol: 'tcp', listen_port: 8080, targets: ['10.0.0.1:80'] };
  const rule = await hit('POST', '/api/rules', '/api/rules', { body: ruleBody });
  await hit('POST', '/api/rules', '/api/rules', { body: ruleBody });
  await hit('GET', '/api/rules', '/api/rules?enabled=true');
  await hit('GET', '/api/rules/{id}', `/api/rules/${rule.body.id}`);
  await hit('PUT', '/api/rules/{id}', `/api/rules/${rule.body.id}`, {
    body: { ...rule.body, tunnel_id: tunnel.body.id },
  });
  await hit('POST', '/api/rules/{id}/sync', `/api/rules/${rule.body.id}/sync`);
  const batch = await hit('POST', '/api/rules/batch-create', '/api/rules/batch-create', {
    body: {
      rules: [
        { ...ruleBody, listen_port: 9000 },
        { ...ruleBody, listen_port: 9001 },
      ],
    },
  });
  await hit('POST', '/api/rules/batch-create', '/api/rules/batch-create?dry_run=true', {
    body: { rules: [{ ...ruleBody, listen_port: 9002 }] },
  });
  await hit('POST', '/api/rules/batch-create', '/api/rules/batch-create', { body: { rules: [ruleBody] } });
  const batchIds = batch.body.results.map((r: { id: number }) => r.id);
  await hit('POST', '/api/rules/batch-update', '/api/rules/batch-update', {
    body: { ids: [...batchIds, 999], changes: { enabled: false } },
  });
  await hit('POST', '/api/rules/batch-sync', '/api/rules/batch-sync', { body: { ids: batchIds } });
  await hit('POST', '/api/rules/batch-delete', '/api/rules/batch-delete', { body: { ids: [batchIds[0], 999] } });

  await hit('GET', '/api/dashboard', '/api/dashboard');
  await hit(
    'GET',
    '/api/dashboard/traffic',
    '/api/dashboard/traffic?step=60&from=2026-01-01T00:00:00Z&to=2026-01-01T01:00:00Z',
  );
  const exported = await hit('GET', '/api/export', '/api/export');
  await hit('POST', '/api/import', '/api/import?dry_run=true', { body: exported.body });
  await hit('POST', '/api/import', '/api/import', {
    body: { ...exported.body, rules: [{ ...exported.body.rules[0], node: 'ghost' }] },
  });

  await hit('DELETE', '/api/tunnels/{id}', `/api/tunnels/${tunnel.body.id}`);
  await hit('POST', '/api/tunnels/batch-delete', '/api/tunnels/batch-delete?cascade=true', {
    body: { ids: [tunnel.body.id] },
  });
  await hit('DELETE', '/api/rules/{id}', `/api/rules/${batchIds[1]}`);
  await hit('POST', '/api/nodes/batch-delete', '/api/nodes/batch-delete', { body: { ids: [a.body.id] } });
  await hit('DELETE', '/api/nodes/{id}', `/api/nodes/${b.body.id}`);
  await hit('DELETE', '/api/nodes/{id}', `/api/nodes/${c.body.id}`);
  await hit('GET', '/api/audit-logs', '/api/audit-logs?limit=200');
  await hit('POST', '/api/auth/logout', '/api/auth/logout', { token: login.body.token });

  const missing = routes.map((r) => `${r.method} ${r.path}`).filter((name) => !seen.has(name));
  assert.deepEqual(missing, [], 'every operation is exercised');
});
