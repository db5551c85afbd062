// A hostile client or agent against the master: malformed requests on the upgrade path and
// on ordinary requests, lying or malformed link messages, values the database cannot hold.
// Each must end at worst its own connection or link, and leave the data readable.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect } from 'node:net';
import { test } from 'node:test';
import { LINK_PATH, LINK_PROTOCOL, send } from '../internal/agentlink/wire.ts';
import { MAX_ENTRIES } from '../internal/domain/link.ts';
import { exitCannotListen } from '../internal/tunnel/wire.ts';
import { call, mintToken, node, rule, snapshot, startMaster, type Running } from './helpers.ts';
import { link, type RawLink } from './rawlink.ts';
import { until } from './net.ts';

/** Sends raw bytes to the master and returns everything it answers until it closes. */
async function rawExchange(m: Running, bytes: string): Promise<string> {
  const { port } = new URL(m.url);
  const socket = connect({ host: '127.0.0.1', port: Number(port) });
  let answer = '';
  socket.setEncoding('utf8').on('data', (chunk: string) => (answer += chunk));
  socket.on('error', () => undefined);
  await once(socket, 'connect');
  socket.write(bytes);
  await once(socket, 'close');
  return answer;
}

async function nodeOf(m: Running, id: number) {
  const answer = await call(m.url, 'GET', `/api/nodes/${id}`, { token: m.admin });
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  return answer.body;
}

/** Resolves when the master has ended the link (once() would reject on the reset that may come first). */
function closed(raw: RawLink): Promise<void> {
  return new Promise((resolve) => (raw.socket.destroyed ? resolve() : raw.socket.on('close', () => resolve())));
}

const upgrade = (target: string, extra = '') =>
  `GET ${target} HTTP/1.1\r\nHost: master\r\nConnection: Upgrade\r\nUpgrade: ${LINK_PROTOCOL}\r\n${extra}\r\n`;

test(
  'malformed request targets on the upgrade path and on ordinary requests are 400, and the ' + 'master keeps serving',
  async (t) => {
    const m = await startMaster(t);
    // This one request line used to throw in the upgrade handler and end the process.
    for (const target of ['//[', '//[::1', 'http://[/agent/v1/link', '//%zz[']) {
      assert.match(await rawExchange(m, upgrade(target)), /^HTTP\/1\.1 400 /, `upgrade ${target}`);
      const plain = await rawExchange(m, `GET ${target} HTTP/1.1\r\nHost: master\r\nConnection: close\r\n\r\n`);
      assert.match(plain, /^HTTP\/1\.1 400 /, `GET ${target}`);
      assert.match(plain, /"code":"bad_request"/);
    }
    assert.match(await rawExchange(m, upgrade('/elsewhere')), /^HTTP\/1\.1 404 /);
    assert.match(await rawExchange(m, 'NOT A REQUEST\r\n\r\n'), /^HTTP\/1\.1 400 /);
    assert.match(
      await rawExchange(m, upgrade(LINK_PATH, `Authorization: Bearer ${'x'.repeat(20_000)}\r\n`)),
      /^HTTP\/1\.1 431 /,
    );
    assert.equal((await call(m.url, 'GET', '/api/nodes', { token: m.admin })).status, 200);
  },
);

test('failed link attempts are limited per address and, past the first, write nothing', async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const forged = `mat_${n.id}_${'B'.repeat(43)}`;
  const first = (await link(m, forged)) as { status: number };
  assert.equal(first.status, 401);
  assert.match((await nodeOf(m, n.id)).status_detail, /^auth_failed/);
  const before = snapshot(m);
  const statuses: number[] = [];
  for (let i = 0; i < 12; i++) statuses.push(((await link(m, forged)) as { status: number }).status);
  assert.deepEqual(statuses, [...Array(9).fill(401), 429, 429, 429], 'ten failures a minute, then refused unseen');
  assert.equal(snapshot(m), before, 'repeated refusals wrote nothing');
  // Even the right token waits: the address is refused before any token is looked at.
  assert.equal(((await link(m, n.agent_token)) as { status: number }).status, 429);
  m.advance(61_000);
  const good = (await link(m, n.agent_token)) as RawLink;
  await good.next('config');
  good.socket.destroy();
});

