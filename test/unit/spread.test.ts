// The kernel's side of balancing, as the script nftables is given: a rule with several targets up jumps to a chain of
// its own whose DNAT draws from a map (numgen over the weighted cycle, jhash over the relay's source buckets); one with
// a single target up stays in the plain port map; a rule that keeps the client's address is not source-NATed.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { bucketOwners, SOURCE_BUCKETS } from '../../internal/domain/spread.ts';
import { NOTHING_HELD, rulesetScript, type KernelRule, type KernelTarget } from '../../internal/kernel/ruleset.ts';

const LIMITS = { perSource: 100, tcpIdleSeconds: 300 };

function target(index: number, weight = 1): KernelTarget {
  return { index, weight, v4: { address: `192.0.2.${index + 1}`, port: 80 }, v6: null };
}

function script(rules: KernelRule[], chains: string[] = []): string {
  return rulesetScript('portplane_1', rules, { ...NOTHING_HELD, chains: new Set(chains) }, LIMITS);
}

const base = { protocol: 'tcp' as const, spread: 'round_robin' as const };

test('weights 3:1 in the kernel: the rule jumps to its chain, whose numgen map gives slots 0-2 and 3', () => {
  const text = script([{ ...base, id: 7, listen_port: 8080, targets: [target(0, 3), target(1)] }]);
  assert.match(text, /add element inet portplane_1 tcp4_spread \{ 8080 : goto r7_tcp4 \}/);
  const map = '{ 0-2 : 192.0.2.1 . 80, 3 : 192.0.2.2 . 80 }';
  const dnat = `meta nfproto ipv4 meta l4proto tcp dnat ip to numgen inc mod 4 map ${map}`;
  assert.ok(text.includes(`add rule inet portplane_1 r7_tcp4 ${dnat}`), text);
  assert.doesNotMatch(text, /add element inet portplane_1 tcp4 \{/, 'not in the plain map');
});

const HASHED =
  'source_hash in the kernel: jhash of the client over the buckets, each span its owner as the relay reckons';

test(HASHED, () => {
  const targets = [target(0), target(1), target(2)];
  const text = script([{ ...base, spread: 'source_hash', id: 7, listen_port: 8080, targets }]);
  const map = /jhash ip saddr mod 256 map \{ (.*) \}/.exec(text)?.[1];
  assert.ok(map, text);
  const owners = bucketOwners(targets);
  let covered = 0;
  for (const span of map.split(', ')) {
    const [, from, to, address] = /^(\d+)(?:-(\d+))? : 192\.0\.2\.(\d+) \. 80$/.exec(span)!;
    for (let bucket = Number(from); bucket <= Number(to ?? from); bucket++, covered++)
      assert.equal(owners[bucket], Number(address) - 1, `bucket ${bucket}`);
  }
  assert.equal(covered, SOURCE_BUCKETS);
});

test('one target up is a plain map element; a chain no rule needs any more is deleted', () => {
  const text = script([{ ...base, id: 7, listen_port: 8080, targets: [target(1)] }], ['r7_tcp4', 'r9_udp6']);
  assert.match(text, /add element inet portplane_1 tcp4 \{ 8080 : 192\.0\.2\.2 \. 80 \}/);
  assert.match(text, /delete chain inet portplane_1 r7_tcp4/);
  assert.match(text, /delete chain inet portplane_1 r9_udp6/);
});

test("a rule that keeps the client's address is left out of the source NAT, the others not", () => {
  const text = script([
    { ...base, id: 1, listen_port: 8001, targets: [target(0)], preserveSource: true },
    { ...base, id: 2, listen_port: 8002, targets: [target(0)] },
  ]);
  assert.match(text, /add element inet portplane_1 tcp_snat \{ 8002 \}/);
  assert.match(text, /add element inet portplane_1 tcp_ports \{ 8001, 8002 \}/);
});
