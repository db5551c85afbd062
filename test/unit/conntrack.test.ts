// Counting the kernel's connections (kernel/conntrack.ts) from a table as the kernel writes it: by protocol and the
// original direction's port, TCP connections on their way out left out, and only the ports asked for.

import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { countConnections } from '../../internal/kernel/conntrack.ts';

const TABLE = [
  'ipv4     2 tcp      6 3598 ESTABLISHED src=10.0.2.1 dst=10.0.2.2 sport=47892 dport=15001 src=10.0.3.2 ' +
    'dst=10.0.3.1 sport=7007 dport=47892 [ASSURED] mark=0 zone=0 use=2',
  'ipv4     2 tcp      6 3598 ESTABLISHED src=10.0.2.1 dst=10.0.2.2 sport=47906 dport=15001 src=10.0.3.2 ' +
    'dst=10.0.3.1 sport=7007 dport=47906 [ASSURED] mark=0 zone=0 use=2',
  'ipv4     2 tcp      6 117 TIME_WAIT src=10.0.2.1 dst=10.0.2.2 sport=47872 dport=15001 src=10.0.3.2 ' +
    'dst=10.0.3.1 sport=7007 dport=47872 [ASSURED] mark=0 zone=0 use=2',
  'ipv4     2 udp      17 27 src=10.0.2.1 dst=10.0.2.2 sport=50491 dport=15002 src=10.0.3.2 dst=10.0.3.1 ' +
    'sport=7007 dport=50491 mark=0 zone=0 use=2',
  'ipv6     10 tcp      6 3598 SYN_SENT src=fd14::1 dst=fd14::2 sport=40000 dport=15001 [UNREPLIED] src=fd14:3::2 ' +
    'dst=fd14::1 sport=7008 dport=40000 mark=0 zone=0 use=2',
  'ipv4     2 tcp      6 299 ESTABLISHED src=10.0.1.2 dst=10.0.1.1 sport=33254 dport=44657 src=10.0.1.1 ' +
    'dst=10.0.1.2 sport=44657 dport=33254 [ASSURED] mark=0 zone=0 use=2',
  'ipv4     2 icmp     1 29 src=10.0.2.1 dst=10.0.2.2 type=8 code=0 id=1 mark=0 use=1',
].join('\n');

test('conntrack entries are counted by protocol and original port, closing TCP ones left out', async () => {
  const file = join(mkdtempSync(join(tmpdir(), 'portplane-conntrack-')), 'nf_conntrack');
  writeFileSync(file, `${TABLE}\n`);
  const counts = await countConnections(new Set(['tcp:15001', 'udp:15002', 'udp:15001']), file);
  assert.deepEqual(Object.fromEntries(counts!), { 'tcp:15001': 3, 'udp:15002': 1 });
  assert.equal(await countConnections(new Set(['tcp:15001']), join(file, 'missing')), null, 'no table: no count');
});