test(
  'a traffic report that lies ends the link, counts nothing and is recorded on the node; the ' +
    'node is refused for a minute',
  async (t) => {
    const m = await startMaster(t);
    const n = await node(m, 'edge');
    const r = (await rule(m, { node_id: n.id, listen_port: 80 })).body;
    const at = Math.floor(Date.now() / 1000);
    const entry = (bytes_in: unknown, bytes_out: unknown = 0, id: unknown = r.id) => ({ id, bytes_in, bytes_out });
    const cases: [string, unknown[], RegExp][] = [
      ['a rule named twice', [entry(1), entry(2)], /names rule \d+ twice/],
      ['negative bytes', [entry(-1)], /bytes_in must be between/],
      ['fractional bytes', [entry(1.5)], /bytes_in must be an integer/],
      ['bytes past 2^53', [entry(2 ** 60)], /bytes_in must be between/],
      ['bytes as a string', [entry('100')], /bytes_in must be an integer/],
      ['an id of 0', [entry(1, 1, 0)], /id must be between/],
      [
        'more entries than a message may carry',
        Array.from({ length: MAX_ENTRIES + 1 }, (_, i) => entry(1, 1, i + 1)),
        /rules must have at most/,
      ],
      ['more bytes than a node relays in the time', [entry(10 ** 15)], /more than the node could have relayed/],
    ];
    for (const [name, rules, reason] of cases) {
      m.advance(61_000);
      const raw = (await link(m, n.agent_token)) as RawLink;
      await raw.next('config');
      send(raw.socket, { type: 'traffic', stream: 'lies', seq: 1, at, rules });
      await closed(raw);
      const after = await nodeOf(m, n.id);
      assert.match(after.status_detail ?? '', /^protocol_violation: /, name);
      assert.match(after.status_detail, reason, name);
      assert.equal(after.status, 'offline', name);
      assert.deepEqual(after.traffic, { bytes_in: 0, bytes_out: 0 }, `${name}: nothing counted`);
      const refused = (await link(m, n.agent_token)) as { status: number; body: { code: string } };
      assert.deepEqual(
        [refused.status, refused.body.code],
        [429, 'rate_limited'],
        `${name}: refused during the cool-down`,
      );
    }
    assert.deepEqual((await call(m.url, 'GET', `/api/rules/${r.id}`, { token: m.admin })).body.traffic, {
      bytes_in: 0,
      bytes_out: 0,
      refused: 0,
    });
  },
);

test("an agent that breaks the protocol on either of its node's links loses both; the node is refused", async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  for (const breaker of ['the working link', 'the newer link, before it took over'] as const) {
    m.advance(61_000);
    const working = (await link(m, n.agent_token)) as RawLink;
    await working.next('config');
    const newer = (await link(m, n.agent_token)) as RawLink;
    await newer.next('config');
    if (breaker === 'the working link') {
      const at = Math.floor(Date.now() / 1000);
      send(working.socket, {
        type: 'traffic',
        stream: 's',
        seq: 1,
        at,
        rules: [{ id: 1, bytes_in: -1, bytes_out: 0 }],
      });
    } else newer.socket.write('not json\n');
    await closed(working);
    await closed(newer);
    const after = await nodeOf(m, n.id);
    assert.deepEqual(
      [after.status, /^protocol_violation: /.test(after.status_detail ?? '')],
      ['offline', true],
      breaker,
    );
    assert.equal(((await link(m, n.agent_token)) as { status: number }).status, 429, `${breaker}: refused after`);
  }
});

