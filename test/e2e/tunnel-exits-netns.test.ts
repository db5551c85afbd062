// A tunnel of three exits across "hosts": the entry and each exit an agent process in a network namespace of its own,
// the master in the test's namespace. The entry reaches each exit only through a link impaired in user space in the
// test's namespace (this kernel has no netem): one slow, one fast but losing (its bytes stalled past a round now and
// then), one between. Each exit's target listens on its own loopback and answers with the exit's name, so a
// connection says which exit carried it. Needs root and `ip netns`; skips with the reason otherwise
// (tunnel-exits.test.ts beside it is the loopback variant, which runs wherever this cannot).

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { test, type TestContext } from 'node:test';
import { nodeOf, startAgent } from '../agents.ts';
import { call, node, rule, startMaster, type Running } from '../helpers.ts';
import { impairedLink, until, untilClosed } from '../net.ts';
import { namespaces, netnsUnavailable, veth } from '../netns.ts';
import { SWITCHING, tunnelOf } from '../tunnel-fleet.ts';

const tag = `${process.pid % 100_000}`;
const ENTRY = `pp${tag}n`;
const EXITS = [`pp${tag}1`, `pp${tag}2`, `pp${tag}3`];
const TUNNEL_PORT = 40200;

/** Each namespace linked to this one: 10.219.N.1 here, 10.219.N.2 there (N: 1 the entry, 2-4 the exits). */
function network(t: TestContext): void {
  namespaces(t, [ENTRY, ...EXITS]);
  [ENTRY, ...EXITS].forEach((ns, i) =>
    veth(`${ns}a`, null, `10.219.${i + 1}.1/30`, `${ns}b`, ns, `10.219.${i + 1}.2/30`),
  );
}

/** In namespace `ns`, a server on 127.0.0.1:7007 that answers `name` to each connection and hangs up. */
async function tellingIn(t: TestContext, ns: string, name: string): Promise<void> {
  const program = `require('node:net').createServer((s) => s.on('error', () => {}).end(${JSON.stringify(name)}))
    .listen(7007, '127.0.0.1', () => console.log('ready'));`;
  const child = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', program], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  t.after(() => child.kill('SIGKILL'));
  await once(child.stdout!, 'data');
}

async function switches(m: Running, id: number): Promise<{ changes: { after: { because: string } } }[]> {
  const page = await call(m.url, 'GET', `/api/audit-logs?action=tunnel.exit_switched&resource_id=${id}&limit=100`, {
    token: m.admin,
  });
  return page.body.items;
}

