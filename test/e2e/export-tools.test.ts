// The formats written for running without an agent, through the real tools: a node's rules exported as nftables
// (checked by nft -c, loaded in a namespace, listed as JSON) and as HAProxy (haproxy -c clean) come back alike when
// imported; and an exported HAProxy config forwards through a real HAProxy. Needs nft and ip netns (root), and
// haproxy; each skips with the reason otherwise.

import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { roundTrip, type Trip } from '../format-trips.ts';
import { node, rule, startMaster } from '../helpers.ts';
import { freePort, tcpEcho, tcpRoundTrip, until } from '../net.ts';
import { netnsUnavailable } from '../netns.ts';

/** An nft script loaded in a namespace of its own (checked first), and the ruleset listed as JSON. */
function nftListed(script: string): string {
  const ns = `pp-export-${process.pid}`;
  const run = (...args: string[]) =>
    execFileSync('ip', ['netns', 'exec', ns, 'nft', ...args], { input: script, encoding: 'utf8' });
  execFileSync('ip', ['netns', 'add', ns]);
  try {
    run('-c', '-f', '-');
    run('-f', '-');
    return run('-j', 'list', 'ruleset');
  } finally {
    execFileSync('ip', ['netns', 'del', ns]);
  }
}

const noNft =
  netnsUnavailable(`pp-probe-${process.pid}`) ?? (spawnSync('nft', ['--version']).status === 0 ? false : 'no nft');

/** An HAProxy config as `haproxy -c` finds it: clean (no warning), or the test fails. */
function haproxyChecked(config: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'pp-haproxy-'));
  writeFileSync(join(dir, 'haproxy.cfg'), config);
  const checked = spawnSync('haproxy', ['-c', '-f', join(dir, 'haproxy.cfg')], { encoding: 'utf8' });
  assert.equal(checked.status, 0, `${checked.stdout}${checked.stderr}`);
  assert.doesNotMatch(`${checked.stdout}${checked.stderr}`, /WARNING|ALERT/, config);
  return config;
}

const noHaproxy: string | false = spawnSync('haproxy', ['-v']).status === 0 ? false : 'no haproxy';

const NFTABLES: Trip = {
  format: 'nftables',
  notCarried: ['max_connections', 'bandwidth_limit', 'quota', 'health_check', 'proxy_protocol'],
  roundTrip: [
    { name: 'web', protocol: 'tcp+udp', listen_port: 8080, targets: ['198.51.100.1:80'] },
    {
      name: 'weighted',
      protocol: 'tcp',
      listen_port: 8443,
      targets: ['198.51.100.2:443', '198.51.100.3:443'],
      strategy: 'random',
      weights: [3, 1],
      allow_sources: ['203.0.113.0/24'],
    },
    {
      name: 'sticky',
      protocol: 'tcp',
      listen_port: 9000,
      listen_port_end: 9009,
      targets: ['198.51.100.4:9000-9009'],
      preserve_source: true,
    },
    {
      name: 'hashed',
      protocol: 'udp',
      listen_port: 5353,
      targets: ['[2001:db8::53]:53', '[2001:db8::54]:53'],
      strategy: 'source_hash',
    },
  ],
  // The script as the kernel holds it, read back by the real nft: loaded in a namespace, listed as JSON.
  through: nftListed,
};

const HAPROXY: Trip = {
  format: 'haproxy',
  notCarried: ['udp', 'bandwidth_limit', 'quota', 'preserve_source', 'strategy lowest_latency'],
  roundTrip: [
    {
      name: 'weighted',
      protocol: 'tcp',
      listen_port: 8080,
      targets: ['198.51.100.1:80', '198.51.100.2:80'],
      weights: [3, 1],
      health_check: { interval_seconds: 5, timeout_ms: 1500, fall: 2, rise: 3 },
      max_connections: 500,
    },
    {
      name: 'db',
      protocol: 'tcp',
      listen_port: 5432,
      targets: ['198.51.100.3:5432', '[2001:db8::4]:5432'],
      strategy: 'source_hash',
      proxy_protocol: 'v2',
      max_new_connections_per_second: 20,
      allow_sources: ['198.51.100.0/24'],
      deny_sources: ['198.51.100.9'],
    },
    {
      name: 'span',
      protocol: 'tcp',
      listen_port: 7000,
      listen_port_end: 7009,
      targets: ['198.51.100.5:8000-8009'],
      strategy: 'least_conn',
    },
  ],
  // The header's defaults, which are the proxy's own: listed, as any such line is.
  roundTripUnmapped: /^timeout (connect|client|server) .*$/,
  through: haproxyChecked,
};

for (const [trip, skip] of [
  [NFTABLES, noNft],
  [HAPROXY, noHaproxy],
] as const)
  test(
    `${trip.format}: rules exported and imported again, alike but for ${trip.notCarried.join(', ')}`,
    { skip },
    (t) => roundTrip(t, trip),
  );

test("a node's TCP rules exported for HAProxy forward through a real HAProxy", { skip: noHaproxy }, async (t) => {
  const m = await startMaster(t, { localTargets: true });
  const edge = await node(m, 'edge');
  const [echo, port] = [await tcpEcho(t), await freePort()];
  const made = await rule(m, { name: 'echo', node_id: edge.id, listen_port: port, targets: [`127.0.0.1:${echo}`] });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const exported = await fetch(`${m.url}/api/nodes/${edge.id}/export?format=haproxy`, {
    headers: { Authorization: `Bearer ${m.admin}` },
  });
  const config = haproxyChecked(await exported.text());
  const dir = mkdtempSync(join(tmpdir(), 'pp-haproxy-'));
  writeFileSync(join(dir, 'haproxy.cfg'), config);
  const haproxy = spawn('haproxy', ['-db', '-f', join(dir, 'haproxy.cfg')], { stdio: 'ignore' });
  t.after(() => haproxy.kill('SIGKILL'));
  const payload = Buffer.from('through haproxy\n');
  const back = await until('HAProxy forwarding', async () => {
    try {
      return await tcpRoundTrip(port, payload);
    } catch {
      return undefined;
    }
  });
  assert.deepEqual(back, payload);
});
