// Other tools' configs through the one import: each fixture of test/fixtures/ (written for these tests) read for a
// node into the rules expected, every construct that does not map listed with its line, nothing written by a dry
// run and everything by the import; and realm's round trip (nftables' and HAProxy's, through the real tools, are
// test/e2e/export-tools.test.ts's).

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { kept, roundTrip, type Kept } from './format-trips.ts';
import { assertProblem, call, node, startMaster } from './helpers.ts';

interface Case {
  format: string;
  fixture: string;
  /** The far end's node, where a pair of ends in the source makes a tunnel. */
  peerNode?: string;
  /** The tunnels the source makes, by name. */
  tunnels?: string[];
  rules: Kept[];
  /** Each unmapped construct: its line and what its `why` says. */
  unmapped: [number, RegExp][];
  /** Fields of a rule this format does not carry on a round trip (the round trip's rules leave them default). */
  notCarried: string[];
  /** Rules to export and import again (every field they set is one the format carries); null: tried elsewhere. */
  roundTrip: Record<string, unknown>[] | null;
}

const CASES: Case[] = [
  {
    format: 'realm',
    fixture: 'realm/edge.toml',
    rules: [
      {
        name: 'realm-tcp-5000',
        protocol: 'tcp',
        listen_port: 5000,
        targets: ['198.51.100.10:443'],
        strategy: 'failover',
      },
      {
        name: 'realm-tcp-5001',
        protocol: 'tcp',
        listen_port: 5001,
        targets: ['198.51.100.11:8443', '198.51.100.12:8443', '[2001:db8::12]:8443'],
        strategy: 'round_robin',
        weights: [4, 2, 1],
      },
      {
        name: 'realm-tcp-5002',
        protocol: 'tcp',
        listen_port: 5002,
        targets: ['db.example.net:5432'],
        strategy: 'source_hash',
        proxy_protocol: 'v1',
        source_address: '192.0.2.7',
      },
      { name: 'realm-udp-5353', protocol: 'udp', listen_port: 5353, targets: ['203.0.113.53:53'] },
      { name: 'realm-tcp-6000', protocol: 'tcp', listen_port: 6000, targets: ['203.0.113.60:443'] },
    ],
    unmapped: [
      [2, /the agent's own settings/],
      [9, /no rule setting carries it/],
      [22, /rules listen on every address/],
      [31, /no rule setting carries it/],
      [36, /transports .* are not a rule's/],
      [37, /no rule setting carries it/],
      [39, /remote "not-an-address" is not host:port/],
    ],
    notCarried: ['max_connections', 'bandwidth_limit', 'allow_sources', 'quota', 'health_check', 'listen_port_end'],
    roundTrip: [
      { name: 'web', protocol: 'tcp', listen_port: 8080, targets: ['198.51.100.1:80'], strategy: 'failover' },
      {
        name: 'spread',
        protocol: 'tcp+udp',
        listen_port: 8081,
        targets: ['198.51.100.2:80', '198.51.100.3:80'],
        strategy: 'source_hash',
        weights: [3, 1],
        proxy_protocol: 'v2',
      },
      { name: 'dns', protocol: 'udp', listen_port: 8053, targets: ['[2001:db8::53]:53'], strategy: 'failover' },
    ],
  },
  {
    format: 'iptables',
    fixture: 'iptables/edge.rules',
    rules: [
      { name: 'iptables-8080', protocol: 'tcp+udp', listen_port: 8080, targets: ['10.0.0.2:80'] },
      {
        name: 'iptables-tcp-2222',
        listen_port: 2222,
        targets: ['10.0.0.3:22'],
        allow_sources: ['198.51.100.0/24'],
        source_address: '192.0.2.7',
      },
      {
        name: 'iptables-tcp-5000-5010',
        listen_port: 5000,
        listen_port_end: 5010,
        targets: ['10.0.0.4:6000-6010'],
        preserve_source: true,
      },
      {
        name: 'iptables-tcp-443',
        listen_port: 443,
        targets: ['10.0.0.5:443', '10.0.0.6:443'],
        strategy: 'round_robin',
        preserve_source: false,
      },
      { name: 'iptables-tcp-3389', listen_port: 3389, targets: ['10.0.0.7:3389'] },
      { name: 'iptables-tcp-25', listen_port: 25, targets: ['10.0.0.8:25'] },
    ],
    unmapped: [
      [3, /filter table's policies are the node's own firewall/],
      [5, /filter table is the node's own firewall/],
      [15, /rules listen on every address/],
      [19, /no rule setting carries this match/],
      [20, /rules forward TCP and UDP/],
      [21, /only DNAT in PREROUTING is a rule/],
    ],
    notCarried: [],
    roundTrip: null,
  },
  {
    format: 'nftables',
    fixture: 'nftables/edge.json',
    rules: [
      { name: 'nftables-8080', protocol: 'tcp+udp', listen_port: 8080, targets: ['10.0.0.2:80'] },
      {
        name: 'nftables-tcp-2222',
        listen_port: 2222,
        targets: ['10.0.0.3:22'],
        allow_sources: ['198.51.100.0/24'],
        source_address: '192.0.2.7',
      },
      {
        name: 'nftables-tcp-5000-5010',
        listen_port: 5000,
        listen_port_end: 5010,
        targets: ['10.0.0.4:6000-6010'],
        preserve_source: true,
      },
      {
        name: 'nftables-tcp-443',
        targets: ['10.0.0.5:443', '10.0.0.6:443'],
        strategy: 'round_robin',
        preserve_source: false,
      },
      { name: 'nftables-53', protocol: 'tcp+udp', targets: ['10.0.0.53:53'], preserve_source: true },
      { name: 'nftables-tcp-25', listen_port: 25, targets: ['10.0.0.8:25'] },
    ],
    unmapped: [
      [8, /rules listen on every address/],
      [11, /no rule setting carries this match/],
      [17, /drop policy is the node's own firewall/],
      [18, /no nat hook: the node's own firewall/],
    ],
    notCarried: [],
    roundTrip: null,
  },
  {
    format: 'haproxy',
    fixture: 'haproxy/edge.cfg',
    rules: [
      {
        name: 'haproxy-tcp-8080',
        targets: ['10.0.0.2:80', '10.0.0.3:80'],
        strategy: 'round_robin',
        weights: [3, 1],
        max_connections: 500,
        health_check: { interval_seconds: 5, timeout_ms: 5000, fall: 2, rise: 3 },
      },
      {
        name: 'haproxy-tcp-5432',
        targets: ['10.0.0.4:5432', '10.0.0.5:5432'],
        strategy: 'source_hash',
        proxy_protocol: 'v2',
        max_new_connections_per_second: 20,
        source_address: '192.0.2.7',
        allow_sources: ['198.51.100.0/24', '192.0.2.0/24'],
      },
      { name: 'haproxy-tcp-5433', listen_port: 5433, targets: ['10.0.0.4:5432', '10.0.0.5:5432'] },
      { name: 'haproxy-tcp-7000-7009', listen_port: 7000, listen_port_end: 7009, targets: ['10.0.0.6:8000-8009'] },
      { name: 'haproxy-tcp-9000', targets: ['10.0.0.8:9000'] },
    ],
    unmapped: [
      [3, /global: the agent's own/],
      [4, /global: the agent's own/],
      [8, /timeouts/],
      [9, /timeouts/],
      [10, /timeouts/],
      [32, /rules listen on every address/],
      [35, /HTTP mode: rules forward TCP/],
      [46, /a balance no rule strategy is/],
      [47, /no rule setting carries it/],
    ],
    notCarried: [],
    roundTrip: null,
  },
  {
    format: 'gost',
    fixture: 'gost/edge.json',
    rules: [
      {
        name: 'gost-tcp-8080',
        targets: ['10.0.0.2:80', '10.0.0.3:80'],
        strategy: 'failover',
        bandwidth_limit: 10_000_000,
        max_connections: 100,
        max_new_connections_per_second: 20,
      },
      { name: 'gost-udp-5353', protocol: 'udp', targets: ['10.0.0.53:53'] },
      { name: 'gost-tcp-9000', targets: ['10.0.0.9:9000', '[2001:db8::9]:9000'], strategy: 'source_hash' },
      // The reverse forward: listened for at the relay (the peer, the tunnel's entry), dialled from here.
      { name: 'gost-tcp-2222', listen_port: 2222, targets: ['10.0.0.22:22'], node: 'relay', tunnel: 'gost-back' },
    ],
    peerNode: 'relay',
    tunnels: ['gost-back'],
    unmapped: [
      [1, /no rule setting carries it/],
      [1, /per-client limits/],
      [3, /not a TCP or UDP port forward/],
      [5, /per-client limits/],
    ],
    notCarried: [],
    roundTrip: null,
  },
  {
    format: 'nodepass',
    fixture: 'nodepass/edge.txt',
    peerNode: 'far',
    rules: [
      { name: 'nodepass-8080', protocol: 'tcp+udp', listen_port: 8080, targets: ['10.0.0.2:80'] },
      { name: 'nodepass-5353', protocol: 'tcp+udp', listen_port: 5353, targets: ['10.0.0.53:53'] },
      { name: 'nodepass-2222', protocol: 'tcp+udp', listen_port: 2222, targets: ['10.0.0.22:22'] },
    ],
    tunnels: ['nodepass-10101'],
    unmapped: [
      [3, /NodePass's own option/],
      [4, /NodePass's own option/],
      [6, /NodePass's own option/],
      [6, /NodePass's own option/],
      [6, /NodePass's own option/],
      [6, /a server without its client/],
      [7, /NodePass's own option/],
      [7, /forward mode/],
      [8, /NodePass's own option/],
      [8, /forward mode/],
    ],
    notCarried: [],
    roundTrip: null,
  },
];

describe('importing other tools’ configs', () => {
  for (const c of CASES)
    test(`${c.format}: ${c.fixture} reads into its rules, each unmapped construct listed with its line`, async (t) => {
      const m = await startMaster(t);
      const edge = await node(m, 'edge');
      if (c.peerNode) await node(m, c.peerNode);
      const source = readFileSync(`test/fixtures/${c.fixture}`, 'utf8');
      const body = { format: c.format, node: 'edge', source, ...(c.peerNode ? { peer_node: c.peerNode } : {}) };
      const preview = await call(m.url, 'POST', '/api/import?dry_run=true', { token: m.admin, body });
      assert.equal(preview.status, 200, JSON.stringify(preview.body));
      const read = preview.body.document.rules as Record<string, unknown>[];
      assert.deepEqual(
        read.map((r) => kept(r, Object.keys(c.rules[read.indexOf(r)] ?? {}))),
        c.rules,
      );
      assert.deepEqual(
        preview.body.unmapped.map((u: { line: number }) => u.line),
        c.unmapped.map(([line]) => line),
        JSON.stringify(preview.body.unmapped, null, 1),
      );
      for (const [i, [, why]] of c.unmapped.entries()) assert.match(preview.body.unmapped[i].why, why);
      assert.ok(preview.body.rules.every((r: { line: number }) => Number.isInteger(r.line)));
      assert.deepEqual(
        preview.body.document.tunnels.map((tunnel: { name: string }) => tunnel.name),
        c.tunnels ?? [],
      );
      const none = await call(m.url, 'GET', `/api/rules?node_id=${edge.id}&count=true`, { token: m.admin });
      assert.equal(none.body.total, 0, 'a dry run writes nothing');

      const imported = await call(m.url, 'POST', '/api/import', { token: m.admin, body });
      assert.equal(imported.status, 200, JSON.stringify(imported.body));
      const listed = await call(m.url, 'GET', '/api/rules?limit=1000', { token: m.admin });
      assert.deepEqual(
        listed.body.items.map((r: Record<string, unknown>) => r.name).sort(),
        c.rules.map((r) => r.name).sort(),
      );
    });

  for (const c of CASES.filter((c) => c.roundTrip !== null))
    test(`${c.format}: rules exported and imported again, alike but for ${c.notCarried.join(', ')}`, (t) =>
      roundTrip(t, c));

  test('a source that is not its format, or a rule it makes that is no rule, is 422 naming the line', async (t) => {
    const m = await startMaster(t);
    await node(m, 'edge');
    const refused = await call(m.url, 'POST', '/api/import', {
      token: m.admin,
      body: { format: 'realm', node: 'edge', source: '[[endpoints]]\nlisten = "0.0.0.0:1"\nremote = ' },
    });
    assertProblem(refused, 422, 'validation_failed');
    assert.deepEqual(refused.body.errors, [
      { pointer: '#/source', detail: 'line 3: not TOML: line 3: a value was expected' },
    ]);
    const badTarget = await call(m.url, 'POST', '/api/import', {
      token: m.admin,
      body: { format: 'realm', node: 'edge', source: '\n[[endpoints]]\nlisten = "0.0.0.0:1"\nremote = "bad host:80"' },
    });
    assertProblem(badTarget, 422, 'validation_failed');
    assert.equal(badTarget.body.errors[0].pointer, '#/rules/0/targets/0');
    assert.match(badTarget.body.errors[0].detail, /^line 2: /);
    const unknown = await call(m.url, 'POST', '/api/import', {
      token: m.admin,
      body: { format: 'socat', node: 'edge', source: 'x' },
    });
    assertProblem(unknown, 422, 'validation_failed');
    assert.match(unknown.body.errors[0].detail, /must be one of portplane-export, realm/);
    const noNode = await call(m.url, 'POST', '/api/import', {
      token: m.admin,
      body: { format: 'realm', node: 'nowhere', source: '[[endpoints]]\nlisten = ":1"\nremote = "192.0.2.1:1"' },
    });
    assertProblem(noNode, 422, 'validation_failed');
    assert.match(JSON.stringify(noNode.body.errors), /nowhere/);
  });
});
