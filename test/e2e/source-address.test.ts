// source_address through the relay on this machine: a rule's connections to its target come from the address it
// names (one of this machine's own, which the agent reports), directly and at a tunnel's exit; the master refuses an
// address the node did not report, and the agent fails a rule whose address it does not have. The kernel path, with a
// node of two addresses: e2e/kernel-netns.test.ts.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, connect, type AddressInfo } from 'node:net';
import { networkInterfaces } from 'node:os';
import { describe, test, type TestContext } from 'node:test';
import { agentInProcess, nodeOf, ruleOf } from '../agents.ts';
import { call, node, rule, startMaster } from '../helpers.ts';
import { freePort, until } from '../net.ts';
import { tunnelFleet, untilCarrying } from '../tunnel-fleet.ts';

/** An IPv4 address of this machine's own that is not loopback, or null. */
function ownAddress(): string | null {
  for (const list of Object.values(networkInterfaces()))
    for (const entry of list ?? []) if (!entry.internal && entry.family === 'IPv4') return entry.address;
  return null;
}

/** A TCP server on loopback that answers each connection with the address it came from, and closes. */
async function whoCalled(t: TestContext): Promise<number> {
  const server = createServer((socket) => socket.end(socket.remoteAddress ?? '')).listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => server.close());
  return (server.address() as AddressInfo).port;
}

async function ask(port: number): Promise<string> {
  const socket = connect({ host: '127.0.0.1', port });
  let said = '';
  socket.on('data', (chunk) => (said += chunk));
  await once(socket, 'end');
  return said.replace(/^::ffff:/, '');
}

describe('source_address', { concurrency: 4 }, () => {
  test("a rule's connections come from its source_address; the master refuses one its node lacks", async (t) => {
    const from = ownAddress();
    if (!from) return t.skip('this machine has no IPv4 address but loopback');
    const m = await startMaster(t, { localTargets: true });
    await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { agent_report_interval_seconds: 1 } });
    const n = await node(m, 'edge');
    await agentInProcess(t, m.url, n.agent_token);
    await until('the node to report its addresses', async () =>
      ((await nodeOf(m, n.id)).vitals?.addresses ?? []).includes(from),
    );
    const target = `127.0.0.1:${await whoCalled(t)}`;
    const [sourced, plain] = [await freePort(), await freePort()];
    for (const [port, source] of [
      [sourced, from],
      [plain, null],
    ] as const)
      assert.equal(
        (await rule(m, { node_id: n.id, listen_port: port, targets: [target], source_address: source })).status,
        201,
      );
    await until('both rules applied', async () => {
      const rules = (await call(m.url, 'GET', `/api/rules?node_id=${n.id}`, { token: m.admin })).body.items;
      return rules.every((r: { sync: { state: string } }) => r.sync.state === 'applied');
    });
    assert.equal(await ask(sourced), from);
    assert.equal(await ask(plain), '127.0.0.1');
    const foreign = await call(m.url, 'POST', '/api/rules', {
      token: m.admin,
      body: {
        name: 'x',
        node_id: n.id,
        protocol: 'tcp',
        listen_port: 9,
        targets: [target],
        source_address: '192.0.2.77',
      },
    });
    assert.equal(foreign.status, 422);
    assert.match(foreign.body.errors[0].detail, new RegExp(`^is not an address of node ${n.id} \\(its agent reports `));
  });

  test('an agent without the address fails the rule with source_unavailable, saying which', async (t) => {
    const m = await startMaster(t, { localTargets: true });
    const n = await node(m, 'edge');
    // Written before the node reported any address: the master cannot tell, the agent can.
    const made = (await rule(m, { node_id: n.id, listen_port: await freePort(), source_address: '192.0.2.77' })).body;
    await agentInProcess(t, m.url, n.agent_token);
    const failed = await until('the rule to fail', async () => {
      const shown = await ruleOf(m, made.id);
      return shown.sync.state === 'failed' && shown;
    });
    assert.deepEqual(failed.sync.error, {
      code: 'source_unavailable',
      detail: '192.0.2.77 is not an address of this node: nothing can be dialled from it',
    });
  });

  test('through a tunnel, the exit dials from its own address the rule names', async (t) => {
    const from = ownAddress();
    if (!from) return t.skip('this machine has no IPv4 address but loopback');
    const f = await tunnelFleet(t);
    await untilCarrying(f);
    const target = `127.0.0.1:${await whoCalled(t)}`;
    await until('the exit to report its addresses', async () =>
      ((await nodeOf(f.m, f.exitNode.id)).vitals?.addresses ?? []).includes(from),
    );
    const port = await freePort();
    const made = await rule(f.m, {
      node_id: f.entryNode.id,
      tunnel_id: f.tunnel.id,
      listen_port: port,
      targets: [target],
      source_address: from,
    });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    await until(
      'the rule applied at both ends',
      async () => (await ruleOf(f.m, made.body.id)).sync.state === 'applied',
    );
    assert.equal(await ask(port), from);
  });
});
