// Rollouts with real agents, each under its supervisor: a second agent bundle built by the test (the built agent with
// another version, or broken on purpose) and signed by the test's release key is taken to the nodes in waves, and the
// agents verify it, hand their listening sockets over, and go back by themselves when the new one does not link.

import assert from 'node:assert/strict';
import { createPublicKey } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { connect, createServer, Server, type Socket } from 'node:net';
import { createSocket } from 'node:dgram';
import { once } from 'node:events';
import test, { type TestContext } from 'node:test';
import { send } from '../../internal/agentlink/wire.ts';
import { AGENT_FEATURES } from '../../internal/domain/link.ts';
import { keyIdOf } from '../../internal/release/signature.ts';
import { VERSION } from '../../internal/version.ts';
import { nodeOf, ruleOf, startAgent, udpRoundTrip, type AgentProcess } from '../agents.ts';
import { assertProblem, call, node, rule, startMaster, type Running } from '../helpers.ts';
import { freePort, freeSpan, probe, tcpEcho, tcpRoundTrip, udpEcho, until } from '../net.ts';
import { agentAs, releaseKey, rolloutOf, startRollout, upload } from '../releases.ts';
import { link, type RawLink } from '../rawlink.ts';

interface Fleet {
  m: Running;
  nodes: { id: number; agent: AgentProcess; port: number }[];
}

/** A master trusting the test's release key, and `count` nodes whose agents trust it too, each with a relayed rule. */
async function fleet(t: TestContext, count: number): Promise<Fleet> {
  const key = releaseKey();
  const m = await startMaster(t, { releaseKeyPaths: [key.path], localTargets: true });
  const echo = await tcpEcho(t);
  const nodes: Fleet['nodes'] = [];
  for (let i = 0; i < count; i++) {
    const made = await node(m, `edge-${i}`);
    const port = await freePort();
    await rule(m, { node_id: made.id, protocol: 'tcp', listen_port: port, targets: [`127.0.0.1:${echo}`] });
    const agent = startAgent(t, m.url, made.agent_token, {
      built: true,
      extraArgs: ['--release-key', key.text, '--drain-seconds', '3'],
    });
    nodes.push({ id: made.id, agent, port });
  }
  for (const { id, port } of nodes) {
    await until(`node ${id} applied its rule`, async () => (await nodeOf(m, id)).status === 'online');
    await until(`port ${port} forwards`, async () =>
      (await tcpRoundTrip(port, Buffer.from('hi')).catch(() => Buffer.alloc(0))).toString() === 'hi' ? true : false,
    );
  }
  return { m, nodes };
}

async function rolloutNodes(m: Running, id: number) {
  return (await call(m.url, 'GET', `/api/rollouts/${id}/nodes?limit=100`, { token: m.admin })).body.items as {
    node_id: number;
    state: string;
    detail: string | null;
    soaking_since: string | null;
  }[];
}

/** Opens a connection through `port` every 20 ms, each echoing a word, until stopped (or the test ends). */
function steadyClients(t: TestContext, port: number) {
  let opened = 0;
  const failures: string[] = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      const word = `w${opened++}`;
      await tcpRoundTrip(port, Buffer.from(word)).then(
        (echoed) => (echoed.toString() === word ? undefined : failures.push(`${word}: echoed '${echoed}'`)),
        (error: Error) => failures.push(`${word}: ${error.message}`),
      );
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  })();
  t.after(() => (running = false));
  return {
    failures,
    opened: () => opened,
    stop: async () => {
      running = false;
      await loop;
    },
  };
}

/** A connection through `port` held open: each `ask` sends a word and waits for its echo. */
async function heldConnection(port: number) {
  const socket: Socket = connect({ host: '127.0.0.1', port });
  await once(socket, 'connect');
  let received = '';
  socket.on('data', (chunk) => (received += chunk.toString()));
  socket.on('error', () => undefined);
  return {
    socket,
    ask: async (word: string) => {
      received = '';
      socket.write(word);
      await until(`'${word}' echoed on the held connection`, () => received === word, 5000);
    },
  };
}

