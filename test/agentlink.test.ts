// The master's end of the agent link, driven by a raw client speaking the wire protocol.

import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { once } from 'node:events';
import { test } from 'node:test';
import { send } from '../internal/agentlink/wire.ts';
import { AGENT_FEATURES, MASTER_READS, TUNNEL_WS } from '../internal/domain/link.ts';
import { keyPinOf } from '../internal/tls/pin.ts';
import { statePromotion } from '../internal/tls/promotion.ts';
import { assertProblem, call, newTenant, node, rule, startMaster, type Running } from './helpers.ts';
import { link, type RawLink } from './rawlink.ts';
import { until } from './net.ts';

async function ruleTraffic(m: Running, id: number) {
  return (await call(m.url, 'GET', `/api/rules/${id}`, { token: m.admin })).body.traffic;
}

test('a traffic report resent after a reconnect is counted once; a new stream starts its own count', async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const r = (await rule(m, { node_id: n.id, listen_port: 80 })).body;
  const first = (await link(m, n.agent_token)) as RawLink;
  await first.next('config');
  const at = Math.floor(Date.now() / 1000);
  const report = {
    type: 'traffic',
    stream: 'stream-a',
    seq: 1,
    at,
    rules: [{ id: r.id, bytes_in: 100, bytes_out: 1000 }],
  };
  send(first.socket, report);
  assert.deepEqual(await first.next('traffic_ack'), { type: 'traffic_ack', stream: 'stream-a', seq: 1 });
  first.socket.destroy();

  const second = (await link(m, n.agent_token)) as RawLink;
  send(second.socket, report);
  assert.deepEqual(
    await second.next('traffic_ack'),
    { type: 'traffic_ack', stream: 'stream-a', seq: 1 },
    'a duplicate is acknowledged',
  );
  assert.deepEqual(
    await ruleTraffic(m, r.id),
    { bytes_in: 100, bytes_out: 1000, refused: 0 },
    '... and not counted again',
  );

  send(second.socket, { ...report, seq: 2, rules: [{ id: r.id, bytes_in: 5, bytes_out: 5 }] });
  await second.next('traffic_ack');
  send(second.socket, { ...report, stream: 'stream-b', seq: 1, rules: [{ id: r.id, bytes_in: 1, bytes_out: 1 }] });
  await second.next('traffic_ack');
  assert.deepEqual(await ruleTraffic(m, r.id), { bytes_in: 106, bytes_out: 1006, refused: 0 });
  second.socket.destroy();
});

test(
  "an agent cannot count traffic on another node's rules, and acknowledgements of old " + 'configs change nothing',
  async (t) => {
    const m = await startMaster(t);
    const mine = await node(m, 'mine');
    const theirs = await node(m, 'theirs');
    const ours = (await rule(m, { node_id: mine.id, listen_port: 80 })).body;
    const foreign = (await rule(m, { node_id: theirs.id, listen_port: 80 })).body;
    const raw = (await link(m, mine.agent_token)) as RawLink;
    const config = await raw.next('config');
    assert.deepEqual(
      (config.rules as { id: number }[]).map((x) => x.id),
      [ours.id],
    );

    send(raw.socket, {
      type: 'traffic',
      stream: 's',
      seq: 1,
      at: Math.floor(Date.now() / 1000),
      rules: [{ id: foreign.id, bytes_in: 999, bytes_out: 999 }],
    });
    await raw.next('traffic_ack');
    assert.deepEqual(await ruleTraffic(m, foreign.id), { bytes_in: 0, bytes_out: 0, refused: 0 });

    await call(m.url, 'PUT', `/api/rules/${ours.id}`, { token: m.admin, body: { ...ours, listen_port: 81 } });
    const newer = await raw.next('config');
    send(raw.socket, {
      type: 'applied',
      version: config.version,
      results: [
        { id: ours.id, state: 'applied', error: null },
        { id: foreign.id, state: 'applied', error: null },
      ],
    });
    send(raw.socket, {
      type: 'applied',
      version: newer.version,
      results: [
        { id: ours.id, state: 'failed', error: { code: 'port_in_use', detail: 'taken' } },
        { id: foreign.id, state: 'applied', error: null },
      ],
    });
    // Messages are taken in order: once the master answers a ping, it has taken both results; then they are durable.
    send(raw.socket, { type: 'ping' });
    await raw.next('pong');
    await m.app.store.committed();
    const after = (await call(m.url, 'GET', `/api/rules/${ours.id}`, { token: m.admin })).body;
    assert.deepEqual(after.sync, {
      state: 'failed',
      error: { code: 'port_in_use', detail: 'taken' },
      applied_at: null,
      applied_path: null,
      relayed_because: null,
    });
    assert.equal(
      (await call(m.url, 'GET', `/api/rules/${foreign.id}`, { token: m.admin })).body.sync.state,
      'pending',
      "another node's rule is untouched",
    );
    raw.socket.destroy();
  },
);

