// The document and the server agree, strictly: every operation in the route table is called for real, for its
// successes and for every error status a caller can reach without an agent, and every answer is held against what
// the served OpenAPI document declares for its status: the status itself, the media type, the body (Ajv, JSON
// Schema 2020-12, formats on), every header it declares as always sent, and no header it does not declare.

import assert from 'node:assert/strict';
import { totpCode } from './totp-codes.ts';
import { test } from 'node:test';
import { routes } from '../internal/api/routes.ts';
import type { Route } from '../internal/api/route.ts';
import { ADMIN_PASSWORD, call, login, startMaster, type Answer, type CallOptions } from './helpers.ts';
import { check, inlineRefs } from './json-schema.ts';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateLicenseKeys } from '../internal/license/license.ts';
import { signBundle } from '../internal/release/signature.ts';
import { freePort, until } from './net.ts';
import { CLIENT_ID, CLIENT_SECRET, signInHeadless, signingKey, startProvider } from './oidc-provider.ts';
import { SoftAuthenticator } from './authenticator.ts';
import { openEvents, parseFrames } from './sse.ts';

/** Headers of the transport, not of the API: HTTP itself describes them. */
const TRANSPORT = new Set(['content-type', 'content-length', 'date', 'connection', 'keep-alive', 'transfer-encoding']);

/** What the document declares for `answer` is what it got; returns the problems found. */
function disagreements(doc: any, route: Route, answer: Answer, knownCaller: boolean): string[] {
  const operation = doc.paths[route.path]?.[route.method.toLowerCase()];
  if (!operation) return [`${route.method} ${route.path} is not in the document`];
  const documented = operation.responses[String(answer.status)];
  if (!documented) return [`answered ${answer.status}, which is not documented: ${JSON.stringify(answer.body)}`];
  const problems: string[] = [];
  const content = documented.content ?? {};
  const type = answer.headers.get('content-type');
  if (Object.keys(content).length === 0) {
    if (answer.body !== '') problems.push(`has a body, none documented`);
  } else if (!type || !content[type]) {
    problems.push(`content-type ${type}, documented ${Object.keys(content).join(', ')}`);
  } else if (type === 'text/event-stream') {
    // A stream's schema is that of each event's data.
    const { frames, rest } = parseFrames(answer.body);
    if (rest !== '') problems.push(`the stream ends inside a frame: ${rest.slice(0, 80)}`);
    for (const frame of frames) problems.push(...check(content[type].schema, frame.data));
  } else if (content[type].schema) {
    problems.push(...check(content[type].schema, answer.body));
  }
  const declared = new Map(Object.entries(documented.headers ?? {}).map(([n, h]) => [n.toLowerCase(), h as any]));
  for (const [name, header] of declared)
    if (header.required && answer.headers.get(name) === null) problems.push(`declares ${name} and did not send it`);
  for (const [name, value] of answer.headers) {
    if (TRANSPORT.has(name)) continue;
    const header = declared.get(name);
    if (!header) problems.push(`sent ${name}, undeclared`);
    else problems.push(...check(header.schema, header.schema.type === 'integer' ? Number(value) : value));
  }
  // The pacing headers go with every answer to a caller whose token is good (the budget is on here).
  if (knownCaller && answer.status !== 401 && answer.status !== 503 && answer.headers.get('ratelimit') === null)
    problems.push('a known caller got no RateLimit');
  if (answer.status === 422 && !(answer.body.errors?.length > 0)) problems.push('a 422 without errors');
  return problems;
}

/** A release key, its public half in a file of its own; `sign` makes a bundle signed with it as `version`. */
function releaseKey() {
  const keys = generateLicenseKeys();
  const path = join(mkdtempSync(join(tmpdir(), 'portplane-release-')), 'release-public.pem');
  writeFileSync(path, keys.publicKeyPem);
  const sign = (version: string) => {
    const bundle = Buffer.from(`console.log('agent ${version}');\n`);
    return { bundle: bundle.toString('base64'), signature: signBundle(bundle, version, keys.privateKeyPem) };
  };
  return { path, sign };
}