test("an agent that resets its link is logged as a lost link, not as the master's failure", async (t) => {
  const logged: { level: string; msg: string }[] = [];
  const at = (level: string) => (msg: string) => void logged.push({ level, msg });
  const m = await startMaster(t, { log: { info: at('info'), warn: at('warn'), error: at('error') } });
  const n = await node(m, 'edge');
  const raw = (await link(m, n.agent_token)) as RawLink;
  await raw.next('config');
  raw.socket.resetAndDestroy();
  while (!logged.some(({ msg }) => msg === 'agent disconnected')) await new Promise((r) => setTimeout(r, 10));
  assert.deepEqual(
    logged.filter(({ msg }) => msg.startsWith('agent ')).map(({ level, msg }) => `${level} ${msg}`),
    ['info agent connected', 'info agent link lost', 'info agent disconnected'],
  );
  assert.equal((await nodeOf(m, n.id)).status, 'offline');
});

test('lines that are too long, too deep, not JSON or not messages end the link and nothing else', async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const lines = [
    `{"type":"ping","pad":"${'x'.repeat(600 * 1024)}"}\n`,
    `${'['.repeat(5000)}${']'.repeat(5000)}\n`,
    '{"type":"traffic",\n',
    '[1,2,3]\n',
    '{"type":42}\n',
    '{"type":"applied","version":1,"results":[{"id":1,"state":"applied","error":null},' +
      '{"id":1,"state":"failed","error":null}]}\n',
    '{"type":"applied","version":1,"results":[{"id":1,"state":"applied","error":{"code":"$(reboot)","detail":"x"}}]}\n',
  ];
  for (const line of lines) {
    m.advance(61_000);
    const raw = (await link(m, n.agent_token)) as RawLink;
    await raw.next('config');
    raw.socket.write(line);
    await closed(raw);
    assert.equal((await nodeOf(m, n.id)).status, 'offline', line.slice(0, 40));
  }
  // Without a newline, an endless line is cut off at the limit too.
  m.advance(61_000);
  const raw = (await link(m, n.agent_token)) as RawLink;
  await raw.next('config');
  raw.socket.on('error', () => undefined);
  const chunk = 'y'.repeat(64 * 1024);
  for (let i = 0; i < 16 && !raw.socket.destroyed; i++) raw.socket.write(chunk);
  await closed(raw);
  assert.equal((await call(m.url, 'GET', '/api/nodes', { token: m.admin })).status, 200);
});

test('totals saturate at 2^53-1 and always read back as safe integers', async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const r = (await rule(m, { node_id: n.id, listen_port: 80 })).body;
  const admin = await mintToken(m, ['*']);
  // Five quiet days let the node claim up to ~10^16 bytes, past what a JavaScript number holds exactly.
  m.advance(5 * 86_400_000);
  const raw = (await link(m, n.agent_token)) as RawLink;
  await raw.next('config');
  const at = Math.floor((Date.now() + 5 * 86_400_000) / 1000);
  const max = Number.MAX_SAFE_INTEGER;
  send(raw.socket, {
    type: 'traffic',
    stream: 's',
    seq: 1,
    at,
    rules: [{ id: r.id, bytes_in: max - 10, bytes_out: 7 }],
  });
  await raw.next('traffic_ack');
  send(raw.socket, { type: 'traffic', stream: 's', seq: 2, at, rules: [{ id: r.id, bytes_in: 1000, bytes_out: 7 }] });
  await raw.next('traffic_ack');
  raw.socket.destroy();
  for (const path of [`/api/rules/${r.id}`, `/api/nodes/${n.id}`, '/api/dashboard']) {
    assert.deepEqual(
      (await call(m.url, 'GET', path, { token: admin })).body.traffic,
      { bytes_in: max, bytes_out: 14, ...(path.startsWith('/api/rules') ? { refused: 0 } : {}) },
      path,
    );
  }
});