test('a rollout takes 5 nodes to a new agent in a canary wave then the rest, refusing no connection', async (t) => {
  const { m, nodes } = await fleet(t, 5);
  await upload(m, '0.2.0', agentAs('0.2.0'));
  for (const { id } of nodes) assert.equal((await nodeOf(m, id)).upgrade_available, '0.2.0');
  const watched = nodes[0]!;
  // A UDP rule too: its bound socket is handed over as well.
  const [udpTarget, udpPort] = [await udpEcho(t), await freePort()];
  await rule(m, { node_id: watched.id, protocol: 'udp', listen_port: udpPort, targets: [`127.0.0.1:${udpTarget}`] });
  await until('the UDP rule forwards', async () => (await udpRoundTrip(udpPort, ['one']).catch(() => [])).length === 1);
  const clients = steadyClients(t, watched.port);
  const held = await heldConnection(watched.port);
  await held.ask('before');

  const { id } = await startRollout(m, { version: '0.2.0', ids: nodes.map((n) => n.id), waves: [1, '100%'] });
  await until('the canary upgraded', async () => (await nodeOf(m, watched.id)).agent_version === '0.2.0', 30_000);
  // The old agent drains for 3 s: the connection it holds works on meanwhile.
  await held.ask('during');
  const done = await until(
    'the rollout done',
    async () => {
      const rollout = await rolloutOf(m, id);
      assert.notEqual(rollout.state, 'halted', rollout.reason);
      return rollout.state === 'done' && rollout;
    },
    60_000,
  );
  assert.deepEqual(done.nodes, { waiting: 0, upgrading: 0, passed: 5, failed: 0 });
  await clients.stop();
  assert.deepEqual(clients.failures, [], `of ${clients.opened()} connections`);
  assert.ok(clients.opened() > 50);

  assert.deepEqual(await udpRoundTrip(udpPort, ['a', 'b', 'c']), ['a', 'b', 'c']);
  for (const { id: nodeId, port, agent } of nodes) {
    const shown = await nodeOf(m, nodeId);
    assert.equal(shown.agent_version, '0.2.0');
    assert.equal(shown.upgrade_available, null);
    const rules = await call(m.url, 'GET', `/api/rules?node_id=${nodeId}`, { token: m.admin });
    assert.equal(rules.body.items[0].sync.state, 'applied', JSON.stringify(rules.body.items[0].sync));
    assert.equal((await tcpRoundTrip(port, Buffer.from('after'))).toString(), 'after');
    assert.match(agent.output.join(''), /upgraded: the new agent took over; the old one drains/);
  }
  // Past the drain time the old agent closed what it still carried.
  await until('the held connection closed by the old agent', () => held.socket.destroyed || held.socket.readableEnded);
  const states = (await rolloutNodes(m, id)).map((n) => n.state);
  assert.deepEqual(states, ['passed', 'passed', 'passed', 'passed', 'passed']);
  const audit = await call(m.url, 'GET', `/api/audit-logs?resource=rollout&limit=100`, { token: m.admin });
  const actions = new Set(audit.body.items.map((entry: { action: string }) => entry.action));
  for (const action of ['rollout.create', 'rollout.node', 'rollout.wave', 'rollout.done'])
    assert.ok(actions.has(action));
});

