// A tunnel's path quality over time: the master samples each tunnel once a minute from what its entry reported (up,
// round trip, PINGs lost) and keeps the points at falling resolution. The entry's own measure of loss, on a path that
// stops answering: e2e/tunnel-paths.test.ts.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { send } from '../internal/agentlink/wire.ts';
import { AGENT_FEATURES, TUNNEL_EXITS } from '../internal/domain/link.ts';
import { call, newTenant, node, startMaster } from './helpers.ts';
import { link, type RawLink } from './rawlink.ts';
import { until } from './net.ts';

test(
  "a tunnel's path is sampled once a minute from its entry's word: up, round trip and loss, averaged per step; " +
    'another tenant cannot read it',
  async (t) => {
    const m = await startMaster(t);
    const [entry, exit] = [await node(m, 'entry'), await node(m, 'exit')];
    const made = await call(m.url, 'POST', '/api/tunnels', {
      token: m.admin,
      body: { name: 't', entry_node_id: entry.id, exit_node_id: exit.id },
    });
    const id = made.body.id as number;
    const raw = (await link(m, entry.agent_token)) as RawLink;
    await raw.next('config');
    const say = async (state: 'up' | 'down', rtt_us: number | null, loss_percent: number | null) => {
      send(raw.socket, { type: 'tunnel_status', tunnels: [{ id, state, error: null, rtt_us, loss_percent }] });
      await until(`the entry's word (${state})`, async () => {
        const shown = (await call(m.url, 'GET', `/api/tunnels/${id}`, { token: m.admin })).body;
        return shown.ends.entry.status === state && shown.loss_percent === (state === 'up' ? loss_percent : null);
      });
    };
    const started = Date.now();
    const minuteOf = () => Math.floor((started + offset) / 60_000);
    let offset = 0;
    const points = async (step = 60) => {
      const from = new Date((minuteOf() - 5) * 60_000).toISOString();
      const to = new Date((minuteOf() + 5) * 60_000).toISOString();
      const answer = await call(m.url, 'GET', `/api/tunnels/${id}/paths?from=${from}&to=${to}&step=${step}`, {
        token: m.admin,
      });
      assert.equal(answer.status, 200, JSON.stringify(answer.body));
      return answer.body.points as { at: string; up: number; rtt_ms: number | null; loss_percent: number | null }[];
    };
    // Each minute's sample, taken at the minute's first turn of the master's clock (once a second), from how the
    // tunnel stands then: the next minute's shows the word said before it.
    await say('up', 5000, 8.3);
    m.advance(60_000);
    offset += 60_000;
    await until('the up minute sampled', async () => (await points()).some((p) => p.up === 1 && p.rtt_ms === 5));
    await say('down', null, null);
    m.advance(60_000);
    offset += 60_000;
    const both = await until('the down minute sampled', async () => {
      const now = await points();
      return now.some((p) => p.up === 0) && now;
    });
    const up = both.find((p) => p.up === 1)!;
    const down = both.find((p) => p.up === 0)!;
    assert.deepEqual([up.rtt_ms, up.loss_percent, down.rtt_ms, down.loss_percent], [5, 8.3, null, null]);
    // An hour's step averages its minutes: half of those sampled up, the round trip of those that had one.
    const hourly = await points(3600);
    assert.ok(hourly.length >= 1 && hourly.length <= 2, JSON.stringify(hourly));
    const within = hourly.reduce((sum, p) => sum + p.up, 0) / hourly.length;
    assert.ok(within > 0 && within < 1, JSON.stringify(hourly));

    const plan = await call(m.url, 'POST', '/api/plans', { token: m.admin, body: { name: 'p' } });
    const other = await newTenant(m, 'other', plan.body.id, { scopes: ['tunnels:read'] });
    const refused = await call(m.url, 'GET', `/api/tunnels/${id}/paths`, { token: other.token });
    assert.equal(refused.status, 404);
    raw.socket.destroy();
  },
);

