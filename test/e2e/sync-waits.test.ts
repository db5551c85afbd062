// Sync mode's waits, measured in real time: a standby asks a primary that was down again every second, however long it
// was down; a primary with no standby asking waits out its timeout; one none of whose peers answers asks them again
// every few seconds while it waits.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'node:test';
import { runCommand } from '../../cmd/master/commands.ts';
import { start } from '../../cmd/master/start.ts';
import { silentLogger } from '../../internal/log/log.ts';
import { call, mintToken, node, plainConfig, startMaster, type Running } from '../helpers.ts';
import { freePort, until } from '../net.ts';

async function setSettings(m: Running, settings: Record<string, unknown>): Promise<void> {
  const answer = await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: settings });
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
}

const SYNC_AFTER_RESTART =
  'a sync-mode primary started again answers no write before a standby holds it: the standby asks a sync-mode ' +
  'primary again every second, however long it was down; with none asking since the start, a write waits out the ' +
  'timeout and the primary says it goes on alone';
test(SYNC_AFTER_RESTART, async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'portplane-test-'));
  const port = await freePort();
  let primary = await startMaster(t, { dataDir, port });
  await setSettings(primary, { replication_mode: 'sync', replication_sync_timeout_seconds: 2 });
  const token = await mintToken(primary, ['replication'], 'standby');
  const standby = await startMaster(t, { follow: { url: primary.url, token } });
  await node(primary, 'before');
  const health = async () => (await call(primary.url, 'GET', '/api/health')).body;

  // Down 4.5 s: a standby doubling its wait would have asked at 1 and 3 s, and next at 7 s, past the timeout.
  await primary.close();
  await new Promise((resolve) => setTimeout(resolve, 4500));
  primary = await startMaster(t, { dataDir, port });
  const made = await node(primary, 'after-restart');
  const seen = await call(standby.url, 'GET', `/api/nodes/${made.id}`, { token: primary.admin });
  assert.equal(seen.status, 200, 'answered before the standby held it');
  assert.equal((await health()).sync_lapsed_since, null, 'the standby came back within the timeout');

  await standby.close();
  await primary.close();
  // Its first write (the test's login) waits out the timeout: no standby asked since the start.
  const started = Date.now();
  primary = await startMaster(t, { dataDir, port });
  // Removed once the masters on it have stopped: a test's hooks run in the order they were added.
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  assert.ok(Date.now() - started >= 2000, 'no standby asked since the start: the write waited out the timeout');
  assert.ok((await health()).sync_lapsed_since, 'and the primary says it goes on alone');
});

test('a sync-mode primary none of whose peers answers asks them again every 5 s while it waits', async (t) => {
  // A peer that answers nothing a primary can read, and counts the asks.
  const asked: number[] = [];
  const peer = createServer((_req, res) => {
    asked.push(Date.now());
    res.writeHead(503).end();
  }).listen(0, '127.0.0.1');
  await once(peer, 'listening');
  t.after(() => peer.close());
  const dataDir = mkdtempSync(join(tmpdir(), 'portplane-alone-'));
  const port = await freePort();
  const first = await startMaster(t, { dataDir, port });
  await setSettings(first, {
    standby_masters: `http://127.0.0.1:${(peer.address() as AddressInfo).port}`,
    replication_mode: 'sync',
    // What the master writes as it stops waits no longer for a standby to hold it.
    replication_sync_timeout_seconds: 1,
  });
  await first.close();
  asked.length = 0;

  const starting = start(plainConfig(dataDir, port), silentLogger);
  t.after(async () => (await starting).close());
  // Removed once the masters on it have stopped: a test's hooks run in the order they were added.
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  await until('asked twice', async () => asked.length >= 2, 10_000);
  const apart = asked[1]! - asked[0]!;
  assert.ok(apart >= 4500 && apart < 7000, `asked again after ${apart} ms`);
  assert.equal((await call(first.url, 'GET', '/api/health')).status, 503, 'still waiting');
  await runCommand({ name: 'serve-alone', dataDir, operand: '' }, () => '');
  assert.equal((await call((await starting).url, 'GET', '/api/health')).body.role, 'primary');
});