test("deleting a node ends its agent's link, alone or in a batch, and the agent is refused after", async (t) => {
  const m = await startMaster(t);
  for (const how of ['DELETE', 'batch-delete'] as const) {
    const n = await node(m, `gone-${how}`);
    const raw = (await link(m, n.agent_token)) as RawLink;
    await raw.next('config');
    const closed = new Promise((resolve) => raw.socket.once('close', resolve));
    const deleted =
      how === 'DELETE'
        ? await call(m.url, 'DELETE', `/api/nodes/${n.id}`, { token: m.admin })
        : await call(m.url, 'POST', '/api/nodes/batch-delete', { token: m.admin, body: { ids: [n.id] } });
    assert.ok(deleted.status < 300, `${how}: ${deleted.status}`);
    await closed;
    const again = (await link(m, n.agent_token)) as { status: number; body: { code: string } };
    assert.deepEqual([again.status, again.body.code], [401, 'auth_failed'], how);
  }
});

test('the link refuses wrong tokens and protocols with a reason, and closes on malformed messages', async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const wrong = (await link(m, `mat_${n.id}_${'B'.repeat(43)}`)) as { status: number; body: any };
  assert.deepEqual([wrong.status, wrong.body.code], [401, 'auth_failed']);
  const garbage = (await link(m, 'not-a-token')) as { status: number; body: any };
  assert.equal(garbage.status, 401);
  const old = (await link(m, n.agent_token, 'portplane-agent/0')) as { status: number; body: any };
  assert.deepEqual([old.status, old.body.code], [426, 'version_mismatch']);
  assert.match(
    (await call(m.url, 'GET', `/api/nodes/${n.id}`, { token: m.admin })).body.status_detail,
    /^version_mismatch/,
  );

  const raw = (await link(m, n.agent_token)) as RawLink;
  await raw.next('config');
  raw.socket.write('{"type":"traffic","seq":"not a number"}\n');
  await once(raw.socket, 'close');
  assert.ok(raw.socket.destroyed);
});

test('agents receive the data-plane settings with their config, and again when those settings change', async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const raw = (await link(m, n.agent_token)) as RawLink;
  const first = await raw.next('config');
  assert.deepEqual(
    [first.tcp_idle_timeout_seconds, first.max_connections_per_source, first.report_interval_seconds],
    [3600, 256, 10],
  );
  assert.equal(
    (
      await call(m.url, 'PATCH', '/api/settings', {
        token: m.admin,
        body: { tcp_idle_timeout_seconds: 120, max_connections_per_source: 8 },
      })
    ).status,
    200,
  );
  const pushed = await raw.next('config');
  assert.deepEqual([pushed.tcp_idle_timeout_seconds, pushed.max_connections_per_source], [120, 8]);
  raw.socket.destroy();
});

