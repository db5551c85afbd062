// What a primary that starts makes of its peers' answers (internal/replication/peers.ts): only a master that says a
// later epoch fences it, and whatever else a peer sends, or does not, counts as no answer.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test, { describe, type TestContext } from 'node:test';
import { runCommand } from '../cmd/master/commands.ts';
import { start } from '../cmd/master/start.ts';
import { silentLogger } from '../internal/log/log.ts';
import { call, plainConfig, startMaster } from './helpers.ts';
import { freePort, until } from './net.ts';
import { askPeers, type Peer } from '../internal/replication/peers.ts';

// Most of these tests wait on clocks and sockets: they run side by side.
describe('peers', { concurrency: 4 }, () => {
  const newerPrimary = async (peers: Peer[], epoch: number, waitMs?: number) =>
    (await askPeers(peers, epoch, waitMs)).newer;

  /** A peer on loopback that answers GET /api/health as `answer` does; its address. */
  async function peer(t: TestContext, answer: (res: ServerResponse) => void): Promise<string> {
    const server = createServer((_req, res) => answer(res)).listen(0, '127.0.0.1');
    await once(server, 'listening');
    t.after(() => server.closeAllConnections());
    t.after(() => server.close());
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  }

  const said = (body: unknown) => (res: ServerResponse) => res.end(JSON.stringify(body));

  test('a peer leading a later epoch is named; a later epoch of a master not leading fences unnamed', async (t) => {
    const standby = await peer(t, said({ role: 'standby', epoch: 1 }));
    const promoted = await peer(t, said({ role: 'primary', epoch: 2 }));
    const fenced = await peer(t, said({ role: 'fenced', epoch: 3 }));
    const peers = (...urls: string[]) => urls.map((url) => ({ url, pin: null }));
    assert.equal(await newerPrimary(peers(standby), 1), null);
    assert.deepEqual(await newerPrimary(peers(standby, promoted), 1), { epoch: 2, primary: promoted });
    assert.deepEqual(await newerPrimary(peers(promoted, fenced), 1), { epoch: 3, primary: null });
    assert.equal(await newerPrimary(peers(promoted), 2), null, 'its own epoch is no newer');
    assert.equal((await askPeers(peers(standby, fenced, 'http://127.0.0.1:1'), 1)).answered, 2);
  });

  test('a peer that answers anything else, too much, or nothing in time counts as no answer', async (t) => {
    const hostile = [
      await peer(t, (res) => res.end('not json')),
      await peer(t, said({ role: 'primary', epoch: '9' })),
      await peer(t, said({ role: 'primary', epoch: 2 ** 60 })),
      await peer(t, said({ role: 7, epoch: 9 })),
      await peer(t, said([9])),
      await peer(t, (res) => res.end(`{"role":"primary","epoch":9,"pad":"${'x'.repeat(100_000)}"}`)),
      await peer(t, () => undefined),
      'http://127.0.0.1:1',
    ];
    const started = Date.now();
    assert.deepEqual(
      await askPeers(
        hostile.map((url) => ({ url, pin: null })),
        1,
        500,
      ),
      { newer: null, answered: 0 },
    );
    assert.ok(Date.now() - started < 5000, 'asked together, each within its wait');
  });

  const WAITS =
    'in sync mode a primary none of whose peers answers waits before its first write, saying why, until ' +
    '`master serve-alone`; in async mode it goes on after the one ask';

  test(WAITS, async (t) => {
    const dataDir = mkdtempSync(join(tmpdir(), 'portplane-alone-'));
    const port = await freePort();
    const first = await startMaster(t, { dataDir, port });
    // A loopback port nothing listens on: the peer refuses at once, as one cut off would not answer.
    const body = {
      standby_masters: 'https://127.0.0.1:2',
      replication_mode: 'sync',
      replication_sync_timeout_seconds: 1,
    };
    assert.equal((await call(first.url, 'PATCH', '/api/settings', { token: first.admin, body })).status, 200);
    await first.close();

    const starting = start(plainConfig(dataDir, port), silentLogger);
    let served = false;
    void starting.then((again) => {
      served = true;
      t.after(() => again.close());
    });
    const waiting = await until('the master waiting for its peers', async () => {
      const health = await call(first.url, 'GET', '/api/health').catch(() => null);
      return health?.body.starting_reason && health;
    });
    assert.equal(waiting.status, 503);
    assert.equal(waiting.body.status, 'starting');
    assert.match(
      waiting.body.starting_reason,
      /none of the masters standby_masters lists answered \(https:\/\/127\.0\.0\.1:2\)/,
    );
    const refused = await call(first.url, 'POST', '/api/nodes', {
      token: first.admin,
      body: { name: 'x', host: '192.0.2.1' },
    });
    assert.equal(refused.status, 503);
    // It asks again every 5 s while it waits (test/e2e/sync-waits.test.ts times that).
    assert.equal(served, false, 'it goes on waiting');

    const told = await runCommand({ name: 'serve-alone', dataDir, operand: '' }, () => '');
    assert.match(told, /asked the master of .* to serve without its peers; it waited because none of the masters/);
    const again = await starting;
    assert.equal((await call(again.url, 'GET', '/api/health')).body.role, 'primary');
    const made = await call(again.url, 'POST', '/api/nodes', {
      token: first.admin,
      body: { name: 'x', host: '192.0.2.1' },
    });
    assert.equal(made.status, 201);
    // Nothing waits now: the command says so, and leaves nothing behind for a later start.
    await assert.rejects(
      runCommand({ name: 'serve-alone', dataDir, operand: '' }, () => ''),
      /no master serving from/,
    );

    // In async mode the one ask is all: it serves at once.
    const mode = { replication_mode: 'async' };
    assert.equal((await call(again.url, 'PATCH', '/api/settings', { token: first.admin, body: mode })).status, 200);
    await again.close();
    const asynchronous = await start(plainConfig(dataDir, port), silentLogger);
    t.after(() => asynchronous.close());
    assert.equal((await call(asynchronous.url, 'GET', '/api/health')).body.status, 'ok');
  });
});
