// The console for a fleet, in a real browser against a real master with 2,000 rules on three nodes (one with a real
// agent): find through filters in the URL, count, select every match, preview and run a batch, read a rule's chart,
// change one's own password; every page at desktop and phone width.

import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { test } from 'node:test';
import { nodeOf, startAgent } from '../agents.ts';
import { ADMIN_PASSWORD, call, login, node, rule, ruleBodies, startMaster } from '../helpers.ts';
import { freePort, tcpEcho, tcpRoundTrip, until } from '../net.ts';
import { consolePage, noBrowser } from '../browser.ts';
import { totpCode } from '../totp-codes.ts';

const SHOTS = 'test-results/console';

/** Holds `count` free TCP ports on 127.0.0.1, so that rules listening on them fail on the node as port_in_use. */
async function holdPorts(count: number): Promise<{ ports: number[]; servers: Server[] }> {
  const servers = await Promise.all(
    Array.from(
      { length: count },
      () =>
        new Promise<Server>((resolve) => {
          const server = createServer().listen(0, '127.0.0.1', () => resolve(server));
        }),
    ),
  );
  return { servers, ports: servers.map((s) => (s.address() as { port: number }).port) };
}

const options = { skip: noBrowser, timeout: 180_000 };

test('an operator finds, selects and fixes rules among thousands from the console', options, async (t) => {
  const m = await startMaster(t, { localTargets: true });
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { agent_report_interval_seconds: 1 } });
  const [a, b, c] = [await node(m, 'edge-a'), await node(m, 'edge-b'), await node(m, 'edge-c')];
  startAgent(t, m.url, a.agent_token);
  await until('edge-a to come online', async () => (await nodeOf(m, a.id)).status === 'online');

  // On edge-a: a rule with real traffic, and twelve on ports something else holds there, which its agent fails.
  const echo = await tcpEcho(t);
  const listen = await freePort();
  const web = (await rule(m, { name: 'web', node_id: a.id, listen_port: listen, targets: [`127.0.0.1:${echo}`] })).body;
  const held = await holdPorts(12);
  t.after(() => held.servers.forEach((server) => server.close()));
  for (const [i, port] of held.ports.entries())
    await rule(m, { name: `clash-${i}`, node_id: a.id, listen_port: port, targets: ['10.0.0.1:80'] });
  // And 2,000 on edge-b and edge-c, whose agents are not running.
  for (const [n, count] of [
    [b, 1000],
    [c, 1000],
  ] as const) {
    const made = await call(m.url, 'POST', '/api/rules/batch-create', {
      token: m.admin,
      body: { rules: ruleBodies(n.id, count, 20000, n.name) },
    });
    assert.equal(made.status, 201);
  }
  await until('the twelve to fail on edge-a', async () => {
    const failed = await call(m.url, 'GET', `/api/rules?node_id=${a.id}&sync_state=failed&count=true`, {
      token: m.admin,
    });
    return failed.body.total === 12;
  });
  const payload = Buffer.alloc(48 * 1024, 3);
  assert.ok((await tcpRoundTrip(web.listen_port, payload)).equals(payload));
  await until('the traffic to be counted', async () => {
    const counted = await call(m.url, 'GET', `/api/rules/${web.id}`, { token: m.admin });
    return counted.body.traffic.bytes_in > 0;
  });

  const origin = new URL(m.url).origin;
  const { page, problems } = await consolePage(t, { origin, timeoutMs: 15_000 });
  mkdirSync(SHOTS, { recursive: true });

  // A link that names a node and a sync state opens the rules page filtered so: shareable, kept over a reload.
  await page.goto(`${m.url}/#/rules?node_id=${a.id}&sync_state=failed`);
  await page.getByLabel('Username').fill('admin');
  await page.getByLabel('Password').fill(ADMIN_PASSWORD);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByText('12 rules match').waitFor();
  assert.equal(await page.getByLabel('Node', { exact: true }).inputValue(), String(a.id));
  assert.equal(await page.getByLabel('Sync', { exact: true }).inputValue(), 'failed');
  await page
    .getByRole('row', { name: /clash-0/ })
    .getByText(/is already in use on the node \(port_in_use\)/)
    .waitFor();
  await page.reload();
  await page.getByText('12 rules match').waitFor();

  // Select every match, preview a batch that tags them, run it.
  const bulk = page.getByRole('group', { name: 'Selected rules' });
  await bulk.getByRole('button', { name: 'Select all 12 matching' }).click();
  await bulk.getByText('All 12 matching selected').waitFor();
  await bulk.getByLabel('Tags to set').fill('to-fix');
  await bulk.getByRole('button', { name: 'Set tags' }).click();
  const dialog = page.getByRole('dialog');
  await dialog.getByText('Preview of 12 rules: 12 updated.').waitFor();
  await page.screenshot({ path: `${SHOTS}/fleet-batch-preview.png` });
  await dialog.getByRole('button', { name: 'Run' }).click();
  await page.getByRole('status').getByText('Set tags of selected: 12 updated').waitFor();
  const tagged = await call(m.url, 'GET', '/api/rules?tag=to-fix&count=true', { token: m.admin });
  assert.equal(tagged.body.total, 12);

  // A thousand on edge-c, disabled at once through the filter (not a page of a hundred), after a preview.
  await page.goto(`${m.url}/#/rules?node_id=${c.id}`);
  await page.getByText('1,000 rules match').waitFor();
  await bulk.getByRole('button', { name: 'Select all 1,000 matching' }).click();
  await bulk.getByRole('button', { name: 'Disable' }).click();
  await dialog.getByText('Preview of 1000 rules: 1000 updated.').waitFor();
  await dialog.getByRole('button', { name: 'Run' }).click();
  await page.getByRole('status').getByText('Disable selected: 1000 updated').waitFor();
  const disabled = await call(m.url, 'GET', `/api/rules?node_id=${c.id}&state=disabled&count=true`, {
    token: m.admin,
  });
  assert.equal(disabled.body.total, 1000);
  await page.goto(`${m.url}/#/rules?state=disabled`);
  await page.getByText('1,000 rules match').waitFor();

  // A batch that cannot do all it is asked: the preview names each clash, and so does the run's outcome.
  await page.goto(`${m.url}/#/rules?node_id=${b.id}`);
  await page.getByRole('checkbox', { name: 'Select edge-b-0', exact: true }).check();
  await page.getByRole('checkbox', { name: 'Select edge-b-1', exact: true }).check();
  await bulk.getByLabel('Node to move to').selectOption({ label: 'edge-c' });
  await bulk.getByRole('button', { name: 'Move' }).click();
  await dialog.getByText('Preview of 2 rules: 2 conflict.').waitFor();
  await dialog
    .getByRole('list', { name: 'Items that would not change' })
    .getByText(/port 20000\/tcp/)
    .waitFor();
  await dialog.getByRole('button', { name: 'Run' }).click();
  const outcome = page.getByRole('list', { name: 'Items that did not change' });
  await outcome.getByText(/port 20001\/tcp/).waitFor();
  await page.screenshot({ path: `${SHOTS}/fleet-batch-outcome.png` });
  await dialog.getByRole('button', { name: 'Close' }).click();

  // Sorted by a column, both ways: the order is the API's (over every match, not the page), and in the URL.
  await page.goto(`${m.url}/#/rules?node_id=${b.id}`);
  await page.getByText('1,000 rules match').waitFor();
  const listens = page.getByRole('columnheader', { name: 'Listens' });
  await listens.getByRole('button').click();
  await page.waitForFunction("location.hash.includes('sort=listen_port')");
  assert.equal(await listens.getAttribute('aria-sort'), 'ascending');
  await page.getByRole('row').nth(1).getByText('tcp 20000').waitFor();
  await listens.getByRole('button').click();
  await page.waitForFunction("location.hash.includes('sort=-listen_port')");
  assert.equal(await listens.getAttribute('aria-sort'), 'descending');
  await page.getByRole('row').nth(1).getByText('tcp 20999').waitFor();
  await page.reload();
  await page.getByRole('row').nth(1).getByText('tcp 20999').waitFor();
  // Nodes filter by status through the URL too.
  await page.goto(`${m.url}/#/nodes?status=online`);
  await page.getByText('1 node matches.').waitFor();
  await page.getByRole('row', { name: /edge-a/ }).waitFor();

  // Every list keeps its filters in the URL: the audit log of the batches above, say.
  await page.goto(`${m.url}/#/audit?action=rule.update&status=success`);
  assert.equal(await page.getByLabel('Action', { exact: true }).inputValue(), 'rule.update');
  await page
    .getByRole('row', { name: /rule\.update/ })
    .first()
    .waitFor();
  assert.equal(await page.getByRole('row', { name: /rule\.create/ }).count(), 0);
  await page.goto(`${m.url}/#/users?disabled=false&sort=-username`);
  assert.equal(await page.getByRole('columnheader', { name: 'Username' }).getAttribute('aria-sort'), 'descending');

  // A rule's own traffic, over a window of one's choosing.
  await page.goto(`${m.url}/#/rules?q=web`);
  await page.getByRole('row', { name: /web/ }).getByRole('button', { name: 'Traffic' }).click();
  const chart = dialog.getByRole('img', { name: /^Traffic from/ });
  await chart.waitFor();
  assert.doesNotMatch((await chart.getAttribute('aria-label')) ?? '', /: 0 B in/);
  await dialog.getByLabel('Window').selectOption('Last day');
  await dialog.getByRole('img', { name: /^Traffic from/ }).waitFor();
  await page.screenshot({ path: `${SHOTS}/fleet-rule-chart.png` });
  await dialog.getByRole('button', { name: 'Close' }).click();

  // A node's traffic too; a user's scopes and state edited in place.
  await page.goto(`${m.url}/#/nodes`);
  await page
    .getByRole('row', { name: /edge-a/ })
    .getByRole('button', { name: 'Traffic' })
    .click();
  await dialog.getByRole('img', { name: /^Traffic from/ }).waitFor();
  await dialog.getByRole('button', { name: 'Close' }).click();
  const ops = await call(m.url, 'POST', '/api/users', {
    token: m.admin,
    body: { username: 'ops', password: 'ops-password-1', scopes: ['nodes:read'] },
  });
  await page.goto(`${m.url}/#/users`);
  await page.getByRole('row', { name: /ops/ }).getByRole('button', { name: 'Edit' }).click();
  const editUser = page.getByRole('form', { name: 'Edit ops' });
  await editUser.getByRole('checkbox', { name: 'rules:read' }).check();
  await editUser.getByRole('checkbox', { name: 'Disabled' }).check();
  await editUser.getByRole('button', { name: 'Save' }).click();
  await page.getByRole('status').getByText('Saved ops').waitFor();
  const edited = await call(m.url, 'GET', `/api/users/${ops.body.id}`, { token: m.admin });
  assert.deepEqual([edited.body.scopes, edited.body.disabled], [['nodes:read', 'rules:read'], true]);

  // Every page, at desktop and at phone width.
  for (const [width, height] of [
    [1280, 800],
    [390, 844],
  ] as const) {
    await page.setViewportSize({ width, height });
    for (const [title, path] of [
      ['Dashboard', '/'],
      ['Nodes', '/nodes'],
      ['Rules', '/rules'],
      ['Tunnels', '/tunnels'],
      ['Tokens', '/tokens'],
      ['Users', '/users'],
      ['Settings', '/settings'],
      ['Audit log', '/audit'],
      ['Account', '/account'],
    ] as const) {
      await page.goto(`${m.url}/#${path}`);
      await page.getByRole('heading', { name: title, level: 1 }).waitFor();
      await page.screenshot({ path: `${SHOTS}/fleet-${path.slice(1) || 'dashboard'}-${width}.png`, fullPage: true });
      const wide = (await page.evaluate('document.documentElement.scrollWidth')) as number;
      assert.ok(wide <= width, `${title} at ${width} px is ${wide} px wide`);
    }
  }

  // At phone width every dialog opens inside the screen, nothing in it past the edge, its buttons in reach.
  const inside = async (what: string, open: () => Promise<unknown>) => {
    await open();
    const box = (await dialog.boundingBox())!;
    assert.ok(box.x >= 0 && box.y >= 0 && box.x + box.width <= 390 && box.y + box.height <= 844, `${what}: ${box}`);
    const overflow = await dialog.evaluate((d) => d.scrollWidth - d.clientWidth);
    assert.ok(overflow <= 0, `${what} is ${overflow} px wider than itself`);
    for (const button of await dialog.getByRole('button').all()) {
      await button.scrollIntoViewIfNeeded();
      const at = (await button.boundingBox())!;
      assert.ok(at.x >= 0 && at.x + at.width <= 390, `${what}: a button past the edge`);
    }
    await page.screenshot({ path: `${SHOTS}/fleet-dialog-${what.replace(/ /g, '-')}-390.png` });
    await page.keyboard.press('Escape');
    await dialog.waitFor({ state: 'hidden' });
  };
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto(`${m.url}/#/rules?node_id=${a.id}`);
  await page.getByRole('heading', { name: 'Rules', level: 1 }).waitFor();
  await inside('new rule', () => page.getByRole('button', { name: 'New rule' }).click());
  await inside('rule edit', () => page.getByRole('row').nth(1).getByRole('button', { name: 'Edit' }).click());
  await inside('batch preview', async () => {
    await bulk.getByRole('button', { name: /^Select all \d+ matching$/ }).click();
    await bulk.getByRole('button', { name: 'Enable' }).click();
    await dialog.getByText(/^Preview of/).waitFor();
  });
  await inside('rule traffic', async () => {
    await page.getByRole('row').nth(1).getByRole('button', { name: 'Traffic' }).click();
    await dialog.getByRole('img', { name: /^Traffic from/ }).waitFor();
  });
  await page.goto(`${m.url}/#/nodes`);
  await inside('node traffic', async () => {
    await page
      .getByRole('row', { name: /edge-a/ })
      .getByRole('button', { name: 'Traffic' })
      .click();
    await dialog.getByRole('img', { name: /^Traffic from/ }).waitFor();
  });
  await page.goto(`${m.url}/#/users`);
  await inside('user edit', () => page.getByRole('row', { name: /ops/ }).getByRole('button', { name: 'Edit' }).click());
  await page.setViewportSize({ width: 1280, height: 800 });

  // One's own password, changed with the current one.
  await page.goto(`${m.url}/#/account`);
  const account = page.getByRole('form', { name: 'Change your password' });
  await account.getByLabel('Current password').fill('not the password');
  await account.getByLabel('New password', { exact: true }).fill('a-new-admin-password');
  await account.getByLabel('New password again').fill('a-new-admin-password');
  await account.getByRole('button', { name: 'Change password' }).click();
  await account.getByText('is not the password of this user', { exact: true }).waitFor();
  await account.getByLabel('Current password').fill(ADMIN_PASSWORD);
  await account.getByLabel('New password', { exact: true }).fill('a-new-admin-password');
  await account.getByLabel('New password again').fill('a-new-admin-password');
  await account.getByRole('button', { name: 'Change password' }).click();
  await page
    .getByRole('status')
    .getByText(/^Password changed/)
    .waitFor();
  // Sessions elsewhere, each ended from the account page below: what that page reads again after each.
  for (let i = 0; i < 3; i++) await login(m.url, 'admin', 'a-new-admin-password');
  const endAnother = async () => {
    const ends = page.getByRole('table', { name: 'Where you are signed in' }).getByRole('button', { name: 'End' });
    await ends.first().waitFor();
    const before = await ends.count();
    await ends.first().click();
    await until('the page read again', async () => (await ends.count()) === before - 1);
  };

  // A second factor: set up in the account page with a code of the key it shows, then asked at the next sign-in. The
  // recovery codes, shown once, stay on the page when it reads again (a session ended meanwhile).
  // (Read afresh: the page was drawn before those logins.)
  await page.reload();
  await page.getByRole('button', { name: 'Set up an authenticator app' }).click();
  const key = (await page.getByLabel('Secret key').textContent())!;
  const confirm = page.getByRole('form', { name: 'Confirm the second factor' });
  await confirm.getByLabel('Code').fill(totpCode(key));
  await confirm.getByRole('button', { name: 'Turn on' }).click();
  const recovery = page.getByRole('list', { name: 'Recovery codes' }).getByRole('listitem');
  await recovery.nth(9).waitFor();
  await endAnother();
  assert.equal(await recovery.count(), 10, 'the recovery codes are still shown');
  await page.getByRole('button', { name: 'I have kept them' }).click();
  await page.getByText(/^On: signing in asks for a code/).waitFor();
  await page.getByRole('button', { name: 'Sign out', exact: true }).click();
  const signIn = page.getByRole('form', { name: 'Sign in' });
  await signIn.getByLabel('Username').fill('admin');
  await signIn.getByLabel('Password').fill('a-new-admin-password');
  await signIn.getByRole('button', { name: 'Sign in' }).click();
  // The code of the next step: this step's was taken by the confirmation.
  await signIn.getByLabel('Code').fill(totpCode(key, 30));
  await signIn.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('button', { name: 'Sign out', exact: true }).waitFor();
  await page.goto(`${m.url}/#/account`);
  // A password typed in is kept when the page reads again (another session ended meanwhile).
  const off = page.getByRole('form', { name: 'Turn the second factor off' });
  await off.getByLabel('Password').fill('a-new-admin-password');
  await endAnother();
  await off.getByRole('button', { name: 'Turn off' }).click();
  await page.getByRole('status').getByText('Second factor off').waitFor();
  await login(m.url, 'admin', 'a-new-admin-password');

  // Where one is signed in, each session's address and client and how it signed in; another one ended from here.
  // (Read afresh: the login just above came after the page was drawn.)
  await page.reload();
  const where = page.getByRole('table', { name: 'Where you are signed in' });
  await where.getByRole('row', { name: /password\+totp this one/ }).waitFor();
  const others = await where.getByRole('button', { name: 'End' }).count();
  assert.ok(others >= 1, 'the logins of this test are listed');
  await where.getByRole('button', { name: 'End' }).first().click();
  await page.getByRole('status').getByText('Session ended').waitFor();
  await until(
    'one session fewer',
    async () => (await where.getByRole('button', { name: 'End' }).count()) === others - 1,
  );

  assert.deepEqual(problems, []);
});