test(
  'a database already holding counts past 2^53 stays readable, exportable and deletable, and ' +
    'its agent can reconnect',
  async (t) => {
    const m = await startMaster(t);
    const n = await node(m, 'edge');
    const r = (await rule(m, { node_id: n.id, listen_port: 80 })).body;
    const huge = 2n ** 62n;
    // As an older master could have left it: values SQLite holds but a JavaScript number cannot.
    const db = m.app.store.db;
    db.write(() => {
      db.prepare('UPDATE nodes SET bytes_in = ?, bytes_out = ? WHERE id = ?').run(huge, huge, n.id);
      db.prepare('UPDATE rules SET bytes_in = ?, bytes_out = ? WHERE id = ?').run(huge, huge, r.id);
      db.prepare('INSERT INTO traffic_total (id, start, bytes_in, bytes_out) VALUES (0, ?, ?, ?), (0, ?, ?, ?)').run(
        0,
        huge,
        huge,
        60,
        huge,
        huge,
      );
    });
    const safe = { bytes_in: Number.MAX_SAFE_INTEGER, bytes_out: Number.MAX_SAFE_INTEGER };
    assert.deepEqual((await nodeOf(m, n.id)).traffic, safe);
    assert.deepEqual((await call(m.url, 'GET', '/api/nodes', { token: m.admin })).body.items[0].traffic, safe);
    const ruleTraffic = { ...safe, refused: 0 };
    assert.deepEqual((await call(m.url, 'GET', `/api/rules/${r.id}`, { token: m.admin })).body.traffic, ruleTraffic);
    assert.deepEqual((await call(m.url, 'GET', '/api/rules', { token: m.admin })).body.items[0].traffic, ruleTraffic);
    assert.deepEqual((await call(m.url, 'GET', '/api/dashboard', { token: m.admin })).body.traffic, safe);
    const series = await call(
      m.url,
      'GET',
      '/api/dashboard/traffic?from=1970-01-01T00:00:00Z&to=1970-01-01T01:00:00Z&step=3600',
      { token: m.admin },
    );
    assert.equal(series.status, 200, JSON.stringify(series.body));
    assert.deepEqual(
      series.body.points.map((p: { bytes_in: number }) => p.bytes_in),
      [Number.MAX_SAFE_INTEGER],
      'a sum of two huge buckets is cut, not overflowed',
    );
    assert.equal((await call(m.url, 'GET', '/api/export', { token: m.admin })).status, 200);
    const raw = (await link(m, n.agent_token)) as RawLink;
    assert.equal(((await raw.next('config')).rules as unknown[]).length, 1);
    send(raw.socket, {
      type: 'traffic',
      stream: 's',
      seq: 1,
      at: Math.floor(Date.now() / 1000),
      rules: [{ id: r.id, bytes_in: 5, bytes_out: 5 }],
    });
    await raw.next('traffic_ack');
    raw.socket.destroy();
    assert.deepEqual((await nodeOf(m, n.id)).traffic, safe);
    assert.equal((await call(m.url, 'DELETE', `/api/nodes/${n.id}?cascade=true`, { token: m.admin })).status, 204);
  },
);

test('a node alternating between two report streams is still counted exactly once per report', async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const r = (await rule(m, { node_id: n.id, listen_port: 80 })).body;
  const raw = (await link(m, n.agent_token)) as RawLink;
  await raw.next('config');
  const at = Math.floor(Date.now() / 1000);
  const report = (stream: string, seq: number) => ({
    type: 'traffic',
    stream,
    seq,
    at,
    rules: [{ id: r.id, bytes_in: 1, bytes_out: 10 }],
  });
  for (const [stream, seq] of [
    ['a', 1],
    ['b', 1],
    ['a', 1],
    ['b', 1],
    ['a', 2],
    ['b', 1],
    ['a', 2],
    ['b', 2],
  ] as const) {
    send(raw.socket, report(stream, seq));
    assert.deepEqual(await raw.next('traffic_ack'), { type: 'traffic_ack', stream, seq });
  }
  raw.socket.destroy();
  assert.deepEqual(
    (await call(m.url, 'GET', `/api/rules/${r.id}`, { token: m.admin })).body.traffic,
    { bytes_in: 4, bytes_out: 40, refused: 0 },
    'a1 b1 a2 b2, once each',
  );
});