test('a tampered bundle is refused by every agent, and the rollout halts saying so', async (t) => {
  const { m, nodes } = await fleet(t, 3);
  await upload(m, '0.3.0', agentAs('0.3.0'));
  // What a master taken over could do: change the bytes it hands out.
  const tampered = Buffer.concat([agentAs('0.3.0'), Buffer.from('\nprocess.exit(0);\n')]);
  m.app.store.write(() =>
    m.app.store.db.prepare("UPDATE agent_bundles SET body = ? WHERE version = '0.3.0'").run(tampered),
  );
  const { id } = await startRollout(m, { version: '0.3.0', ids: nodes.map((n) => n.id), waves: ['100%'] });
  const halted = await until('the rollout halted', async () => {
    const rollout = await rolloutOf(m, id);
    return rollout.state === 'halted' && rollout;
  });
  assert.match(halted.reason, /refused the bundle: the bundle is refused: the bundle is not the one signed/);
  for (const { agent, id: nodeId } of nodes) {
    await until(`node ${nodeId}'s agent refused it`, () => /refused an agent bundle/.test(agent.output.join('')));
    assert.equal((await nodeOf(m, nodeId)).agent_version, VERSION);
  }
});

test('an agent refuses an older bundle, however signed, whatever its master believes', async (t) => {
  const { m, nodes } = await fleet(t, 1);
  const [{ id, agent }] = nodes as [Fleet['nodes'][0]];
  await upload(m, '0.0.5', agentAs('0.0.5'));
  // A master taken over, or mistaken, takes the node for older than the bundle: the agent knows better.
  m.app.store.write(() => m.app.store.db.prepare('UPDATE nodes SET agent_version = ? WHERE id = ?').run('0.0.1', id));
  const { id: rollout } = await startRollout(m, { version: '0.0.5', ids: [id], waves: ['100%'] });
  const halted = await until('the rollout halted', async () => {
    const shown = await rolloutOf(m, rollout);
    return shown.state === 'halted' && shown;
  });
  assert.ok(halted.reason.includes(`0.0.5 is older than this agent (${VERSION}): an upgrade never goes back`));
  assert.doesNotMatch(agent.output.join(''), /a new agent bundle starts/);
});

test("a bundle that cannot link goes back by the agent's own watchdog, halting the rollout", async (t) => {
  const { m, nodes } = await fleet(t, 3);
  // It asks the master for a link where there is none: it runs, and never links.
  const broken = agentAs('0.4.0', (text) => text.replace('"/agent/v1/link"', '"/agent/v1/nowhere"'));
  await upload(m, '0.4.0', broken);
  const canary = nodes[0]!;
  // Going back takes the same path: the agent before never stopped accepting, and no connection is refused.
  const clients = steadyClients(t, canary.port);
  const started = Date.now();
  const { id } = await startRollout(m, {
    version: '0.4.0',
    ids: nodes.map((n) => n.id),
    waves: [1, '100%'],
    gate_seconds: 10,
  });
  const halted = await until(
    'the rollout halted',
    async () => {
      const rollout = await rolloutOf(m, id);
      return rollout.state === 'halted' && rollout;
    },
    40_000,
  );
  assert.match(halted.reason, new RegExp(`node ${canary.id}: its agent went back to the bundle before`));
  assert.match(halted.reason, /did not link and apply within 10 s/);
  assert.ok(Date.now() - started < 10_000 + 15_000, 'back within the gate and its grace');
  assert.equal((await nodeOf(m, canary.id)).agent_version, VERSION);
  assert.equal((await tcpRoundTrip(canary.port, Buffer.from('back'))).toString(), 'back');
  await clients.stop();
  assert.deepEqual(clients.failures, [], `of ${clients.opened()} connections`);
  const others = (await rolloutNodes(m, id)).filter((n) => n.node_id !== canary.id);
  assert.deepEqual(
    others.map((n) => n.state),
    ['waiting', 'waiting'],
  );
  for (const other of nodes.slice(1)) assert.equal((await nodeOf(m, other.id)).agent_version, VERSION);
});

