// A master, an entry and an exit agent in this process, a tunnel between them of the transport a test names, and a
// TCP and a UDP rule through it to echo servers: what the tunnel tests of each transport start from.

import assert from 'node:assert/strict';
import type { TestContext } from 'node:test';
import { agentInProcess, nodeOf, startAgent } from './agents.ts';
import { call, node, rule, startMaster } from './helpers.ts';
import { freePort, tcpEcho, udpEcho, until } from './net.ts';

export interface FleetOptions {
  transport?: 'tls' | 'ws';
  /** The tunnel's via, made once the exit's port is known (a proxy in front of it); none: the exit itself. */
  via?: (tunnelPort: number) => Promise<string>;
  /** Run the entry's agent as a process of its own with this environment (in this process otherwise). */
  entryEnv?: Record<string, string>;
}

export async function tunnelFleet(t: TestContext, options: FleetOptions = {}) {
  const m = await startMaster(t, { localTargets: true });
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { agent_report_interval_seconds: 1 } });
  const echo = await tcpEcho(t);
  const udp = await udpEcho(t);
  const entryNode = await node(m, 'entry', { host: '127.0.0.1' });
  const exitNode = await node(m, 'exit', { host: '127.0.0.1' });
  const tunnelPort = await freePort();
  const via = options.via ? await options.via(tunnelPort) : null;
  const created = await call(m.url, 'POST', '/api/tunnels', {
    token: m.admin,
    body: {
      name: 't1',
      entry_node_id: entryNode.id,
      exit_node_id: exitNode.id,
      listen_port: tunnelPort,
      transport: options.transport ?? 'tls',
      via,
    },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const tunnel = created.body;
  const entry = options.entryEnv
    ? startAgent(t, m.url, entryNode.agent_token, { env: options.entryEnv })
    : await agentInProcess(t, m.url, entryNode.agent_token);
  const exit = await agentInProcess(t, m.url, exitNode.agent_token);
  await until('both agents online', async () =>
    (await Promise.all([nodeOf(m, entryNode.id), nodeOf(m, exitNode.id)])).every((n) => n.status === 'online'),
  );
  const [tcpPort, udpPort] = [await freePort(), await freePort()];
  const through = { node_id: entryNode.id, tunnel_id: tunnel.id };
  const tcpRule = (await rule(m, { ...through, listen_port: tcpPort, targets: [`127.0.0.1:${echo}`] })).body;
  const udpRule = (await rule(m, { ...through, listen_port: udpPort, protocol: 'udp', targets: [`127.0.0.1:${udp}`] }))
    .body;
  return { m, entryNode, exitNode, tunnel, tunnelPort, entry, exit, tcpRule, udpRule, tcpPort, udpPort };
}

export async function tunnelOf(m: { url: string; admin: string }, id: number) {
  return (await call(m.url, 'GET', `/api/tunnels/${id}`, { token: m.admin })).body;
}

/** Pushes both rules to the agents (and waits for their answers), then until the tunnel is up with a round trip. */
export async function untilCarrying(fleet: Awaited<ReturnType<typeof tunnelFleet>>): Promise<void> {
  const { m, tunnel, tcpRule, udpRule } = fleet;
  const batch = await call(m.url, 'POST', '/api/rules/batch-sync', {
    token: m.admin,
    body: { ids: [tcpRule.id, udpRule.id] },
  });
  assert.deepEqual(batch.body.results, [
    { id: tcpRule.id, outcome: 'applied' },
    { id: udpRule.id, outcome: 'applied' },
  ]);
  await until('the tunnel up with a round trip', async () => {
    const now = await tunnelOf(m, tunnel.id);
    return now.status === 'up' && now.rtt_ms !== null;
  });
}