test("a node's second link takes over once its agent speaks on it; one whose agent is gone ends nothing", async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const status = async () => (await call(m.url, 'GET', `/api/nodes/${n.id}`, { token: m.admin })).body.status;
  const idleTimeout = (seconds: number) =>
    call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { tcp_idle_timeout_seconds: seconds } });
  const first = (await link(m, n.agent_token)) as RawLink;
  await first.next('config');
  let firstOpen = true;
  const firstClosed = once(first.socket, 'close').then(() => (firstOpen = false));

  // A handshake that reached the master after its agent gave up on it: it gets a config, says nothing, and goes.
  const gone = (await link(m, n.agent_token)) as RawLink;
  await gone.next('config');
  gone.socket.destroy();
  await new Promise((resolve) => setTimeout(resolve, 200));
  assert.equal(firstOpen, true, 'the working link is kept');
  assert.equal(await status(), 'online');
  await idleTimeout(120);
  assert.equal((await first.next('config')).tcp_idle_timeout_seconds, 120, 'and still gets the changes');

  // An agent that linked again and speaks on its new link: that one takes over, the old one ends.
  const again = (await link(m, n.agent_token)) as RawLink;
  const config = await again.next('config');
  send(again.socket, { type: 'applied', version: config.version, results: [] });
  await firstClosed;
  assert.equal(await status(), 'online');
  await idleTimeout(240);
  assert.equal((await again.next('config')).tcp_idle_timeout_seconds, 240);
  again.socket.destroy();
});

test("when a node's link ends, a newer one its agent has not spoken on yet carries on", async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const first = (await link(m, n.agent_token)) as RawLink;
  await first.next('config');
  const newer = (await link(m, n.agent_token)) as RawLink;
  await newer.next('config');
  first.socket.destroy();
  await once(first.socket, 'close');
  await new Promise((resolve) => setTimeout(resolve, 200));
  const got = (await call(m.url, 'GET', `/api/nodes/${n.id}`, { token: m.admin })).body;
  assert.equal(got.status, 'online');
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { tcp_idle_timeout_seconds: 300 } });
  assert.equal((await newer.next('config')).tcp_idle_timeout_seconds, 300);
  newer.socket.destroy();
});

test('during an import, agents wait their turn: their reports and new links are written after it', async (t) => {
  const m = await startMaster(t);
  const a = await node(m, 'edge-a');
  const b = await node(m, 'edge-b');
  const r = (await rule(m, { node_id: a.id, listen_port: 80 })).body;
  const first = (await link(m, a.agent_token)) as RawLink;
  await first.next('config');

  // A long write that runs till the test ends it, yielding as an import does.
  let done = false;
  const holding = m.app.store.db.longWrite(async (step) => {
    while (!done) await (step() ?? undefined);
  });
  const at = Math.floor(Date.now() / 1000);
  send(first.socket, { type: 'traffic', stream: 's', seq: 1, at, rules: [{ id: r.id, bytes_in: 7, bytes_out: 9 }] });
  let acknowledged = false;
  const ack = first.next('traffic_ack').then(() => (acknowledged = true));
  const linking = link(m, b.agent_token);
  await new Promise((resolve) => setTimeout(resolve, 150));
  assert.equal(acknowledged, false, 'the report waits');
  assert.deepEqual(
    await ruleTraffic(m, r.id),
    { bytes_in: 0, bytes_out: 0, refused: 0 },
    'reads are answered meanwhile',
  );
  assert.equal((await call(m.url, 'GET', `/api/nodes/${b.id}`, { token: m.admin })).body.status, 'new');

  done = true;
  await holding;
  await ack;
  assert.deepEqual(await ruleTraffic(m, r.id), { bytes_in: 7, bytes_out: 9, refused: 0 });
  const second = (await linking) as RawLink;
  await second.next('config');
  assert.equal((await call(m.url, 'GET', `/api/nodes/${b.id}`, { token: m.admin })).body.status, 'online');
  first.socket.destroy();
  second.socket.destroy();
});

const DRIFT_BOUND =
  "an agent's drift count reaches the node as said, but the metric grows by at most 4 a write, however large the " +
  "number; a restarted agent's count is counted anew";
