// A real browser for the console's tests: Chromium through playwright-core, and what a page does wrong, collected.

import { existsSync } from 'node:fs';
import type { TestContext } from 'node:test';
import { chromium, type BrowserContext, type Page } from 'playwright-core';

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/** Why a console test is skipped here: false where Chromium is. */
export const noBrowser = existsSync(CHROMIUM) ? false : `no Chromium at ${CHROMIUM} (apt-get install chromium)`;

/** Chromium's console line for every answer that is an error; those a test provokes are no fault of the page. */
const ANSWERED = /^Failed to load resource: the server responded with a status of (\d{3})/;

/**
 * A page of a new browser at a desktop's size (closed after the test), and the problems seen on it: a script's error,
 * an error on the console but an answer's status the test provokes (by default any 4xx: a 401, 412, 422...), and with
 * `origin` a request to any other.
 */
export async function consolePage(
  t: TestContext,
  {
    origin,
    timeoutMs = 10_000,
    provoked = (status: number) => status >= 400 && status < 500,
  }: { origin?: string; timeoutMs?: number; provoked?: (status: number) => boolean } = {},
): Promise<{ context: BrowserContext; page: Page; problems: string[] }> {
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  t.after(() => browser.close());
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  page.setDefaultTimeout(timeoutMs);
  const problems: string[] = [];
  page.on('pageerror', (error) => problems.push(`script error: ${error.message}`));
  page.on('console', (message) => {
    const answered = ANSWERED.exec(message.text());
    if (message.type() === 'error' && !(answered && provoked(Number(answered[1]))))
      problems.push(`console error: ${message.text()}`);
  });
  if (origin)
    page.on('request', (request) => {
      if (new URL(request.url()).origin !== origin) problems.push(`request to another origin: ${request.url()}`);
    });
  return { context, page, problems };
}

/** Signs `username` in to the console at `url` with a password and waits for the dashboard. */
export async function signIn(page: Page, url: string, username: string, password: string): Promise<void> {
  await page.goto(url);
  await page.getByLabel('Username').fill(username);
  await page.getByLabel('Password').fill(password);
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { name: 'Dashboard', level: 1 }).waitFor();
}