test(
  "each exit's path is sampled from the entry's word on it (round trip, loss, its probe), and goes with the exit; a " +
    "move of the entry's choice is audited in words, one it cannot make is not taken",
  async (t) => {
    const m = await startMaster(t);
    const [entry, a, b] = [await node(m, 'entry'), await node(m, 'a'), await node(m, 'b')];
    const made = await call(m.url, 'POST', '/api/tunnels', {
      token: m.admin,
      body: { name: 't', entry_node_id: entry.id, exit_node_ids: [a.id, b.id], exit_strategy: 'lowest_latency' },
    });
    const id = made.body.id as number;
    const features = { 'X-Agent-Features': [...AGENT_FEATURES, TUNNEL_EXITS].join(',') };
    const raw = (await link(m, entry.agent_token, undefined, undefined, features)) as RawLink;
    const config = (await raw.next('config')) as unknown as {
      tunnels: { id: number; exits: { node_id: number }[]; exit_strategy: string }[];
    };
    const end = config.tunnels.find((tunnel) => tunnel.id === id)!;
    assert.deepEqual(
      end.exits.map((exit) => exit.node_id),
      [a.id, b.id],
    );
    assert.equal(end.exit_strategy, 'lowest_latency');
    const exit = (node_id: number, rtt_us: number, probe: number | 'failed') => ({
      node_id,
      state: 'up',
      error: null,
      rtt_us,
      loss_percent: 0,
      probe_us: probe === 'failed' ? null : probe,
      probe_failed: probe === 'failed',
      score_ms: rtt_us / 1000,
    });
    const say = (chosen: number | null, switched: Record<string, unknown> | null) =>
      send(raw.socket, {
        type: 'tunnel_status',
        tunnels: [
          {
            id,
            state: 'up',
            error: null,
            rtt_us: 4000,
            loss_percent: 0,
            exits: [exit(a.id, 9000, 'failed'), exit(b.id, 4000, 1500)],
            chosen,
            switched,
          },
        ],
      });
    const at = new Date().toISOString();
    say(b.id, { from: a.id, to: b.id, reason: 'lower_latency', from_score_ms: 9, to_score_ms: 5.5, at });
    const moved = await until('the move shown', async () => {
      const shown = (await call(m.url, 'GET', `/api/tunnels/${id}`, { token: m.admin })).body;
      return shown.chosen_exit_node_id === b.id && shown;
    });
    assert.equal(
      moved.chosen_because,
      `node ${a.id} (score 9 ms) -> node ${b.id} (score 5.5 ms): a lower score for long enough`,
    );
    assert.deepEqual(
      moved.exits.map((e: { chosen: boolean; probe_ms: number | null; probe_failed: boolean }) => [
        e.chosen,
        e.probe_ms,
        e.probe_failed,
      ]),
      [
        [false, null, true],
        [true, 1.5, false],
      ],
    );
    const audit = await call(m.url, 'GET', `/api/audit-logs?action=tunnel.exit_switched&resource_id=${id}`, {
      token: m.admin,
    });
    assert.equal(audit.body.items.length, 1);
    assert.equal(audit.body.items[0].actor_type, 'system');
    // A node that is no exit of the tunnel is not a choice: none is shown, and that move is audited too.
    say(entry.id, null);
    await until('no choice shown', async () => {
      const shown = (await call(m.url, 'GET', `/api/tunnels/${id}`, { token: m.admin })).body;
      return shown.chosen_exit_node_id === null;
    });

    m.advance(60_000);
    const window = () => {
      const minute = Math.floor((Date.now() + 60_000) / 60_000);
      const at = (offset: number) => new Date((minute + offset) * 60_000).toISOString();
      return `from=${at(-5)}&to=${at(5)}`;
    };
    const pathOf = async (nodeId: number) => {
      const answer = await call(m.url, 'GET', `/api/tunnels/${id}/paths?${window()}&exit_node_id=${nodeId}`, {
        token: m.admin,
      });
      assert.equal(answer.status, 200, JSON.stringify(answer.body));
      return answer.body;
    };
    const through = await until('the exits sampled', async () => {
      const [pa, pb] = [await pathOf(a.id), await pathOf(b.id)];
      return pa.points.length > 0 && pb.points.length > 0 && { pa, pb };
    });
    assert.deepEqual(
      [through.pa.exit_node_id, through.pa.points[0].rtt_ms, through.pa.points[0].probe_ok],
      [a.id, 9, 0],
    );
    assert.deepEqual(
      [
        through.pb.points[0].up,
        through.pb.points[0].rtt_ms,
        through.pb.points[0].probe_ms,
        through.pb.points[0].probe_ok,
      ],
      [1, 4, 1.5, 1],
    );
    const stranger = await call(m.url, 'GET', `/api/tunnels/${id}/paths?exit_node_id=${entry.id}`, { token: m.admin });
    assert.equal(stranger.status, 422);
    assert.equal(stranger.body.errors[0].pointer, '?exit_node_id');

    // b leaves the tunnel: at the next sample its path and points are gone.
    const { id: _, version: __, ...kept } = made.body;
    const dropped = await call(m.url, 'PUT', `/api/tunnels/${id}`, {
      token: m.admin,
      body: { ...kept, exit_node_ids: [a.id], exit_ports: null, exit_vias: null },
    });
    assert.equal(dropped.status, 200, JSON.stringify(dropped.body));
    m.advance(60_000);
    await until('the gone exit forgotten', () => {
      const left = m.app.store.db.prepare('SELECT count(*) AS n FROM tunnel_exit_paths WHERE node_id = ?').get(b.id);
      return (left as { n: number }).n === 0;
    });
    const points = m.app.store.db.prepare('SELECT count(*) AS n FROM exit_path_points').get() as { n: number };
    const paths = m.app.store.db.prepare('SELECT count(*) AS n FROM tunnel_exit_paths').get() as { n: number };
    assert.equal(paths.n, 1);
    assert.ok(points.n >= 1);
    raw.socket.destroy();
  },
);