test('a rollout pauses, resumes and aborts; what it is given is checked first', async (t) => {
  const { m, nodes } = await fleet(t, 2);
  await upload(m, '0.5.0', agentAs('0.5.0'));
  const ids = nodes.map((n) => n.id);
  assertProblem(
    await call(m.url, 'POST', '/api/rollouts', { token: m.admin, body: { version: '9.9.9', ids, waves: ['100%'] } }),
    422,
    'validation_failed',
  );
  const short = await call(m.url, 'POST', '/api/rollouts', {
    token: m.admin,
    body: { version: '0.5.0', ids, waves: [1] },
  });
  assertProblem(short, 422, 'validation_failed');
  assert.match(JSON.stringify(short.body), /the waves take 1 of the 2 nodes/);

  const { id } = await startRollout(m, { version: '0.5.0', ids, waves: [1, '100%'], pause_seconds: 3600 });
  assertProblem(
    await call(m.url, 'POST', '/api/rollouts', { token: m.admin, body: { version: '0.5.0', ids, waves: ['100%'] } }),
    409,
    'conflict',
  );
  await until('the canary wave passed', async () => (await rolloutOf(m, id)).wave_passed_at !== null, 30_000);
  const paused = await call(m.url, 'POST', `/api/rollouts/${id}/pause`, { token: m.admin });
  assert.equal(paused.body.state, 'paused');
  assertProblem(await call(m.url, 'POST', `/api/rollouts/${id}/pause`, { token: m.admin }), 409, 'conflict');
  assert.equal((await call(m.url, 'POST', `/api/rollouts/${id}/resume`, { token: m.admin })).body.state, 'running');
  const aborted = await call(m.url, 'POST', `/api/rollouts/${id}/abort`, { token: m.admin });
  assert.equal(aborted.body.state, 'aborted');
  assert.equal(aborted.body.reason, 'aborted by an operator');
  // The second wave never started: its node runs what it ran.
  await new Promise((resolve) => setTimeout(resolve, 1500));
  assert.equal((await nodeOf(m, nodes[1]!.id)).agent_version, VERSION);
  assert.deepEqual(
    (await rolloutNodes(m, id)).map((n) => n.state),
    ['passed', 'waiting'],
  );
});

/** The processes whose parent is `pid`. */
function childrenOf(pid: number): number[] {
  return readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .filter((name) => {
      try {
        // comm may hold spaces and parentheses: the fields after its closing one.
        const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
        return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid;
      } catch {
        return false;
      }
    })
    .map(Number);
}

/** Whether this process can bind `port` on loopback for `transport`: nothing anywhere holds it. */
async function bindable(transport: 'tcp' | 'udp', port: number): Promise<boolean> {
  const socket = transport === 'tcp' ? createServer() : createSocket('udp4');
  const bound = new Promise<boolean>((resolve) => {
    socket.once('error', () => resolve(false));
    socket.once('listening', () => resolve(true));
  });
  if (socket instanceof Server) socket.listen(port, '127.0.0.1');
  else socket.bind(port, '127.0.0.1');
  const free = await bound;
  if (free) socket.close();
  return free;
}

const DIED_AGAIN =
  'a worker that dies leaves its listening sockets with the supervisor: what comes meanwhile waits for the next ' +
  'worker, which closes and binds them again as its rules change; a worker whose supervisor was killed stops, ' +
  'a socket on its way or not';
