// The console as a tenant and as the operator who serves them, in a real browser: a tenant sees only their own world
// (their rules, the nodes granted them, their plan and its use) and none of the operators' pages; the operator sees
// each user's role, plan and usage, and the plans. Screenshots go to test-results/console.

import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { test } from 'node:test';
import { ADMIN_PASSWORD, call, newTenant, node, rule, startMaster } from '../helpers.ts';
import { consolePage, noBrowser, signIn } from '../browser.ts';

const SHOTS = 'test-results/console';
const GiB = 2 ** 30;

const TENANT_CONSOLE =
  "a tenant's console shows only their world: their rules, the nodes granted them, their plan and its use; the " +
  "operator's shows each user's plan and usage";

test(TENANT_CONSOLE, { skip: noBrowser, timeout: 120_000 }, async (t) => {
  const m = await startMaster(t);
  const granted = await node(m, 'granted-eu', { tags: ['eu'] });
  await node(m, 'not-granted');
  const plan = await call(m.url, 'POST', '/api/plans', {
    token: m.admin,
    body: {
      name: 'starter',
      node_tags: ['eu'],
      port_ranges: ['30000-30099'],
      max_rules: 3,
      traffic: { bytes: GiB, period: 'month', past: 'slow', slow_to: 1_048_576 },
    },
  });
  const tenant = (username: string) => newTenant(m, username, plan.body.id);
  const [alice, bob] = [await tenant('alice'), await tenant('bob')];
  const theirs = (who: { token: string }, name: string, port: number) =>
    call(m.url, 'POST', '/api/rules', {
      token: who.token,
      body: { name, node_id: granted.id, protocol: 'tcp', listen_port: port, targets: ['10.0.0.1:80'] },
    });
  const hers = (await theirs(alice, 'alice-web', 30000)).body;
  await theirs(bob, 'bob-web', 30001);
  await rule(m, { name: 'operators-rule', node_id: granted.id, listen_port: 10001 });
  // Her rule's bytes as a node's report counts them: into the rule and her allowance.
  const { store } = m.app;
  store.write(() => {
    store.traffic.record(hers.id, granted.id, Math.floor(Date.now() / 1000), 200 * 2 ** 20, 56 * 2 ** 20);
    store.users.countTraffic([{ id: hers.id, bytes_in: 200 * 2 ** 20, bytes_out: 56 * 2 ** 20 }], granted.id);
  });

  const { page, problems } = await consolePage(t);
  mkdirSync(SHOTS, { recursive: true });
  const shot = (name: string) => page.screenshot({ path: `${SHOTS}/${name}.png`, fullPage: true });
  const open = async (link: string) => {
    await page.getByRole('link', { name: link, exact: true }).click();
    await page.getByRole('heading', { name: link, level: 1 }).waitFor();
  };

  await t.test('a tenant sees their pages alone, their plan and its use on the dashboard', async () => {
    await signIn(page, m.url, 'alice', 'alice-password');
    const links = await page.locator('#nav a').allTextContents();
    assert.deepEqual(links, ['Dashboard', 'Nodes', 'Map', 'Rules', 'Tunnels', 'Tokens', 'Audit log', 'Account']);
    const yours = page.getByRole('region', { name: 'Your plan' });
    await yours.getByText('1 of 3').waitFor();
    await yours.getByText(/256\.0 MiB of 1\.0 GiB this month/).waitFor();
    assert.equal(await yours.locator('meter').count(), 2, 'a bar for the rules and one for the traffic');
    await page.getByRole('region', { name: 'Nodes' }).getByText('1', { exact: true }).waitFor();
    await shot('tenant-dashboard');
  });

  await t.test('a tenant lists the nodes granted them and their own rules, no one else’s', async () => {
    await open('Nodes');
    const nodes = page.getByRole('table', { name: 'Nodes granted to you' });
    await nodes.getByRole('rowheader', { name: /granted-eu/ }).waitFor();
    assert.equal(await nodes.getByText('not-granted').count(), 0);
    await shot('tenant-nodes');
    await open('Map');
    await page.locator('.map a[href="#/nodes?q=granted-eu"]').waitFor();
    assert.equal(await page.locator('.map').getByText('not-granted').count(), 0, 'a map of what is granted alone');
    await open('Rules');
    await page.getByRole('row', { name: /alice-web/ }).waitFor();
    const table = await page.locator('main table').first().textContent();
    assert.doesNotMatch(table ?? '', /bob-web|operators-rule/);
    await shot('tenant-rules');
    await open('Account');
    await page.getByRole('region', { name: 'Your plan' }).getByText('starter').waitFor();
    await page.locator('#sign-out').click();
    await page.getByLabel('Username').waitFor();
  });

  await t.test("the operator sees each user's role, plan and usage, and the plans", async () => {
    await signIn(page, m.url, 'admin', ADMIN_PASSWORD);
    await open('Users');
    const row = page.getByRole('row', { name: /alice/ });
    await row.getByText('1 rule, 256.0 MiB this period').waitFor();
    await row.getByText(`plan #${plan.body.id}`).waitFor();
    await shot('users-tenants');
    // A change from the console keeps what it does not show changing: a tenant disabled stays a tenant on their plan.
    await page.getByRole('row', { name: /bob/ }).getByRole('button', { name: 'Disable' }).click();
    await page.getByRole('row', { name: /bob/ }).getByText('disabled').waitFor();
    const bobNow = (await call(m.url, 'GET', `/api/users/${bob.id}`, { token: m.admin })).body;
    assert.deepEqual([bobNow.role, bobNow.plan_id, bobNow.disabled], ['tenant', plan.body.id, true]);
    await open('Plans');
    await page
      .getByRole('row', { name: /starter/ })
      .getByText('1.0 GiB a month, then 1.0 MiB/s')
      .waitFor();
    const tenants = page.locator('main table tbody tr').filter({ hasText: 'starter' }).locator('td').first();
    await tenants.filter({ hasText: /^2$/ }).waitFor();
    await shot('plans');
  });

  assert.deepEqual(problems, []);
});