test(DRIFT_BOUND, async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const raw = (await link(m, n.agent_token)) as RawLink;
  await raw.next('config');
  const drifts = () => m.app.metrics.kernelDrifts.series({}).value;
  const say = async (count: number) => {
    send(raw.socket, {
      type: 'paths',
      kernel: { available: true, reason: null, drifts: count, last_drift_at: '2026-11-27T06:00:00Z' },
    });
    await until(`the node to say ${count}`, async () => {
      const got = (await call(m.url, 'GET', `/api/nodes/${n.id}`, { token: m.admin })).body;
      return got.kernel_path?.drifts === count;
    });
  };
  await say(Number.MAX_SAFE_INTEGER);
  assert.equal(drifts(), 4, 'a hostile number adds the bound, not itself');
  await say(Number.MAX_SAFE_INTEGER);
  assert.equal(drifts(), 4, 'the same count again adds nothing');
  await say(2);
  assert.equal(drifts(), 6, "a restarted agent's count is new");
  await say(3);
  assert.equal(drifts(), 7);
  const shown = (await call(m.url, 'GET', `/api/nodes/${n.id}`, { token: m.admin })).body;
  assert.equal(shown.kernel_path.last_drift_at, '2026-11-27T06:00:00Z');
});

const UNCHANGED =
  'an acknowledgement that says of a rule what the master holds already writes nothing of it: its version, ' +
  'applied_at and event journal stay as they were';

test(UNCHANGED, async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const kept = (await rule(m, { node_id: n.id, listen_port: 80 })).body;
  const raw = (await link(m, n.agent_token)) as RawLink;
  const acknowledge = async (version: unknown, ids: number[]) => {
    const results = ids.map((id) => ({ id, state: 'applied', error: null, path: 'relay', reason: 'r' }));
    send(raw.socket, { type: 'applied', version, results });
    send(raw.socket, { type: 'ping' });
    await raw.next('pong');
    await m.app.store.committed();
  };
  await acknowledge((await raw.next('config')).version, [kept.id]);
  const before = (await call(m.url, 'GET', `/api/rules/${kept.id}`, { token: m.admin })).body;
  assert.equal(before.sync.state, 'applied');
  const head = m.app.store.events.head();
  // A second later on the master's clock (applied_at has seconds), another rule's change sends the node a config
  // carrying both.
  m.advance(1000);
  const added = (await rule(m, { node_id: n.id, listen_port: 81 })).body;
  await acknowledge((await raw.next('config')).version, [kept.id, added.id]);
  const after = (await call(m.url, 'GET', `/api/rules/${kept.id}`, { token: m.admin })).body;
  assert.deepEqual([after.version, after.sync], [before.version, before.sync]);
  const page = { after: head, limit: 100, resources: '["rule"]', types: null, node_id: null, resource_id: null };
  const told = m.app.store.events.page(page).map((e) => e.resource_id);
  assert.ok(!told.includes(kept.id), `events of the unchanged rule: ${JSON.stringify(told)}`);
  assert.ok(told.includes(added.id), 'the new one is told');
  raw.socket.destroy();
});

const SKEW =
  'an agent older than what a rule asks is not sent that rule: it fails saying what the agent lacks, and an agent ' +
  'that names no features is taken for one that has them all';

test(SKEW, async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const range = (await rule(m, { node_id: n.id, listen_port: 30000, listen_port_end: 30009 })).body;
  const weighted = (
    await rule(m, { node_id: n.id, listen_port: 80, targets: ['10.0.0.1:80', '10.0.0.2:80'], weights: [3, 1] })
  ).body;
  const older = (await link(m, n.agent_token, undefined, '0.0.9', {
    'X-Agent-Features': 'weights,unheard_of',
  })) as RawLink;
  const config = await older.next('config');
  assert.deepEqual(
    (config.rules as { id: number }[]).map((r) => r.id),
    [weighted.id],
  );
  const refused = await until('the range rule marked', async () => {
    const shown = (await call(m.url, 'GET', `/api/rules/${range.id}`, { token: m.admin })).body;
    return shown.sync.state === 'failed' && shown;
  });
  assert.equal(refused.sync.error.code, 'agent_outdated');
  assert.equal(
    refused.sync.error.detail,
    'the agent (0.0.9) cannot apply a port range (listen_port_end): upgrade it (POST /api/rollouts)',
  );
  older.socket.destroy();

  const current = (await link(m, n.agent_token)) as RawLink;
  const full = await current.next('config');
  assert.deepEqual((full.rules as { id: number }[]).map((r) => r.id).sort(), [range.id, weighted.id].sort());
  current.socket.destroy();
});

