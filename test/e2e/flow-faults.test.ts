// No fault in one flow ends the agent: every failing kind of target (a name that resolves nowhere, a refused port, a
// connection reset mid-stream, broadcast, no route) driven through the relay, probes, checks, health checks and a
// tunnel, TCP and UDP, fails only its own connection or session; the agent lives on and its other rules forward. A
// throw inside a flow's callback is contained the same way, counted, and reported in the node's vitals.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { connect, createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import { datagramsTo } from '../../internal/relay/dial.ts';
import { contained, faults } from '../../internal/relay/faults.ts';
import { TargetPicker } from '../../internal/relay/targets.ts';
import { nodeOf, startAgent, udpRoundTrip, type AgentProcess } from '../agents.ts';
import { call, node, NO_CONTROLS, rule, startMaster } from '../helpers.ts';
import { closedPort, freePort, tcpEcho, tcpRoundTrip, udpEcho, until } from '../net.ts';
import { namespaces, netnsUnavailable } from '../netns.ts';

// Most of these tests wait on clocks and sockets: they run side by side.
describe('flow faults', { concurrency: 4 }, () => {
  const UNKNOWN = 'no-such-host.invalid';

  /** A TCP server that takes a connection, reads its first bytes and resets it. */
  async function resetter(t: TestContext): Promise<number> {
    const server = createServer((socket) => socket.once('data', () => socket.resetAndDestroy()));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    t.after(() => server.close());
    return (server.address() as AddressInfo).port;
  }

  /** Sends datagrams to a port and waits a moment for anything to come back (nothing need). */
  async function datagrams(port: number, count = 5): Promise<void> {
    const client = createSocket('udp4');
    client.on('error', () => undefined);
    for (let i = 0; i < count; i++) client.send(`d${i}`, port, '127.0.0.1');
    await new Promise((resolve) => setTimeout(resolve, 300));
    client.close();
  }

  /** Connects, writes, waits for the relay to answer or hang up (at most a second), and hangs up. */
  async function connection(port: number): Promise<void> {
    const socket = connect({ host: '127.0.0.1', port });
    socket.on('error', () => undefined);
    socket.on('connect', () => socket.write('hello'));
    await new Promise((resolve) => {
      socket.once('data', resolve);
      socket.once('close', resolve);
      setTimeout(resolve, 1000);
    });
    socket.destroy();
  }

  function alive(agent: AgentProcess): void {
    assert.equal(agent.exitCode, null, `the agent ended: ${agent.output.join('').slice(-2000)}`);
    assert.equal(agent.signalCode, null);
  }

  const EVERY_KIND =
    'every failing kind of target, through relay, probe, check, health check and tunnel, fails only its own flow';
  test(EVERY_KIND, async (t) => {
    const m = await startMaster(t, { localTargets: true });
    await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { agent_report_interval_seconds: 1 } });
    const [udp, tcp, closed, reset] = [await udpEcho(t), await tcpEcho(t), await closedPort(), await resetter(t)];
    const edge = await node(m, 'edge', { host: '127.0.0.1' });
    const far = await node(m, 'far', { host: '127.0.0.1' });
    const tunnel = await call(m.url, 'POST', '/api/tunnels', {
      token: m.admin,
      body: { name: 't', entry_node_id: edge.id, exit_node_id: far.id, listen_port: await freePort() },
    });
    assert.equal(tunnel.status, 201, JSON.stringify(tunnel.body));
    const agents = [startAgent(t, m.url, edge.agent_token), startAgent(t, m.url, far.agent_token)];
    await until('both nodes online', async () =>
      (await Promise.all([nodeOf(m, edge.id), nodeOf(m, far.id)])).every((n) => n.status === 'online'),
    );

    const rules: Record<string, { id: number; port: number; protocol: string }> = {};
    const add = async (name: string, protocol: string, targets: string[], extra: Record<string, unknown> = {}) => {
      const port = await freePort();
      const body = { name, node_id: edge.id, protocol, listen_port: port, targets, strategy: 'failover', ...extra };
      const created = await rule(m, body);
      assert.equal(created.status, 201, JSON.stringify(created.body));
      rules[name] = { id: created.body.id, port, protocol };
    };
    const health = { health_check: { interval_seconds: 1, timeout_ms: 200, fall: 1, rise: 1 } };
    await add('udp-unknown-name', 'udp', [`${UNKNOWN}:9`, `127.0.0.1:${udp}`]);
    await add('tcp-unknown-name', 'tcp', [`${UNKNOWN}:9`, `127.0.0.1:${tcp}`], health);
    await add('udp-refused', 'udp', [`127.0.0.1:${closed}`]);
    await add('tcp-refused', 'tcp', [`127.0.0.1:${closed}`], health);
    await add('tcp-reset', 'tcp', [`127.0.0.1:${reset}`], health);
    const through = { tunnel_id: tunnel.body.id };
    await add('tunnel-udp-unknown-name', 'udp', [`${UNKNOWN}:9`, `127.0.0.1:${udp}`], through);
    await add('tunnel-tcp-unknown-name', 'tcp', [`${UNKNOWN}:9`, `127.0.0.1:${tcp}`], through);
    await add('tunnel-udp-refused', 'udp', [`127.0.0.1:${closed}`], through);
    await add('tunnel-tcp-reset', 'tcp', [`127.0.0.1:${reset}`], through);
    await add('healthy', 'udp', [`127.0.0.1:${udp}`]);
    await until('every rule applied', async () => {
      const listed = await call(m.url, 'GET', `/api/rules?node_id=${edge.id}&limit=100`, { token: m.admin });
      return listed.body.items.every((r: { sync: { state: string } }) => r.sync.state === 'applied');
    });

    for (let round = 0; round < 3; round++) {
      for (const { port, protocol } of Object.values(rules))
        await (protocol === 'udp' ? datagrams(port) : connection(port));
      for (const { id } of Object.values(rules)) {
        const checked = await call(m.url, 'POST', `/api/rules/${id}/check`, { token: m.admin });
        assert.equal(checked.status, 200, JSON.stringify(checked.body));
      }
      for (const protocol of ['udp', 'tcp'])
        for (const target of [`${UNKNOWN}:9`, `127.0.0.1:${closed}`]) {
          const probed = await call(m.url, 'POST', `/api/nodes/${edge.id}/probe`, {
            token: m.admin,
            body: { target, protocol },
          });
          assert.equal(probed.status, 200, JSON.stringify(probed.body));
          assert.equal(probed.body.results[0].reachable, false, `${protocol} ${target}`);
        }
      agents.forEach(alive);
    }
    // The failing targets' rules still carry what they can: failover past the name that resolves nowhere.
    assert.deepEqual(await udpRoundTrip(rules['udp-unknown-name']!.port, ['a']), ['a']);
    assert.deepEqual(await tcpRoundTrip(rules['tcp-unknown-name']!.port, Buffer.from('b')), Buffer.from('b'));
    assert.deepEqual(await udpRoundTrip(rules['tunnel-udp-unknown-name']!.port, ['c']), ['c']);
    assert.deepEqual(await udpRoundTrip(rules['healthy']!.port, ['d', 'e']), ['d', 'e']);
    const checked = await call(m.url, 'GET', `/api/rules/${rules['tcp-refused']!.id}`, { token: m.admin });
    await until('the health check to mark the refused target down', async () => {
      const current = await call(m.url, 'GET', `/api/rules/${rules['tcp-refused']!.id}`, { token: m.admin });
      return current.body.health?.targets[0]?.status === 'down';
    });
    assert.equal(checked.status, 200);
    agents.forEach(alive);
    const vitals = (await nodeOf(m, edge.id)).vitals;
    assert.deepEqual(vitals.agent.faults, {}, 'failing targets are outcomes, not faults');
  });

  test(
    'a config the master would refuse today (broadcast, ' + 'multicast, no route) ends no flow but its own',
    async (t) => {
      const unavailable = netnsUnavailable('pp-faults-probe');
      if (unavailable) return t.skip(unavailable);
      // A namespace with nothing but loopback: every other address has no route, and nothing leaves it.
      const ns = `pp-faults-${process.pid}`;
      namespaces(t, [ns]);
      const inNs = (script: string) =>
        execFileSync('ip', ['netns', 'exec', ns, process.execPath, '--input-type=module', '-e', script], {
          encoding: 'utf8',
          timeout: 10_000,
        });
      const targets = [
        '255.255.255.255:9',
        '[::ffff:255.255.255.255]:9',
        '224.0.0.1:9',
        '198.51.100.1:9',
        '[2001:db8::1]:9',
      ];
      const stateDir = join(mkdtempSync(join(tmpdir(), 'portplane-agent-')), 'state');
      mkdirSync(stateDir);
      const { tags: _, ...controls } = NO_CONTROLS;
      const ruleOf = (id: number, protocol: string, port: number, to: string[]) => ({
        id,
        protocol,
        listen_port: port,
        targets: to,
        strategy: 'round_robin',
        enabled: true,
        tunnel_id: null,
        forwarding: 'relay',
        ...controls,
      });
      const rules = targets.flatMap((target, i) => [
        ruleOf(2 * i + 1, 'udp', 20_000 + i, [target]),
        ruleOf(2 * i + 2, 'tcp', 20_000 + i, [target]),
      ]);
      writeFileSync(
        join(stateDir, 'config.json'),
        JSON.stringify({
          version: 1,
          report_interval_seconds: 60,
          tcp_idle_timeout_seconds: 60,
          max_connections_per_source: 100,
          allow_local_targets: true,
          rules: [...rules, ruleOf(100, 'udp', 21_000, ['127.0.0.1:7'])],
          tunnels: [],
        }),
      );
      // Its master is nowhere: the agent forwards from the saved config, as after a restart during an outage.
      const agent = startAgent(t, 'http://127.0.0.1:9', `mat_1_${'x'.repeat(43)}`, {
        stateDir,
        within: ['ip', 'netns', 'exec', ns],
      });
      await until('the saved config applied', async () => agent.output.join('').includes('applying the saved config'));
      const answered = inNs(`
    import { createSocket } from 'node:dgram';
    import { connect } from 'node:net';
    const echo = createSocket('udp4');
    echo.on('message', (m, from) => echo.send(m, from.port, from.address));
    echo.bind(7, '127.0.0.1');
    const ports = ${JSON.stringify(targets.map((_, i) => 20_000 + i))};
    const client = createSocket('udp4');
    client.on('error', () => {});
    const wait = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
    await wait(500);
    for (let round = 0; round < 3; round++) {
      for (const port of ports) {
        for (let i = 0; i < 3; i++) client.send('x', port, '127.0.0.1');
        const socket = connect({ host: '127.0.0.1', port });
        socket.on('error', () => {});
        socket.on('connect', () => socket.write('x'));
      }
      await wait(200);
    }
    let replies = 0;
    client.on('message', () => (replies += 1));
    client.send('still here', 21000, '127.0.0.1');
    await wait(500);
    console.log(replies);
    process.exit(0);`);
      assert.equal(answered.trim(), '1', 'the loopback rule of the same config still forwards');
      alive(agent);
    },
  );

  test("a throw inside a flow's callback ends that flow, is counted at its site, and nothing else", async (t) => {
    const before = faults.totals().find((f) => f.site === 'udp_relay')?.count ?? 0;
    const echo = await udpEcho(t);
    let ended = 0;
    const dial = datagramsTo(new TargetPicker([{ host: '127.0.0.1', port: echo }], 'failover'), {
      allowLocalTargets: true,
    });
    const session = dial(
      () => {
        throw new Error('a reply handler that fails');
      },
      () => (ended += 1),
      '127.0.0.1',
    );
    assert.ok(session);
    session.send(Buffer.from('x'));
    await until('the session to end', async () => ended === 1);
    assert.equal(session.send(Buffer.from('y')), false, 'an ended session takes nothing more');
    assert.equal(faults.totals().find((f) => f.site === 'udp_relay')?.count, before + 1);

    const seen: string[] = [];
    const handler = contained(
      'probe',
      (n: number) => {
        if (n > 1) throw new Error(`bad ${n}`);
        seen.push(`ok ${n}`);
      },
      (error, n) => {
        seen.push(`ended ${n}: ${(error as Error).message}`);
        throw new Error('an end that fails too');
      },
    );
    handler(1);
    handler(2);
    assert.deepEqual(seen, ['ok 1', 'ended 2: bad 2']);
  });
});
