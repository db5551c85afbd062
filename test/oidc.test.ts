// Sign-in by an OpenID provider over HTTP, without a browser (test/e2e/oidc.test.ts has the console's): a real
// provider (oidc-provider) on loopback, its pages posted as a browser would. Who gets in and as whom: created by their
// group, linked to the user of their name, refused without a group or a verified email; each code and state once; no
// second factor asked; the client secret never shown; passwords turned off for all but holders of *.

import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { assertProblem, call, login, snapshot, startMaster, type Running } from './helpers.ts';
import {
  CLIENT_SECRET,
  clientSettings,
  signInHeadless,
  signingKey,
  startProvider,
  type Account,
} from './oidc-provider.ts';

const ACCOUNTS: Record<string, Account> = {
  alice: { email: 'alice@example.com', groups: ['ops'] },
  carol: { email: 'carol@example.com', groups: ['customers'] },
  mallory: { email: 'mallory@example.com', groups: ['sales'] },
  unverified: { email: 'unverified@example.com', groups: ['ops'], emailVerified: false },
};

async function withProvider(t: TestContext, settings: Record<string, unknown> = {}) {
  const m = await startMaster(t);
  const publicUrl = new URL(m.url).origin;
  const provider = await startProvider(t, `${publicUrl}/api/auth/oidc/callback`, [signingKey('k1', 'EdDSA')], ACCOUNTS);
  const plan = await call(m.url, 'POST', '/api/plans', { token: m.admin, body: { name: 'basic', max_rules: 3 } });
  const patched = await call(m.url, 'PATCH', '/api/settings', {
    token: m.admin,
    body: {
      ...clientSettings(provider, publicUrl),
      oidc_scopes: 'openid email groups offline_access',
      oidc_provisioning: [
        { group: 'ops', role: 'operator', scopes: ['nodes:read'] },
        { group: 'customers', role: 'tenant', plan_id: plan.body.id, scopes: ['rules:read', 'rules:write'] },
      ],
      ...settings,
    },
  });
  assert.equal(patched.status, 200, JSON.stringify(patched.body));
  return { m, provider };
}

/** Signs `login` in; the session token the console would hold, or why not. */
async function signIn(m: Running, login: string): Promise<{ token?: string; why?: string }> {
  const back = new URLSearchParams((await signInHeadless(m.url, login)).hash.slice(1));
  if (back.has('oidc_error')) return { why: back.get('oidc_error')! };
  const taken = await call(m.url, 'POST', '/api/auth/oidc/session', { body: { code: back.get('oidc') } });
  assert.equal(taken.status, 200, JSON.stringify(taken.body));
  const again = await call(m.url, 'POST', '/api/auth/oidc/session', { body: { code: back.get('oidc') } });
  assertProblem(again, 401, 'unauthorized');
  return { token: taken.body.token };
}

async function userNamed(m: Running, username: string) {
  const found = await call(m.url, 'GET', `/api/users?q=${encodeURIComponent(username)}`, { token: m.admin });
  return found.body.items.find((user: { username: string }) => user.username === username);
}

test('a new user of the provider is created as the first entry of their groups says, and signs in', async (t) => {
  const { m } = await withProvider(t, { totp_required: 2 });
  const alice = await signIn(m, 'alice');
  assert.ok(alice.token, alice.why);
  const me = await call(m.url, 'GET', '/api/auth/me', { token: alice.token });
  assert.equal(me.body.user.username, 'alice', 'named by sub, oidc_username_claim by default');
  assert.deepEqual(me.body.token.scopes, ['nodes:read'], 'a full session: the factor is the provider');
  const sessions = await call(m.url, 'GET', '/api/auth/sessions', { token: alice.token });
  assert.equal(sessions.body.items[0].signed_in_with, 'oidc');

  const carol = await signIn(m, 'carol');
  const tenant = await userNamed(m, 'carol');
  assert.equal(tenant.role, 'tenant');
  assert.notEqual(tenant.plan_id, null);
  assert.ok(carol.token);

  const before = snapshot(m, ['audit_log']);
  const mallory = await signIn(m, 'mallory');
  assert.match(mallory.why ?? '', /none of your groups is one oidc_provisioning creates users for/);
  assert.equal(snapshot(m, ['audit_log']), before, 'nothing written but the audit of the refusal');
  const failed = await call(m.url, 'GET', '/api/audit-logs?status=failed&action=auth.login', { token: m.admin });
  assert.equal(failed.body.items[0].actor_name, 'mallory');

  // Signing in again is the same user, found by the subject it was linked to.
  const again = await signIn(m, 'alice');
  assert.equal((await call(m.url, 'GET', '/api/auth/me', { token: again.token })).body.user.id, me.body.user.id);
});