test(
  'an agent that does not name tunnel_ws is sent no end of a ws tunnel, and the rules through it fail saying so, at ' +
    'the entry and at the exit; a tls tunnel beside it goes as before, and an agent that names it gets both',
  async (t) => {
    const m = await startMaster(t);
    const [entry, exit] = [await node(m, 'entry'), await node(m, 'exit')];
    const tunnels: Record<string, number> = {};
    for (const transport of ['tls', 'ws']) {
      const made = await call(m.url, 'POST', '/api/tunnels', {
        token: m.admin,
        body: { name: transport, entry_node_id: entry.id, exit_node_id: exit.id, transport },
      });
      assert.equal(made.status, 201, JSON.stringify(made.body));
      tunnels[transport] = made.body.id;
    }
    const through = async (tunnel: number, port: number) =>
      (await rule(m, { node_id: entry.id, tunnel_id: tunnel, listen_port: port, targets: ['10.0.0.1:80'] })).body.id;
    const [overTls, overWs] = [await through(tunnels.tls!, 8001), await through(tunnels.ws!, 8002)];
    for (const [n, role] of [
      [entry, 'entry'],
      [exit, 'exit'],
    ] as const) {
      const older = (await link(m, n.agent_token, undefined, '0.0.9', { 'X-Agent-Features': 'weights' })) as RawLink;
      const config = await older.next('config');
      assert.deepEqual(
        (config.tunnels as { id: number; role: string }[]).map((end) => [end.id, end.role]),
        [[tunnels.tls, role]],
      );
      if (role === 'entry')
        assert.deepEqual(
          (config.rules as { id: number }[]).map((r) => r.id),
          [overTls],
        );
      older.socket.destroy();
      const current = (await link(m, n.agent_token, undefined, '0.0.10', {
        'X-Agent-Features': `weights,${TUNNEL_WS}`,
      })) as RawLink;
      const full = await current.next('config');
      // What the agent may send this master beyond the oldest masters' messages, each named.
      assert.deepEqual(full.master_reads, [...MASTER_READS]);
      assert.deepEqual(
        (full.tunnels as { id: number; transport?: string }[]).map((end) => [end.id, end.transport ?? 'tls']),
        [
          [tunnels.tls, 'tls'],
          [tunnels.ws, 'ws'],
        ],
      );
      current.socket.destroy();
    }
    const refused = await until('the ws rule marked', async () => {
      const shown = (await call(m.url, 'GET', `/api/rules/${overWs}`, { token: m.admin })).body;
      return shown.sync.state === 'failed' && shown;
    });
    assert.equal(refused.sync.error.code, 'agent_outdated');
    assert.match(refused.sync.error.detail, /cannot apply a tunnel inside a WebSocket \(transport ws\)/);
  },
);

test(
  'an entry agent that does not name tunnel_exits is sent no end of a tunnel of several exits, and its rules fail ' +
    'saying so; its exits are sent their ends as before, without what older agents would refuse',
  async (t) => {
    const m = await startMaster(t);
    const [entry, a, b] = [await node(m, 'entry'), await node(m, 'a'), await node(m, 'b')];
    const made = await call(m.url, 'POST', '/api/tunnels', {
      token: m.admin,
      body: { name: 'two', entry_node_id: entry.id, exit_node_ids: [a.id, b.id], probe_target: '10.0.0.9:22' },
    });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const ruleId = (
      await rule(m, { node_id: entry.id, tunnel_id: made.body.id, listen_port: 8003, targets: ['10.0.0.1:80'] })
    ).body.id;
    const older = (await link(m, entry.agent_token, undefined, '0.0.9', { 'X-Agent-Features': 'weights' })) as RawLink;
    const config = await older.next('config');
    assert.deepEqual(config.tunnels, []);
    assert.deepEqual(config.rules, []);
    const refused = await until('the rule marked', async () => {
      const shown = (await call(m.url, 'GET', `/api/rules/${ruleId}`, { token: m.admin })).body;
      return shown.sync.state === 'failed' && shown;
    });
    assert.equal(refused.sync.error.code, 'agent_outdated');
    assert.match(refused.sync.error.detail, /cannot apply a tunnel of several exits/);
    older.socket.destroy();
    for (const exitNode of [a, b]) {
      const exitAgent = (await link(m, exitNode.agent_token, undefined, '0.0.9', {
        'X-Agent-Features': 'weights',
      })) as RawLink;
      const [end] = (await exitAgent.next('config')).tunnels as Record<string, unknown>[];
      assert.equal(end!.role, 'exit');
      assert.equal('probe_target' in end!, false, 'no field an older agent would refuse');
      exitAgent.socket.destroy();
    }
  },
);