test('an agent speaks only for its own tunnel ends: status and results for others change nothing', async (t) => {
  const m = await startMaster(t);
  const [a, b, c] = [await node(m, 'a'), await node(m, 'b'), await node(m, 'c')];
  const tunnel = (
    await call(m.url, 'POST', '/api/tunnels', {
      token: m.admin,
      body: { name: 'ab', entry_node_id: a.id, exit_node_id: b.id },
    })
  ).body;
  const r = (await rule(m, { node_id: a.id, tunnel_id: tunnel.id, listen_port: 8080 })).body;
  const state = async () => {
    const current = (await call(m.url, 'GET', `/api/tunnels/${tunnel.id}`, { token: m.admin })).body;
    const sync = (await call(m.url, 'GET', `/api/rules/${r.id}`, { token: m.admin })).body.sync;
    return { status: current.status, entry: current.ends.entry.status, exit: current.ends.exit.status, sync };
  };
  /** Sends `status` and an `applied` for the rule as the node with `token`, then closes its link. */
  const speak = async (token: string, view: Record<string, unknown>, result: Record<string, unknown>) => {
    const raw = (await link(m, token)) as RawLink;
    const config = await raw.next('config');
    send(raw.socket, { type: 'tunnel_status', tunnels: [{ id: tunnel.id, error: null, ...view }] });
    send(raw.socket, { type: 'applied', version: config.version, results: [{ id: r.id, error: null, ...result }] });
    send(raw.socket, { type: 'ping' });
    await raw.next('pong');
    return raw;
  };

  const stranger = await speak(c.agent_token, { state: 'up', rtt_us: 5 }, { state: 'applied' });
  assert.deepEqual(await state(), {
    status: 'pending',
    entry: 'pending',
    exit: 'pending',
    sync: { state: 'pending', error: null, applied_at: null, applied_path: null, relayed_because: null },
  });
  stranger.socket.destroy();

  const exit = await speak(b.agent_token, { state: 'up', rtt_us: 5 }, { state: 'applied' });
  const half = await state();
  assert.deepEqual([half.status, half.entry, half.exit, half.sync.state], ['pending', 'pending', 'up', 'pending']);
  assert.equal((await call(m.url, 'GET', `/api/tunnels/${tunnel.id}`, { token: m.admin })).body.rtt_ms, null);
  const entry = await speak(a.agent_token, { state: 'up', rtt_us: 1500 }, { state: 'applied' });
  const whole = await state();
  assert.deepEqual([whole.status, whole.entry, whole.exit, whole.sync.state], ['up', 'up', 'up', 'applied']);
  assert.equal((await call(m.url, 'GET', `/api/tunnels/${tunnel.id}`, { token: m.admin })).body.rtt_ms, 1.5);

  // A new port for the tunnel: both ends start over, and its rule waits for both again.
  const moved = await call(m.url, 'PUT', `/api/tunnels/${tunnel.id}`, {
    token: m.admin,
    body: { name: 'ab', entry_node_id: a.id, exit_node_id: b.id, listen_port: tunnel.listen_port + 1 },
  });
  assert.equal(moved.status, 200, JSON.stringify(moved.body));
  const again = await state();
  assert.deepEqual(
    [again.status, again.entry, again.exit, again.sync.state],
    ['pending', 'pending', 'pending', 'pending'],
  );
  entry.socket.destroy();
  exit.socket.destroy();
});

test("a tunnel's keys go with its nodes; a new address for the exit reaches the entry", async (t) => {
  const m = await startMaster(t);
  const [a, b, c] = [await node(m, 'a'), await node(m, 'b'), await node(m, 'c')];
  const body = { name: 'ab', entry_node_id: a.id, exit_node_id: b.id };
  const tunnel = (await call(m.url, 'POST', '/api/tunnels', { token: m.admin, body })).body;
  const keysOf = () => m.app.store.tunnels.endsOf(a.id)[0]!;
  const versionOf = (id: number) => m.app.store.nodes.find(id)!.config_version;
  const first = keysOf();

  const renamed = await call(m.url, 'PUT', `/api/tunnels/${tunnel.id}`, {
    token: m.admin,
    body: { ...body, name: 'ab2' },
  });
  assert.equal(renamed.status, 200);
  assert.equal(keysOf().exit_cert, first.exit_cert, 'a rename keeps the keys');

  const entryBefore = versionOf(a.id);
  const moved = await call(m.url, 'PUT', `/api/nodes/${b.id}`, {
    token: m.admin,
    body: { name: 'b', host: '198.51.100.7' },
  });
  assert.equal(moved.status, 200, JSON.stringify(moved.body));
  assert.ok(versionOf(a.id) > entryBefore, "the entry is sent the exit node's new address");
  assert.equal(keysOf().exit_host, '198.51.100.7');

  const toC = { ...body, name: 'ab2', exit_node_id: c.id };
  assert.equal((await call(m.url, 'PUT', `/api/tunnels/${tunnel.id}`, { token: m.admin, body: toC })).status, 200);
  const second = keysOf();
  assert.notEqual(second.exit_cert, first.exit_cert, 'a tunnel moved to another exit gets new key pairs');
  assert.notEqual(second.entry_cert, first.entry_cert);
  assert.deepEqual(m.app.store.tunnels.endsOf(b.id), [], 'the old exit holds no end of it any more');
});

