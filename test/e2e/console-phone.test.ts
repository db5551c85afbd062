// The console at a phone's width (390 px) and a desktop's (1280 px), in Chromium: every page the operator has opens
// through the menu, nothing is wider than the screen, and every button of a list's rows is on screen to be pressed.

import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { test } from 'node:test';
import type { Page } from 'playwright-core';
import { consolePage, noBrowser } from '../browser.ts';
import { ADMIN_PASSWORD, call, node, rule, startMaster } from '../helpers.ts';

const SHOTS = 'test-results/console';

/** How much wider than the window the page is, and the buttons of list rows that lie outside it. */
const OUT_OF_VIEW = `(() => {
  const width = document.documentElement.clientWidth;
  const hidden = [...document.querySelectorAll('main tbody button')]
    .filter((button) => button.offsetParent !== null)
    .filter((button) => {
      const box = button.getBoundingClientRect();
      return box.left < 0 || box.right > width + 0.5;
    })
    .map((button) => button.textContent);
  return { overflow: document.documentElement.scrollWidth - width, hidden };
})()`;

async function outOfView(page: Page): Promise<{ overflow: number; hidden: string[] }> {
  return (await page.evaluate(OUT_OF_VIEW)) as { overflow: number; hidden: string[] };
}

test(
  'every page fits a phone and a desktop, its navigation a menu on the phone',
  {
    skip: noBrowser,
    timeout: 180_000,
  },
  async (t) => {
    const m = await startMaster(t);
    const edge = await node(m, 'edge-with-a-rather-long-name-1', { tags: ['eu', 'production'] });
    for (let i = 0; i < 3; i++)
      await rule(m, { name: `web-${i}`, node_id: edge.id, listen_port: 20000 + i, targets: ['192.0.2.10:80'] });
    await call(m.url, 'POST', '/api/users', {
      token: m.admin,
      body: { username: 'ops', password: 'ops-password-long', scopes: ['nodes:read'] },
    });
    mkdirSync(SHOTS, { recursive: true });

    for (const width of [390, 1280]) {
      const { context, page, problems } = await consolePage(t);
      await page.setViewportSize({ width, height: 844 });
      await page.goto(m.url);
      await page.getByLabel('Username').fill('admin');
      await page.getByLabel('Password').fill(ADMIN_PASSWORD);
      await page.getByRole('button', { name: 'Sign in', exact: true }).click();
      await page.getByRole('heading', { name: 'Dashboard', level: 1 }).waitFor();
      const menu = page.getByRole('button', { name: 'Menu' });
      assert.equal(await menu.isVisible(), width < 600, `a menu at ${width} px`);
      const titles = await page.locator('#nav a').allTextContents();
      assert.ok(titles.length >= 10, titles.join(', '));
      for (const title of titles) {
        if (width < 600) {
          await menu.click();
          assert.equal(await menu.getAttribute('aria-expanded'), 'true');
        }
        await page.getByRole('link', { name: title, exact: true }).click();
        await page.getByRole('heading', { name: title, level: 1 }).waitFor();
        // What the page reads arrives after its heading, into the element after its status line.
        await page.locator('main > .status + div > *').first().waitFor();
        await page.screenshot({ path: `${SHOTS}/phone-${width}-${title.replace(/\W+/g, '-').toLowerCase()}.png` });
        const { overflow, hidden } = await outOfView(page);
        assert.ok(overflow <= 0, `${title} at ${width} px is ${overflow} px wider than the screen`);
        assert.deepEqual(hidden, [], `${title} at ${width} px: buttons off screen`);
        if (width < 600) assert.equal(await page.locator('.top nav').isVisible(), false, 'the menu closed');
        if (title === 'Rules') {
          const first = await page.locator('main tbody tr').first().boundingBox();
          assert.ok(first && first.y < 844, `the first rule at ${first?.y} px: in the first screen`);
        }
      }
      assert.deepEqual(problems, []);
      await context.close();
    }
  },
);