test(DIED_AGAIN, async (t) => {
  const { m, nodes } = await fleet(t, 1);
  const [{ id, agent, port }] = nodes as [Fleet['nodes'][0]];
  const [udpTarget, udpPort] = [await udpEcho(t), await freePort()];
  const udpRule = await rule(m, {
    node_id: id,
    protocol: 'udp',
    listen_port: udpPort,
    targets: [`127.0.0.1:${udpTarget}`],
  });
  await until('the UDP rule forwards', async () => (await udpRoundTrip(udpPort, ['hi']).catch(() => [])).length === 1);
  const listed = await call(m.url, 'GET', `/api/rules?node_id=${id}&protocol=tcp`, { token: m.admin });
  const { id: ruleId, targets } = listed.body.items[0] as { id: number; targets: string[] };
  const span = await freeSpan(3);
  const range = await rule(m, { node_id: id, listen_port: span, listen_port_end: span + 2, targets });
  await until(
    'the range forwards',
    async () => (await tcpRoundTrip(span + 2, Buffer.from('hi')).catch(() => Buffer.alloc(0))).toString() === 'hi',
  );
  const [worker] = childrenOf(agent.pid!);
  assert.ok(worker, 'the supervisor runs its worker as a child');
  process.kill(worker, 'SIGKILL');
  await until('the worker seen gone', () => /the agent worker exited: starting it again/.test(agent.output.join('')));
  // The next starts a second later: connections and a datagram sent before it runs wait in the kernel for it.
  const served = Promise.all([
    tcpRoundTrip(port, Buffer.from('waited')),
    tcpRoundTrip(span + 1, Buffer.from('in range')),
    udpRoundTrip(udpPort, ['queued']),
  ]);
  assert.deepEqual(childrenOf(agent.pid!), [], 'no worker runs yet');
  const [echoed, echoedInRange, replies] = await served;
  assert.equal(echoed.toString(), 'waited');
  assert.equal(echoedInRange.toString(), 'in range');
  assert.deepEqual(replies, ['queued']);
  const [again] = childrenOf(agent.pid!);
  assert.ok(again && again !== worker, 'a new worker served them');
  await until('the node online again', async () => (await nodeOf(m, id)).status === 'online');

  // The new worker closes a port and binds it again in one apply (the rule's listener changes): the supervisor
  // dropped its copy first, or the bind would fail as in use.
  const both = await call(m.url, 'PUT', `/api/rules/${ruleId}`, {
    token: m.admin,
    body: { name: 'r', node_id: id, protocol: 'tcp+udp', listen_port: port, targets },
  });
  assert.equal(both.status, 200, JSON.stringify(both.body));
  const synced = await call(m.url, 'POST', `/api/rules/${ruleId}/sync`, { token: m.admin });
  assert.equal(synced.status, 200, JSON.stringify(synced.body));
  assert.equal((await tcpRoundTrip(port, Buffer.from('rebound'))).toString(), 'rebound');
  // A rule deleted frees its ports: no copy is left listening anywhere.
  for (const gone of [ruleId, udpRule.body.id as number, range.body.id as number])
    assert.equal((await call(m.url, 'DELETE', `/api/rules/${gone}`, { token: m.admin })).status, 204);
  for (const [transport, freed] of [
    ['tcp', port],
    ['udp', port],
    ['udp', udpPort],
    ['tcp', span],
    ['tcp', span + 1],
    ['tcp', span + 2],
  ] as const)
    await until(`${transport} port ${freed} free`, () => bindable(transport, freed));

  // Killed with a socket on its way to it (stopped first, so that it acknowledges none), the supervisor leaves a
  // worker that stops all the same: Node says 'disconnect' only once every handle sent was acknowledged.
  process.kill(agent.pid!, 'SIGSTOP');
  const late = await rule(m, { node_id: id, listen_port: await freePort(), targets });
  await until('the late rule applied', async () => (await ruleOf(m, late.body.id)).sync.state === 'applied');
  agent.kill('SIGKILL');
  await until('the orphaned worker gone', () => !existsSync(`/proc/${again}`), 10_000);
});

