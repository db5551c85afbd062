// Sign-in by the organisation's OpenID provider, end to end: a real provider (oidc-provider) on loopback, the master,
// and the console in Chromium. A user created by their group, one in no such group refused, a key rotation at the
// provider taken in stride, a user disabled there losing their session within a check, and ID tokens forged, expired
// or meant for another client refused.

import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import type { BrowserContext, Page } from 'playwright-core';
import { consolePage, noBrowser } from '../browser.ts';
import { call, startMaster } from '../helpers.ts';
import { until } from '../net.ts';
import { claimsOf, clientSettings, signedToken, signingKey, startProvider } from '../oidc-provider.ts';

const CHECK_SECONDS = 15;

async function fleetWithProvider(t: TestContext) {
  const m = await startMaster(t);
  const publicUrl = new URL(m.url).origin;
  const firstKey = signingKey('first', 'RS256');
  const provider = await startProvider(t, `${publicUrl}/api/auth/oidc/callback`, [firstKey], {
    alice: { email: 'alice@example.com', groups: ['ops', 'staff'] },
    bob: { email: 'bob@example.com', groups: ['ops'] },
    mallory: { email: 'mallory@example.com', groups: ['sales'] },
  });
  const settings = await call(m.url, 'PATCH', '/api/settings', {
    token: m.admin,
    body: {
      ...clientSettings(provider, publicUrl),
      oidc_scopes: 'openid email groups offline_access',
      oidc_username_claim: 'email',
      oidc_name: 'Example IdP',
      oidc_check_seconds: CHECK_SECONDS,
      oidc_provisioning: [{ group: 'ops', role: 'operator', scopes: ['nodes:read', 'rules:read'] }],
    },
  });
  assert.equal(settings.status, 200, JSON.stringify(settings.body));
  assert.equal(settings.body.oidc_client_secret_set, true);
  assert.equal(settings.body.oidc_client_secret, undefined, 'the secret is never shown');
  return { m, provider, publicUrl };
}

/** Signs `login` in through the console's button and the provider's pages; the console's answer after. */
async function signInThroughProvider(page: Page, url: string, login: string): Promise<void> {
  await page.goto(url);
  await page.getByRole('link', { name: 'Sign in with Example IdP' }).click();
  const form = page.locator('input[name="login"]');
  await form.waitFor();
  await form.fill(login);
  await page.locator('input[name="password"]').fill('anything');
  await page.locator('button.login-submit').click();
  // The consent to offline access (the refresh token the master checks the session with).
  await page.getByRole('button', { name: 'Continue' }).click();
}

async function sessionToken(page: Page): Promise<string> {
  return page.evaluate(() => sessionStorage.getItem('portplane.session') ?? '');
}

/** A page of a browser of its own, or of a new context (no cookie of the provider's) of `context`'s browser. */
async function freshPage(t: TestContext, context?: BrowserContext): Promise<Page> {
  if (!context) return (await consolePage(t, { timeoutMs: 15_000 })).page;
  const page = await (await context.browser()!.newContext()).newPage();
  page.setDefaultTimeout(15_000);
  return page;
}

