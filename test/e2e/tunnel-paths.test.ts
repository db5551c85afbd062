// The entry's own measure of a path's loss: a tunnel (transport ws, through a TCP proxy of the test's between entry
// and exit) whose proxy stops passing the exit's bytes for a while. PINGs go unanswered, the entry counts them lost
// and says so while the session stays; once the bytes flow again, new PINGs are answered and the loss goes down.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { tcpProxy, until } from '../net.ts';
import { tunnelFleet, tunnelOf, untilCarrying } from '../tunnel-fleet.ts';

test(
  "an entry counts PINGs unanswered as lost, the tunnel's loss_percent says so while it stays up, and it falls once " +
    'they are answered again',
  { timeout: 90_000 },
  async (t) => {
    let proxy: Awaited<ReturnType<typeof tcpProxy>> | undefined;
    const f = await tunnelFleet(t, {
      transport: 'ws',
      via: async (exitPort) => {
        proxy = await tcpProxy(t, exitPort);
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
