// What a primary that starts makes of its peers' answers (internal/replication/peers.ts): only a master that says a
// later epoch fences it, and whatever else a peer sends, or does not, counts as no answer.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import test, { type TestContext } from 'node:test';
import { newerPrimary } from '../internal/replication/peers.ts';

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
  assert.equal(
    await newerPrimary(
      hostile.map((url) => ({ url, pin: null })),
      1,
      500,
    ),
    null,
  );
  assert.ok(Date.now() - started < 5000, 'asked together, each within its wait');
});
