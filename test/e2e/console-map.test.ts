// The fleet map in Chromium: a thousand nodes in ten tags and five hundred tunnels, drawn in under a second as groups
// (each a link to its group), a group opened to its nodes and the nodes its tunnels reach (each a link to its page),
// and the map fitting a phone.

import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { generateLicenseKeys, issueLicense } from '../../internal/license/license.ts';
import { consolePage, noBrowser, signIn } from '../browser.ts';
import { ADMIN_PASSWORD, call, startMaster } from '../helpers.ts';

const SHOTS = 'test-results/console';
const NODES = 1000;
const TUNNELS = 500;
const TAGS = 10;

test('the fleet map draws 1,000 nodes and 500 tunnels in under a second, by tag', { skip: noBrowser }, async (t) => {
  const keys = generateLicenseKeys();
  const dir = mkdtempSync(join(tmpdir(), 'portplane-map-'));
  writeFileSync(join(dir, 'license.pem'), keys.publicKeyPem);
  const license = issueLicense(
    {
      license_id: 'lic-fleet',
      edition: 'pro',
      licensee: 'Example Hosting Ltd',
      limits: { max_nodes: null },
      issued_at: '2026-01-01T00:00:00Z',
      expires_at: null,
    },
    keys.privateKeyPem,
  );
  const m = await startMaster(t, {
    licenseKeyPath: join(dir, 'license.pem'),
    prepare: (data) => writeFileSync(join(data, 'license.json'), license),
  });
  const name = (i: number) => `n${String(i).padStart(4, '0')}`;
  const doc = {
    format: 'portplane-export',
    version: 2,
    nodes: Array.from({ length: NODES }, (_, i) => ({
      name: name(i),
      host: `${name(i)}.example.net`,
      ssh_port: 22,
      ssh_user: 'root',
      tags: [`region-${i % TAGS}`],
    })),
    // Each tunnel from a node to one of another region, and one inside its own.
    tunnels: Array.from({ length: TUNNELS }, (_, i) => ({
      name: `t${i}`,
      owner: null,
      entry_node: name(i),
      exit_node: name(i % 5 === 0 ? (i + TAGS) % NODES : (i + 1) % NODES),
      listen_port: 20000 + i,
      transport: 'tls',
    })),
    rules: [],
  };
  const imported = await call(m.url, 'POST', '/api/import', { token: m.admin, body: doc });
  assert.equal(imported.status, 200, JSON.stringify(imported.body).slice(0, 500));

  const { page, problems } = await consolePage(t);
  await signIn(page, m.url, 'admin', ADMIN_PASSWORD);

  /** Opens `hash` and waits for the map's picture; how long it took, from the click to the drawn map. */
  // A string, not a function: tsx's helpers that a function would carry are not in the page.
  const drawn = (hash: string, selector: string, expected: number) =>
    page.evaluate(`new Promise((resolve) => {
      const started = performance.now();
      const look = () =>
        document.querySelectorAll(${JSON.stringify(selector)}).length === ${expected}
          ? resolve(performance.now() - started)
          : requestAnimationFrame(look);
      location.hash = ${JSON.stringify(hash)};
      look();
    })`) as Promise<number>;
  const whole = await drawn('#/map', '.map a circle.cluster', TAGS);
  t.diagnostic(`the whole fleet drawn in ${whole.toFixed(0)} ms`);
  assert.ok(whole < 1000, `the whole fleet took ${whole.toFixed(0)} ms`);
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: `${SHOTS}/map-fleet.png`, fullPage: true });
  const caption = await page.locator('.map figcaption').textContent();
  assert.match(caption!, /^1,000 nodes in 10 groups by first tag, 500 tunnels/);
  const group = page
    .locator('.map a')
    .filter({ has: page.locator('circle.cluster') })
    .first();
  assert.match((await group.locator('title').textContent())!, /^region-0: 100 nodes \(100 new\), 50 tunnels inside$/);
  assert.equal(await group.getAttribute('href'), '#/map?tag=region-0');
  const between = page.locator('.map line.path');
  // From region-k to region-k+1 for every k but 0 and 5 (whose tunnels stay inside their region).
  assert.equal(await between.count(), 8, 'tunnels between groups drawn as arrows, one a pair');
  assert.match((await between.first().locator('title').textContent())!, /^\d+ tunnels? from region-\d to region-\d/);

  // region-0: its 100 nodes, and the nodes its tunnels reach or come from (in their own groups).
  const opened = await drawn('#/map?tag=region-0', '.map a circle.node', 100 + 50);
  t.diagnostic(`a group of 150 nodes drawn in ${opened.toFixed(0)} ms`);
  assert.ok(opened < 1000, `a group took ${opened.toFixed(0)} ms`);
  await page.screenshot({ path: `${SHOTS}/map-group.png`, fullPage: true });
  const dot = page
    .locator('.map a')
    .filter({ has: page.locator('circle.node') })
    .first();
  assert.match((await dot.getAttribute('href'))!, /^#\/nodes\?q=n\d{4}$/);
  const tunnelLink = page
    .locator('.map a')
    .filter({ has: page.locator('line.path') })
    .first();
  assert.match((await tunnelLink.getAttribute('href'))!, /^#\/tunnels\?q=t\d+$/);
  await dot.click();
  await page.getByRole('heading', { name: 'Nodes', level: 1 }).waitFor();

  await page.setViewportSize({ width: 390, height: 844 });
  await drawn('#/map', '.map a circle.cluster', TAGS);
  const overflow = (await page.evaluate('document.documentElement.scrollWidth - innerWidth')) as number;
  assert.ok(overflow <= 0, `the map is ${overflow} px wider than a phone`);
  assert.deepEqual(problems, []);
});