const FLAPPING =
  'an agent flapping every state it reports writes a row per interval, not per message; past its budget it is told';
test(FLAPPING, async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'flapper', { host: '192.0.2.10' });
  const other = await node(m, 'exit', { host: '192.0.2.11' });
  const checked = (
    await rule(m, {
      node_id: n.id,
      listen_port: 9000,
      targets: ['192.0.2.1:80'],
      health_check: { interval_seconds: 1 },
    })
  ).body;
  const tunnel = await call(m.url, 'POST', '/api/tunnels', {
    token: m.admin,
    body: { name: 't', entry_node_id: n.id, exit_node_id: other.id, listen_port: 40_100 },
  });
  assert.equal(tunnel.status, 201, JSON.stringify(tunnel.body));
  const raw = (await link(m, n.agent_token)) as RawLink;
  const { version } = (await raw.next('config')) as unknown as { version: number };
  const events = () => (m.app.store.db.prepare('SELECT count(*) AS n FROM events').get() as { n: number }).n;
  const before = events();
  const cpuBefore = process.cpuUsage();
  const started = performance.now();
  let sent = 0;
  let last = '';
  // Three seconds of flapping, as fast as the master takes it (the test waits whenever a megabyte is unread): each
  // message flips every state the agent reports.
  while (performance.now() - started < 3000 && !raw.socket.destroyed) {
    const flip = sent % 2 === 0;
    const status = flip ? 'down' : 'up';
    last = status;
    send(raw.socket, {
      type: 'health',
      rules: [{ id: checked.id, targets: [{ target: '192.0.2.1:80', status, error: null, checked_at: null }] }],
    });
    send(raw.socket, {
      type: 'tunnel_status',
      tunnels: [{ id: tunnel.body.id, state: flip ? 'down' : 'up', error: flip ? 'flap' : null, rtt_us: null }],
    });
    send(raw.socket, { type: 'paths', kernel: { available: flip, reason: flip ? null : 'flap' } });
    const error = flip ? { code: 'port_in_use', detail: 'flap' } : null;
    send(raw.socket, {
      type: 'applied',
      version,
      results: [{ id: checked.id, state: flip ? 'failed' : 'applied', error }],
    });
    sent += 4;
    if (raw.socket.writableLength > 1024 * 1024) await once(raw.socket, 'drain');
    else if (sent % 400 === 0) await new Promise((resolve) => setImmediate(resolve));
  }
  assert.ok(!raw.socket.destroyed, 'the master kept the link: flapping is no protocol violation');
  // Messages are taken in order: once the master answers a ping, it has taken every one before; then a window passes.
  send(raw.socket, { type: 'ping' });
  await raw.next('pong');
  await new Promise((resolve) => setTimeout(resolve, 2500));
  const written = events() - before;
  const seconds = (performance.now() - started) / 1000;
  // Each of the three states may write 4 changes at once, then one every 2 s, and a config's result four times (its
  // first and three changes): about 3 x 8 + 4 rows here.
  assert.ok(sent > 3000, `the flood was a flood (${sent} messages)`);
  assert.ok(written <= 3 * (4 + Math.ceil(seconds / 2) + 1) + 4, `${written} events for ${sent} flapping messages`);
  const cpu = process.cpuUsage(cpuBefore);
  assert.ok((cpu.user + cpu.system) / 1e6 / seconds < 1.5, 'the master spent at most about a core on it');
  // Past its budget of writes the link was told so, and what it sent then was dropped.
  const told = (await raw.next('over_budget')) as unknown as { detail: string };
  assert.match(told.detail, /dropped since the last notice and not acted on/);
  // A minute on, the link writes again, and its word is taken.
  m.advance(60_000);
  send(raw.socket, {
    type: 'health',
    rules: [{ id: checked.id, targets: [{ target: '192.0.2.1:80', status: last, error: null, checked_at: null }] }],
  });
  await until('the last word taken', async () => {
    const health = (await call(m.url, 'GET', `/api/rules/${checked.id}`, { token: m.admin })).body.health;
    return health.targets[0].status === last;
  });
  assert.equal((await call(m.url, 'GET', '/api/health', { token: m.admin })).status, 200);
});

