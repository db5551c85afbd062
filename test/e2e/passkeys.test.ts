// Passkeys in Chromium, with its virtual authenticator (the DevTools protocol's WebAuthn domain): one registered from
// the account page, a sign-in with it in place of a password, and a clone of it (its counter behind) refused.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { BrowserContext, CDPSession, Page } from 'playwright-core';
import { consolePage, noBrowser } from '../browser.ts';
import { ADMIN_PASSWORD, call, login, startMaster } from '../helpers.ts';

async function authenticator(context: BrowserContext, page: Page): Promise<{ cdp: CDPSession; id: string }> {
  const cdp = await context.newCDPSession(page);
  await cdp.send('WebAuthn.enable');
  const { authenticatorId } = await cdp.send('WebAuthn.addVirtualAuthenticator', {
    options: {
      protocol: 'ctap2',
      transport: 'internal',
      hasResidentKey: true,
      hasUserVerification: true,
      isUserVerified: true,
      automaticPresenceSimulation: true,
    },
  });
  return { cdp, id: authenticatorId };
}

async function signInWithPasskey(page: Page, url: string): Promise<void> {
  await page.goto(url);
  await page.getByRole('button', { name: 'Sign in with a passkey' }).click();
}

test(
  'a passkey is registered, signs in instead of a password, and its clone is refused',
  {
    skip: noBrowser,
    timeout: 120_000,
  },
  async (t) => {
    const m = await startMaster(t);
    // WebAuthn binds a passkey to a name, not an address: the console is opened at localhost.
    const url = `http://localhost:${new URL(m.url).port}`;
    const off = await call(m.url, 'POST', '/api/auth/passkeys/sign-in/options');
    assert.equal(off.status, 409, 'off while public_url is unset');
    await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { public_url: url } });
    assert.equal((await call(m.url, 'GET', '/api/auth/methods')).body.passkeys, true);

    const { context, page } = await consolePage(t, { timeoutMs: 15_000 });
    const { cdp, id } = await authenticator(context, page);
    await page.goto(url);
    await page.getByLabel('Username').fill('admin');
    await page.getByLabel('Password').fill(ADMIN_PASSWORD);
    await page.getByRole('button', { name: 'Sign in', exact: true }).click();
    await page.locator('#who').filter({ hasText: 'admin' }).waitFor();
    await page.goto(`${url}/#/account`);
    await page.getByLabel('Name').fill('laptop');
    await page.getByRole('button', { name: 'Add a passkey' }).click();
    await page.getByRole('status').filter({ hasText: 'Passkey laptop added' }).waitFor();
    const session = await login(m.url, 'admin', ADMIN_PASSWORD);
    const listed = await call(m.url, 'GET', '/api/auth/passkeys', { token: session });
    assert.deepEqual(
      listed.body.items.map((key: { name: string }) => key.name),
      ['laptop'],
    );

    // Signed out, in again with the passkey alone: no password, no second factor.
    await page.locator('#sign-out').click();
    await signInWithPasskey(page, url);
    await page.locator('#who').filter({ hasText: 'admin' }).waitFor();
    const token = await page.evaluate(() => sessionStorage.getItem('portplane.session') ?? '');
    const sessions = await call(m.url, 'GET', '/api/auth/sessions', { token });
    assert.equal(sessions.body.items.find((s: { current: boolean }) => s.current).signed_in_with, 'passkey');

    // A copy of the credential as it stood, then the original used once more: the copy's counter is behind.
    const { credentials } = await cdp.send('WebAuthn.getCredentials', { authenticatorId: id });
    assert.equal(credentials.length, 1);
    await page.locator('#sign-out').click();
    await signInWithPasskey(page, url);
    await page.locator('#who').filter({ hasText: 'admin' }).waitFor();

    const cloneContext = await context.browser()!.newContext();
    const clonePage = await cloneContext.newPage();
    clonePage.setDefaultTimeout(15_000);
    const clone = await authenticator(cloneContext, clonePage);
    await clone.cdp.send('WebAuthn.addCredential', { authenticatorId: clone.id, credential: credentials[0]! });
    await signInWithPasskey(clonePage, url);
    await clonePage.getByRole('alert').filter({ hasText: 'counter went back' }).waitFor();
    assert.equal(await clonePage.evaluate(() => sessionStorage.getItem('portplane.session')), null);
    const failed = await call(m.url, 'GET', '/api/audit-logs?status=failed&action=auth.login', { token: m.admin });
    assert.equal(failed.body.items[0].actor_name, 'admin');
  },
);
