// Tunnels of transport ws on loopback: the tunnel's TLS inside a WebSocket to the exit's own port, what that port
// says to anything else, and what a via may name. Through real nginx and HAProxy: e2e/tunnel-proxies.test.ts.

import assert from 'node:assert/strict';
import { request } from 'node:http';
import { connect } from 'node:net';
import { describe, test } from 'node:test';
import { udpRoundTrip } from './agents.ts';
import { call } from './helpers.ts';
import { tcpRoundTrip, until } from './net.ts';
import { tunnelFleet, tunnelOf, untilCarrying } from './tunnel-fleet.ts';

function get(port: number, headers: Record<string, string> = {}): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: '/', headers }, (res) => {
      res.resume();
      resolve(res.statusCode!);
    });
    req.on('error', reject);
    req.end();
  });
}

describe('tunnels over a WebSocket', { concurrency: 4 }, () => {
  test('a ws tunnel straight to the exit carries TCP and UDP, and its GET says transport ws', async (t) => {
    const f = await tunnelFleet(t, { transport: 'ws' });
    await untilCarrying(f);
    const payload = Buffer.alloc(2 * 1024 * 1024);
    for (let i = 0; i < payload.length; i += 4) payload.writeUInt32BE(i, i);
    assert.ok((await tcpRoundTrip(f.tcpPort, payload)).equals(payload));
    assert.deepEqual(await udpRoundTrip(f.udpPort, ['one', 'two', 'three']), ['one', 'three', 'two']);
    const tunnel = await tunnelOf(f.m, f.tunnel.id);
    assert.equal(tunnel.transport, 'ws');
    assert.equal(tunnel.via, null);
    assert.equal(tunnel.ends.entry.status, 'up');
  });

  test(
    "a ws exit's port answers plain HTTP 404 and a broken upgrade 400, counts a stranger's TLS as refused, and " +
      'the tunnel carries on',
    async (t) => {
      const f = await tunnelFleet(t, { transport: 'ws' });
      await untilCarrying(f);
      assert.equal(await get(f.tunnelPort), 404);
      assert.equal(await get(f.tunnelPort, { Connection: 'Upgrade', Upgrade: 'websocket' }), 400, 'no key, no version');
      // Raw bytes that are no HTTP at all: the connection ends, nothing else does.
      const garbage = connect({ host: '127.0.0.1', port: f.tunnelPort });
      garbage.on('error', () => undefined);
      garbage.end(Buffer.alloc(4096, 0x16));
      await new Promise((resolve) => garbage.once('close', resolve));
      assert.ok((await tcpRoundTrip(f.tcpPort, Buffer.from('still there'))).equals(Buffer.from('still there')));
      assert.equal((await tunnelOf(f.m, f.tunnel.id)).status, 'up');
    },
  );

  test('via is a ws:// or wss:// URL and only with transport ws; a changed via moves the entry', async (t) => {
    const f = await tunnelFleet(t, { transport: 'ws' });
    const { m } = f;
    const body = {
      name: 'other',
      entry_node_id: f.entryNode.id,
      exit_node_id: f.exitNode.id,
      listen_port: f.tunnelPort + 1,
    };
    for (const [extra, pointer] of [
      [{ transport: 'tls', via: 'ws://proxy.example/t' }, '#/via'],
      [{ transport: 'ws', via: 'http://proxy.example/t' }, '#/via'],
      [{ transport: 'ws', via: 'ws://user:pw@proxy.example/t' }, '#/via'],
      [{ transport: 'ws', via: 'ws://proxy.example/t#frag' }, '#/via'],
      [{ transport: 'ws', via: 'ws://pro xy/' }, '#/via'],
      [{ transport: 'quic' }, '#/transport'],
    ] as const) {
      const answer = await call(m.url, 'POST', '/api/tunnels', { token: m.admin, body: { ...body, ...extra } });
      assert.equal(answer.status, 422, JSON.stringify(extra));
      assert.ok(
        answer.body.errors.some((e: { pointer: string }) => e.pointer === pointer),
        JSON.stringify(answer.body),
      );
    }
    assert.equal((await call(m.url, 'GET', '/api/tunnels', { token: m.admin })).body.items.length, 1);

    // Pointed at a port where nothing listens, the entry says where it could not reach.
    const moved = await call(m.url, 'PUT', `/api/tunnels/${f.tunnel.id}`, {
      token: m.admin,
      body: { ...body, name: 't1', listen_port: f.tunnelPort, transport: 'ws', via: 'ws://127.0.0.1:9/portplane' },
    });
    assert.equal(moved.status, 200, JSON.stringify(moved.body));
    const down = await until('the entry to say it cannot reach the via', async () => {
      const tunnel = await tunnelOf(m, f.tunnel.id);
      return tunnel.ends.entry.last_error?.includes('through ws://127.0.0.1:9/portplane') && tunnel;
    });
    assert.equal(down.ends.entry.status, 'down');
  });

  test("a tenant's via may not reach what is local to the entry node, as their rules' targets may not", async (t) => {
    const f = await tunnelFleet(t, { transport: 'ws' });
    const { m } = f;
    const tenant = await call(m.url, 'POST', '/api/users', {
      token: m.admin,
      body: { username: 'tenant1', password: 'tenant-password-1', role: 'tenant' },
    });
    assert.equal(tenant.status, 201, JSON.stringify(tenant.body));
    await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { allow_local_rule_targets: true } });
    const given = await call(m.url, 'PUT', `/api/tunnels/${f.tunnel.id}`, {
      token: m.admin,
      body: {
        name: 't1',
        owner_id: tenant.body.id,
        entry_node_id: f.entryNode.id,
        exit_node_id: f.exitNode.id,
        listen_port: f.tunnelPort,
        transport: 'ws',
        via: `ws://127.0.0.1:${f.tunnelPort}/`,
      },
    });
    assert.equal(given.status, 200, JSON.stringify(given.body));
    const refused = await until('the entry to refuse the local via', async () => {
      const tunnel = await tunnelOf(m, f.tunnel.id);
      return tunnel.ends.entry.last_error?.includes('local targets are not allowed') && tunnel;
    });
    assert.match(refused.ends.entry.last_error, /^not dialling the exit node through ws:\/\/127\.0\.0\.1:\d+\/: /);
    assert.equal(refused.status, 'down');
  });
});
