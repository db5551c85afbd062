// A rollout on a node whose rules the kernel carries: client, node and target on three hosts (network namespaces
// joined by veth pairs). The agent changes under the kernel's rules: a client connecting every 20 ms sees no
// failure, and what crossed the kernel meanwhile is counted once. Needs root, `ip netns` and `nft`; skips otherwise.

import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import test from 'node:test';
import { nodeOf, ruleOf, startAgent } from '../agents.ts';
import { call, node, rule, startMaster } from '../helpers.ts';
import { until } from '../net.ts';
import { echoIn, ip, namespaces, nftUnavailable, veth } from '../netns.ts';
import { agentAs, releaseKey, rolloutOf, startRollout, upload } from '../releases.ts';

const tag = `${process.pid % 100_000}`;
const [CLIENT, NODE, TARGET] = [`pr${tag}c`, `pr${tag}n`, `pr${tag}t`];
const NODE_ADDRESS = '10.217.2.2';

/** Connects to the node's port every 20 ms from the client, each echoing 1 KiB, until stdin ends; prints the tally. */
const STEADY_CLIENTS = `
  import { connect } from 'node:net';
  const [host, port] = process.argv.slice(1);
  let running = true, opened = 0, failed = 0, bytes = 0;
  process.stdin.on('end', () => (running = false)).resume();
  const once = () => new Promise((resolve) => {
    const payload = Buffer.alloc(1024, opened++ % 256);
    const socket = connect({ host, port: Number(port), allowHalfOpen: true }, () => socket.end(payload));
    let got = 0;
    socket.on('data', (chunk) => (got += chunk.length));
    socket.on('end', () => { if (got === payload.length) bytes += got; else failed++; socket.destroy(); resolve(); });
    socket.on('error', () => { failed++; resolve(); });
    // unref: the last connection's timer would hold the script open for 3 s after stdin's end.
    setTimeout(() => { if (!socket.destroyed) { failed++; socket.destroy(); resolve(); } }, 3000).unref();
  });
  while (running) { await once(); await new Promise((resolve) => setTimeout(resolve, 20)); }
  console.log(JSON.stringify({ opened, failed, bytes }));`;

test('an agent upgraded under kernel rules: no connection fails, and their traffic is counted once', async (t) => {
  const reason = nftUnavailable(`${NODE}-probe`);
  if (reason) return t.skip(reason);
  namespaces(t, [CLIENT, NODE, TARGET]);
  veth(`${NODE}h`, null, '10.217.1.1/30', `${NODE}m`, NODE, '10.217.1.2/30');
  veth(`${CLIENT}n`, CLIENT, '10.217.2.1/24', `${NODE}c`, NODE, `${NODE_ADDRESS}/24`);
  veth(`${NODE}t`, NODE, '10.217.3.1/24', `${TARGET}n`, TARGET, '10.217.3.2/24');
  ip('netns', 'exec', CLIENT, 'ip', 'route', 'add', 'default', 'via', NODE_ADDRESS);
  execFileSync('ip', ['netns', 'exec', NODE, 'sysctl', '-qw', 'net.ipv4.ip_forward=1']);
  await echoIn(t, TARGET, '0.0.0.0');

  const key = releaseKey();
  const m = await startMaster(t, { host: '0.0.0.0', insecureHttp: true, releaseKeyPaths: [key.path] });
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { agent_report_interval_seconds: 1 } });
  const edge = await node(m, 'edge', { host: NODE_ADDRESS });
  startAgent(t, `http://10.217.1.1:${new URL(m.url).port}`, edge.agent_token, {
    within: ['ip', 'netns', 'exec', NODE],
    listenHost: '0.0.0.0',
    built: true,
    extraArgs: ['--insecure-http', '--forwarding', 'auto', '--release-key', key.text, '--drain-seconds', '2'],
  });
  const direct = (await rule(m, { node_id: edge.id, listen_port: 15001, targets: ['10.217.3.2:7007'] })).body;
  await until('the rule in the kernel', async () => (await ruleOf(m, direct.id)).sync.applied_path === 'kernel');

  const clients = spawn(
    'ip',
    ['netns', 'exec', CLIENT, process.execPath, '--input-type=module', '-e', STEADY_CLIENTS, NODE_ADDRESS, '15001'],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  t.after(() => clients.kill('SIGKILL'));
  let tally = '';
  clients.stdout.setEncoding('utf8').on('data', (chunk: string) => (tally += chunk));
  await new Promise((resolve) => setTimeout(resolve, 500));

  await upload(m, '0.2.0', agentAs('0.2.0'));
  const { id } = await startRollout(m, { version: '0.2.0', ids: [edge.id], waves: ['100%'] });
  await until(
    'the rollout done',
    async () => {
      const rollout = await rolloutOf(m, id);
      assert.notEqual(rollout.state, 'halted', rollout.reason);
      return rollout.state === 'done';
    },
    30_000,
  );
  await new Promise((resolve) => setTimeout(resolve, 500));
  clients.stdin.end();
  await once(clients, 'exit');
  const { opened, failed, bytes } = JSON.parse(tally) as { opened: number; failed: number; bytes: number };
  assert.equal(failed, 0, `of ${opened} connections`);
  assert.ok(opened > 20, `${opened} connections`);

  const shown = await nodeOf(m, edge.id);
  assert.equal(shown.agent_version, '0.2.0');
  assert.equal((await ruleOf(m, direct.id)).sync.applied_path, 'kernel');
  // Each echoed byte crossed the kernel twice (in and out), with its headers: counted once, not twice, not lost.
  const counted = await until('the traffic reported', async () => {
    const { bytes_in } = (await ruleOf(m, direct.id)).traffic;
    return bytes_in >= bytes && bytes_in;
  });
  assert.ok(counted < bytes * 2, `counted ${counted} of ${bytes} bytes sent`);
  t.diagnostic(`${opened} connections through the upgrade, ${bytes} bytes echoed, ${counted} counted in`);
});