test("a tunnel exit's socket outlives its worker too, and goes with its tunnel", async (t) => {
  const key = releaseKey();
  const m = await startMaster(t, { releaseKeyPaths: [key.path], localTargets: true });
  const echo = await tcpEcho(t);
  const [entryNode, exitNode] = [
    await node(m, 'entry', { host: '127.0.0.1' }),
    await node(m, 'exit', { host: '127.0.0.1' }),
  ];
  const tunnelPort = await freePort();
  const tunnel = await call(m.url, 'POST', '/api/tunnels', {
    token: m.admin,
    body: { name: 't1', entry_node_id: entryNode.id, exit_node_id: exitNode.id, listen_port: tunnelPort },
  });
  assert.equal(tunnel.status, 201, JSON.stringify(tunnel.body));
  const exit = startAgent(t, m.url, exitNode.agent_token, { built: true, extraArgs: ['--release-key', key.text] });
  startAgent(t, m.url, entryNode.agent_token);
  const port = await freePort();
  const through = await rule(m, {
    node_id: entryNode.id,
    tunnel_id: tunnel.body.id,
    listen_port: port,
    targets: [`127.0.0.1:${echo}`],
  });
  const forwards = async () =>
    (await tcpRoundTrip(port, Buffer.from('hi')).catch(() => Buffer.alloc(0))).toString() === 'hi';
  await until('the rule forwards through the tunnel', forwards, 20_000);
  const [worker] = childrenOf(exit.pid!);
  process.kill(worker!, 'SIGKILL');
  await until('the worker seen gone', () => /the agent worker exited: starting it again/.test(exit.output.join('')));
  // Until the next worker runs, the exit's port takes connections into its backlog; that worker listens on it (the
  // copy holds the port: it could not bind one of its own), and the entry comes back to it.
  assert.equal(await probe(tunnelPort), 'open');
  assert.deepEqual(childrenOf(exit.pid!), [], 'no worker runs yet');
  await until('the rule forwards through the tunnel again', forwards, 20_000);
  for (const path of [`/api/rules/${through.body.id}`, `/api/tunnels/${tunnel.body.id}`])
    assert.equal((await call(m.url, 'DELETE', path, { token: m.admin })).status, 204);
  await until(`the exit's port ${tunnelPort} free`, () => bindable('tcp', tunnelPort));
});

/** The built agent as `version`, which exits (code 3) `ms` after it first applies a config: 0, as it starts. */
function dyingAgent(version: string, ms: number): Buffer {
  return agentAs(version, (text) =>
    ms === 0
      ? text.replace(`var VERSION = "${version}";`, `process.exit(3);\nvar VERSION = "${version}";`)
      : text.replace(
          '    this.options.log.info("applied config", {',
          `    globalThis.dies ??= setTimeout(() => process.exit(3), ${ms});\n` +
            '    this.options.log.info("applied config", {',
        ),
  );
}

/** The built agent as `version`, which drops its link to the master 1.5 s after it first applies a config. */
function cutOffAgent(version: string): Buffer {
  return agentAs(version, (text) =>
    text.replace(
      '    this.options.log.info("applied config", {',
      '    globalThis.cut ??= setTimeout(() => this.socket?.destroy(), 1500);\n' +
        '    this.options.log.info("applied config", {',
    ),
  );
}

/**
 * What a worker that dies takes with it: the connection it was serving, if one (the clients go one at a time), reset
 * or ended unanswered. Anything else, a refusal above all, is a failure.
 */
const DIED_SERVING = /^w\d+: ((read|write) (ECONNRESET|EPIPE)|echoed '')$/;

