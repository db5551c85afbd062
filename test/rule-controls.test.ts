// A rule's controls end to end: what the API accepts and shows, and what a real agent enforces with them (who may
// connect, how many at once, until when, the PROXY protocol header its targets receive).

import assert from 'node:assert/strict';
import { createSocket } from 'node:dgram';
import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { describe, test, type TestContext } from 'node:test';
import { ruleFieldsOf } from '../internal/domain/rules.ts';
import { send } from '../internal/agentlink/wire.ts';
import { configMessage } from '../internal/domain/link.ts';
import { validate } from '../internal/schema/schema.ts';
import { onlineNode } from './agents.ts';
import { link, type RawLink } from './rawlink.ts';
import { assertProblem, call, NO_CONTROLS, node, rule, snapshot, startMaster, type Running } from './helpers.ts';
import { freePort, probe, tcpEcho, udpEcho, until } from './net.ts';

// Most of these tests wait on clocks and sockets: they run side by side.
describe('rule controls', { concurrency: 4 }, () => {
  /** Sends a line from `localAddress` and reads until the far side ends: the echo, or '' when the relay closed it. */
  function exchange(port: number, localAddress = '127.0.0.1', line = 'ping'): Promise<string> {
    return new Promise((resolve) => {
      const socket = connect({ host: '127.0.0.1', port, localAddress, allowHalfOpen: true });
      let got = '';
      socket.setEncoding('utf8').on('data', (chunk: string) => (got += chunk));
      socket.on('connect', () => socket.end(line));
      socket.on('error', () => undefined);
      socket.on('close', () => resolve(got));
    });
  }

  /** An open connection through `port` that has carried one echo, to hold a place. */
  async function held(t: TestContext, port: number): Promise<Socket> {
    const socket = connect({ host: '127.0.0.1', port });
    t.after(() => socket.destroy());
    await once(socket, 'connect');
    socket.write('x');
    await once(socket, 'data');
    return socket;
  }

  /** A target that keeps what each connection sent first and answers `ok`. */
  async function recordingTarget(t: TestContext): Promise<{ port: number; received: Buffer[] }> {
    const received: Buffer[] = [];
    const server = createServer((socket) => {
      const chunks: Buffer[] = [];
      socket.on('data', (chunk) => {
        chunks.push(chunk);
        if (Buffer.concat(chunks).includes('ping')) {
          received.push(Buffer.concat(chunks));
          socket.end('ok');
        }
      });
      socket.on('error', () => undefined);
    }).listen(0, '127.0.0.1');
    await once(server, 'listening');
    t.after(() => server.close());
    return { port: (server.address() as AddressInfo).port, received };
  }

  async function applied(m: Running, id: number) {
    const synced = await call(m.url, 'POST', `/api/rules/${id}/sync`, { token: m.admin });
    assert.equal(synced.status, 200, JSON.stringify(synced.body));
    return synced.body;
  }

  async function refusedOf(m: Running, id: number): Promise<number> {
    return (await call(m.url, 'GET', `/api/rules/${id}`, { token: m.admin })).body.traffic.refused;
  }

  test('bad controls are 422 with a pointer each, and nothing is written', async (t) => {
    const m = await startMaster(t);
    const n = await node(m, 'edge');
    const base = { node_id: n.id, listen_port: 9000, targets: ['192.0.2.1:80'] };
    const before = snapshot(m);
    for (const [field, value, detail] of [
      ['allow_sources', ['10.0.0.5/24'], /bits set past its \/24 prefix/],
      ['allow_sources', ['10.0.0.0/33'], /prefix \/33, which is not from 0 to 32/],
      ['deny_sources', ['2001:db8::/129'], /not from 0 to 128/],
      ['deny_sources', ['example.com'], /IPv4 or IPv6 address/],
      ['deny_sources', ['10.0.0.0/8', '10.0.0.0/8'], /duplicate/],
      ['max_connections', 0, /between 1 and/],
      ['max_new_connections_per_second', 0, /between 1 and/],
      ['max_new_connections_per_second', 1.5, /integer/],
      ['source_address', '10.0.0.0/8', /IPv4 or IPv6 address \(no zone, no block\)/],
      ['source_address', '0.0.0.0', /unspecified address/],
      ['source_address', 'fe80::1', /link-local address/],
      ['source_address', '::ffff:192.0.2.1', /IPv4 or IPv6 address/],
      ['source_address', 'node.example', /IPv4 or IPv6 address/],
      ['allow_hours', { zone: 'Mars/Olympus', windows: [{ days: ['mon'], from: '08:00', to: '18:00' }] }, /IANA/],
      ['allow_hours', { zone: 'UTC', windows: [{ days: ['mon'], from: '8:00', to: '18:00' }] }, /HH:MM/],
      ['allow_hours', { zone: 'UTC', windows: [{ days: ['mon'], from: '08:00', to: '24:01' }] }, /24:00/],
      ['allow_hours', { zone: 'UTC', windows: [{ days: [], from: '08:00', to: '18:00' }] }, /at least 1/],
      ['allow_hours', { zone: 'UTC', windows: [] }, /at least 1/],
      ['expires_at', 'tomorrow', /RFC 3339/],
      ['proxy_protocol', 'v3', /one of/],
      ['tags', ['has space'], /letters, digits/],
    ] as const) {
      const answer = await call(m.url, 'POST', '/api/rules', { token: m.admin, body: { ...base, [field]: value } });
      assertProblem(answer, 422, 'validation_failed');
      const error = answer.body.errors.find((e: { pointer: string }) => e.pointer.startsWith(`#/${field}`));
      assert.ok(error, `${field}: ${JSON.stringify(answer.body.errors)}`);
      assert.match(error.detail, detail, field);
    }
    assert.equal(snapshot(m), before);
  });

  test('controls round-trip through create, read, list by tag, batch update, export and import', async (t) => {
    const m = await startMaster(t);
    const n = await node(m, 'edge');
    const controls = {
      tags: ['game', 'eu'],
      allow_sources: ['198.51.100.0/24', '2001:db8::/32'],
      deny_sources: ['198.51.100.7'],
      max_connections: 50,
      bandwidth_limit: 10 * 2 ** 20,
      max_new_connections_per_second: 20,
      source_address: '2001:db8::10',
      allow_hours: { zone: 'Europe/Berlin', windows: [{ days: ['mon', 'fri'], from: '22:00', to: '06:00' }] },
      expires_at: '2030-01-02T03:04:05Z',
      proxy_protocol: 'v2',
      quota: { bytes: 2 ** 40, period: 'day', direction: 'out', reset_day: 1, reset_hour: 4 },
      health_check: { interval_seconds: 30, timeout_ms: 1000, fall: 2, rise: 3 },
    };
    const made = await rule(m, { node_id: n.id, listen_port: 9000, targets: ['192.0.2.1:80'], ...controls });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const read = (await call(m.url, 'GET', `/api/rules/${made.body.id}`, { token: m.admin })).body;
    assert.deepEqual(read, made.body, 'the stored view is what the create answered');
    assert.deepEqual({ ...read, ...controls }, read);
    assert.equal(read.state, 'active');
    assert.equal(read.traffic.refused, 0);
    const other = await rule(m, { node_id: n.id, listen_port: 9001, targets: ['192.0.2.1:80'], tags: ['us'] });
    const byTag = await call(m.url, 'GET', '/api/rules?tag=eu', { token: m.admin });
    assert.deepEqual(
      byTag.body.items.map((r: { id: number }) => r.id),
      [made.body.id],
    );

    const batch = await call(m.url, 'POST', '/api/rules/batch-update', {
      token: m.admin,
      body: {
        ids: [other.body.id],
        changes: { tags: ['eu'], max_connections: 5, proxy_protocol: 'v1', max_new_connections_per_second: 7 },
      },
    });
    assert.deepEqual(batch.body.results, [{ id: other.body.id, outcome: 'updated' }]);
    const changed = (await call(m.url, 'GET', `/api/rules/${other.body.id}`, { token: m.admin })).body;
    assert.deepEqual(
      [changed.tags, changed.max_connections, changed.proxy_protocol, changed.max_new_connections_per_second],
      [['eu'], 5, 'v1', 7],
    );

    const exported = (await call(m.url, 'GET', '/api/export', { token: m.admin })).body;
    const m2 = await startMaster(t);
    const imported = await call(m2.url, 'POST', '/api/import', { token: m2.admin, body: exported });
    assert.equal(imported.status, 200, JSON.stringify(imported.body));
    const again = (await call(m2.url, 'GET', '/api/rules', { token: m2.admin })).body.items;
    const writable = (r: Record<string, unknown>) => {
      const { id: _id, node_id: _node, state: _state, sync: _sync, traffic: _traffic, version: _v, ...rest } = r;
      delete rest.quota_usage;
      delete rest.health;
      const { created_at: _created, updated_at: _updated, ...fields } = rest;
      return fields;
    };
    assert.deepEqual(again.map(writable), [read, changed].map(writable));
  });

  test(
    'a rule from a denied source is refused and counted, an allowed one relays; max_connections, ' +
      'max_new_connections_per_second and allow_hours hold',
    async (t) => {
      const m = await startMaster(t, { localTargets: true });
      const n = await onlineNode(t, m);
      const echo = await tcpEcho(t);
      const udp = await udpEcho(t);
      const [denyPort, allowPort, maxPort] = [await freePort(), await freePort(), await freePort()];
      const denying = await rule(m, {
        node_id: n.id,
        listen_port: denyPort,
        targets: [`127.0.0.1:${echo}`],
        allow_sources: ['127.0.0.0/8'],
        deny_sources: ['127.0.0.2/32'],
      });
      const allowing = await rule(m, {
        node_id: n.id,
        protocol: 'udp',
        listen_port: allowPort,
        targets: [`127.0.0.1:${udp}`],
        allow_sources: ['127.0.0.1'],
      });
      const limited = await rule(m, {
        node_id: n.id,
        listen_port: maxPort,
        targets: [`127.0.0.1:${echo}`],
        max_connections: 2,
      });
      const ratePort = await freePort();
      const rated = await rule(m, {
        node_id: n.id,
        listen_port: ratePort,
        targets: [`127.0.0.1:${echo}`],
        max_new_connections_per_second: 2,
      });
      // Hours that start two hours from now, for a minute: now is outside them.
      const hhmm = (ms: number) => new Date(ms).toISOString().slice(11, 16);
      const day = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'][new Date().getUTCDay()];
      const window = { days: [day], from: hhmm(Date.now() + 7_200_000), to: hhmm(Date.now() + 7_260_000) };
      const hoursPort = await freePort();
      const closed = await rule(m, {
        node_id: n.id,
        listen_port: hoursPort,
        targets: [`127.0.0.1:${echo}`],
        allow_hours: { zone: 'UTC', windows: [window] },
      });
      for (const made of [denying, allowing, limited, rated, closed])
        assert.equal((await applied(m, made.body.id)).sync.state, 'applied');

      assert.equal(await exchange(denyPort, '127.0.0.1'), 'ping');
      assert.equal(await exchange(denyPort, '127.0.0.3'), 'ping', 'in allow_sources and not denied');
      assert.equal(await exchange(denyPort, '127.0.0.2'), '', 'denied: closed at once');

      const datagram = async (from: string) => {
        const socket = createSocket('udp4');
        socket.bind(0, from);
        await once(socket, 'listening');
        const reply = once(socket, 'message').then(([message]) => String(message));
        socket.send('hello', allowPort, '127.0.0.1');
        const answer = await Promise.race([reply, new Promise((resolve) => setTimeout(() => resolve('dropped'), 500))]);
        socket.close();
        return answer;
      };
      assert.equal(await datagram('127.0.0.1'), 'hello');
      assert.equal(await datagram('127.0.0.5'), 'dropped');

      const first = await held(t, maxPort);
      await held(t, maxPort);
      assert.equal(await exchange(maxPort), '', 'the third connection is refused');
      let limitedRefusals = 1;
      first.destroy();
      await until('a place to free up', async () => {
        const got = await exchange(maxPort);
        if (got === '') limitedRefusals++;
        return got === 'ping';
      });

      // Two new connections a second: of four at once, two relay and two are closed at once.
      const burst = await Promise.all([1, 2, 3, 4].map(() => exchange(ratePort)));
      assert.deepEqual([...burst].sort(), ['', '', 'ping', 'ping']);

      assert.equal(await exchange(hoursPort), '', 'outside allow_hours: closed at once');

      const expected = [1, 1, limitedRefusals, 2, 1];
      await until(`refusals ${expected} to be reported`, async () => {
        const counts = await Promise.all(
          [denying, allowing, limited, rated, closed].map((r) => refusedOf(m, r.body.id)),
        );
        return JSON.stringify(counts) === JSON.stringify(expected);
      });
    },
  );

  test('targets receive the PROXY v1 and v2 headers with the client address and port', async (t) => {
    const m = await startMaster(t, { localTargets: true });
    const n = await onlineNode(t, m);
    const target = await recordingTarget(t);
    const [v1Port, v2Port] = [await freePort(), await freePort()];
    for (const [port, version] of [
      [v1Port, 'v1'],
      [v2Port, 'v2'],
    ] as const) {
      const made = await rule(m, {
        node_id: n.id,
        listen_port: port,
        targets: [`127.0.0.1:${target.port}`],
        proxy_protocol: version,
      });
      assert.equal((await applied(m, made.body.id)).sync.applied_path, 'relay');
    }

    const from = async (port: number) => {
      const socket = connect({ host: '127.0.0.1', port, localAddress: '127.0.0.4' });
      await once(socket, 'connect');
      const clientPort = socket.localPort!;
      socket.setEncoding('utf8');
      socket.write('ping');
      const [answer] = await once(socket, 'data');
      socket.destroy();
      assert.equal(answer, 'ok');
      return clientPort;
    };
    const v1Client = await from(v1Port);
    assert.equal(target.received[0]!.toString(), `PROXY TCP4 127.0.0.4 127.0.0.1 ${v1Client} ${v1Port}\r\nping`);

    const v2Client = await from(v2Port);
    const v2 = target.received[1]!;
    assert.deepEqual([...v2.subarray(0, 12)], [13, 10, 13, 10, 0, 13, 10, 81, 85, 73, 84, 10], 'the v2 signature');
    assert.equal(v2[12], 0x21, 'version 2, PROXY');
    assert.equal(v2[13], 0x11, 'TCP over IPv4');
    assert.equal(v2.readUInt16BE(14), 12);
    assert.deepEqual([...v2.subarray(16, 20)], [127, 0, 0, 4]);
    assert.deepEqual([...v2.subarray(20, 24)], [127, 0, 0, 1]);
    assert.equal(v2.readUInt16BE(24), v2Client);
    assert.equal(v2.readUInt16BE(26), v2Port);
    assert.equal(v2.subarray(28).toString(), 'ping');
  });

  test('a rule stops at its expires_at (state expired, audited) and a later expiry starts it again', async (t) => {
    const m = await startMaster(t, { localTargets: true });
    const n = await onlineNode(t, m);
    const echo = await tcpEcho(t);
    const port = await freePort();
    // Whole seconds (the API keeps seconds), at least two from now.
    const expiresAt = new Date(Math.ceil(Date.now() / 1000) * 1000 + 2000).toISOString().replace('.000Z', 'Z');
    const made = await rule(m, {
      node_id: n.id,
      listen_port: port,
      targets: [`127.0.0.1:${echo}`],
      expires_at: expiresAt,
    });
    assert.equal(made.body.state, 'active');
    await applied(m, made.body.id);
    assert.equal(await exchange(port), 'ping');

    await until('the node to stop the rule', async () => (await probe(port)) === 'ECONNREFUSED');
    assert.ok(Date.now() >= Date.parse(expiresAt), 'not before its time');
    const expired = await until('the master to mark it expired', async () => {
      const current = (await call(m.url, 'GET', `/api/rules/${made.body.id}`, { token: m.admin })).body;
      return current.state === 'expired' && current;
    });
    assert.equal(expired.enabled, true, "expiry is not the writer's enabled flag");
    const audit = await call(m.url, 'GET', `/api/audit-logs?resource=rule&resource_id=${made.body.id}`, {
      token: m.admin,
    });
    const entry = audit.body.items.find((e: { action: string }) => e.action === 'rule.expire');
    assert.equal(entry?.actor_type, 'system');

    const {
      id: _id,
      state: _s,
      sync: _y,
      traffic: _t,
      version: _v,
      created_at: _c,
      updated_at: _u,
      ...fields
    } = expired;
    const renewed = await call(m.url, 'PUT', `/api/rules/${made.body.id}`, {
      token: m.admin,
      body: { ...fields, expires_at: null },
    });
    assert.equal(renewed.status, 200, JSON.stringify(renewed.body));
    assert.equal(renewed.body.state, 'active');
    await applied(m, made.body.id);
    assert.equal(await exchange(port), 'ping');
  });

  test('a spent quota stops the rule on its node (quota_exceeded, 409 to re-enable) until a new period', async (t) => {
    const m = await startMaster(t, { localTargets: true });
    const n = await onlineNode(t, m);
    // An echo target that counts what reaches it.
    let received = 0;
    const target = createServer((socket) => {
      socket.on('data', (chunk) => (received += chunk.length));
      socket.pipe(socket);
      socket.on('error', () => undefined);
    }).listen(0, '127.0.0.1');
    await once(target, 'listening');
    t.after(() => target.close());
    const port = await freePort();
    const QUOTA = 256 * 1024;
    const made = await rule(m, {
      node_id: n.id,
      listen_port: port,
      targets: [`127.0.0.1:${(target.address() as AddressInfo).port}`],
      quota: { bytes: QUOTA, period: 'day', direction: 'in' },
    });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    assert.deepEqual(Object.keys(made.body.quota_usage), ['used_bytes', 'period_started_at', 'resets_at']);
    assert.equal(made.body.quota_usage.used_bytes, 0);
    const { period_started_at, resets_at } = made.body.quota_usage;
    assert.equal(Date.parse(resets_at) - Date.parse(period_started_at), 86_400_000);
    await applied(m, made.body.id);

    // One client sends far more than the quota: the node ends it once the quota is spent.
    const socket = connect({ host: '127.0.0.1', port });
    socket.resume();
    socket.on('error', () => undefined);
    await once(socket, 'connect');
    const chunk = Buffer.alloc(16 * 1024, 2);
    const push = () => {
      while (!socket.destroyed && socket.write(chunk));
    };
    socket.on('drain', push);
    const closed = new Promise((resolve) => socket.on('close', resolve));
    push();
    await closed;
    // At most the read that spent it past the quota (what was on its way when the connection ended may be lost).
    assert.ok(received <= QUOTA + 256 * 1024, `${received} bytes reached the target for ${QUOTA}`);
    assert.equal(await exchange(port), '', 'a new client is refused at once');

    const spent = await until('the master to mark the quota spent', async () => {
      const current = (await call(m.url, 'GET', `/api/rules/${made.body.id}`, { token: m.admin })).body;
      return current.state === 'quota_exceeded' && current;
    });
    assert.equal(spent.enabled, false);
    assert.ok(spent.quota_usage.used_bytes >= QUOTA);
    const audit = await call(m.url, 'GET', `/api/audit-logs?resource=rule&resource_id=${made.body.id}`, {
      token: m.admin,
    });
    assert.ok(audit.body.items.some((e: { action: string }) => e.action === 'rule.quota_exceeded'));
    const { id: _i, state: _s, quota_usage: _q, sync: _y, traffic: _t, version: _v, ...writable } = spent;
    const { created_at: _c, updated_at: _u, ...fields } = writable;
    const again = await call(m.url, 'PUT', `/api/rules/${made.body.id}`, {
      token: m.admin,
      body: { ...fields, enabled: true },
    });
    assertProblem(again, 409, 'conflict');
    assert.match(again.body.detail, /used \d+ of its 262144 bytes this period/);
    const batch = await call(m.url, 'POST', '/api/rules/batch-update', {
      token: m.admin,
      body: { ids: [made.body.id], changes: { enabled: true } },
    });
    assert.deepEqual(
      batch.body.results.map((r: { outcome: string }) => r.outcome),
      ['conflict'],
      'a batch enables it no more than a PUT does',
    );

    // The period ends (brought forward here, rather than waited for): the count starts over and the rule forwards.
    // (The batch's writer hands the database back a moment after its answer.)
    await m.app.store.db.writable();
    m.app.store.write(() =>
      m.app.store.db
        .prepare('UPDATE rules SET quota_resets_at = ? WHERE id = ?')
        .run('2020-01-01T00:00:00Z', made.body.id),
    );
    const reset = await until('the new period', async () => {
      const current = (await call(m.url, 'GET', `/api/rules/${made.body.id}`, { token: m.admin })).body;
      return current.state === 'active' && current;
    });
    assert.equal(reset.enabled, true);
    assert.equal(reset.quota_usage.used_bytes, 0);
    await applied(m, made.body.id);
    assert.equal(await exchange(port), 'ping');
  });

  const QUOTA_LOWERED =
    'a quota lowered to what its period has used stops the rule at once; raised past it, it goes on';
  test(QUOTA_LOWERED, async (t) => {
    const m = await startMaster(t);
    const n = await node(m, 'edge');
    const base = { name: 'metered', node_id: n.id, protocol: 'tcp', listen_port: 9000, targets: ['192.0.2.1:80'] };
    const made = (await rule(m, { ...base, quota: { bytes: 1000 } })).body;
    // What the node would have reported: 600 bytes of the period used.
    m.app.store.write(() => m.app.store.db.prepare('UPDATE rules SET quota_used = 600 WHERE id = ?').run(made.id));
    const put = (bytes: number, enabled = true) =>
      call(m.url, 'PUT', `/api/rules/${made.id}`, { token: m.admin, body: { ...base, enabled, quota: { bytes } } });
    const lowered = await put(500);
    assert.equal(lowered.status, 200);
    assert.deepEqual([lowered.body.state, lowered.body.enabled], ['quota_exceeded', false]);
    assertProblem(await put(600), 409, 'conflict');
    const raised = await put(2000);
    assert.equal(raised.status, 200);
    assert.deepEqual(
      [raised.body.state, raised.body.enabled, raised.body.quota_usage.used_bytes],
      ['active', true, 600],
    );
  });

  test('a quota is validated as a whole and its fields one by one', async (t) => {
    const m = await startMaster(t);
    const n = await node(m, 'edge');
    const base = { name: 'q', node_id: n.id, protocol: 'tcp', listen_port: 9000, targets: ['192.0.2.1:80'] };
    for (const [quota, pointer] of [
      [{ bytes: 0 }, '#/quota/bytes'],
      [{ bytes: 10, reset_day: 29 }, '#/quota/reset_day'],
      [{ bytes: 10, reset_hour: 24 }, '#/quota/reset_hour'],
      [{ bytes: 10, period: 'week' }, '#/quota/period'],
      [{ bytes: 10, direction: 'up' }, '#/quota/direction'],
      [{ period: 'day' }, '#/quota/bytes'],
    ] as const) {
      const answer = await call(m.url, 'POST', '/api/rules', { token: m.admin, body: { ...base, quota } });
      assertProblem(answer, 422, 'validation_failed');
      assert.deepEqual(
        answer.body.errors.map((e: { pointer: string }) => e.pointer),
        [pointer],
      );
    }
    const made = await rule(m, { ...base, quota: { bytes: 1000 } });
    assert.deepEqual(made.body.quota, { bytes: 1000, period: 'month', direction: 'both', reset_day: 1, reset_hour: 0 });
  });

  test(
    'a config carries only the controls a rule uses, each as ' + 'the agent reads it; one without any, none',
    async (t) => {
      const m = await startMaster(t);
      const n = await node(m, 'edge');
      const plain = (await rule(m, { node_id: n.id, listen_port: 9000, targets: ['192.0.2.1:80'] })).body;
      const limited = (
        await rule(m, {
          node_id: n.id,
          listen_port: 9001,
          targets: ['192.0.2.1:80'],
          deny_sources: ['192.0.2.0/24'],
          quota: { bytes: 5000, direction: 'in' },
        })
      ).body;
      const raw = (await link(m, n.agent_token)) as RawLink;
      const config = await raw.next('config');
      raw.socket.destroy();
      const rules = config.rules as Record<string, unknown>[];
      const sent = (id: number) => rules.find((r) => r.id === id)!;
      assert.deepEqual(Object.keys(sent(plain.id)).sort(), [
        'enabled',
        'forwarding',
        'id',
        'listen_port',
        'protocol',
        'strategy',
        'targets',
        'tunnel_id',
      ]);
      assert.deepEqual(sent(limited.id).deny_sources, ['192.0.2.0/24']);
      assert.deepEqual(sent(limited.id).quota, {
        bytes: 5000,
        direction: 'in',
        period_start: limited.quota_usage.period_started_at,
        used: 0,
      });
      assert.equal(sent(limited.id).allow_sources, undefined);
      const { value, errors } = validate(configMessage, config);
      assert.deepEqual(errors, []);
      assert.deepEqual(value.rules.find((r) => r.id === plain.id)?.allow_sources, [], 'the agent fills in the default');
    },
  );

  /** A target on `port` (0: any) that answers every connection with `name`; `stop` ends it and its connections. */
  async function namedTarget(t: TestContext, name: string, port = 0) {
    const sockets = new Set<Socket>();
    const server = createServer((socket) => {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      socket.on('error', () => undefined);
      socket.end(name);
    }).listen(port, '127.0.0.1');
    await once(server, 'listening');
    const stop = () => {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => server.close(resolve));
    };
    t.after(stop);
    return { stop, port: (server.address() as AddressInfo).port };
  }

  test(
    'health checks mark a target down when it stops answering ' + 'and up when it answers; all down refuses',
    async (t) => {
      const m = await startMaster(t, { localTargets: true });
      const n = await onlineNode(t, m);
      const a = await namedTarget(t, 'A');
      let b = await namedTarget(t, 'B');
      const port = await freePort();
      const made = await rule(m, {
        node_id: n.id,
        listen_port: port,
        targets: [`127.0.0.1:${a.port}`, `127.0.0.1:${b.port}`],
        strategy: 'round_robin',
        health_check: { interval_seconds: 1, timeout_ms: 500, fall: 1, rise: 1 },
      });
      assert.equal(made.status, 201, JSON.stringify(made.body));
      assert.deepEqual(made.body.health, {
        status: 'unknown',
        targets: made.body.targets.map((target: string) => ({
          target,
          status: 'unknown',
          error: null,
          checked_at: null,
        })),
      });
      assert.equal((await applied(m, made.body.id)).sync.applied_path, 'relay');
      const healthIs = (status: string, targets: string[]) =>
        until(`health ${status} ${targets}`, async () => {
          const { health } = (await call(m.url, 'GET', `/api/rules/${made.body.id}`, { token: m.admin })).body;
          const now = health.targets.map((target: { status: string }) => target.status);
          return health.status === status && JSON.stringify(now) === JSON.stringify(targets) && health;
        });
      await healthIs('up', ['up', 'up']);
      const answers = async (times: number) =>
        (await Promise.all(Array.from({ length: times }, () => exchange(port)))).sort();
      assert.deepEqual([...new Set(await answers(6))], ['A', 'B']);

      await b.stop();
      const degraded = await healthIs('degraded', ['up', 'down']);
      assert.equal(degraded.targets[1].error, 'ECONNREFUSED');
      assert.deepEqual([...new Set(await answers(6))], ['A'], 'the target down is skipped');

      await a.stop();
      await healthIs('down', ['down', 'down']);
      assert.equal(await exchange(port), '', 'every target down: the client is closed at once');

      b = await namedTarget(t, 'B', b.port);
      await healthIs('degraded', ['down', 'up']);
      assert.deepEqual([...new Set(await answers(4))], ['B'], 'back up, it is used again');
    },
  );

  /** Nodes "entry" and "exit", and a tunnel between them. */
  async function tunnelOf(m: Running) {
    const entry = await node(m, 'entry');
    const exit = await node(m, 'exit');
    const body = { name: 't', entry_node_id: entry.id, exit_node_id: exit.id };
    const tunnel = (await call(m.url, 'POST', '/api/tunnels', { token: m.admin, body })).body;
    return { entry, tunnel };
  }

  test('a health check is for direct rules only, and is bounded', async (t) => {
    const m = await startMaster(t);
    const { entry, tunnel } = await tunnelOf(m);
    const base = { name: 'h', node_id: entry.id, protocol: 'tcp', listen_port: 9000, targets: ['192.0.2.1:80'] };
    const through = await call(m.url, 'POST', '/api/rules', {
      token: m.admin,
      body: { ...base, tunnel_id: tunnel.id, health_check: {} },
    });
    assertProblem(through, 422, 'validation_failed');
    assert.match(through.body.errors[0].detail, /direct rules/);
    for (const [check, pointer] of [
      [{ interval_seconds: 0 }, '#/health_check/interval_seconds'],
      [{ timeout_ms: 10 }, '#/health_check/timeout_ms'],
      [{ fall: 11 }, '#/health_check/fall'],
      [{ rise: 0 }, '#/health_check/rise'],
    ] as const) {
      const answer = await call(m.url, 'POST', '/api/rules', {
        token: m.admin,
        body: { ...base, health_check: check },
      });
      assert.deepEqual(
        answer.body.errors.map((e: { pointer: string }) => e.pointer),
        [pointer],
      );
    }
    const made = await rule(m, { ...base, health_check: {} });
    assert.deepEqual(made.body.health_check, { interval_seconds: 5, timeout_ms: 2000, fall: 3, rise: 2 });
  });

  const COMBINATIONS =
    'fields that do not go together are 422 naming the field, on create, replace, batch create, batch update and ' +
    'import alike, and nothing is written';

  test(COMBINATIONS, async (t) => {
    const m = await startMaster(t);
    const { entry, tunnel } = await tunnelOf(m);
    const targets = ['192.0.2.1:80', '192.0.2.2:80'];
    const base = { name: 'c', node_id: entry.id, protocol: 'tcp', listen_port: 9000, targets };
    const checked = { strategy: 'lowest_latency', health_check: {} };
    const existing = (await rule(m, { ...base, ...checked, listen_port: 9001 })).body;
    const cases = [
      [{ weights: [1] }, '#/weights', /2 targets: one per target/],
      [{ weights: [3, 1], strategy: 'failover' }, '#/weights', /round_robin, random, source_hash/],
      [{ weights: [3, 1], strategy: 'least_conn' }, '#/weights', /not least_conn/],
      [{ weights: [0, 1] }, '#/weights/0', /between 1 and 100/],
      [{ strategy: 'lowest_latency' }, '#/strategy', /needs a health_check/],
      [{ preserve_source: true, forwarding: 'relay' }, '#/preserve_source', /needs the kernel path/],
      [{ preserve_source: true, tunnel_id: tunnel.id }, '#/preserve_source', /through a tunnel/],
      // Every other reason a rule is the relay's alone: a rule that keeps the client's address could never be applied.
      [{ preserve_source: true, health_check: {}, proxy_protocol: 'v1' }, '#/preserve_source', /proxy_protocol/],
      [{ preserve_source: true, health_check: {}, bandwidth_limit: 65536 }, '#/preserve_source', /bandwidth_limit/],
      [
        { preserve_source: true, health_check: {}, quota: { bytes: 1000 }, protocol: 'udp' },
        '#/preserve_source',
        /quota/,
      ],
      [{ preserve_source: true, health_check: {}, strategy: 'least_conn' }, '#/preserve_source', /least_conn/],
      [{ preserve_source: true }, '#/preserve_source', /several targets without a health_check/],
      [
        { allow_hours: { zone: 'UTC', windows: [{ days: ['mon'], from: '08:00', to: '08:00' }] } },
        '#/allow_hours/windows/0/to',
        /is its from: an empty window/,
      ],
      [
        {
          preserve_source: true,
          health_check: {},
          allow_hours: { zone: 'UTC', windows: [{ days: ['mon'], from: '08:00', to: '09:00' }] },
        },
        '#/preserve_source',
        /allow_hours/,
      ],
      [
        { preserve_source: true, health_check: {}, source_address: '192.0.2.10' },
        '#/source_address',
        /preserve_source keeps the client's: not both/,
      ],
    ] as const;
    const before = snapshot(m);
    for (const [fields, pointer, detail] of cases) {
      const body = { ...base, ...fields };
      const writes = [
        await call(m.url, 'POST', '/api/rules', { token: m.admin, body }),
        await call(m.url, 'PUT', `/api/rules/${existing.id}`, {
          token: m.admin,
          body: { ...checked, ...body, health_check: null, listen_port: 9001 },
        }),
      ];
      for (const answer of writes) {
        assertProblem(answer, 422, 'validation_failed');
        const error = answer.body.errors.find((e: { pointer: string }) => e.pointer === pointer);
        assert.ok(error, `${JSON.stringify(fields)}: ${JSON.stringify(answer.body.errors)}`);
        assert.match(error.detail, detail);
      }
      const batch = await call(m.url, 'POST', '/api/rules/batch-create', { token: m.admin, body: { rules: [body] } });
      assert.notEqual(batch.body.results?.[0]?.outcome ?? batch.status, 'created', JSON.stringify(batch.body));
    }
    const changed = await call(m.url, 'POST', '/api/rules/batch-update', {
      token: m.admin,
      body: { ids: [existing.id], changes: { health_check: null } },
    });
    assert.equal(changed.body.results[0].outcome, 'invalid', JSON.stringify(changed.body));
    const doc = (await call(m.url, 'GET', '/api/export', { token: m.admin })).body;
    doc.rules[0] = { ...doc.rules[0], weights: [1, 2, 3] };
    const imported = await call(m.url, 'POST', '/api/import', { token: m.admin, body: doc });
    assert.equal(imported.status, 422, JSON.stringify(imported.body));
    assert.equal(snapshot(m), before);
    const kept = await rule(m, {
      ...base,
      weights: [3, 1],
      strategy: 'source_hash',
      preserve_source: true,
      health_check: {},
    });
    assert.deepEqual([kept.body.weights, kept.body.strategy, kept.body.preserve_source], [[3, 1], 'source_hash', true]);
  });

  const PRESERVE_ON_RELAY = "a rule that keeps the client's address fails on a node that forwards in user space only";

  test(PRESERVE_ON_RELAY, async (t) => {
    const m = await startMaster(t);
    const n = await onlineNode(t, m);
    const made = (await rule(m, { node_id: n.id, listen_port: await freePort(), preserve_source: true })).body;
    const synced = await call(m.url, 'POST', `/api/rules/${made.id}/sync`, { token: m.admin });
    assertProblem(synced, 502, 'bad_gateway');
    const { sync } = synced.body.rule;
    assert.deepEqual([sync.state, sync.error.code, sync.applied_path], ['failed', 'kernel_unsupported', null]);
    assert.match(sync.error.detail, /user space only/);
  });

  test("an agent's health reports reach only its own health-checked rules and their own targets", async (t) => {
    const m = await startMaster(t);
    const mine = await node(m, 'mine');
    const theirs = await node(m, 'theirs');
    const check = { interval_seconds: 5 };
    const base = { listen_port: 9000, targets: ['192.0.2.1:80', '192.0.2.2:80'], health_check: check };
    const own = (await rule(m, { ...base, node_id: mine.id })).body;
    const unchecked = (await rule(m, { node_id: mine.id, listen_port: 9001, targets: ['192.0.2.1:80'] })).body;
    const foreign = (await rule(m, { ...base, node_id: theirs.id })).body;
    const raw = (await link(m, mine.agent_token)) as RawLink;
    await raw.next('config');
    const down = (target: string) => ({
      target,
      status: 'down',
      error: 'ECONNREFUSED',
      checked_at: '2026-11-26T10:00:00Z',
    });
    send(raw.socket, {
      type: 'health',
      rules: [
        { id: own.id, targets: [down('192.0.2.2:80'), down('203.0.113.9:80')] },
        { id: unchecked.id, targets: [down('192.0.2.1:80')] },
        { id: foreign.id, targets: [down('192.0.2.1:80')] },
      ],
    });
    const healthOf = async (id: number) =>
      (await call(m.url, 'GET', `/api/rules/${id}`, { token: m.admin })).body.health;
    const now = await until('the report stored', async () => {
      const health = await healthOf(own.id);
      return health.status === 'degraded' && health;
    });
    assert.deepEqual(
      now.targets.map((target: { target: string; status: string }) => [target.target, target.status]),
      [
        ['192.0.2.1:80', 'unknown'],
        ['192.0.2.2:80', 'down'],
      ],
      'a target the rule does not have is not added',
    );
    assert.equal(await healthOf(unchecked.id), null, 'a rule without checks has no health');
    assert.equal((await healthOf(foreign.id)).status, 'unknown', "another node's rule is untouched");

    // A malformed report ends the link, as any malformed message does.
    send(raw.socket, { type: 'health', rules: [{ id: own.id, targets: [{ target: 'x', status: 'sideways' }] }] });
    await once(raw.socket, 'close');
  });

  test(
    'what GET and lists answer of a rule is what its writes ' + 'answer, through every change of its state',
    async (t) => {
      // A list's page is rendered by SQLite (RULE_JSON), the answer to a write by the store's mapping (toRule).
      const m = await startMaster(t);
      const n = await node(m, 'edge');
      const { store } = m.app;
      const made = await rule(m, {
        node_id: n.id,
        listen_port: 9000,
        targets: ['192.0.2.1:80', '192.0.2.2:80'],
        tags: ['a'],
        allow_sources: ['192.0.2.0/24'],
        deny_sources: ['192.0.2.9'],
        max_connections: 5,
        bandwidth_limit: 4096,
        expires_at: '2099-01-01T00:00:00Z',
        proxy_protocol: 'v1',
        quota: { bytes: 1000, period: 'day', direction: 'in' },
        health_check: { interval_seconds: 5 },
      });
      const id = made.body.id as number;
      const at = '2026-11-26T10:00:00Z';
      const fields = { ...ruleFieldsOf(store.rules.find(id)!), owner_id: store.rules.find(id)!.owner_id };
      const down = { target: '192.0.2.2:80', status: 'down' as const, error: 'ECONNREFUSED', checked_at: at };
      const changes: [string, () => unknown][] = [
        ['a sync result', () => store.rules.setSync(id, n.id, 'applied', null, at, 'relay')],
        ['traffic with refusals', () => store.traffic.record(id, n.id, 1_800_000_000, 600, 50, 3)],
        ['a health report', () => store.rules.setHealth(id, n.id, [down])],
        ['the quota used up', () => store.traffic.record(id, n.id, 1_800_000_000, 600, 0)],
        ['the quota spent', () => assert.equal(store.rules.spendQuotas([id]).length, 1)],
        ['a new period', () => store.rules.resetQuotas('2099-12-31T00:00:00Z')],
        ['expiry', () => store.rules.expire('2099-12-31T00:00:00Z')],
        ['an update', () => store.rules.update(id, { ...fields, name: 'renamed', expires_at: null }, at)],
        ['pending again', () => store.rules.markPending(id)],
        ['every control off', () => store.rules.update(id, { ...fields, ...NO_CONTROLS }, at)],
      ];
      const states: string[] = [];
      for (const [what, change] of changes) {
        store.write(change);
        const rule = store.rules.find(id)!;
        states.push(rule.state);
        assert.deepEqual(JSON.parse(store.rules.json(id)!.json), rule, `after ${what}`);
      }
      assert.deepEqual(new Set(states), new Set(['active', 'quota_exceeded', 'expired']), 'the states were all met');
    },
  );
});
