// Moving a node in from iptables, across three "hosts" (client, node, target: network namespaces the test makes): the
// node forwards with an iptables ruleset; what iptables-save says of it is imported; with iptables emptied, the
// node's agent applies the imported rules and the same client traffic reaches the same target. And out again: the
// node's rules exported as an nftables script, loaded with the agent gone, forward that traffic once more. Needs root,
// `ip netns`, nft and iptables; skips with the reason otherwise.

import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { kernelEdge, nodeOf, stopAgent } from '../agents.ts';
import { call } from '../helpers.ts';
import { until } from '../net.ts';
import { echoIn, nftIn, nftUnavailable, runIn, TCP_ROUND_TRIP, threeHosts, UDP_ROUND_TRIP } from '../netns.ts';

const PREFIX = `pi${process.pid % 100_000}`;
const [CLIENT, NODE] = [`${PREFIX}c`, `${PREFIX}n`];
const NODE_ADDRESS = '10.215.2.2';
const TARGET_ADDRESS = '10.215.3.2';

/** The node's iptables ruleset: a TCP port and a UDP port to the target, and the source NAT that goes with them. */
const RULESET = `*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -p tcp -m tcp --dport 15001 -j DNAT --to-destination ${TARGET_ADDRESS}:7007
-A PREROUTING -p udp -m udp --dport 15002 -j DNAT --to-destination ${TARGET_ADDRESS}:7007
-A POSTROUTING -d ${TARGET_ADDRESS}/32 -j MASQUERADE
COMMIT
`;

const iptablesIn = (ns: string, args: string[], input?: string) =>
  execFileSync('ip', ['netns', 'exec', ns, ...args], { encoding: 'utf8', input });

/** The client's traffic through the node: TCP bytes and a UDP datagram echoed by the target. */
async function carried(): Promise<void> {
  assert.equal(await runIn(CLIENT, TCP_ROUND_TRIP, NODE_ADDRESS, '15001', '50000'), '50000');
  assert.equal(await runIn(CLIENT, UDP_ROUND_TRIP, NODE_ADDRESS, '15002', '3'), '3');
}

test(
  'an iptables ruleset imported: the agent forwards the same traffic to the same target, and so does its nft export',
  { timeout: 120_000 },
  async (t) => {
    const reason =
      nftUnavailable(`${NODE}-probe`) ??
      (spawnSync('iptables-restore', ['--version']).status === 0
        ? null
        : 'iptables is not installed (apt-get install iptables)');
    if (reason) return t.skip(reason);
    const hosts = threeHosts(t, PREFIX, 215);
    await echoIn(t, hosts.target, '0.0.0.0');

    iptablesIn(NODE, ['iptables-restore'], RULESET);
    await carried();
    const source = iptablesIn(NODE, ['iptables-save']);
    iptablesIn(NODE, ['iptables', '-t', 'nat', '-F']);
    await assert.rejects(runIn(CLIENT, TCP_ROUND_TRIP, NODE_ADDRESS, '15001', '10'), 'nothing forwards once emptied');

    const { m, edge, agent } = await kernelEdge(t, { namespace: NODE, ...hosts });
    const patched = await call(m.url, 'PATCH', '/api/settings', {
      token: m.admin,
      body: { agent_report_interval_seconds: 1 },
    });
    assert.equal(patched.status, 200);
    const imported = await call(m.url, 'POST', '/api/import', {
      token: m.admin,
      body: { format: 'iptables', node: 'edge', source },
    });
    assert.equal(imported.status, 200, JSON.stringify(imported.body));
    assert.deepEqual(
      imported.body.rules.map((r: { name: string; outcome: string }) => [r.name, r.outcome]),
      [
        ['iptables-tcp-15001', 'created'],
        ['iptables-udp-15002', 'created'],
      ],
    );
    assert.deepEqual(imported.body.unmapped, [], 'iptables-save of this ruleset maps whole');
    await until('the imported rules applied', async () => {
      const rules = await call(m.url, 'GET', `/api/rules?node_id=${edge.id}`, { token: m.admin });
      return rules.body.items.every((r: { sync: { state: string } }) => r.sync.state === 'applied');
    });
    await carried();

    const exported = await fetch(`${m.url}/api/nodes/${edge.id}/export?format=nftables`, {
      headers: { Authorization: `Bearer ${m.admin}` },
    });
    const script = await exported.text();
    await stopAgent(agent);
    await until('the node offline', async () => (await nodeOf(m, edge.id)).status === 'offline');
    // The agent's own table, left for a restart to take up, goes: the script alone forwards.
    for (const [, family, name] of nftIn(NODE, 'list', 'tables').out.matchAll(/^table (\S+) (portplane_\d+)$/gm))
      nftIn(NODE, 'delete', 'table', family!, name!);
    assert.doesNotMatch(nftIn(NODE, 'list', 'tables').out, /portplane_\d+/);
    const checked = spawnSync('ip', ['netns', 'exec', NODE, 'nft', '-c', '-f', '-'], {
      input: script,
      encoding: 'utf8',
    });
    assert.equal(checked.status, 0, `${checked.stderr}\n${script}`);
    iptablesIn(NODE, ['nft', '-f', '-'], script);
    await carried();
  },
);