test(
  'three exits of different delay and loss: the entry settles on the best within the rounds, does not move for a ' +
    "lossy exit's noise, moves when the best degrades, each new connection leaving by the chosen exit, and does not " +
    'move between two close exits',
  { timeout: 120_000 },
  async (t) => {
    const reason = netnsUnavailable(`${ENTRY}-probe`);
    if (reason) return t.skip(reason);
    network(t);
    const names = ['slow', 'lossy', 'fast'];
    for (const [i, ns] of EXITS.entries()) await tellingIn(t, ns, names[i]!);
    const m = await startMaster(t, { host: '0.0.0.0', insecureHttp: true, localTargets: true });
    const port = new URL(m.url).port;
    await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: SWITCHING });
    const entryNode = await node(m, 'entry', { host: '10.219.1.2' });
    const exitNodes: Awaited<ReturnType<typeof node>>[] = [];
    for (const [i, name] of names.entries()) exitNodes.push(await node(m, name, { host: `10.219.${i + 2}.2` }));
    // The links, as the entry sees them: each a proxy here, on the entry's side of its link, to one exit.
    const links = await Promise.all([
      impairedLink(t, TUNNEL_PORT, 60, { host: '10.219.2.2', listen: '10.219.1.1' }),
      impairedLink(t, TUNNEL_PORT, 5, { host: '10.219.3.2', listen: '10.219.1.1', stall: { every: 5, ms: 1_200 } }),
      impairedLink(t, TUNNEL_PORT, 15, { host: '10.219.4.2', listen: '10.219.1.1' }),
    ]);
    const created = await call(m.url, 'POST', '/api/tunnels', {
      token: m.admin,
      body: {
        name: 'three',
        entry_node_id: entryNode.id,
        exit_node_ids: exitNodes.map((exit) => exit.id),
        exit_ports: exitNodes.map(() => TUNNEL_PORT),
        exit_strategy: 'lowest_latency',
        transport: 'ws',
        exit_vias: links.map((link) => `ws://10.219.1.1:${link.port}/`),
      },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const tunnel = created.body;
    links[2]!.cut();
    const inside = (ns: string) => ({
      within: ['ip', 'netns', 'exec', ns],
      listenHost: '0.0.0.0',
      extraArgs: ['--insecure-http'],
    });
    startAgent(t, `http://10.219.1.1:${port}`, entryNode.agent_token, inside(ENTRY));
    for (const [i, exit] of exitNodes.entries())
      startAgent(t, `http://10.219.${i + 2}.1:${port}`, exit.agent_token, inside(EXITS[i]!));
    await until('every agent online', async () =>
      (await Promise.all([entryNode, ...exitNodes].map((n) => nodeOf(m, n.id)))).every((n) => n.status === 'online'),
    );
    const through = (
      await rule(m, { node_id: entryNode.id, tunnel_id: tunnel.id, listen_port: 15001, targets: ['127.0.0.1:7007'] })
    ).body;
    assert.ok(through.id, JSON.stringify(through));
    const synced = await call(m.url, 'POST', '/api/rules/batch-sync', { token: m.admin, body: { ids: [through.id] } });
    assert.deepEqual(synced.body.results, [{ id: through.id, outcome: 'applied' }]);
    const carrier = async () => (await untilClosed(15001, '', '10.219.1.2')).toString();

    const [slow, lossy, fast] = exitNodes.map((exit) => exit.id) as [number, number, number];
    // The fast exit's link is cut at first: the choice takes another, and moves once the fast one is better for long.
    await until('a choice', async () => (await tunnelOf(m, tunnel.id)).chosen_exit_node_id !== null, 30_000);
    assert.notEqual((await tunnelOf(m, tunnel.id)).chosen_exit_node_id, fast);
    links[2]!.mend();
    const mended = performance.now();
    await until(
      'the choice on the fast exit',
      async () => (await tunnelOf(m, tunnel.id)).chosen_exit_node_id === fast,
      40_000,
    );
    t.diagnostic(`on the fast exit ${Math.round(performance.now() - mended)} ms after its link mended`);
    const settled = await until('the slow exit scored', async () => {
      const now = await tunnelOf(m, tunnel.id);
      return now.exits.find((exit: { node_id: number }) => exit.node_id === slow).score_ms !== null && now;
    });
    const score = (id: number) =>
      settled.exits.find((exit: { node_id: number }) => exit.node_id === id).score_ms as number | null;
    t.diagnostic(`scores: slow ${score(slow)} ms, lossy ${score(lossy)} ms, fast ${score(fast)} ms`);
    assert.ok(score(fast)! < score(slow)!, JSON.stringify(settled.exits));
    assert.equal(await carrier(), 'fast');

    // The lossy exit's scores jump about; the choice stays on the fast one.
    const before = (await switches(m, tunnel.id)).length;
    await new Promise((resolve) => setTimeout(resolve, 8_000));
    const later = await tunnelOf(m, tunnel.id);
    t.diagnostic(JSON.stringify(later.exits));
    assert.equal(later.chosen_exit_node_id, fast);
    const [lossyNow, fastNow] = [lossy, fast].map((id) =>
      later.exits.find((exit: { node_id: number }) => exit.node_id === id),
    );
    if (lossyNow.status === 'up' && lossyNow.score_ms !== null) {
      assert.ok(lossyNow.loss_percent > 0, 'its stalls are PINGs lost');
      assert.ok(lossyNow.score_ms > fastNow.score_ms, 'and cost it its lead');
    }
    assert.equal((await switches(m, tunnel.id)).length, before, 'no move while the fast exit stayed best');

    links[2]!.setDelay(250);
    const degraded = performance.now();
    const moved = await until(
      'the choice off the degraded exit',
      async () => {
        const now = await tunnelOf(m, tunnel.id);
        return now.chosen_exit_node_id !== fast && now;
      },
      30_000,
    );
    t.diagnostic(`moved to ${moved.chosen_exit_node_id} ${Math.round(performance.now() - degraded)} ms after`);
    assert.match(moved.chosen_because, /a lower score for long enough/);
    const name = names[exitNodes.findIndex((exit) => exit.id === moved.chosen_exit_node_id)];
    assert.equal(await carrier(), name, 'a new connection leaves by the exit chosen now');

    // The fast exit back within a few ms of the chosen one: no gain worth a move, however many rounds pass.
    assert.equal(moved.chosen_exit_node_id, slow);
    links[2]!.setDelay(58);
    const settledCount = (await switches(m, tunnel.id)).length;
    await new Promise((resolve) => setTimeout(resolve, 6_000));
    assert.equal((await tunnelOf(m, tunnel.id)).chosen_exit_node_id, slow);
    assert.equal((await switches(m, tunnel.id)).length, settledCount, 'no move between two close exits');
  },
);
