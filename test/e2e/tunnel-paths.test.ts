// The entry's own measure of a path's loss: a tunnel (transport ws, through a TCP proxy of the test's between entry
// and exit) whose proxy stops passing the exit's bytes for a while. PINGs go unanswered, the entry counts them lost
// and says so while the session stays; once the bytes flow again, new PINGs are answered and the loss goes down.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { test, type TestContext } from 'node:test';
import { until } from '../net.ts';
import { tunnelFleet, tunnelOf, untilCarrying } from '../tunnel-fleet.ts';

/** A TCP proxy to `port` whose way back (`target` to client) can be held: bytes wait while held, then go on. */
async function holdingProxy(t: TestContext, port: number) {
  let held = false;
  const waiting: { client: Socket; chunk: Buffer }[] = [];
  const server = createServer((client) => {
    const upstream = connect({ host: '127.0.0.1', port });
    client.pipe(upstream);
    upstream.on('data', (chunk: Buffer) => (held ? waiting.push({ client, chunk }) : client.write(chunk)));
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
  }).listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => server.close());
  return {
    port: (server.address() as AddressInfo).port,
    hold: () => (held = true),
    release: () => {
      held = false;
      for (const { client, chunk } of waiting.splice(0)) if (!client.destroyed) client.write(chunk);
    },
  };
}

test(
  "an entry counts PINGs unanswered as lost, the tunnel's loss_percent says so while it stays up, and it falls once " +
    'they are answered again',
  { timeout: 90_000 },
  async (t) => {
    let proxy: Awaited<ReturnType<typeof holdingProxy>> | undefined;
    const f = await tunnelFleet(t, {
      transport: 'ws',
      via: async (exitPort) => {
        proxy = await holdingProxy(t, exitPort);
        return `ws://127.0.0.1:${proxy.port}/`;
      },
    });
    await untilCarrying(f);
    await until('a round trip with nothing lost', async () => {
      const tunnel = await tunnelOf(f.m, f.tunnel.id);
      return tunnel.loss_percent === 0 && tunnel;
    });
    proxy!.hold();
    const lossy = await until(
      'PINGs counted lost',
      async () => {
        const tunnel = await tunnelOf(f.m, f.tunnel.id);
        return tunnel.loss_percent > 0 && tunnel;
      },
      20_000,
    );
    assert.equal(lossy.status, 'up', 'the session stays while its PINGs go unanswered');
    proxy!.release();
    const peak = lossy.loss_percent as number;
    await until(
      'the loss to fall as PINGs are answered again',
      async () => {
        const tunnel = await tunnelOf(f.m, f.tunnel.id);
        return (
          tunnel.loss_percent !== null && tunnel.loss_percent < peak + 1 && tunnel.status === 'up' && tunnel.rtt_ms
        );
      },
      20_000,
    );
  },
);