const TENANT_APART =
  "where operators' rules may reach local targets, a tenant's rule goes to its node and its tunnel's exit saying " +
  'it may not, and an agent that cannot hold rules apart is not sent it';

test(TENANT_APART, async (t) => {
  const m = await startMaster(t, { localTargets: true });
  const [entry, exit] = [await node(m, 'entry', { tags: ['eu'] }), await node(m, 'exit', { tags: ['eu'] })];
  const plan = await call(m.url, 'POST', '/api/plans', {
    token: m.admin,
    body: { name: 'p', node_tags: ['eu'], port_ranges: ['30000-30099'] },
  });
  const acme = await newTenant(m, 'acme', plan.body.id);
  const tunnel = await call(m.url, 'POST', '/api/tunnels', {
    token: acme.token,
    body: { name: 'acme-link', entry_node_id: entry.id, exit_node_id: exit.id },
  });
  assert.equal(tunnel.status, 201, JSON.stringify(tunnel.body));
  const create = async (token: string, body: Record<string, unknown>) => {
    const made = await call(m.url, 'POST', '/api/rules', {
      token,
      body: { name: `r${body.listen_port}`, node_id: entry.id, protocol: 'tcp', targets: ['10.0.0.1:80'], ...body },
    });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    return made.body.id as number;
  };
  const direct = await create(acme.token, { listen_port: 30010 });
  const through = await create(acme.token, { listen_port: 30011, tunnel_id: tunnel.body.id });
  const operators = await create(m.admin, { listen_port: 80 });
  type Carried = { id: number; local_targets?: boolean }[];
  type Config = { rules: Carried; tunnels: { rules: Carried }[] };
  const policies = (rules: Carried) => Object.fromEntries(rules.map((r) => [r.id, r.local_targets ?? 'absent']));

  const current = (await link(m, entry.agent_token, undefined, undefined, {
    'X-Agent-Features': AGENT_FEATURES.join(','),
  })) as RawLink;
  const config = (await current.next('config')) as unknown as Config;
  assert.equal((config as unknown as { allow_local_targets: boolean }).allow_local_targets, true);
  assert.deepEqual(policies(config.rules), { [direct]: false, [through]: false, [operators]: 'absent' });
  current.socket.destroy();
  const exitLink = (await link(m, exit.agent_token, undefined, undefined, {
    'X-Agent-Features': AGENT_FEATURES.join(','),
  })) as RawLink;
  const exitConfig = (await exitLink.next('config')) as unknown as Config;
  assert.deepEqual(policies(exitConfig.tunnels[0]!.rules), { [through]: false });
  exitLink.socket.destroy();

  // Agents that name no features, or not this one, are older than it: on either end the tenant's rules fail.
  const olderExit = (await link(m, exit.agent_token, undefined, '0.0.9')) as RawLink;
  assert.deepEqual(((await olderExit.next('config')) as unknown as Config).tunnels[0]!.rules, []);
  const older = (await link(m, entry.agent_token, undefined, '0.0.9', { 'X-Agent-Features': 'weights' })) as RawLink;
  assert.deepEqual(
    ((await older.next('config')) as unknown as Config).rules.map((r) => r.id),
    [operators],
  );
  for (const id of [direct, through]) {
    const refused = await until(`rule ${id} marked`, async () => {
      const shown = (await call(m.url, 'GET', `/api/rules/${id}`, { token: m.admin })).body;
      return shown.sync.state === 'failed' && shown;
    });
    assert.equal(refused.sync.error.code, 'agent_outdated');
    assert.match(refused.sync.error.detail, /a tenant's rule held off local targets/);
  }
  // Nor is it asked to check one: the master answers for it.
  const check = await call(m.url, 'POST', `/api/rules/${direct}/check`, { token: acme.token });
  assert.equal(check.status, 200, JSON.stringify(check.body));
  assert.match(check.body.results[0].error, /the agent \(0\.0\.9\) cannot hold a tenant's rule off local targets/);
  older.socket.destroy();
  olderExit.socket.destroy();

  // Where no rule may reach local targets there is nothing to hold apart: the older agent is sent them all.
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { allow_local_rule_targets: 0 } });
  const again = (await link(m, entry.agent_token, undefined, '0.0.9', { 'X-Agent-Features': 'weights' })) as RawLink;
  const plain = (await again.next('config')) as unknown as Config;
  assert.deepEqual(policies(plain.rules), { [direct]: 'absent', [through]: 'absent', [operators]: 'absent' });
  again.socket.destroy();
});

