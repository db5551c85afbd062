// A tunnel's path quality over time: the master samples each tunnel once a minute from what its entry reported (up,
// round trip, PINGs lost) and keeps the points at falling resolution. The entry's own measure of loss, on a path that
// stops answering: e2e/tunnel-paths.test.ts.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { send } from '../internal/agentlink/wire.ts';
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