test('every answer of every operation is what the OpenAPI document declares for its status', async (t) => {
  const release = releaseKey();
  const m = await startMaster(t, { releaseKeyPaths: [release.path] });
  const doc = inlineRefs((await call(m.url, 'GET', '/api/openapi.json')).body);
  const byName = new Map(routes.map((r) => [`${r.method} ${r.path}`, r]));
  /** Tokens that authenticate. */
  const good = new Set([m.admin]);
  /** Statuses each operation answered, checked. */
  const seen = new Map<string, Set<number>>();

  async function hit(name: string, path: string, options: CallOptions = {}): Promise<Answer> {
    const route = byName.get(name);
    assert.ok(route, `${name} is not a route`);
    const answer = await call(m.url, route.method, path, { token: m.admin, ...options });
    const knownCaller = route.scope !== 'public' && good.has(options.token ?? m.admin);
    assert.deepEqual(disagreements(doc, route, answer, knownCaller), [], `${route.method} ${path} -> ${answer.status}`);
    let statuses = seen.get(name);
    if (!statuses) seen.set(name, (statuses = new Set()));
    statuses.add(answer.status);
    return answer;
  }

  const session = await hit('POST /api/auth/login', '/api/auth/login', {
    body: { username: 'admin', password: 'admin-password-for-tests' },
  });
  good.add(session.body.token);
  await hit('POST /api/auth/login', '/api/auth/login', { body: { username: 'admin', password: 'wrong-password' } });
  await hit('GET /api/auth/me', '/api/auth/me');
  await hit('GET /api/openapi.json', '/api/openapi.json');
  await hit('GET /api/health', '/api/health');
  await hit('GET /api/backup', '/api/backup');
  await hit('GET /api/metrics', '/api/metrics');
  await hit('GET /api/license', '/api/license');
  await hit('GET /api/settings', '/api/settings');
  await hit('GET /api/replication/standbys', '/api/replication/standbys');
  await hit('GET /api/live', '/api/live?sort=open&limit=5');
  await hit('GET /api/dashboard/busiest', '/api/dashboard/busiest?limit=3');
  // Sign-in by a provider: off (409), the provider down (502), then a real one (302s, and a session taken).
  await hit('GET /api/auth/methods', '/api/auth/methods');
  await hit('GET /api/auth/oidc/login', '/api/auth/oidc/login');
  await hit('GET /api/auth/oidc/callback', '/api/auth/oidc/callback?state=x&code=y');
  await hit('GET /api/auth/oidc/callback', `/api/auth/oidc/callback?state=${'x'.repeat(300)}`);
  const publicUrl = new URL(m.url).origin;
  const provider = await startProvider(t, `${publicUrl}/api/auth/oidc/callback`, [signingKey('k')], {
    alice: { email: 'alice@example.com', groups: ['ops'] },
  });
  const oidc = { public_url: publicUrl, oidc_client_id: CLIENT_ID, oidc_client_secret: CLIENT_SECRET };
  const closed = `http://127.0.0.1:${await freePort()}`;
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { ...oidc, oidc_issuer: closed } });
  await hit('GET /api/auth/oidc/login', '/api/auth/oidc/login');
  await call(m.url, 'PATCH', '/api/settings', {
    token: m.admin,
    body: {
      oidc_issuer: provider.issuer,
      oidc_scopes: 'openid groups',
      oidc_provisioning: [{ group: 'ops', role: 'operator' }],
    },
  });
  await hit('GET /api/auth/oidc/login', '/api/auth/oidc/login');
  await hit('GET /api/auth/oidc/callback', '/api/auth/oidc/callback?state=x&code=y');
  const handedOff = new URLSearchParams((await signInHeadless(m.url, 'alice')).hash.slice(1)).get('oidc');
  await hit('POST /api/auth/oidc/session', '/api/auth/oidc/session', { body: { code: handedOff } });
  await hit('POST /api/auth/oidc/session', '/api/auth/oidc/session', { body: { code: handedOff } });
  // Passkeys: off while public_url is an IP address, then on at localhost, with a software authenticator.
  const keyHolder = await login(m.url, 'admin', ADMIN_PASSWORD);
  good.add(keyHolder);
  await hit('POST /api/auth/passkeys/options', '/api/auth/passkeys/options', { token: keyHolder });
  await hit('POST /api/auth/passkeys/sign-in/options', '/api/auth/passkeys/sign-in/options');
  const device = new SoftAuthenticator('localhost', `http://localhost:${new URL(m.url).port}`);
  await hit('POST /api/auth/passkeys/sign-in', '/api/auth/passkeys/sign-in', {
    body: { credential: device.assert('x') },
  });
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { public_url: device.origin } });
  const registering = await hit('POST /api/auth/passkeys/options', '/api/auth/passkeys/options', { token: keyHolder });
  const registration = device.register(registering.body.challenge);
  const key = await hit('POST /api/auth/passkeys', '/api/auth/passkeys', {
    token: keyHolder,
    body: { name: 'laptop', credential: registration },
  });
  const again = await call(m.url, 'POST', '/api/auth/passkeys/options', { token: keyHolder });
  await hit('POST /api/auth/passkeys', '/api/auth/passkeys', {
    token: keyHolder,
    body: { name: 'laptop', credential: device.register(again.body.challenge) },
  });
  await hit('POST /api/auth/passkeys', '/api/auth/passkeys', {
    token: keyHolder,
    body: { name: 'laptop', credential: registration },
  });
  await hit('GET /api/auth/passkeys', '/api/auth/passkeys', { token: keyHolder });
  const keyPath = `/api/auth/passkeys/${key.body.id}`;
  await hit('PATCH /api/auth/passkeys/{id}', keyPath, { token: keyHolder, body: { name: 'old laptop' } });
  await hit('PATCH /api/auth/passkeys/{id}', keyPath, {
    token: keyHolder,
    body: { name: 'x' },
    headers: { 'if-match': '"99"' },
  });
  await hit('PATCH /api/auth/passkeys/{id}', '/api/auth/passkeys/999999', { token: keyHolder, body: { name: 'x' } });
  const signingIn = await hit('POST /api/auth/passkeys/sign-in/options', '/api/auth/passkeys/sign-in/options');
  await hit('POST /api/auth/passkeys/sign-in', '/api/auth/passkeys/sign-in', {
    body: { credential: device.assert(signingIn.body.challenge) },
  });
  for (let i = 0; i < 10 && !seen.get('POST /api/auth/passkeys/sign-in')!.has(429); i++)
    await hit('POST /api/auth/passkeys/sign-in', '/api/auth/passkeys/sign-in', {
      body: { credential: new SoftAuthenticator('localhost', device.origin).assert('unknown') },
    });
  const holderId = (await call(m.url, 'GET', '/api/auth/me', { token: keyHolder })).body.user.id;
  await hit('GET /api/users/{id}/passkeys', `/api/users/${holderId}/passkeys`);
  await hit('GET /api/users/{id}/passkeys', '/api/users/999999/passkeys');
  await hit('DELETE /api/users/{id}/passkeys', '/api/users/999999/passkeys');
  await hit('DELETE /api/users/{id}/passkeys', `/api/users/${holderId}/passkeys`, {
    headers: { 'if-match': '"stale"' },
  });
  await hit('DELETE /api/auth/passkeys/{id}', keyPath, { token: keyHolder, headers: { 'if-match': '"99"' } });
  await hit('DELETE /api/auth/passkeys/{id}', keyPath, { token: keyHolder });
  await hit('DELETE /api/auth/passkeys/{id}', keyPath, { token: keyHolder });
  await hit('DELETE /api/users/{id}/passkeys', `/api/users/${holderId}/passkeys`);
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { public_url: new URL(m.url).origin } });
  // Local targets allowed: the alert channel below is to a closed port on loopback, so its test fails at once.
  const settings = await hit('PATCH /api/settings', '/api/settings', {
    body: { sync_wait_seconds: 0, allow_local_rule_targets: 1, allow_local_channel_targets: 1 },
  });

  const token = await hit('POST /api/tokens', '/api/tokens', {
    body: { name: 'ci', scopes: ['audit:read'], expires_at: '2099-01-01T00:00:00Z' },
    headers: { 'idempotency-key': 'contract-token-1' },
  });
  // The same key again: the stored answer, replayed.
  await hit('POST /api/tokens', '/api/tokens', {
    body: { name: 'ci', scopes: ['audit:read'], expires_at: '2099-01-01T00:00:00Z' },
    headers: { 'idempotency-key': 'contract-token-1' },
  });
  await hit('POST /api/tokens', '/api/tokens', {
    body: { name: 'ci-2', scopes: ['audit:read'] },
    headers: { 'idempotency-key': 'contract-token-1' },
  });
  await hit('POST /api/tokens', '/api/tokens', {
    body: { name: 'ci-3', scopes: [] },
    headers: { 'idempotency-key': '' },
  });
  await hit('GET /api/tokens', '/api/tokens');
  await hit('GET /api/tokens/{id}', `/api/tokens/${token.body.id}`);

  const user = await hit('POST /api/users', '/api/users', {
    body: { username: 'ops', password: 'ops-password-1', scopes: ['nodes:read'] },
  });
  await hit('POST /api/users', '/api/users', { body: { username: 'OPS', password: 'ops-password-1', scopes: [] } });
  await hit('GET /api/users', '/api/users?q=ops');
  await hit('GET /api/users/{id}', `/api/users/${user.body.id}`);
  await hit('PUT /api/users/{id}', `/api/users/${user.body.id}`, { body: { ...user.body, disabled: true } });
  await hit('PUT /api/users/{id}', `/api/users/${user.body.id}`, { body: { ...user.body, username: 'admin' } });
  await hit('DELETE /api/users/{id}', '/api/users/1');

  const a = await hit('POST /api/nodes', '/api/nodes', {
    body: { name: 'a', host: '192.0.2.10', ssh_password: 'pw-for-node' },
  });
  const b = await hit('POST /api/nodes', '/api/nodes', { body: { name: 'b', host: 'b.example.net' } });
  await hit('POST /api/nodes', '/api/nodes', { body: { name: 'A', host: 'a2.example.net' } });
  await hit('GET /api/nodes', '/api/nodes');
  await hit('GET /api/nodes/{id}', `/api/nodes/${a.body.id}`);
  await hit('GET /api/nodes/{id}/vitals', `/api/nodes/${a.body.id}/vitals`);
  await hit('GET /api/nodes/{id}/export', `/api/nodes/${a.body.id}/export?format=realm`);
  await hit('GET /api/nodes/{id}/export', '/api/nodes/999999/export?format=realm');
  await hit(
    'GET /api/nodes/{id}/vitals',
    `/api/nodes/${a.body.id}/vitals?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z`,
  );
  const readA = await call(m.url, 'GET', `/api/nodes/${a.body.id}`, { token: m.admin });
  await hit('PUT /api/nodes/{id}', `/api/nodes/${a.body.id}`, { body: { ...readA.body, tags: ['x'] } });
  await hit('PUT /api/nodes/{id}', `/api/nodes/${a.body.id}`, { body: { ...readA.body, name: 'b' } });
  // Port 1 on loopback refuses at once: the install is accepted (202), then fails in the background.
  const c = await hit('POST /api/nodes', '/api/nodes', { body: { name: 'c', host: '127.0.0.1', ssh_port: 1 } });
  await hit('POST /api/nodes/{id}/install-ssh', `/api/nodes/${c.body.id}/install-ssh`, {
    body: { master_url: 'http://127.0.0.1:9' },
  });
  // Still installing: 409. Once the install has failed (at once: nothing listens on port 1), a reinstall starts.
  await hit('POST /api/nodes/{id}/reinstall', `/api/nodes/${c.body.id}/reinstall`);
  await until(
    'the install to fail',
    async () =>
      (await call(m.url, 'GET', `/api/nodes/${c.body.id}`, { token: m.admin })).body.status === 'install_failed',
  );
  await hit('POST /api/nodes/{id}/reinstall', `/api/nodes/${c.body.id}/reinstall`);
  await hit('POST /api/nodes/{id}/install-ssh', `/api/nodes/${c.body.id}/install-ssh`, {
    body: { master_url: 'http://127.0.0.1:9' },
  });
  await hit('POST /api/nodes/{id}/install-ssh', `/api/nodes/${a.body.id}/install-ssh`, {
    body: { master_url: 'not a url' },
  });
  for (let i = 0; i < 2; i++)
    await hit('POST /api/nodes', '/api/nodes', { body: { name: `n${i}`, host: `n${i}.example` } });
  // The free license allows five nodes: the sixth, alone or in an import, is 403 license_limit.
  await hit('POST /api/nodes', '/api/nodes', { body: { name: 'sixth', host: 'sixth.example' } });

  const tunnel = await hit('POST /api/tunnels', '/api/tunnels', {
    body: { name: 'a-b', entry_node_id: a.body.id, exit_node_id: b.body.id },
  });
  await hit('GET /api/tunnels', '/api/tunnels');
  await hit('GET /api/tunnels/{id}', `/api/tunnels/${tunnel.body.id}`);
  await hit('GET /api/tunnels/{id}/paths', `/api/tunnels/${tunnel.body.id}/paths`);
  await hit(
    'GET /api/tunnels/{id}/paths',
    `/api/tunnels/${tunnel.body.id}/paths?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z`,
  );
  const readTunnel = await call(m.url, 'GET', `/api/tunnels/${tunnel.body.id}`, { token: m.admin });
  await hit('PUT /api/tunnels/{id}', `/api/tunnels/${tunnel.body.id}`, {
    body: { ...readTunnel.body, name: 'a-to-b' },
  });
  await hit('POST /api/tunnels', '/api/tunnels', {
    body: { name: 'A-TO-B', entry_node_id: a.body.id, exit_node_id: b.body.id },
  });

  const spareTunnel = await call(m.url, 'POST', '/api/tunnels', {
    token: m.admin,
    body: { name: 'spare', entry_node_id: b.body.id, exit_node_id: c.body.id },
  });
  await hit('DELETE /api/tunnels/{id}', `/api/tunnels/${spareTunnel.body.id}`);

  const ruleBody = { name: 'web', node_id: a.body.id, protocol: 'tcp', listen_port: 8080, targets: ['10.0.0.1:80'] };
  const rule = await hit('POST /api/rules', '/api/rules', { body: ruleBody });
  await hit('POST /api/rules', '/api/rules', { body: ruleBody });
  await hit('GET /api/rules', '/api/rules?enabled=true');
  await hit('GET /api/rules/{id}', `/api/rules/${rule.body.id}`);
  await hit('PUT /api/rules/{id}', `/api/rules/${rule.body.id}`, { body: { ...rule.body, tunnel_id: tunnel.body.id } });
  const second = await call(m.url, 'POST', '/api/rules', { token: m.admin, body: { ...ruleBody, listen_port: 8081 } });
  await hit('PUT /api/rules/{id}', `/api/rules/${second.body.id}`, { body: { ...second.body, listen_port: 8080 } });
  // The tunnel's rules pin its entry node: moving it is 409.
  await hit('PUT /api/tunnels/{id}', `/api/tunnels/${tunnel.body.id}`, {
    body: { ...readTunnel.body, name: 'a-to-b', entry_node_id: c.body.id, exit_node_id: b.body.id },
  });
  await hit('POST /api/rules/{id}/sync', `/api/rules/${rule.body.id}/sync`);
  const batch = await hit('POST /api/rules/batch-create', '/api/rules/batch-create', {
    body: {
      rules: [
        { ...ruleBody, listen_port: 9000 },
        { ...ruleBody, listen_port: 9001 },
      ],
    },
  });
  await hit('POST /api/rules/batch-create', '/api/rules/batch-create?dry_run=true', {
    body: { rules: [{ ...ruleBody, listen_port: 9002 }] },
  });
  await hit('POST /api/rules/batch-create', '/api/rules/batch-create', { body: { rules: [ruleBody] } });
  await hit('POST /api/rules/batch-create', '/api/rules/batch-create', {
    body: { rules: [{ ...ruleBody, listen_port: 0 }] },
  });
  const batchIds = batch.body.results.map((r: { id: number }) => r.id);
  await hit('POST /api/rules/batch-update', '/api/rules/batch-update', {
    body: { ids: [...batchIds, 999], changes: { enabled: false } },
  });
  await hit('POST /api/rules/batch-sync', '/api/rules/batch-sync', { body: { ids: batchIds } });
  await hit('POST /api/rules/batch-delete', '/api/rules/batch-delete', { body: { ids: [batchIds[0], 999] } });

  await hit('GET /api/dashboard', '/api/dashboard');
  await hit(
    'GET /api/dashboard/traffic',
    '/api/dashboard/traffic?step=60&from=2026-01-01T00:00:00Z&to=2026-01-01T01:00:00Z',
  );
  const exported = await hit('GET /api/export', '/api/export');
  await hit('POST /api/import', '/api/import?dry_run=true', { body: exported.body });
  await hit('POST /api/import', '/api/import', {
    body: { ...exported.body, rules: [{ ...exported.body.rules[0], node: 'ghost' }] },
  });
  await hit('POST /api/import', '/api/import', {
    body: { ...exported.body, nodes: [...exported.body.nodes, { ...exported.body.nodes[0], name: 'one-too-many' }] },
  });

  // An agent bundle the master's release key signed, again (409), and with bytes that are not the signed ones (422).
  const { bundle, signature } = release.sign('0.2.0');
  const kept = await hit('POST /api/agent-bundles', '/api/agent-bundles', { body: { bundle, signature } });
  await hit('POST /api/agent-bundles', '/api/agent-bundles', { body: { bundle, signature } });
  await hit('POST /api/agent-bundles', '/api/agent-bundles', { body: { bundle: `${bundle}AAAA`, signature } });
  await hit('GET /api/agent-bundles', '/api/agent-bundles');
  const claimed = await hit('POST /api/agent-bundles', '/api/agent-bundles', {
    body: { bundle, signature: { ...signature, version: '0.3.0' } },
  });
  assert.equal(claimed.status, 422, 'the version is among the signed facts');
  const spareBundle = await hit('POST /api/agent-bundles', '/api/agent-bundles', { body: release.sign('0.2.1') });
  await hit('DELETE /api/agent-bundles/{id}', `/api/agent-bundles/${spareBundle.body.id}`);

  // What a standby reads: a snapshot, then the changes after it (none yet, or reseed for a position of elsewhere).
  const standby = await call(m.url, 'POST', '/api/tokens', {
    token: m.admin,
    body: { name: 'standby', scopes: ['replication'] },
  });
  good.add(standby.body.token);
  const seeded = await hit('GET /api/replication/snapshot', '/api/replication/snapshot', {
    token: standby.body.token,
  });
  const [generation, seq] = String(seeded.headers.get('x-replication-position')).split('/');
  await hit('GET /api/replication/changes', `/api/replication/changes?generation=${generation}&after=${seq}`, {
    token: standby.body.token,
  });
  await hit('GET /api/replication/changes', '/api/replication/changes?generation=elsewhere&after=1', {
    token: standby.body.token,
  });
  await hit('POST /api/replication/promote', '/api/replication/promote');

  // A rollout of it to a node without an agent: it waits for the node a gate's time, and is steered meanwhile.
  const plan = { version: '0.2.0', ids: [c.body.id], waves: ['100%'], gate_seconds: 600 };
  const rollout = await hit('POST /api/rollouts', '/api/rollouts', { body: plan });
  await hit('POST /api/rollouts', '/api/rollouts', { body: plan });
  await hit('POST /api/rollouts', '/api/rollouts', { body: { ...plan, waves: [0] } });
  await hit('DELETE /api/agent-bundles/{id}', `/api/agent-bundles/${kept.body.id}`);
  await hit('GET /api/rollouts', '/api/rollouts');
  await hit('GET /api/rollouts/{id}', `/api/rollouts/${rollout.body.id}`);
  await hit('GET /api/rollouts/{id}/nodes', `/api/rollouts/${rollout.body.id}/nodes`);
  for (const steer of ['pause', 'pause', 'resume', 'resume', 'abort', 'abort'])
    await hit(`POST /api/rollouts/{id}/${steer}`, `/api/rollouts/${rollout.body.id}/${steer}`);

  // Alerting: a channel (its test fails, and says so) and a rule that notifies it.
  const hook = { type: 'webhook', url: 'http://127.0.0.1:1/hook' };
  const channel = await hit('POST /api/channels', '/api/channels', { body: { name: 'ops', ...hook } });
  const spareChannel = await hit('POST /api/channels', '/api/channels', { body: { name: 'spare', ...hook } });
  await hit('POST /api/channels', '/api/channels', { body: { name: 'OPS', ...hook } });
  await hit('PUT /api/channels/{id}', `/api/channels/${spareChannel.body.id}`, { body: { name: 'ops', ...hook } });
  await hit('PUT /api/channels/{id}', `/api/channels/${spareChannel.body.id}`, { body: { name: 'spare', ...hook } });
  await hit('GET /api/channels', '/api/channels?count=true');
  await hit('GET /api/channels/{id}', `/api/channels/${channel.body.id}`);
  await hit('POST /api/channels/{id}/test', `/api/channels/${channel.body.id}/test`);
  const alertRule = { condition: 'node_offline', channel_ids: [channel.body.id] };
  const watching = await hit('POST /api/alert-rules', '/api/alert-rules', { body: { name: 'down', ...alertRule } });
  const spareRule = await hit('POST /api/alert-rules', '/api/alert-rules', { body: { name: 'spare', ...alertRule } });
  await hit('POST /api/alert-rules', '/api/alert-rules', { body: { name: 'DOWN', ...alertRule } });
  for (const name of ['down', 'still spare'])
    await hit('PUT /api/alert-rules/{id}', `/api/alert-rules/${spareRule.body.id}`, { body: { name, ...alertRule } });
  await hit('GET /api/alert-rules', '/api/alert-rules?count=true');
  await hit('GET /api/alert-rules/{id}', `/api/alert-rules/${watching.body.id}`);
  await hit('GET /api/alerts', '/api/alerts?count=true');
  await hit('GET /api/deliveries', '/api/deliveries');
  const window = { comment: 'maintenance', ends_at: m.app.timestamp(86_400_000) };
  const silence = await hit('POST /api/silences', '/api/silences', { body: { ...window, node_ids: [b.body.id] } });
  await hit('POST /api/silences', '/api/silences', { body: { ...window, ends_at: '2000-01-01T00:00:00Z' } });
  await hit('PUT /api/silences/{id}', `/api/silences/${silence.body.id}`, { body: { ...window, comment: 'longer' } });
  await hit('GET /api/silences', '/api/silences?count=true');
  await hit('GET /api/silences/{id}', `/api/silences/${silence.body.id}`);
  const spareSilence = await hit('POST /api/silences', '/api/silences', { body: window });
  await hit('DELETE /api/silences/{id}', `/api/silences/${spareSilence.body.id}`);
  const starter = await hit('POST /api/plans', '/api/plans', {
    body: { name: 'starter', port_ranges: ['30000-30099'] },
  });
  await hit('POST /api/plans', '/api/plans', { body: { name: 'STARTER' } });
  await hit('PUT /api/plans/{id}', `/api/plans/${starter.body.id}`, { body: { name: 'starter', max_rules: 10 } });
  await hit('GET /api/plans', '/api/plans?count=true');
  await hit('GET /api/plans/{id}', `/api/plans/${starter.body.id}`);
  const sparePlan = await hit('POST /api/plans', '/api/plans', { body: { name: 'spare' } });
  await hit('PUT /api/plans/{id}', `/api/plans/${starter.body.id}`, { body: { name: 'spare' } });
  await hit('DELETE /api/plans/{id}', `/api/plans/${sparePlan.body.id}`);
  await hit('DELETE /api/alert-rules/{id}', `/api/alert-rules/${spareRule.body.id}`);
  await hit('DELETE /api/channels/{id}', `/api/channels/${spareChannel.body.id}`);

  // Every operation, for the error statuses any operation can meet: no token, a bad one, a token without the
  // scope, an unknown query parameter, an id that names nothing, a stale If-Match, a body of the wrong type, too
  // large, or invalid.
  const narrow = await call(m.url, 'POST', '/api/tokens', {
    token: m.admin,
    body: { name: 'narrow', scopes: ['audit:read'] },
  });
  const other = await call(m.url, 'POST', '/api/tokens', {
    token: m.admin,
    body: { name: 'other', scopes: ['nodes:read'] },
  });
  good.add(narrow.body.token).add(other.body.token);
  // A tenant, whom every route that does not follow ownership refuses.
  await call(m.url, 'POST', '/api/users', {
    token: m.admin,
    body: { username: 'customer', password: 'customer-password', role: 'tenant', scopes: ['rules:read'] },
  });
  const customer = await login(m.url, 'customer', 'customer-password');
  good.add(customer);
  // A login session of its own for /api/auth/sessions/{id}, which the calls below end: not the admin's.
  const throwaway = await call(m.url, 'POST', '/api/auth/login', {
    body: { username: 'admin', password: ADMIN_PASSWORD },
  });
  const ids: Record<string, number> = {
    auth: (await call(m.url, 'GET', '/api/auth/me', { token: throwaway.body.token })).body.token.id,
    tokens: token.body.id,
    users: user.body.id,
    nodes: c.body.id,
    rules: rule.body.id,
    tunnels: tunnel.body.id,
    channels: channel.body.id,
    'alert-rules': watching.body.id,
    silences: silence.body.id,
    plans: starter.body.id,
    'agent-bundles': kept.body.id,
    rollouts: rollout.body.id,
  };
  for (const route of routes) {
    const name = `${route.method} ${route.path}`;
    const existing = route.path.replace('{id}', String(ids[route.path.split('/')[2]!] ?? 1));
    const hasBody = route.method !== 'GET';
    if (route.scope !== 'public') {
      await hit(name, existing, { token: '' });
      await hit(name, existing, { token: 'mst_0000000000000000000000000000000000000000' });
      const lacking = route.scope === 'audit:read' ? other.body.token : narrow.body.token;
      if (route.scope !== 'authenticated')
        await hit(name, existing, { token: lacking, body: hasBody ? {} : undefined });
      if (!route.tenants) await hit(name, existing, { token: customer, body: hasBody ? {} : undefined });
    }
    await hit(name, `${existing}?no_such_parameter=1`, { body: hasBody ? {} : undefined });
    // A body that passes, where one is needed to get past validation to what is checked next.
    const valid =
      route.method === 'PUT'
        ? (await call(m.url, 'GET', existing, { token: m.admin })).body
        : route.method === 'PATCH'
          ? { sync_wait_seconds: 0 }
          : hasBody
            ? {}
            : undefined;
    if (route.path.includes('{id}')) await hit(name, route.path.replace('{id}', '999999'), { body: valid });
    if (['PUT', 'PATCH', 'DELETE'].includes(route.method)) {
      // A weak tag never matches (the comparison is strong), whatever version it names.
      await hit(name, existing, { body: valid, headers: { 'if-match': `W/"${valid?.version ?? 1}"` } });
    }
    if (hasBody) {
      await hit(name, existing, { body: 'x', headers: { 'content-type': 'text/plain' } });
      await hit(name, existing, { body: { no_such_field: 1 } });
      await hit(name, existing, { body: `"${'x'.repeat(route.maxBodyBytes ?? 1024 * 1024)}"` });
    }
  }

  // A probe's body is checked before its node is looked for.
  await hit('POST /api/nodes/{id}/probe', '/api/nodes/999999/probe', { body: { target: '192.0.2.1:80' } });

  // Rules still run through the tunnel and on node a: deletes that would strand them are 409.
  await hit('DELETE /api/tunnels/{id}', `/api/tunnels/${tunnel.body.id}`);
  await hit('DELETE /api/nodes/{id}', `/api/nodes/${a.body.id}`);
  await hit('POST /api/tunnels/batch-delete', '/api/tunnels/batch-delete?cascade=true', {
    body: { ids: [tunnel.body.id] },
  });
  await hit('DELETE /api/rules/{id}', `/api/rules/${batchIds[1]}`);
  await hit('POST /api/nodes/batch-delete', '/api/nodes/batch-delete', { body: { ids: [a.body.id] } });
  await hit('DELETE /api/nodes/{id}', `/api/nodes/${b.body.id}`);
  const apiToken = await call(m.url, 'POST', '/api/tokens', {
    token: m.admin,
    body: { name: 'api', scopes: ['audit:read'] },
  });
  good.add(apiToken.body.token);
  await hit('POST /api/auth/logout', '/api/auth/logout', { token: apiToken.body.token });
  // Failed logins past the throttle: 429 with Retry-After.
  for (let i = 0; i < 6; i++)
    await hit('POST /api/auth/login', '/api/auth/login', { body: { username: 'ops', password: 'not-the-password' } });
  await hit('GET /api/audit-logs', '/api/audit-logs?limit=200');
  const spare = await call(m.url, 'POST', '/api/tokens', {
    token: m.admin,
    body: { name: 'spare', scopes: ['audit:read'] },
  });
  await hit('DELETE /api/tokens/{id}', `/api/tokens/${spare.body.id}`);
  await hit('DELETE /api/users/{id}', `/api/users/${user.body.id}`);
  // (The calls above ended the admin's other sessions: POST /api/auth/logout-others.)
  const last = await login(m.url, 'admin', 'admin-password-for-tests');
  good.add(last);
  await hit('POST /api/auth/password', '/api/auth/password', {
    token: last,
    body: { current_password: 'wrong-password', new_password: 'admin-password-for-tests' },
  });
  await hit('POST /api/auth/password', '/api/auth/password', {
    token: last,
    body: { current_password: 'admin-password-for-tests', new_password: 'admin-password-for-tests' },
  });
  await hit('POST /api/auth/logout-others', '/api/auth/logout-others', { token: last });
  // That ended the admin's session the rest of the calls use: a new one.
  m.admin = await login(m.url, 'admin', 'admin-password-for-tests');
  good.add(m.admin);
  // A second factor: enrolled, confirmed, turned off by its user and by an operator, each way it answers.
  const me = (await call(m.url, 'GET', '/api/auth/me', { token: m.admin })).body.user.id as number;
  await hit('POST /api/auth/totp/confirm', '/api/auth/totp/confirm', { body: { code: '123456' } });
  await hit('POST /api/auth/totp/disable', '/api/auth/totp/disable', {
    body: { password: 'admin-password-for-tests' },
  });
  for (const remover of ['user', 'operator']) {
    const enrolment = await hit('POST /api/auth/totp', '/api/auth/totp');
    await hit('POST /api/auth/totp/confirm', '/api/auth/totp/confirm', { body: { code: '000000' } });
    await hit('POST /api/auth/totp/confirm', '/api/auth/totp/confirm', {
      body: { code: totpCode(new URL(enrolment.body.otpauth_uri).searchParams.get('secret')!) },
    });
    await hit('POST /api/auth/totp', '/api/auth/totp');
    if (remover === 'operator') await hit('DELETE /api/users/{id}/totp', `/api/users/${me}/totp`);
    else {
      await hit('POST /api/auth/totp/disable', '/api/auth/totp/disable', { body: { password: 'not-the-password' } });
      await hit('POST /api/auth/totp/disable', '/api/auth/totp/disable', {
        body: { password: 'admin-password-for-tests' },
      });
    }
  }
  await hit('DELETE /api/users/{id}/totp', `/api/users/${me}/totp`);
  await hit('DELETE /api/users/{id}/totp', `/api/users/${me}/totp`, { headers: { 'if-match': '"stale"' } });
  // Login sessions: one's own listed and one ended, another's not found; a user's listed and ended by an operator.
  await login(m.url, 'admin', 'admin-password-for-tests');
  const own = await hit('GET /api/auth/sessions', '/api/auth/sessions');
  const newest = own.body.items[0] as { id: number };
  await hit('DELETE /api/auth/sessions/{id}', `/api/auth/sessions/${newest.id}`);
  await hit('DELETE /api/auth/sessions/{id}', `/api/auth/sessions/${newest.id}`);
  await hit('GET /api/users/{id}/sessions', `/api/users/${me}/sessions`);
  await hit('GET /api/users/{id}/sessions', '/api/users/999999/sessions');
  await hit('DELETE /api/users/{id}/sessions', '/api/users/999999/sessions');
  const signedOut = await call(m.url, 'POST', '/api/users', {
    token: m.admin,
    body: { username: 'signed-out', password: 'signed-out-password', role: 'operator', scopes: [] },
  });
  await hit('DELETE /api/users/{id}/sessions', `/api/users/${signedOut.body.id}/sessions`);
  await hit('DELETE /api/users/{id}/sessions', `/api/users/${me}/sessions`, { headers: { 'if-match': '"stale"' } });
  await hit('DELETE /api/auth/sessions/{id}', `/api/auth/sessions/${newest.id}`, { headers: { 'if-match': '"9"' } });
  await hit('POST /api/auth/logout', '/api/auth/logout', { token: last });
  good.delete(last);

  // Past the write budget, every write is 429 with Retry-After.
  await hit('PATCH /api/settings', '/api/settings', {
    body: { write_budget_per_minute: 1 },
    headers: { 'if-match': settings.headers.get('etag')! },
  });
  for (const route of routes.filter((r) => r.method !== 'GET' && r.scope !== 'public'))
    await hit(`${route.method} ${route.path}`, route.path.replace('{id}', '1'), { body: {} });

  // A stream, ended by its timeout, whose every event is what the document declares; a user's 17th stream is 429.
  const watcher = await login(m.url, 'admin', 'admin-password-for-tests');
  good.add(watcher);
  await hit('GET /api/events', '/api/events?after=0&timeout_seconds=1', { token: watcher });
  const held = await Promise.all(Array.from({ length: 16 }, () => openEvents(m.url, watcher)));
  await hit('GET /api/events', '/api/events', { token: watcher });
  for (const stream of held) stream.close();

  const missing = routes.map((r) => `${r.method} ${r.path}`).filter((name) => !seen.has(name));
  assert.deepEqual(missing, [], 'every operation is exercised');
  // Every status an operation documents is reached, but those that need what this test has not: an agent (a sync
  // applied: 200, or refused: 502), a full disk (507), a failing commit (500), a master starting or draining (503)
  // or a request still in flight beside its retry (409 on POSTs that have no other 409).
  const unreachable = new Set([500, 502, 503, 507]);
  const needAgent: Record<string, number[]> = {
    'POST /api/rules/{id}/sync': [200],
    'POST /api/rules/{id}/check': [200],
    'POST /api/nodes/{id}/probe': [200],
    // A standby's promotion (test/e2e/replication.test.ts promotes one).
    'POST /api/replication/promote': [200],
  };
  for (const route of routes) {
    const name = `${route.method} ${route.path}`;
    const responses = doc.paths[route.path][route.method.toLowerCase()].responses;
    const inFlightOnly = (status: number) => status === 409 && !route.responses[409];
    const notSeen = Object.keys(responses)
      .map(Number)
      .filter((status) => !seen.get(name)!.has(status) && !unreachable.has(status) && !inFlightOnly(status));
    assert.deepEqual(notSeen, needAgent[name] ?? [], `${name} answered ${[...seen.get(name)!].sort()}`);
  }
});

