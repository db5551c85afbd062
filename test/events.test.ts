// GET /api/events: every change as a server-sent event, in order, resumable, as far as the caller's scopes reach.

import assert from 'node:assert/strict';
import { request, type IncomingMessage } from 'node:http';
import { describe, test } from 'node:test';
import { maintain } from '../internal/service/maintenance.ts';
import { agentInProcess, nodeOf } from './agents.ts';
import { assertProblem, call, login, mintToken, node, rule, ruleBodies, startMaster } from './helpers.ts';
import { freePort, tcpEcho, tcpRoundTrip, until } from './net.ts';
import { openEvents, parseFrames, type StreamEvent } from './sse.ts';

// Most of these tests wait on clocks and sockets: they run side by side.
describe('event streams', { concurrency: 4 }, () => {
  const of = (type: string, id: number) => (e: StreamEvent) => e.event === type && e.data.resource_id === id;

  test("a stream sees a rule's create, its sync result, its traffic and its delete, in order", async (t) => {
    const m = await startMaster(t, { localTargets: true });
    await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { agent_report_interval_seconds: 1 } });
    const n = await node(m, 'edge');
    await agentInProcess(t, m.url, n.agent_token);
    await until('the node to come online', async () => (await nodeOf(m, n.id)).status === 'online');
    const stream = await openEvents(m.url, m.admin, `?node_id=${n.id}`);
    t.after(() => stream.close());
    const ready = await stream.next((e) => e.event === 'ready');

    const target = await tcpEcho(t);
    // Each event comes with its change, not with the next heartbeat (15 s): each is waited for 5 s at most (a tighter
    // bound was missed by a loaded machine, whose tests share its two cores three processes at a time).
    const made = await rule(m, { node_id: n.id, listen_port: await freePort(), targets: [`127.0.0.1:${target}`] });
    const id = made.body.id;
    const created = await stream.next(of('rule.created', id), 5000);
    const synced = await stream.next((e) => of('rule.sync', id)(e) && e.data.data?.sync.state === 'applied', 5000);

    // Bytes through the rule come as a traffic tick (live: no id), counted by the agent.
    const payload = Buffer.alloc(32 * 1024, 1);
    assert.ok((await tcpRoundTrip(made.body.listen_port, payload)).equals(payload));
    // (A report may fall in the middle of the round trip: its bytes then come in two ticks.)
    const ticks = () => stream.events.filter((e) => e.event === 'traffic');
    const sum = (pick: (r: { bytes_in: number; bytes_out: number }) => number) =>
      ticks()
        .flatMap((e) => e.data.data.rules.filter((r: { id: number }) => r.id === id))
        .reduce((total: number, r: { bytes_in: number; bytes_out: number }) => total + pick(r), 0);
    await until('the traffic ticks to count the round trip', () => sum((r) => r.bytes_in) >= payload.length);
    assert.deepEqual([sum((r) => r.bytes_in), sum((r) => r.bytes_out)], [payload.length, payload.length]);
    for (const tick of ticks()) {
      assert.equal(tick.id, null, 'a live event moves no resume point');
      assert.deepEqual(tick.data.node_ids, [n.id]);
      assert.deepEqual(
        tick.data.data.rules.map((r: { node_id: number }) => r.node_id),
        tick.data.data.rules.map(() => n.id),
      );
    }
    assert.equal((await call(m.url, 'DELETE', `/api/rules/${id}`, { token: m.admin })).status, 204);
    const deleted = await stream.next(of('rule.deleted', id), 5000);

    assert.ok(ready.id! < created.id! && created.id! < synced.id! && synced.id! < deleted.id!);
    assert.deepEqual(
      { ...created.data, at: undefined, data: undefined, id: undefined },
      {
        type: 'rule.created',
        resource: 'rule',
        resource_id: id,
        node_ids: [n.id],
        detail: null,
        at: undefined,
        data: undefined,
        id: undefined,
      },
    );
    assert.equal(created.data.data.name, made.body.name);
    assert.equal(deleted.data.data, null);
    // The frame's id is the event's; nothing in between was of another node.
    assert.equal(created.id, created.data.id);
    assert.ok(
      stream.events.every((e) => e.event === 'ready' || e.event === 'traffic' || e.data.node_ids.includes(n.id)),
    );
  });

  test("a narrow token's stream carries nothing it cannot read", async (t) => {
    const m = await startMaster(t);
    const rulesOnly = await mintToken(m, ['rules:read']);
    const narrow = await openEvents(m.url, rulesOnly);
    const wide = await openEvents(m.url, m.admin);
    t.after(() => (narrow.close(), wide.close()));
    await Promise.all([narrow.next((e) => e.event === 'ready'), wide.next((e) => e.event === 'ready')]);

    const n = await node(m, 'hidden');
    const r = await rule(m, { node_id: n.id, listen_port: 7000 });
    await call(m.url, 'POST', '/api/users', { token: m.admin, body: { username: 'eve', password: 'a-long-password' } });
    await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { tcp_idle_timeout_seconds: 900 } });
    await call(m.url, 'POST', '/api/tokens', { token: m.admin, body: { name: 'x', scopes: ['nodes:read'] } });
    await wide.next((e) => e.event === 'token.created');
    await narrow.next(of('rule.created', r.body.id));

    const kinds = (s: { events: StreamEvent[] }) => new Set(s.events.map((e) => e.event));
    assert.deepEqual([...kinds(narrow)].sort(), ['ready', 'rule.created']);
    for (const type of ['node.created', 'rule.created', 'user.created', 'settings.updated', 'token.created'])
      assert.ok(kinds(wide).has(type), `the admin sees ${type}`);
    // What a GET answers, no more: the token's event holds no secret.
    const token = wide.events.find((e) => e.event === 'token.created')!;
    assert.equal(token.data.data.name, 'x');
    assert.equal(JSON.stringify(token.data).includes('pp_'), false);
  });

  test(
    'a reconnect with the last id gets exactly the events it ' + 'missed; a pruned resume point is a reset',
    async (t) => {
      const m = await startMaster(t);
      const n = await node(m, 'edge');
      const first = await openEvents(m.url, m.admin, '?types=rule');
      const made = await call(m.url, 'POST', '/api/rules/batch-create', {
        token: m.admin,
        body: { rules: ruleBodies(n.id, 3, 20000, 'a') },
      });
      assert.equal(made.status, 201, JSON.stringify(made.body));
      const last = await first.next((e) => e.event === 'rule.created' && e.data.data?.name === 'a-2');
      first.close();

      // Missed while away: three more rules, a rename, a delete, and a node's change the filter leaves out.
      const more = await call(m.url, 'POST', '/api/rules/batch-create', {
        token: m.admin,
        body: { rules: ruleBodies(n.id, 3, 21000, 'b') },
      });
      const ids: number[] = more.body.results.map((item: { id: number }) => item.id);
      await call(m.url, 'DELETE', `/api/rules/${ids[0]}`, { token: m.admin });
      await call(m.url, 'PUT', `/api/nodes/${n.id}`, {
        token: m.admin,
        body: { name: 'renamed', host: 'edge.example.net' },
      });

      const resumed = await openEvents(m.url, m.admin, '?types=rule', { 'last-event-id': String(last.id) });
      t.after(() => resumed.close());
      await resumed.next(of('rule.deleted', ids[0]!));
      const missed = resumed.events.filter((e) => e.id !== null && e.event !== 'ready');
      assert.deepEqual(
        missed.map((e) => [e.event, e.data.resource_id]),
        [...ids.map((id) => ['rule.created', id]), ['rule.deleted', ids[0]]],
      );
      assert.equal(resumed.events[0]!.event, 'ready');
      assert.equal(resumed.events[0]!.id, last.id);

      // ?after= says the same; an id never sent, or one whose events were pruned, is a reset to now.
      const after = await openEvents(m.url, m.admin, `?types=rule&after=${last.id}&limit=4`);
      await after.ended;
      assert.deepEqual(
        after.events.filter((e) => e.event !== 'ready').map((e) => e.id),
        missed.map((e) => e.id),
      );
      const future = await openEvents(m.url, m.admin, '?after=999999&limit=1');
      t.after(() => future.close());
      const reset = await future.next((e) => e.event === 'reset');
      assert.match(reset.data.detail, /list what you show again/);
      await m.app.store.db.writable();
      m.app.store.write(() => m.app.store.events.prune('9999-01-01T00:00:00Z'));
      await m.app.store.committed();
      const pruned = await openEvents(m.url, m.admin, '?after=1');
      t.after(() => pruned.close());
      const gone = await pruned.next((e) => e.event === 'reset');
      assert.match(gone.data.detail, /were pruned/);
      assert.equal(gone.id, m.app.store.events.head());

      assertProblem(await call(m.url, 'GET', '/api/events?types=rule,bogus', { token: m.admin }), 400, 'invalid_query');
      const badId = await call(m.url, 'GET', '/api/events', { token: m.admin, headers: { 'last-event-id': 'x' } });
      assertProblem(badId, 422, 'validation_failed');
    },
  );

  test("a stalled consumer holds at most the stream's buffer, then is dropped with where to resume", async (t) => {
    const m = await startMaster(t);
    const n = await node(m, 'edge');
    m.app.events.stallMs = 500;
    const stalled = await openEvents(m.url, m.admin);
    t.after(() => stalled.close());
    await stalled.next((e) => e.event === 'ready');
    stalled.res.pause();

    // What the stream holds is watched from the first write on: under load the writes outlast the stall, and the stream
    // may be dropped before they are done.
    let most = 0;
    const watch = setInterval(() => (most = Math.max(most, m.app.events.gauges().bufferedBytes)), 5);
    t.after(() => clearInterval(watch));
    // The client reads again as soon as its stream is dropped (the master ends the connection 5 s later): under load
    // the writes below may go on for longer than that.
    const dropped = until('the stream to be dropped', () => m.app.events.gauges().streams === 0, 30_000).then(() =>
      stalled.res.resume(),
    );
    // 2,000 rules' events with their data (16 long target names each: 3 KiB an event, in bodies under 1 MiB): more than
    // the kernel's socket buffers hold, and the client reads none.
    const targets = Array.from(
      { length: 16 },
      (_, i) => `${'a'.repeat(60)}.${'b'.repeat(60)}.${'c'.repeat(60)}.t${i}:80`,
    );
    for (let batch = 0; batch < 8; batch++) {
      const rules = ruleBodies(n.id, 250, 20000 + batch * 250, `s${batch}`).map((r) => ({ ...r, targets }));
      const made = await call(m.url, 'POST', '/api/rules/batch-create', { token: m.admin, body: { rules } });
      assert.equal(made.status, 201, made.body.detail);
    }
    await dropped;
    clearInterval(watch);
    assert.ok(most > 0, 'the stream did fill');
    assert.ok(most < 400 * 1024, `at most the buffer and a page's frame held: ${most} bytes`);
    await stalled.ended;
    const last = stalled.events.at(-1)!;
    assert.equal(last.event, 'dropped');
    const before = stalled.events.at(-2)!;
    assert.equal(last.data.resume_after, before.id, 'it resumes after the last event it was sent');
  });

  test('a stream ends after its limit or its timeout, and a user may hold only so many', async (t) => {
    const m = await startMaster(t);
    const limited = await openEvents(m.url, m.admin, '?types=node&limit=2');
    await node(m, 'a');
    await node(m, 'b');
    await node(m, 'c');
    await limited.ended;
    assert.deepEqual(
      limited.events.map((e) => e.event),
      ['ready', 'node.created', 'node.created'],
    );
    // Without data, for clients that re-read what they show: the event, not the resource.
    const bare = await openEvents(m.url, m.admin, '?types=node&after=0&limit=1&data=false');
    await bare.ended;
    assert.deepEqual(
      bare.events.map((e) => [e.event, e.data.resource_id, e.data.data]),
      [
        ['ready', undefined, undefined],
        ['node.created', 1, null],
      ],
    );
    const started = Date.now();
    const timed = await openEvents(m.url, m.admin, '?timeout_seconds=1');
    await timed.ended;
    assert.ok(Date.now() - started >= 900);

    const open = await Promise.all(Array.from({ length: 16 }, () => openEvents(m.url, m.admin)));
    t.after(() => open.forEach((s) => s.close()));
    await assert.rejects(openEvents(m.url, m.admin), { status: 429 });
    assert.equal(m.app.events.gauges().streams, 16);
    // A burst of opens at once, while writes keep the answers waiting for their commit: still 16.
    await call(m.url, 'POST', '/api/users', { token: m.admin, body: { username: 'ops', password: 'a-long-password' } });
    const other = await login(m.url, 'ops', 'a-long-password');
    const writes = Array.from({ length: 5 }, (_, i) => rule(m, { node_id: 1, listen_port: 7300 + i }));
    const burst = await Promise.allSettled(Array.from({ length: 40 }, () => openEvents(m.url, other)));
    await Promise.all(writes);
    const opened = burst.filter((r) => r.status === 'fulfilled').map((r) => (r as PromiseFulfilledResult<any>).value);
    t.after(() => opened.forEach((s) => s.close()));
    assert.equal(opened.length, 16);
    assert.ok(burst.every((r) => r.status === 'fulfilled' || (r.reason as { status: number }).status === 429));
    assert.equal(m.app.events.gauges().streams, 32);
  });

  test('a quiet stream gets heartbeats, and a stopping master tells each stream where to resume', async (t) => {
    const m = await startMaster(t);
    m.app.events.heartbeatMs = 1000;
    const res = await new Promise<IncomingMessage>((resolve, reject) =>
      request(`${m.url}/api/events`, { headers: { authorization: `Bearer ${m.admin}` } }, resolve)
        .on('error', reject)
        .end(),
    );
    let text = '';
    res.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
    await until('two heartbeats', () => (text.match(/^: keep-alive$/gm) ?? []).length >= 2, 5000);
    await node(m, 'edge');
    await until('the node event', () => text.includes('event: node.created'));
    const lastId = Number([...text.matchAll(/^id: (\d+)$/gm)].at(-1)![1]);
    const ended = new Promise((resolve) => res.on('end', resolve));
    await m.close();
    await ended;
    const frames = parseFrames(text).frames;
    assert.deepEqual(frames.at(-1), { id: null, event: 'shutdown', data: { type: 'shutdown', resume_after: lastId } });
  });

  test('a stream that fails to render an event ends alone; the master and the other streams go on', async (t) => {
    const m = await startMaster(t);
    const n = await node(m, 'edge');
    const failing = await openEvents(m.url, m.admin, '?types=rule');
    const bare = await openEvents(m.url, m.admin, '?types=rule&data=false');
    t.after(() => bare.close());
    await Promise.all([failing.next((e) => e.event === 'ready'), bare.next((e) => e.event === 'ready')]);
    const { rules } = m.app.store;
    const json = rules.json.bind(rules);
    rules.json = () => {
      throw new Error('the disk went away');
    };
    try {
      const made = await rule(m, { node_id: n.id, listen_port: 7100 });
      await failing.ended;
      await bare.next(of('rule.created', made.body.id));
    } finally {
      rules.json = json;
    }
    assert.equal((await call(m.url, 'GET', '/api/health')).status, 200);
    assert.equal(m.app.events.gauges().streams, 1);
  });

  test("each read scope's stream carries its own resource's events and no other's", async (t) => {
    const m = await startMaster(t);
    const mark = m.app.store.events.head();
    // One change of every resource the journal tells of (but the license, which changes only by expiring).
    const [a, b] = [await node(m, 'a'), await node(m, 'b')];
    await rule(m, { node_id: a.id, listen_port: 7200 });
    const tunnel = await call(m.url, 'POST', '/api/tunnels', {
      token: m.admin,
      body: { name: 't', entry_node_id: a.id, exit_node_id: b.id },
    });
    assert.equal(tunnel.status, 201);
    await call(m.url, 'POST', '/api/users', { token: m.admin, body: { username: 'u', password: 'a-long-password' } });
    await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { tcp_idle_timeout_seconds: 900 } });
    const cases = [
      ['nodes:read', 'node'],
      ['rules:read', 'rule'],
      ['tunnels:read', 'tunnel'],
      ['users:read', 'user'],
      ['tokens:read', 'token'],
      ['settings:read', 'settings'],
      ['dashboard:read', null],
      ['audit:read', null],
    ] as const;
    // (Minting the narrow tokens is itself a token event, seen by tokens:read.)
    const tokens = await Promise.all(cases.map(([scope]) => mintToken(m, [scope], scope)));
    const head = m.app.store.events.head();
    const replays = await Promise.all(
      tokens.map((token) => openEvents(m.url, token, `?after=${mark}&timeout_seconds=1`)),
    );
    await Promise.all(replays.map((replay) => replay.ended));
    for (const [i, [scope, resource]] of cases.entries()) {
      const events = replays[i]!.events.filter((e) => e.id !== null && e.id > mark && e.id <= head);
      const seen = new Set(events.map((e) => e.data.resource));
      assert.deepEqual([...seen], resource ? [resource] : [], `${scope} sees ${[...seen]}`);
    }
  });

  test('events older than audit_retention_days are pruned with the audit log; resuming there is a reset', async (t) => {
    const m = await startMaster(t);
    await node(m, 'old');
    // An API token without expiry: the admin's session does not outlive the clock moved past the window.
    const [reader, writer] = [await mintToken(m, ['nodes:read']), await mintToken(m, ['nodes:write'], 'writer')];
    const before = m.app.store.events.head();
    assert.ok(m.app.store.events.first() !== null);
    m.advance((m.app.settings.get('audit_retention_days') + 1) * 86_400_000);
    await m.app.store.db.writable();
    await maintain(m.app);
    await m.app.store.committed();
    assert.equal(m.app.store.events.first(), null, 'every event is older than the window');
    assert.equal(m.app.store.events.head(), before, 'ids are never given again');
    const late = await openEvents(m.url, reader, '?after=0');
    t.after(() => late.close());
    const reset = await late.next((e) => e.event === 'reset');
    assert.equal(reset.data.resume_after, before);
    const made = await call(m.url, 'POST', '/api/nodes', { token: writer, body: { name: 'new', host: 'new.example' } });
    assert.equal(made.status, 201);
    const next = await late.next((e) => e.event === 'node.created');
    assert.equal(next.id, before + 1);
  });

  const NEWEST =
    'a resource keeps its newest 1,000 events of what agents report, however often it flips; the rest stay';
  test(NEWEST, async (t) => {
    const m = await startMaster(t);
    const edge = await node(m, 'edge');
    const checked = await rule(m, {
      node_id: edge.id,
      listen_port: 9000,
      targets: ['192.0.2.1:80'],
      health_check: { interval_seconds: 1 },
    });
    const other = await rule(m, { node_id: edge.id, listen_port: 9001, health_check: { interval_seconds: 1 } });
    const { store } = m.app;
    const flip = (id: number, target: string, i: number) =>
      store.write(() =>
        store.rules.setHealth(id, edge.id, [{ target, status: i % 2 ? 'up' : 'down', error: null, checked_at: null }]),
      );
    for (let i = 0; i < 1_500; i++) flip(checked.body.id, '192.0.2.1:80', i);
    for (let i = 0; i < 10; i++) flip(other.body.id, other.body.targets[0], i);
    await store.committed();
    const count = (id: number, type: string) =>
      (
        store.db
          .prepare('SELECT count(*) AS n FROM events WHERE resource = ? AND resource_id = ? AND type = ?')
          .get('rule', id, type) as { n: number }
      ).n;
    assert.equal(count(checked.body.id, 'rule.health'), 1_000, 'the newest 1,000 of the flapping rule');
    assert.equal(count(other.body.id, 'rule.health'), 10, "another rule's are its own");
    assert.equal(count(checked.body.id, 'rule.created'), 1, 'events of writes through the API are not bounded so');
    // The newest are the ones kept: the oldest left is the 501st flip, every one after it is there.
    const kept = store.db
      .prepare("SELECT min(id) AS first, max(id) AS last FROM events WHERE resource_id = ? AND type = 'rule.health'")
      .get(checked.body.id) as { first: number; last: number };
    assert.ok(kept.last - kept.first >= 999);
  });
});