test("a link's traffic allowance follows the time since its node's last counted report, not a setting", async (t) => {
  const m = await startMaster(t);
  // settings:write may set an hour between reports; that must not let a new link claim an hour at line rate.
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { agent_report_interval_seconds: 3600 } });
  const n = await node(m, 'edge');
  const r = (await rule(m, { node_id: n.id, listen_port: 80 })).body;
  const report = (raw: RawLink, seq: number, bytes: number) =>
    send(raw.socket, {
      type: 'traffic',
      stream: 's',
      seq,
      at: Math.floor(Date.now() / 1000),
      rules: [{ id: r.id, bytes_in: bytes, bytes_out: 0 }],
    });
  const ten = 25e9 * 600; // ten minutes at the line rate the allowance assumes
  let raw = (await link(m, n.agent_token)) as RawLink;
  await raw.next('config');
  report(raw, 1, ten);
  await closed(raw);
  assert.match((await nodeOf(m, n.id)).status_detail, /more than the node could have relayed/);

  // Ten minutes after a counted report, ten minutes of bytes fit (and twenty do not).
  m.advance(61_000);
  raw = (await link(m, n.agent_token)) as RawLink;
  await raw.next('config');
  report(raw, 1, 1000);
  await raw.next('traffic_ack');
  raw.socket.destroy();
  m.advance(600_000);
  raw = (await link(m, n.agent_token)) as RawLink;
  await raw.next('config');
  report(raw, 2, ten);
  assert.deepEqual(await raw.next('traffic_ack'), { type: 'traffic_ack', stream: 's', seq: 2 });
  report(raw, 3, ten);
  await closed(raw);
});

const ONCE_PER_CONFIG =
  "a rule's result is taken once per config sent, and again where it changed (an SRV name's records gone, say), " +
  'four times in all: repeats and flips past that change nothing, a config sent again is heard';
test(ONCE_PER_CONFIG, async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const r = (await rule(m, { node_id: n.id, listen_port: 9000 })).body;
  const raw = (await link(m, n.agent_token)) as RawLink;
  const { version } = (await raw.next('config')) as unknown as { version: number };
  const ack = (state: 'applied' | 'failed') => {
    const error = state === 'failed' ? { code: 'port_in_use', detail: 'port 9000/tcp is in use' } : null;
    send(raw.socket, { type: 'applied', version, results: [{ id: r.id, state, error }] });
    send(raw.socket, { type: 'ping' });
    return raw.next('pong');
  };
  const syncOf = async () => (await call(m.url, 'GET', `/api/rules/${r.id}`, { token: m.admin })).body.sync.state;
  const events = () =>
    (
      m.app.store.db
        .prepare("SELECT count(*) AS n FROM events WHERE type = 'rule.sync' AND resource_id = ?")
        .get(r.id) as { n: number }
    ).n;
  await ack('failed');
  const first = events();
  await ack('failed');
  assert.equal(events(), first, 'the same result again writes nothing');
  // Taken: failed, applied, failed, applied (the fourth); what comes after, not.
  for (const state of ['applied', 'failed', 'applied', 'failed', 'applied', 'failed'] as const) await ack(state);
  assert.equal(await syncOf(), 'applied');
  assert.equal(events() - first, 3, 'three changes after the first result');
  // A setting agents get sends the same version again: its result is heard.
  const changed = await call(m.url, 'PATCH', '/api/settings', {
    token: m.admin,
    body: { tcp_idle_timeout_seconds: 600 },
  });
  assert.equal(changed.status, 200);
  assert.equal(((await raw.next('config')) as unknown as { version: number }).version, version);
  await ack('failed');
  assert.equal(await syncOf(), 'failed');
});

