// Tunnels of several exits: the API's shape for them, and an entry choosing among real exits whose links are impaired
// in user space (a proxy in front of each exit holding its bytes), moving on a lasting gain or an exit down, and
// leaving open connections where they are.

import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { describe, test } from 'node:test';
import { call, mintToken, newTenant, node, rule, startMaster } from '../helpers.ts';
import { until } from '../net.ts';
import { chosenExit as chosen, echoed, exitSwitches as switches, exitsFleet, tunnelOf } from '../tunnel-fleet.ts';

describe('tunnels of several exits', { concurrency: 2 }, () => {
  test('exits are named in order with their ports and vias; bad lists are refused naming the field', async (t) => {
    const m = await startMaster(t);
    const [entry, a, b] = [await node(m, 'e'), await node(m, 'a'), await node(m, 'b')];
    const create = (body: Record<string, unknown>) =>
      call(m.url, 'POST', '/api/tunnels', { token: m.admin, body: { name: 'x', entry_node_id: entry.id, ...body } });
    const made = await create({ exit_node_ids: [a.id, b.id], exit_ports: [41001, null], probe_target: 'db:5432' });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const tunnel = made.body;
    assert.equal(tunnel.exit_node_id, a.id);
    assert.deepEqual(tunnel.exit_node_ids, [a.id, b.id]);
    assert.equal(tunnel.listen_port, 41001);
    assert.equal(tunnel.exit_ports[0], 41001);
    assert.ok(tunnel.exit_ports[1] >= 40000, 'the second port picked by the master');
    assert.equal(tunnel.exit_strategy, 'failover');
    assert.equal(tunnel.probe_target, 'db:5432');
    assert.deepEqual(
      tunnel.exits.map((exit: { node_id: number; status: string; chosen: boolean }) => [exit.node_id, exit.status]),
      [
        [a.id, 'pending'],
        [b.id, 'pending'],
      ],
    );
    // Each exit's port is claimed on its node: a rule there on it is a conflict.
    const clash = await rule(m, { node_id: b.id, listen_port: tunnel.exit_ports[1], targets: ['10.0.0.1:1'] });
    assert.equal(clash.status, 409, JSON.stringify(clash.body));

    const refused: [Record<string, unknown>, string][] = [
      [{ exit_node_ids: [a.id, a.id] }, '/exit_node_ids/1'],
      [{ exit_node_ids: [entry.id, b.id] }, '/exit_node_ids/0'],
      [{ exit_node_ids: [a.id, b.id], exit_ports: [41002] }, '/exit_ports'],
      [{ exit_node_ids: [a.id, b.id], exit_node_id: b.id }, '/exit_node_id'],
      [{ exit_node_ids: [a.id, b.id], exit_vias: ['ws://proxy/', null] }, '/exit_vias'],
      [{ exit_node_ids: [a.id, 999_999] }, '/exit_node_ids/1'],
      [{}, '/exit_node_ids'],
      [{ exit_node_ids: [a.id], exit_strategy: 'fastest' }, '/exit_strategy'],
    ];
    for (const [body, pointer] of refused) {
      const answer = await create({ ...body, name: 'refused' });
      assert.equal(answer.status, 422, JSON.stringify(body));
      assert.ok(
        answer.body.errors.some((error: { pointer: string }) => error.pointer === `#${pointer}`),
        `${JSON.stringify(body)}: ${JSON.stringify(answer.body.errors)}`,
      );
    }
    assert.equal((await call(m.url, 'GET', '/api/tunnels?q=refused', { token: m.admin })).body.items.length, 0);

    // A tenant's tunnel is held to their plan at every exit: a node it does not grant is refused, ports are its own.
    const plan = await call(m.url, 'POST', '/api/plans', {
      token: m.admin,
      body: { name: 'p', node_ids: [entry.id, a.id], port_ranges: ['30000-30009'] },
    });
    const tenant = await newTenant(m, 'tenant', plan.body.id);
    const asTenant = (exits: number[]) =>
      call(m.url, 'POST', '/api/tunnels', {
        token: tenant.token,
        body: { name: `of-tenant-${exits.length}`, entry_node_id: entry.id, exit_node_ids: exits },
      });
    const ungranted = await asTenant([a.id, b.id]);
    assert.equal(ungranted.status, 403, JSON.stringify(ungranted.body));
    assert.match(ungranted.body.detail, new RegExp(`node ${b.id} is not granted`));
    const granted = await asTenant([a.id]);
    assert.equal(granted.status, 201, JSON.stringify(granted.body));
    assert.ok(granted.body.listen_port >= 30000 && granted.body.listen_port <= 30009);
    const gone = await call(m.url, 'DELETE', `/api/tunnels/${granted.body.id}`, { token: tenant.token });
    assert.equal(gone.status, 204);

    // Dropping an exit frees its port; the export names every exit (version 2) and imports back the same.
    const { id, version, ...kept } = tunnel;
    const dropped = await call(m.url, 'PUT', `/api/tunnels/${id}`, {
      token: m.admin,
      body: { ...kept, exit_node_ids: [a.id], exit_ports: null, exit_vias: null },
    });
    assert.equal(dropped.status, 200, JSON.stringify(dropped.body));
    assert.deepEqual(dropped.body.exit_node_ids, [a.id]);
    assert.equal(dropped.body.listen_port, 41001);
    const free = await rule(m, { node_id: b.id, listen_port: tunnel.exit_ports[1], targets: ['10.0.0.1:1'] });
    assert.equal(free.status, 201, JSON.stringify(free.body));
    // Where a tunnel's rules leave from is theirs: changing the strategy while one runs through it needs rules:write.
    const through = await rule(m, { node_id: entry.id, tunnel_id: id, listen_port: 15001, targets: ['10.0.0.2:1'] });
    assert.equal(through.status, 201, JSON.stringify(through.body));
    const tunnelsOnly = await mintToken(m, ['tunnels:read', 'tunnels:write']);
    const change = {
      ...kept,
      exit_node_ids: [a.id],
      exit_ports: null,
      exit_vias: null,
      exit_strategy: 'lowest_latency',
    };
    const refusedChange = await call(m.url, 'PUT', `/api/tunnels/${id}`, { token: tunnelsOnly, body: change });
    assert.equal(refusedChange.status, 403, JSON.stringify(refusedChange.body));
    assert.match(refusedChange.body.detail, /changing the exits of tunnel/);
    const again = await call(m.url, 'PUT', `/api/tunnels/${id}`, {
      token: m.admin,
      body: { ...kept, exit_node_ids: [a.id, b.id], exit_ports: [41001, 41003], exit_strategy: 'lowest_latency' },
    });
    assert.equal(again.status, 200, JSON.stringify(again.body));
    const exported = (await call(m.url, 'GET', '/api/export', { token: m.admin })).body;
    assert.equal(exported.version, 2);
    const written = exported.tunnels.find((t: { name: string }) => t.name === 'x');
    assert.deepEqual(written.exit_nodes, ['a', 'b']);
    assert.deepEqual(written.exit_ports, [41001, 41003]);
    assert.equal(written.exit_strategy, 'lowest_latency');
    const fresh = await startMaster(t);
    for (const name of ['e', 'a', 'b']) await node(fresh, name);
    const imported = await call(fresh.url, 'POST', '/api/import', { token: fresh.admin, body: exported });
    assert.equal(imported.status, 200, JSON.stringify(imported.body));
    const back = (await call(fresh.url, 'GET', '/api/tunnels?q=x', { token: fresh.admin })).body.items[0];
    assert.deepEqual(back.exit_ports, [41001, 41003]);
    assert.equal(back.exit_strategy, 'lowest_latency');
    assert.equal(back.probe_target, 'db:5432');
  });

  test(
    'lowest_latency: the entry settles on the exit of the lowest score within the rounds, moves when it degrades, ' +
      'keeps open connections where they are, and does not flap between two close exits',
    { timeout: 90_000 },
    async (t) => {
      const { m, tunnel, exitIds, links, listenPort } = await exitsFleet(t, [80, 5, 40], 'lowest_latency', [1]);
      const [slow, fast, middle] = exitIds as [number, number, number];
      // The fastest is cut at first: the choice takes another, and moves once the fastest has been better for long.
      await until('a choice', async () => (await chosen(m, tunnel.id)) !== null);
      assert.notEqual(await chosen(m, tunnel.id), fast);
      links[1]!.mend();
      const mended = performance.now();
      await until('the choice on the fastest exit', async () => (await chosen(m, tunnel.id)) === fast, 30_000);
      t.diagnostic(`settled on the fastest exit ${Math.round(performance.now() - mended)} ms after its link mended`);
      const shown = await until('every exit probed', async () => {
        const now = await tunnelOf(m, tunnel.id);
        return now.exits.every((exit: { probe_ms: number | null }) => exit.probe_ms !== null) && now;
      });
      const scores = new Map(shown.exits.map((exit: { node_id: number; score_ms: number }) => [exit.node_id, exit]));
      assert.ok(
        (scores.get(fast) as { score_ms: number }).score_ms < (scores.get(slow) as { score_ms: number }).score_ms,
        JSON.stringify(shown.exits),
      );
      assert.equal(await echoed(listenPort, 'through the fast exit'), 'through the fast exit');

      // A connection opened now stays on the fast exit when the choice moves.
      const held = connect(listenPort, '127.0.0.1');
      await new Promise((resolve) => held.once('connect', resolve));
      const before = links[1]!.bytes;
      links[1]!.setDelay(150);
      await until('the choice on the middle exit', async () => (await chosen(m, tunnel.id)) === middle, 30_000);
      const moved = (await switches(m, tunnel.id)).at(0)!;
      assert.equal(moved.changes.after.chosen_exit_node_id, middle);
      assert.match(moved.changes.after.because, /a lower score for long enough/);
      held.write('still here');
      await until('the held connection answered', () => held.readableLength >= 'still here'.length || undefined);
      assert.ok(links[1]!.bytes > before, 'its bytes still crossed the fast exit');
      held.destroy();
      const middleBytes = links[2]!.bytes;
      assert.equal(await echoed(listenPort, 'a new connection'), 'a new connection');
      assert.ok(links[2]!.bytes > middleBytes, 'a new connection goes by the middle exit');

      // Two close exits: a few ms apart is no gain; the choice stays over many rounds.
      links[0]!.setDelay(42);
      const count = (await switches(m, tunnel.id)).length;
      await new Promise((resolve) => setTimeout(resolve, 5_000));
      assert.equal(await chosen(m, tunnel.id), middle);
      assert.equal((await switches(m, tunnel.id)).length, count);
    },
  );

  test(
    'failover: the first exit up carries; cut, the next carries at once; back, the first again after the rounds',
    { timeout: 60_000 },
    async (t) => {
      const { m, tunnel, exitIds, links, listenPort } = await exitsFleet(t, [0, 0], 'failover');
      const [first, second] = exitIds as [number, number];
      await until('the choice on the first exit', async () => (await chosen(m, tunnel.id)) === first);
      // Both sessions up and measured first: the second is there to move to when the first goes.
      await until('both exits scored', async () =>
        (await tunnelOf(m, tunnel.id)).exits.every((exit: { score_ms: number | null }) => exit.score_ms !== null),
      );
      links[0]!.cut();
      await until('the choice on the second exit', async () => (await chosen(m, tunnel.id)) === second);
      assert.equal(await echoed(listenPort, 'via the second'), 'via the second');
      const down = (await switches(m, tunnel.id)).at(0)!;
      assert.match(down.changes.after.because, /the chosen exit went down/);
      await until('the tunnel up on one exit of two', async () => (await tunnelOf(m, tunnel.id)).status === 'up');
      links[0]!.mend();
      await until('the choice back on the first exit', async () => (await chosen(m, tunnel.id)) === first, 30_000);
      assert.match((await switches(m, tunnel.id)).at(0)!.changes.after.because, /an earlier exit back up/);
      const metrics = await call(m.url, 'GET', '/api/metrics', { token: m.admin });
      assert.match(metrics.body as string, /portplane_tunnel_exit_switches_total\{reason="exit_down"\} [1-9]/);
      assert.match(metrics.body as string, /portplane_tunnel_exit_switches_total\{reason="preferred_back"\} [1-9]/);
    },
  );
});
