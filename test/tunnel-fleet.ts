// A master, an entry and an exit agent in this process, a tunnel between them of the transport a test names, and a
// TCP and a UDP rule through it to echo servers: what the tunnel tests of each transport start from. And the same
// with several exits, each behind a link impaired in user space: what the tests and the bench of exits start from.

import assert from 'node:assert/strict';
import type { TestContext } from 'node:test';
import { agentInProcess, nodeOf, startAgent } from './agents.ts';
import { call, node, rule, startMaster, type Running } from './helpers.ts';
import { freePort, impairedLink, tcpEcho, tcpRoundTrip, udpEcho, until } from './net.ts';

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

/** Fast rounds, so that a test sees the choice settle in seconds: a round a second, three to move, 2 s apart. */
export const SWITCHING = {
  agent_report_interval_seconds: 1,
  tunnel_round_seconds: 1,
  tunnel_switch_rounds: 3,
  tunnel_switch_gain_ms: 20,
  tunnel_switch_gain_percent: 15,
  tunnel_switch_cooldown_seconds: 2,
};

/**
 * A master, an entry and `delays.length` exits (agents in this process), each exit behind a link delayed that many ms
 * each way (those of `cutAtFirst` cut), a ws tunnel through them with `strategy`, and a TCP rule through it to an echo
 * server.
 */
export async function exitsFleet(
  t: TestContext,
  delays: number[],
  strategy: 'failover' | 'lowest_latency',
  cutAtFirst: number[] = [],
  settings: Record<string, number> = SWITCHING,
) {
  const m = await startMaster(t, { localTargets: true });
  const patched = await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: settings });
  assert.equal(patched.status, 200, JSON.stringify(patched.body));
  const echo = await tcpEcho(t);
  const entryNode = await node(m, 'entry', { host: '127.0.0.1' });
  const exitNodes: Awaited<ReturnType<typeof node>>[] = [];
  for (const i of delays.keys()) exitNodes.push(await node(m, `exit-${i + 1}`, { host: '127.0.0.1' }));
  const ports = await Promise.all(delays.map(() => freePort()));
  const links = await Promise.all(delays.map((delay, i) => impairedLink(t, ports[i]!, delay)));
  for (const i of cutAtFirst) links[i]!.cut();
  const created = await call(m.url, 'POST', '/api/tunnels', {
    token: m.admin,
    body: {
      name: 'several',
      entry_node_id: entryNode.id,
      exit_node_ids: exitNodes.map((exit) => exit.id),
      exit_ports: ports,
      exit_strategy: strategy,
      transport: 'ws',
      exit_vias: links.map((link) => `ws://127.0.0.1:${link.port}/`),
    },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const entry = await agentInProcess(t, m.url, entryNode.agent_token);
  for (const end of exitNodes) await agentInProcess(t, m.url, end.agent_token);
  await until('every agent online', async () =>
    (await Promise.all([entryNode, ...exitNodes].map((end) => nodeOf(m, end.id)))).every((n) => n.status === 'online'),
  );
  const listenPort = await freePort();
  const through = { node_id: entryNode.id, tunnel_id: created.body.id, listen_port: listenPort };
  const tcpRule = (await rule(m, { ...through, targets: [`127.0.0.1:${echo}`] })).body;
  const synced = await call(m.url, 'POST', `/api/rules/${tcpRule.id}/sync`, { token: m.admin });
  assert.equal(synced.body.sync?.state ?? synced.body.state, 'applied', JSON.stringify(synced.body));
  const exitIds = exitNodes.map((exit) => exit.id);
  return { m, tunnel: created.body, exitIds, links, listenPort, tcpRule, entry };
}

export async function echoed(port: number, text: string): Promise<string> {
  return (await tcpRoundTrip(port, Buffer.from(text))).toString();
}

export async function chosenExit(m: Running, id: number): Promise<number | null> {
  return (await tunnelOf(m, id)).chosen_exit_node_id;
}

export async function exitSwitches(m: Running, id: number) {
  const page = await call(m.url, 'GET', `/api/audit-logs?action=tunnel.exit_switched&resource_id=${id}&limit=100`, {
    token: m.admin,
  });
  return page.body.items as { actor: unknown; changes: { after: { chosen_exit_node_id: number; because: string } } }[];
}
