// The console on a standby master, in a real browser: a banner names the primary before and after sign-in, the
// primary's nodes show with no control that writes, the Replication page says whom it follows, and a promotion ends
// the banner and the standby's session (sign in again). Screenshots go to test-results/console.

import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { test } from 'node:test';
import { ADMIN_PASSWORD, call, mintToken, node, startMaster } from '../helpers.ts';
import { until } from '../net.ts';
import { consolePage, noBrowser } from '../browser.ts';

const SHOTS = 'test-results/console';

const STANDBY_CONSOLE =
  'on a standby the console reads the primary’s copy under a banner naming it, offers no change, and drops both ' +
  'once promoted';

test(STANDBY_CONSOLE, { skip: noBrowser, timeout: 120_000 }, async (t) => {
  const primary = await startMaster(t);
  await node(primary, 'edge-primary');
  const token = await mintToken(primary, ['replication'], 'standby');
  const standby = await startMaster(t, { follow: { url: primary.url, token } });
  await until('the node on the standby', async () => {
    const nodes = await call(standby.url, 'GET', '/api/nodes', { token: primary.admin });
    return nodes.body.items?.length === 1;
  });

  const { page, problems } = await consolePage(t);
  mkdirSync(SHOTS, { recursive: true });

  await page.goto(standby.url);
  const banner = page.getByRole('status').filter({ hasText: /^Standby of/ });
  await banner.waitFor();
  assert.match((await banner.textContent()) ?? '', new RegExp(`^Standby of ${primary.url}: read-only`));
  await page.getByLabel('Username').fill('admin');
  await page.getByLabel('Password').fill(ADMIN_PASSWORD);
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { name: 'Dashboard', level: 1 }).waitFor();
  await page.getByRole('link', { name: 'Nodes', exact: true }).click();
  await page.getByRole('row', { name: /edge-primary/ }).waitFor();
  await banner.waitFor();

  // A standby takes no write: the console offers none (no Add a node, no Reinstall, no Delete).
  for (const control of ['Add a node', 'Reinstall', 'Delete'])
    assert.equal(await page.getByText(control, { exact: true }).count(), 0, `${control} on a standby`);
  // Its Replication page says whom it follows and how far behind; the primary's lists it among its standbys.
  await page.getByRole('link', { name: 'Replication', exact: true }).click();
  await page.locator('dl.facts').getByText(primary.url).waitFor();
  await page.locator('dl.facts').getByText('standby', { exact: true }).waitFor();
  const standbys = await call(primary.url, 'GET', '/api/replication/standbys', { token: primary.admin });
  assert.equal(standbys.body.items.length, 1);
  await page.screenshot({ path: `${SHOTS}/standby.png`, fullPage: true });

  await primary.close();
  const promoted = await call(standby.url, 'POST', '/api/replication/promote', { token: primary.admin });
  assert.equal(promoted.status, 200);
  await banner.waitFor({ state: 'hidden' });
  // The standby's session ended with the promotion: the console's next read (its event stream's) signs them out.
  await page.getByRole('heading', { name: 'Sign in to portplane' }).waitFor();
  assert.deepEqual(problems, []);
});
