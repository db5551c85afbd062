// Run from source without a build, the master serves its API all the same; the console's paths say to build it.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtempSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'node:test';
import { consoleHandler } from '../internal/console/console.ts';

test('without a build the console answers 503 saying how to build it, and leaves every other path alone', async (t) => {
  // A directory with no dist/ in it, as a checkout before `npm run build`; the process's own is given back after (the
  // files sharing a process run one at a time).
  const cwd = process.cwd();
  process.chdir(mkdtempSync(join(tmpdir(), 'portplane-unbuilt-')));
  t.after(() => process.chdir(cwd));
  const serve = consoleHandler();
  const server = createServer((req, res) => {
    if (!serve(req, res)) res.writeHead(404).end('api');
  }).listen(0, '127.0.0.1');
  t.after(() => server.close());
  await once(server, 'listening');
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const page = await fetch(`${base}/`);
  assert.equal(page.status, 503);
  assert.match(await page.text(), /the console is not built: run `npm run build`/);
  const api = await fetch(`${base}/api/health`);
  assert.equal(await api.text(), 'api');
});