test(
  'a user of the provider signs in through the console, created by their group, and loses access once disabled there',
  { skip: noBrowser, timeout: 180_000 },
  async (t) => {
    const { m, provider, publicUrl } = await fleetWithProvider(t);
    const methods = await call(m.url, 'GET', '/api/auth/methods');
    assert.deepEqual(methods.body.provider, { name: 'Example IdP', login_url: '/api/auth/oidc/login' });

    const page = await freshPage(t);
    await signInThroughProvider(page, publicUrl, 'alice');
    await page.locator('#who').filter({ hasText: 'alice@example.com' }).waitFor();
    const token = await sessionToken(page);
    assert.match(token, /^mss_/);
    assert.ok(!page.url().includes('oidc='), 'the one-time code is gone from the address');

    const users = await call(m.url, 'GET', '/api/users?q=alice', { token: m.admin });
    const alice = users.body.items[0];
    assert.equal(alice.username, 'alice@example.com');
    assert.equal(alice.role, 'operator');
    assert.deepEqual(alice.scopes, ['nodes:read', 'rules:read']);
    const sessions = await call(m.url, 'GET', '/api/auth/sessions', { token });
    assert.equal(sessions.body.items[0].signed_in_with, 'oidc');
    const me = await call(m.url, 'GET', '/api/auth/me', { token });
    assert.deepEqual(me.body.token.scopes, ['nodes:read', 'rules:read'], 'no second factor asked, full scopes');
    const password = await call(m.url, 'POST', '/api/auth/login', {
      body: { username: 'alice@example.com', password: '' + 'x'.repeat(12) },
    });
    assert.equal(password.status, 401, 'a provisioned user has no password here');

    // Someone in no group oidc_provisioning names is turned away, and the console says why.
    const other = await freshPage(t);
    await signInThroughProvider(other, publicUrl, 'mallory');
    await other.getByRole('alert').filter({ hasText: 'none of your groups' }).waitFor();
    assert.equal((await call(m.url, 'GET', '/api/users?q=mallory', { token: m.admin })).body.items.length, 0);

    // Disabled at the provider: within a check (oidc_check_seconds) and a turn of the clock, the session ends.
    const before = Date.now();
    provider.accounts.get('alice')!.disabled = true;
    await until(
      "alice's session to end",
      async () => (await call(m.url, 'GET', '/api/auth/me', { token })).status === 401,
      (CHECK_SECONDS + 20) * 1000,
    );
    assert.ok(Date.now() - before < 60_000, 'within a minute');
    const audit = await call(m.url, 'GET', '/api/audit-logs?action=session.revoke', { token: m.admin });
    assert.match(JSON.stringify(audit.body.items[0].changes), /identity provider refused it/);
  },
);

test(
  'the provider rotates its keys and sign-in goes on; forged, expired and misaddressed ID tokens are refused',
  {
    skip: noBrowser,
    timeout: 180_000,
  },
  async (t) => {
    const { m, provider, publicUrl } = await fleetWithProvider(t);
    const { context, page } = await consolePage(t, { timeoutMs: 15_000 });
    await signInThroughProvider(page, publicUrl, 'bob');
    await page.locator('#who').filter({ hasText: 'bob@example.com' }).waitFor();
    const reads = provider.keyReads;
    // The master reads a provider's keys again at most every 10 s (a provider naming unknown keys is not hammered).
    await new Promise((resolve) => setTimeout(resolve, 10_000));

    // A new key, another algorithm: the master meets a kid it has not seen and reads the key set again.
    const second = signingKey('second', 'ES256');
    await provider.restart([second]);
    const rotated = await freshPage(t, context);
    await signInThroughProvider(rotated, publicUrl, 'bob');
    await rotated.locator('#who').filter({ hasText: 'bob@example.com' }).waitFor();
    assert.equal(provider.keyReads, reads + 1, 'the key set read again once');

    const cases: [string, (token: string) => string, RegExp][] = [
      ['forged', (token) => signedToken(claimsOf(token), signingKey('second', 'ES256')), /signature does not verify/],
      [
        'expired',
        (token) => signedToken({ ...claimsOf(token), exp: Math.floor(Date.now() / 1000) - 600 }, second),
        /expired/,
      ],
      [
        'for another client',
        (token) => signedToken({ ...claimsOf(token), aud: 'someone-else' }, second),
        /another client/,
      ],
      [
        'unsigned',
        (token) => `${Buffer.from('{"alg":"none"}').toString('base64url')}.${token.split('.')[1]}.`,
        /algorithm/,
      ],
    ];
    for (const [what, tamper, why] of cases) {
      provider.tamper = tamper;
      const refused = await freshPage(t, context);
      await signInThroughProvider(refused, publicUrl, 'bob');
      const alert = refused.getByRole('alert').filter({ hasText: why });
      await alert.waitFor().catch(() => assert.fail(`an ID token ${what} was not refused as ${why}`));
      assert.equal(await sessionToken(refused), '', `no session from an ID token ${what}`);
    }
    provider.tamper = null;
    const failures = await call(m.url, 'GET', '/api/audit-logs?status=failed&action=auth.login', { token: m.admin });
    assert.ok(failures.body.items.length >= cases.length, 'each refusal audited as a failed sign-in');
  },
);
