// Balancing across namespaces, on both paths: a client "host" with several addresses, the node (its agent forwarding
// in the kernel where it can) and a target "host" with three addresses, each answering with its own address first.
// Every strategy is driven through the master's API and counted where the connections arrive. Needs root, `ip netns`
// and `nft`; skips with the reason otherwise.

import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { test, type TestContext } from 'node:test';
import { kernelEdge, ruleOf } from '../agents.ts';
import { call, rule, type Running } from '../helpers.ts';
import { until } from '../net.ts';
import { ip, nftUnavailable, runIn, threeHosts } from '../netns.ts';

const tag = `${process.pid % 100_000}`;
const CLIENT = `pb${tag}c`;
const NODE = `pb${tag}n`;
const TARGET = `pb${tag}t`;
const NODE_ADDRESS = '10.216.2.2';
const TARGETS = ['10.216.3.2', '10.216.3.3', '10.216.3.4'];
/** The client host's addresses: one per "client" of the source_hash test. */
const CLIENTS = Array.from({ length: 8 }, (_, i) => `10.216.2.${10 + i}`);
const PORT = 7010;

/** host <-> node (the agent's link), client <-> node, node <-> target; the target has no route to the client. */
function network(t: TestContext): void {
  threeHosts(t, `pb${tag}`, 216);
  for (const address of CLIENTS) ip('netns', 'exec', CLIENT, 'ip', 'addr', 'add', `${address}/24`, 'dev', `${CLIENT}n`);
  for (const address of TARGETS.slice(1))
    ip('netns', 'exec', TARGET, 'ip', 'addr', 'add', `${address}/24`, 'dev', `${TARGET}n`);
  // The target's firewall, empty for now: conntrack follows its connections from the start, so that a rule added
  // later for new ones (ct state new) tells them from those held.
  const fence =
    'add table inet fence; add chain inet fence input { type filter hook input priority 0; }; ' +
    'add rule inet fence input ct state new counter';
  ip('netns', 'exec', TARGET, 'nft', fence);
}

