// deploy/portplane-watch.sh, the watcher a third machine runs to promote a standby: against two real masters, it
// leaves a primary that answers alone, waits out its grace once the primary is gone, then promotes the standby, and
// does nothing more after.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'node:test';
import { promisify } from 'node:util';
import { call, mintToken, startMaster } from './helpers.ts';

const run = promisify(execFile);

test('the watcher promotes the standby once the primary has not answered for its grace, and only then', async (t) => {
  const primary = await startMaster(t);
  const token = await mintToken(primary, ['replication'], 'standby');
  const standby = await startMaster(t, { follow: { url: primary.url, token } });
  const promoter = await mintToken(primary, ['*'], 'watcher');
  const state = join(mkdtempSync(join(tmpdir(), 'portplane-watch-')), 'down-since');
  const watch = (grace: number) =>
    run('sh', ['deploy/portplane-watch.sh'], {
      env: {
        PATH: process.env.PATH,
        PRIMARY_URL: primary.url,
        STANDBY_URL: standby.url,
        PROMOTE_TOKEN: promoter,
        PORTPLANE_WATCH_GRACE: String(grace),
        PORTPLANE_WATCH_STATE: state,
      },
    });
  const role = async () => (await call(standby.url, 'GET', '/api/health')).body.role;
  // The promoter's token must have reached the copy before the primary goes.
  const seen = async () => (await call(standby.url, 'GET', '/api/auth/me', { token: promoter })).status === 200;
  while (!(await seen())) await new Promise((resolve) => setTimeout(resolve, 50));

  await watch(0);
  assert.equal(existsSync(state), false, 'a primary that answers is left alone');
  await primary.close();
  const first = await watch(60);
  assert.match(first.stdout, /does not answer; promoting .* if it still does not in 60 s/);
  assert.equal(await watch(60).then((r) => r.stdout), '', 'within its grace, nothing');
  assert.equal(await role(), 'standby');
  const promoted = await watch(0);
  assert.match(promoted.stdout, /"role":"primary"/);
  assert.match(promoted.stdout, /promoted http/);
  assert.equal(await role(), 'primary');
  assert.match((await watch(0)).stdout, /does not answer/);
  assert.match((await watch(0)).stdout, /is the primary already: nothing to do/);
});