/** A tunnel between two new nodes, its picked port as the API reads it, and how many moves of it were audited. */
async function tunnelBetweenTwoNodes(m: Running) {
  const entry = await node(m, 'entry');
  const exit = await node(m, 'exit');
  const made = await call(m.url, 'POST', '/api/tunnels', {
    token: m.admin,
    body: { name: 't', entry_node_id: entry.id, exit_node_id: exit.id },
  });
  const id = made.body.id as number;
  const portOf = async () =>
    (await call(m.url, 'GET', `/api/tunnels/${id}`, { token: m.admin })).body.listen_port as number;
  const moves = async () =>
    (await call(m.url, 'GET', `/api/audit-logs?action=tunnel.port_moved&resource_id=${id}`, { token: m.admin })).body
      .items.length as number;
  return { entry, exit, id, portOf, moves };
}

test("an exit that keeps saying its tunnel's picked port is taken moves it at most once every 10 s", async (t) => {
  const m = await startMaster(t);
  const { exit, id, portOf, moves } = await tunnelBetweenTwoNodes(m);
  const raw = (await link(m, exit.agent_token)) as RawLink;
  await raw.next('config');
  const taken = async () => {
    const listenPort = await portOf();
    const error = exitCannotListen(listenPort, 'EADDRINUSE');
    send(raw.socket, { type: 'tunnel_status', tunnels: [{ id, state: 'down', error, rtt_us: null }] });
    send(raw.socket, { type: 'ping' });
    await raw.next('pong');
    await m.app.store.committed();
    return listenPort;
  };
  const first = await taken();
  assert.equal(await portOf(), first + 1, 'moved to the next free port');
  for (let i = 0; i < 3; i++) await taken();
  assert.equal(await portOf(), first + 1, 'not again within 10 s');
  m.advance(10_000);
  await taken();
  assert.equal(await portOf(), first + 2, 'and again after');
  assert.equal(await moves(), 2);
});

const MOVED_BY_ACK =
  "a tunnel's picked port moves when its exit's acknowledgement says it is taken, at most once every 10 s; its entry " +
  'saying so moves nothing';
test(MOVED_BY_ACK, async (t) => {
  const m = await startMaster(t);
  const { entry, exit, id, portOf, moves } = await tunnelBetweenTwoNodes(m);
  const r = (await rule(m, { node_id: entry.id, tunnel_id: id, listen_port: 9000 })).body;
  const taken = async (raw: RawLink) => {
    const { version } = (await raw.next('config')) as unknown as { version: number };
    const error = { code: 'port_in_use', detail: 'the port is in use' };
    send(raw.socket, { type: 'applied', version, results: [{ id: r.id, state: 'failed', error }] });
    send(raw.socket, { type: 'ping' });
    await raw.next('pong');
    await m.app.store.committed();
  };
  const first = await portOf();
  await taken((await link(m, entry.agent_token)) as RawLink);
  assert.equal(await portOf(), first, "the entry's port is not the tunnel's");
  const raw = (await link(m, exit.agent_token)) as RawLink;
  await taken(raw);
  assert.equal(await portOf(), first + 1, 'moved to the next free port');
  // The move sends the exit a new config; its failure again within 10 s moves nothing.
  await taken(raw);
  assert.equal(await portOf(), first + 1, 'not again within 10 s');
  assert.equal(await moves(), 1);
});