test('by email: a user of that name is linked, an unverified email refused, another subject refused', async (t) => {
  const { m } = await withProvider(t, { oidc_username_claim: 'email', oidc_provisioning: [] });
  const made = await call(m.url, 'POST', '/api/users', {
    token: m.admin,
    body: { username: 'alice@example.com', password: 'alice-password-long', scopes: ['rules:read'] },
  });
  const alice = await signIn(m, 'alice');
  const me = await call(m.url, 'GET', '/api/auth/me', { token: alice.token });
  assert.equal(me.body.user.id, made.body.id, 'the existing user, linked');
  assert.deepEqual(me.body.token.scopes, ['rules:read'], 'as the operators made them');

  assert.match((await signIn(m, 'unverified')).why ?? '', /not verified your email/);
});

test('a sign-in state is taken once, an unknown one refused; the provider off is 409', async (t) => {
  const { m } = await withProvider(t);
  const started = await fetch(`${m.url}/api/auth/oidc/login`, { redirect: 'manual' });
  assert.equal(started.status, 302);
  const authorize = new URL(started.headers.get('location')!);
  assert.equal(authorize.searchParams.get('code_challenge_method'), 'S256');
  assert.ok(authorize.searchParams.get('nonce'));
  const state = authorize.searchParams.get('state')!;
  for (const query of [`state=${state}&code=forged`, `state=${state}&code=forged`, 'state=unknown&code=x']) {
    const back = await fetch(`${m.url}/api/auth/oidc/callback?${query}&session_state=ignored`, { redirect: 'manual' });
    assert.equal(back.status, 302);
    const fragment = new URLSearchParams(new URL(back.headers.get('location')!).hash.slice(1));
    assert.ok(fragment.has('oidc_error') && !fragment.has('oidc'), query);
  }
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { oidc_issuer: null } });
  assertProblem(await call(m.url, 'GET', '/api/auth/oidc/login'), 409, 'conflict');
  assert.equal((await call(m.url, 'GET', '/api/auth/methods')).body.provider, null);
});

test('the client secret is written, never shown, audited as set; a provider is TLS off loopback', async (t) => {
  const { m } = await withProvider(t);
  const settings = await call(m.url, 'GET', '/api/settings', { token: m.admin });
  assert.equal(settings.body.oidc_client_secret_set, true);
  assert.ok(!JSON.stringify(settings.body).includes(CLIENT_SECRET));
  const audit = await call(m.url, 'GET', '/api/audit-logs?action=settings.update', { token: m.admin });
  assert.ok(!JSON.stringify(audit.body).includes(CLIENT_SECRET), 'not in the audit log');
  assert.equal(audit.body.items[0].changes.after.oidc_client_secret_set, true);
  const stored = m.app.store.db.prepare("SELECT value FROM settings WHERE key = 'oidc_client_secret'").get();
  assert.ok(!JSON.stringify(stored).includes(CLIENT_SECRET), 'sealed at rest');

  const before = snapshot(m);
  for (const [key, value] of [
    ['oidc_issuer', 'http://idp.example.com'],
    ['oidc_issuer', 'ftp://idp.example.com'],
    ['oidc_scopes', 'email groups'],
    ['oidc_provisioning', [{ group: 'ops', role: 'root' }]],
    ['public_url', 'https://console.example.com/path'],
  ] as const) {
    const refused = await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { [key]: value } });
    assertProblem(refused, 422, 'validation_failed');
    assert.match(refused.body.errors[0].pointer, new RegExp(`^#/${key}`));
  }
  assert.equal(snapshot(m), before);
  const cleared = await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { oidc_client_secret: null } });
  assert.equal(cleared.body.oidc_client_secret_set, false);
});

test('password_login: operators leaves a password to holders of * alone; nobody, to none', async (t) => {
  const { m, provider } = await withProvider(t);
  await call(m.url, 'POST', '/api/users', {
    token: m.admin,
    body: { username: 'ops', password: 'ops-password-long', scopes: ['nodes:read'] },
  });
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { password_login: 'operators' } });
  const ops = await call(m.url, 'POST', '/api/auth/login', {
    body: { username: 'ops', password: 'ops-password-long' },
  });
  assertProblem(ops, 401, 'unauthorized');
  assert.match(ops.body.detail, /holders of \* only/);
  assert.ok(await login(m.url, 'admin', 'admin-password-for-tests'), 'the break-glass password stays');
  assert.equal((await call(m.url, 'GET', '/api/auth/methods')).body.password, 'operators');

  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { password_login: 'nobody' } });
  const admin = await call(m.url, 'POST', '/api/auth/login', {
    body: { username: 'admin', password: 'admin-password-for-tests' },
  });
  assertProblem(admin, 401, 'unauthorized');
  assert.ok((await signIn(m, 'alice')).token, 'the provider still signs people in');
  assert.ok(provider.keyReads >= 1);
});