/** On every target address: answers a connection with the address it reached, then echoes. */
async function targets(t: TestContext): Promise<void> {
  const script = `
    import { createServer } from 'node:net';
    createServer((s) => { s.on('error', () => s.destroy()); s.write(s.localAddress + '\\n'); s.pipe(s); })
      .listen(${PORT}, '0.0.0.0', () => console.log('ready'));`;
  const child = spawn('ip', ['netns', 'exec', TARGET, process.execPath, '--input-type=module', '-e', script], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  t.after(() => child.kill('SIGKILL'));
  await once(child.stdout!, 'data');
}

/** Opens COUNT connections one after another from FROM to HOST:PORT; prints how many reached each target. */
const TALLY = `
  import { connect } from 'node:net';
  const [host, port, count, from] = process.argv.slice(1);
  const tally = {};
  for (let i = 0; i < Number(count); i++) {
    const who = await new Promise((resolve) => {
      const socket = connect({ host, port: Number(port), localAddress: from });
      let got = '';
      socket.setEncoding('utf8').on('data', (text) => {
        got += text;
        if (got.includes('\\n')) { socket.destroy(); resolve(got.trim()); }
      });
      socket.on('error', (error) => resolve(error.code));
      socket.on('close', () => resolve(got.trim() || 'closed'));
      // unref: a connection done leaves its timer behind, which held the script open for 3 s more.
      setTimeout(() => { socket.destroy(); resolve('timeout'); }, 3000).unref();
    });
    tally[who] = (tally[who] ?? 0) + 1;
  }
  console.log(JSON.stringify(tally));`;

async function tally(count: number, from = CLIENTS[0]!): Promise<Record<string, number>> {
  return JSON.parse(await runIn(CLIENT, TALLY, NODE_ADDRESS, String(PORT), String(count), from));
}

function edgeNode(t: TestContext, settings: Record<string, unknown> = {}) {
  return kernelEdge(t, { namespace: NODE, nodeAddress: NODE_ADDRESS, hostAddress: '10.216.1.1' }, settings);
}

/** Writes rule `id` (PUT, all of `fields`), waits for its node to apply it, and says which path carries it. */
async function place(m: Running, id: number, fields: Record<string, unknown>): Promise<string | null> {
  const current = await ruleOf(m, id);
  const body = { ...fields, node_id: current.node_id, listen_port: PORT, name: current.name, protocol: 'tcp' };
  const written = await call(m.url, 'PUT', `/api/rules/${id}`, { token: m.admin, body });
  assert.equal(written.status, 200, JSON.stringify(written.body));
  await until('the rule applied', async () => (await ruleOf(m, id)).sync.state === 'applied', 10_000);
  return (await ruleOf(m, id)).sync.applied_path;
}

const ALL = TARGETS.map((address) => `${address}:${PORT}`);
const CHECKED = { interval_seconds: 1, timeout_ms: 500, fall: 1, rise: 1 };

/** Within 10% of `want` of `total`. */
function near(got: number, want: number, total: number): boolean {
  return Math.abs(got - want) <= total * 0.1;
}

for (const forwarding of ['auto', 'relay'] as const) {
  const path = forwarding === 'auto' ? 'kernel' : 'relay';
  test(
    `on the ${path}: weights 3:1 hold over 400 connections; source_hash keeps a client on its target and spreads ` +
      'several; a target marked down gets no new connection within two check intervals while held ones go on',
    { timeout: 120_000 },
    async (t) => {
      const reason = nftUnavailable(`${NODE}-probe`);
      if (reason) return t.skip(reason);
      network(t);
      await targets(t);
      const { m, edge } = await edgeNode(t);
      const made = await rule(m, { node_id: edge.id, listen_port: PORT, targets: ALL.slice(0, 2), forwarding });
      const id = made.body.id as number;

      const weighted = { targets: ALL.slice(0, 2), weights: [3, 1], health_check: CHECKED, forwarding };
      assert.equal(await place(m, id, weighted), path);
      await until('both targets up', async () => (await ruleOf(m, id)).health?.status === 'up');
      const shares = await tally(400);
      assert.ok(
        near(shares[TARGETS[0]!] ?? 0, 300, 400) && near(shares[TARGETS[1]!] ?? 0, 100, 400),
        JSON.stringify(shares),
      );

      const hashed = { targets: ALL, strategy: 'source_hash', health_check: CHECKED, forwarding };
      assert.equal(await place(m, id, hashed), path);
      const one = await tally(20);
      assert.equal(Object.keys(one).length, 1, `one client, one target: ${JSON.stringify(one)}`);
      const reached = new Set<string>();
      for (const from of CLIENTS) {
        const seen = Object.keys(await tally(3, from));
        assert.equal(seen.length, 1, `${from} stays on one target`);
        reached.add(seen[0]!);
      }
      assert.ok(reached.size >= 2, `eight clients spread: ${[...reached].join(', ')}`);

      // A target refusing new connections (its host's firewall) while those it holds go on.
      const roundRobin = { targets: ALL, strategy: 'round_robin', health_check: CHECKED, forwarding };
      assert.equal(await place(m, id, roundRobin), path);
      await until('every target up', async () => (await ruleOf(m, id)).health?.status === 'up');
      const held = await holdOn(t, TARGETS[1]!);
      const refuse = `ip daddr ${TARGETS[1]} tcp dport ${PORT} ct state new reject with tcp reset`;
      assert.equal(spawnSync('ip', ['netns', 'exec', TARGET, 'nft', `add rule inet fence input ${refuse}`]).status, 0);
      const marked = Date.now();
      await until('the target marked down', async () => (await ruleOf(m, id)).health?.status === 'degraded', 5000);
      const downWithin = Date.now() - marked;
      assert.ok(downWithin <= 2 * 1000 + 1000, `marked down in ${downWithin} ms`);
      const after = await tally(30);
      assert.equal(after[TARGETS[1]!], undefined, `no new connection to the target down: ${JSON.stringify(after)}`);
      assert.equal((after[TARGETS[0]!] ?? 0) + (after[TARGETS[2]!] ?? 0), 30);
      await held.echoes('still-here');
    },
  );
}

/** A connection held open to the target at `address` (connecting until one lands there), that echoes. */
async function holdOn(t: TestContext, address: string) {
  const script = `
    import { connect } from 'node:net';
    import { createInterface } from 'node:readline';
    let socket;
    const open = () => {
      socket = connect(${PORT}, '${NODE_ADDRESS}');
      socket.on('error', (error) => console.log(error.code));
      let first = true;
      socket.setEncoding('utf8').on('data', (text) => {
        if (first && !text.startsWith('${address}')) { socket.destroy(); return open(); }
        if (first) console.log('open');
        first = false;
        process.stdout.write(text);
      });
    };
    createInterface({ input: process.stdin }).on('line', (line) => socket.write(line + '\\n'));
    open();`;
  const child = spawn('ip', ['netns', 'exec', CLIENT, process.execPath, '--input-type=module', '-e', script], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  t.after(() => child.kill('SIGKILL'));
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (out += chunk));
  await until('a connection held on the target', () => out.includes('open'), 10_000);
  return {
    echoes: (line: string) => {
      child.stdin.write(`${line}\n`);
      return until(`"${line}" to come back`, () => out.includes(line), 5000);
    },
  };
}

const PRESERVED =
  "preserve_source in the kernel: a target routing its replies through the node sees the client's own address (the " +
  "node's without it); a rule whose target the kernel cannot send to fails rather than going to the relay";

test(PRESERVED, { timeout: 60_000 }, async (t) => {
  const reason = nftUnavailable(`${NODE}-probe`);
  if (reason) return t.skip(reason);
  network(t);
  // The target's replies to the client's network go back through the node, as behind a gateway.
  ip('netns', 'exec', TARGET, 'ip', 'route', 'add', '10.216.2.0/24', 'via', '10.216.3.1');
  const script = `
    import { createServer } from 'node:net';
    createServer((s) => { s.on('error', () => s.destroy()); s.end(s.remoteAddress + '\\n'); })
      .listen(${PORT}, '0.0.0.0', () => console.log('ready'));`;
  const child = spawn('ip', ['netns', 'exec', TARGET, process.execPath, '--input-type=module', '-e', script], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  t.after(() => child.kill('SIGKILL'));
  await once(child.stdout!, 'data');
  const { m, edge } = await edgeNode(t, { allow_local_rule_targets: 1 });
  const made = await rule(m, { node_id: edge.id, listen_port: PORT, targets: ALL.slice(0, 1), preserve_source: true });
  await until('the rule applied', async () => (await ruleOf(m, made.body.id)).sync.state === 'applied', 10_000);
  assert.equal((await ruleOf(m, made.body.id)).sync.applied_path, 'kernel');
  assert.deepEqual(await tally(3, CLIENTS[2]), { [CLIENTS[2]!]: 3 }, "the target saw the client's address");
  // The same rule without it: the node's address.
  assert.equal(await place(m, made.body.id, { targets: ALL.slice(0, 1), preserve_source: false }), 'kernel');
  assert.deepEqual(await tally(3, CLIENTS[2]), { '10.216.3.1': 3 }, "the target saw the node's address");
  // A target the kernel cannot send to (the node's own loopback): the rule fails rather than go to the relay.
  const local = await rule(m, {
    node_id: edge.id,
    listen_port: PORT + 1,
    targets: ['127.0.0.1:9'],
    preserve_source: true,
  });
  await until('the rule failed', async () => (await ruleOf(m, local.body.id)).sync.state === 'failed', 10_000);
  const { sync } = await ruleOf(m, local.body.id);
  assert.deepEqual([sync.error.code, sync.applied_path], ['kernel_unsupported', null]);
  assert.match(sync.error.detail, /no address of the target/);
});