const FENCED_BY_PROOF =
  "agents' word fences no master: only the promoted master's statement, signed by a key whose pin the master holds " +
  'for a peer (standby_masters), does, and names that peer';

test(FENCED_BY_PROOF, async (t) => {
  const m = await startMaster(t);
  const keyOf = () => {
    const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
    return { pem: privateKey.export({ type: 'pkcs8', format: 'pem' }) as string, pin: keyPinOf(privateKey) };
  };
  const [peer, stranger] = [keyOf(), keyOf()];
  // Loopback ports nothing listens on: the master asks the masters it lists, and is refused at once.
  const standbys = `https://127.0.0.1:2 ${peer.pin},https://127.0.0.1:3`;
  const set = await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { standby_masters: standbys } });
  assert.equal(set.status, 200, JSON.stringify(set.body));
  const [a, b] = [await node(m, 'a'), await node(m, 'b')];
  const claim = { 'X-Agent-Epoch': '7', 'X-Agent-Primary': 'https://127.0.0.1:3' };
  const at = '2026-12-06T12:00:00Z';
  const unproven: [string, Record<string, string>][] = [
    [a.agent_token, claim],
    [b.agent_token, claim],
    [a.agent_token, { ...claim, 'X-Agent-Promotion': statePromotion(stranger.pem, 7, at) }],
    [b.agent_token, { ...claim, 'X-Agent-Promotion': 'a.b' }],
    [a.agent_token, { ...claim, 'X-Agent-Promotion': 'x'.repeat(8000) }],
  ];
  for (const [token, headers] of unproven) {
    const refused = (await link(m, token, undefined, undefined, headers)) as { status: number };
    assert.equal(refused.status, 503, 'a link claiming a newer epoch is refused');
    assert.equal((await call(m.url, 'GET', '/api/health')).body.role, 'primary', JSON.stringify(headers).slice(0, 80));
  }
  assert.equal((await node(m, 'c')).name, 'c');

  // The peer's statement: one agent is enough, and the primary named is the peer that signed, whatever it says.
  const proven = { ...claim, 'X-Agent-Promotion': statePromotion(peer.pem, 7, at) };
  // From a wrong token, even the statement counts for nothing.
  const stray = (await link(m, 'mat_1_' + 'x'.repeat(43), undefined, undefined, proven)) as { status: number };
  assert.equal(stray.status, 401);
  assert.equal((await call(m.url, 'GET', '/api/health')).body.role, 'primary');
  assert.equal(((await link(m, a.agent_token, undefined, undefined, proven)) as { status: number }).status, 503);
  const health = (await call(m.url, 'GET', '/api/health')).body;
  assert.equal(health.role, 'fenced');
  assert.deepEqual(health.fenced_by, { epoch: 7, primary: 'https://127.0.0.1:2' });
  const refused = await call(m.url, 'POST', '/api/nodes', { token: m.admin, body: { name: 'd', host: '192.0.2.4' } });
  assertProblem(refused, 503, 'read_only');
  assert.equal(refused.body.primary, 'https://127.0.0.1:2');
});
