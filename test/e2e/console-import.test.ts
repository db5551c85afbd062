// Importing another tool's config from the console, in Chromium: a realm file uploaded, previewed (its rules with
// their lines, and what does not map), then applied; and an HAProxy config pasted whose error names its line.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { consolePage, noBrowser, signIn } from '../browser.ts';
import { ADMIN_PASSWORD, call, node, startMaster } from '../helpers.ts';

test('a config uploaded in the console is previewed, then imported', { skip: noBrowser }, async (t) => {
  const m = await startMaster(t);
  const edge = await node(m, 'edge');
  const { page, problems } = await consolePage(t);
  await signIn(page, m.url, 'admin', ADMIN_PASSWORD);
  await page.getByRole('link', { name: 'Import', exact: true }).click();
  await page.getByRole('heading', { name: 'Import', level: 1 }).waitFor();

  await page.getByLabel('Format').selectOption('realm');
  await page.getByLabel('Node', { exact: true }).selectOption('edge');
  await page.getByLabel('File').setInputFiles('test/fixtures/realm/edge.toml');
  await page.waitForFunction(`document.querySelector('textarea[name=source]').value.includes('[[endpoints]]')`);
  assert.equal(
    await page.getByRole('textbox', { name: 'Config' }).inputValue(),
    readFileSync('test/fixtures/realm/edge.toml', 'utf8'),
  );
  await page.getByRole('button', { name: 'Preview' }).click();
  const preview = page.getByRole('region', { name: 'Preview' });
  await preview.getByRole('row', { name: /realm-tcp-5001/ }).waitFor();
  assert.match((await preview.getByRole('row', { name: /realm-tcp-5001/ }).textContent())!, /created/);
  await preview.getByText('no_tcp without use_udp').or(preview.getByText('remote "not-an-address"')).first().waitFor();
  const listed = await call(m.url, 'GET', `/api/rules?node_id=${edge.id}&count=true`, { token: m.admin });
  assert.equal(listed.body.total, 0, 'a preview writes nothing');

  await page.getByRole('button', { name: 'Import', exact: true }).click();
  await page.getByRole('status').getByText('Imported 5 rules into edge').waitFor();
  const imported = await call(m.url, 'GET', `/api/rules?node_id=${edge.id}&count=true`, { token: m.admin });
  assert.equal(imported.body.total, 5);

  await page.getByLabel('Format').selectOption('haproxy');
  await page
    .getByRole('textbox', { name: 'Config' })
    .fill('listen x\n    bind :7000\n    server a 10.0.0.1:80 weight 0\n\ttimeout');
  await page.getByRole('button', { name: 'Preview' }).click();
  await page.getByRole('alert').filter({ hasText: /line/ }).waitFor();
  assert.deepEqual(problems, []);
});