type SoakCase = { gate: number; soak: number; dies: boolean };
const FAILS_IN_SOAK: [string, (version: string) => Buffer, SoakCase, RegExp][] = [
  ['exits as it starts', (v) => dyingAgent(v, 0), { gate: 10, soak: 8, dies: true }, /it exited \(code 3\)$/],
  [
    'exits 1.5 s after it applied',
    (v) => dyingAgent(v, 1500),
    { gate: 10, soak: 8, dies: true },
    /it exited \(code 3\) [12] s into its 8 s soak/,
  ],
  [
    'exits 20 s after it applied',
    (v) => dyingAgent(v, 20_000),
    { gate: 10, soak: 30, dies: true },
    /it exited \(code 3\) 2\d s into its 30 s soak/,
  ],
  [
    'loses its link 1.5 s after it applied',
    cutOffAgent,
    { gate: 10, soak: 8, dies: false },
    /it lost its link to the master [12] s into its 8 s soak/,
  ],
];
for (const [index, [what, bundle, { gate, soak, dies }, why]] of FAILS_IN_SOAK.entries()) {
  const name = `a bundle that ${what} is rolled back by its supervisor with no connection refused; it halts`;
  test(name, async (t) => {
    const { m, nodes } = await fleet(t, 2);
    const version = `0.6.${index}`;
    await upload(m, version, bundle(version));
    const canary = nodes[0]!;
    const clients = steadyClients(t, canary.port);
    const { id } = await startRollout(m, {
      version,
      ids: nodes.map((n) => n.id),
      waves: [1, '100%'],
      gate_seconds: gate,
      soak_seconds: soak,
    });
    const halted = await until(
      'the rollout halted',
      async () => {
        const rollout = await rolloutOf(m, id);
        return rollout.state === 'halted' && rollout;
      },
      (gate + soak + 20) * 1000,
    );
    assert.match(halted.reason, new RegExp(`^node ${canary.id}: its agent went back to the bundle before`));
    assert.match(halted.reason, why);
    await until(
      'the canary back on its agent before',
      async () => (await nodeOf(m, canary.id)).agent_version === VERSION,
    );
    assert.equal((await tcpRoundTrip(canary.port, Buffer.from('back'))).toString(), 'back');
    await clients.stop();
    // None refused: the old worker accepted beside the new one throughout. One that stops drains what it took.
    const lost = clients.failures.filter((failure) => dies && DIED_SERVING.test(failure));
    assert.ok(lost.length <= 1, `${lost.join(', ')}: more than the one connection a dying worker may be serving`);
    assert.deepEqual(
      clients.failures.filter((failure) => !lost.includes(failure)),
      [],
      `of ${clients.opened()} connections`,
    );
    assert.deepEqual(
      (await rolloutNodes(m, id)).filter((n) => n.node_id !== canary.id).map((n) => n.state),
      ['waiting'],
      'the next wave was never told',
    );
  });
}

const MASTER_SOAK =
  "the master holds the soak whatever the agent's supervisor does: a node whose new agent links again within it " +
  'fails, one that keeps its link through it passes; soak_seconds goes only to agents that say they soak';
test(MASTER_SOAK, async (t) => {
  const key = releaseKey();
  const m = await startMaster(t, { releaseKeyPaths: [key.path] });
  const keyId = keyIdOf(createPublicKey(readFileSync(key.path, 'utf8')));
  await upload(m, '0.7.0', agentAs('0.7.0'));
  const [flaky, steady] = [await node(m, 'flaky'), await node(m, 'steady')];
  /** A raw link as an agent of `version` that acknowledges each config it is sent; `features` as it names them. */
  const agentOf = async (edge: { agent_token: string }, version: string, features = AGENT_FEATURES) => {
    const linked = (await link(m, edge.agent_token, undefined, version, {
      'X-Agent-Features': features.join(','),
      'X-Agent-Release-Keys': keyId,
    })) as RawLink;
    t.after(() => linked.socket.destroy());
    const config = await linked.next('config');
    send(linked.socket, { type: 'applied', version: config.version, results: [] });
    return linked;
  };
  /** Takes `edge` to 0.7.0 in a rollout of its own, its agent linking again as the new version; returns the rollout. */
  const upgraded = async (edge: { id: number; agent_token: string }, features: string[]) => {
    const old = await agentOf(edge, VERSION, features);
    const { id } = await startRollout(m, { version: '0.7.0', ids: [edge.id], waves: ['100%'], soak_seconds: 4 });
    const order = await old.next('upgrade');
    old.socket.destroy();
    const now = await agentOf(edge, '0.7.0', features);
    await until('its soak begun', async () => (await rolloutNodes(m, id))[0]!.soaking_since !== null);
    return { id, order, now };
  };
  const held = await upgraded(steady, [...AGENT_FEATURES, 'soak']);
  assert.equal(held.order.soak_seconds, 4, 'told the soak: its supervisor soaks');
  await until('the steady node passed', async () => (await rolloutOf(m, held.id)).state === 'done');
  assert.equal(
    (await rolloutNodes(m, held.id))[0]!.detail,
    'runs 0.7.0, linked, applied and healthy through a 4 s soak',
  );

  const flakyRun = await upgraded(flaky, AGENT_FEATURES);
  assert.equal(flakyRun.order.soak_seconds, undefined, 'not told: its supervisor would refuse the field');
  // Its agent comes back on a new link, as after an exit its supervisor did not catch.
  flakyRun.now.socket.destroy();
  await agentOf(flaky, '0.7.0');
  const halted = await until('the rollout halted', async () => {
    const rollout = await rolloutOf(m, flakyRun.id);
    return rollout.state === 'halted' && rollout;
  });
  assert.match(halted.reason, new RegExp(`^node ${flaky.id}: its agent lost its link \\d s into its 4 s soak`));
});