test('a caller whose token is good learns its budget on 404, 405 and a malformed path too', async (t) => {
  const m = await startMaster(t);
  const token = await login(m.url, 'admin', 'admin-password-for-tests');
  for (const [method, path, status] of [
    ['GET', '/api/no-such-thing', 404],
    ['PATCH', '/api/nodes', 405],
    ['GET', '/api/nodes/abc', 404],
  ] as const) {
    const answer = await call(m.url, method, path, { token });
    assert.equal(answer.status, status, `${method} ${path}`);
    assert.match(answer.headers.get('ratelimit') ?? '', /^"writes";r=\d+;t=\d+$/, `${method} ${path}`);
    assert.ok(answer.headers.get('ratelimit-policy'), `${method} ${path}`);
    const stranger = await call(m.url, method, path, { token: 'mss_not-a-session' });
    assert.equal(stranger.status, status);
    assert.equal(stranger.headers.get('ratelimit'), null, 'a bad token learns nothing of anyone');
  }
});

test('every PUT takes back what its GET gave: GET | jq | PUT works for every resource', async (t) => {
  const m = await startMaster(t);
  const post = async (path: string, body: unknown) => (await call(m.url, 'POST', path, { token: m.admin, body })).body;
  const a = await post('/api/nodes', { name: 'a', host: 'a.example' });
  const b = await post('/api/nodes', { name: 'b', host: 'b.example' });
  const made: Record<string, number> = {
    nodes: a.id,
    users: (await post('/api/users', { username: 'ops', password: 'ops-password-1', scopes: [] })).id,
    tunnels: (await post('/api/tunnels', { name: 'a-b', entry_node_id: a.id, exit_node_id: b.id })).id,
    channels: (await post('/api/channels', { name: 'ops', type: 'webhook', url: 'https://hooks.example.com/a' })).id,
    rules: (await post('/api/rules', { name: 'r', node_id: a.id, protocol: 'tcp', listen_port: 80, targets: ['x:1'] }))
      .id,
  };
  made.plans = (await post('/api/plans', { name: 'starter', traffic: { bytes: 1024 } })).id;
  made.silences = (await post('/api/silences', { comment: 'maintenance', ends_at: m.app.timestamp(86_400_000) })).id;
  made['alert-rules'] = (
    await post('/api/alert-rules', { name: 'down', condition: 'node_offline', channel_ids: [made.channels] })
  ).id;
  const puts = routes.filter((r) => r.method === 'PUT');
  assert.ok(puts.length >= 4);
  for (const route of puts) {
    const path = route.path.replace('{id}', String(made[route.path.split('/')[2]!]));
    const read = await call(m.url, 'GET', path, { token: m.admin });
    assert.equal(read.status, 200, path);
    const written = await call(m.url, 'PUT', path, { token: m.admin, body: read.body });
    assert.equal(written.status, 200, `${path}: ${JSON.stringify(written.body)}`);
  }
});