const CRASH_LOOP =
  'a bundle that crash-loops after its soak goes back to the agent before by the watchdog that stays, refusing no ' +
  'connection meanwhile, and the node says so: agent_fell_back, and the agent_crashloop alert';
test(CRASH_LOOP, async (t) => {
  const { m, nodes } = await fleet(t, 1);
  const edge = nodes[0]!;
  const channel = await call(m.url, 'POST', '/api/channels', {
    token: m.admin,
    body: { name: 'ops', type: 'webhook', url: `http://127.0.0.1:${await freePort()}/hook` },
  });
  const alertRule = await call(m.url, 'POST', '/api/alert-rules', {
    token: m.admin,
    body: { name: 'crash loops', condition: 'agent_crashloop', for_seconds: 0, channel_ids: [channel.body.id] },
  });
  assert.equal(alertRule.status, 201, JSON.stringify(alertRule.body));
  // Each time it starts, it dies 6 s after it applied: past the soak of 3 s, so the rollout passes it.
  await upload(m, '0.8.0', dyingAgent('0.8.0', 6000));
  const clients = steadyClients(t, edge.port);
  const { id } = await startRollout(m, { version: '0.8.0', ids: [edge.id], waves: ['100%'], soak_seconds: 3 });
  await until('the rollout done', async () => (await rolloutOf(m, id)).state === 'done', 30_000);
  const fell = await until(
    'the watchdog to go back',
    async () => {
      const shown = await nodeOf(m, edge.id);
      return shown.agent_fell_back !== null && shown.agent_version === VERSION && shown;
    },
    60_000,
  );
  assert.deepEqual(
    { ...fell.agent_fell_back, at: undefined, within_seconds: undefined },
    { from_version: '0.8.0', to_version: VERSION, exits: 3, at: undefined, within_seconds: undefined },
  );
  assert.ok(fell.agent_fell_back.within_seconds <= 60);
  assert.match(edge.agent.output.join(''), /the agent bundle crash-loops: back to the one it replaced/);
  const alerts = await until('the agent_crashloop alert', async () => {
    const listed = (await call(m.url, 'GET', '/api/alerts', { token: m.admin })).body.items;
    return listed.length > 0 && listed;
  });
  assert.equal(alerts[0].resource_id, edge.id);
  assert.match(alerts[0].summary, new RegExp(`went back from agent 0\\.8\\.0, which crash-looped \\(3 exits`));
  // It forwards on the agent it went back to. Between a worker's death and the next one, connections waited in the
  // kernel for it: none was refused; each death may take the one being served.
  assert.equal((await tcpRoundTrip(edge.port, Buffer.from('back'))).toString(), 'back');
  await clients.stop();
  const lost = clients.failures.filter((failure) => DIED_SERVING.test(failure));
  assert.ok(lost.length <= 3, `${lost.join(', ')}: more than the one connection each of 3 deaths may be serving`);
  assert.deepEqual(
    clients.failures.filter((failure) => !lost.includes(failure)),
    [],
    `of ${clients.opened()} connections`,
  );
});
