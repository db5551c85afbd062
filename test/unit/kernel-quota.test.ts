// How the kernel table holds TCP rules to their quotas and closes the ports it stops carrying (kernel/ruleset.ts);
// what the kernel then does with it is tested across namespaces (test/e2e/kernel-netns.test.ts).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { NOTHING_HELD, quotaName, rulesetScript, uncovered, type KernelRule } from '../../internal/kernel/ruleset.ts';

const LIMITS = { perSource: 100, tcpIdleSeconds: 300 };
const target = { index: 0, weight: 1, v4: { address: '192.0.2.1', port: 80 }, v6: null };

function quoted(id: number, port: number, direction: 'in' | 'out' | 'both'): KernelRule {
  const quota = { bytes: 1_000_000, used: 250_000, direction, periodStart: 1_764_201_600 };
  return { id, protocol: 'tcp', listen_port: port, targets: [target], spread: 'round_robin', quota };
}

const BILLED =
  "a quota object per rule, declared with the master's count and the slack, named by its period and bytes, in the " +
  'maps of the ways it bills';

test(BILLED, () => {
  const rules = [quoted(1, 8001, 'in'), quoted(2, 8002, 'out'), quoted(3, 8003, 'both')];
  const text = rulesetScript('portplane_1', rules, NOTHING_HELD, LIMITS);
  assert.equal(quotaName(1, rules[0]!.quota!), 'r1_quota_1764201600_1000000');
  assert.match(text, /quota r1_quota_1764201600_1000000 \{ over 1262144 bytes used 250000 bytes; \}/);
  const elements = (map: string) => new RegExp(`add element inet portplane_1 ${map} \\{ ([^}]*) \\}`).exec(text)?.[1];
  assert.equal(elements('tcp_quota_in'), '8001 : "r1_quota_1764201600_1000000", 8003 : "r3_quota_1764201600_1000000"');
  assert.equal(elements('tcp_quota_out'), '8002 : "r2_quota_1764201600_1000000", 8003 : "r3_quota_1764201600_1000000"');
});

test('a quota object no rule names any more is deleted, after the maps that named it are flushed', () => {
  const held = { ...NOTHING_HELD, quotas: new Set(['r1_quota_1764201600_1000000', 'r1_quota_1761955200_1000000']) };
  const text = rulesetScript('portplane_1', [quoted(1, 8001, 'in')], held, LIMITS);
  assert.doesNotMatch(text, /delete quota inet portplane_1 r1_quota_1764201600_1000000/);
  const deleted = text.indexOf('delete quota inet portplane_1 r1_quota_1761955200_1000000');
  assert.ok(deleted > text.indexOf('flush map inet portplane_1 tcp_quota_in'), text);
});

test('a closed port is reset for the seconds it has left, unless a rule carries it again', () => {
  const closed = [
    { port: 8001, last: 8001, seconds: 3600 },
    { port: 8009, last: 8009, seconds: 42 },
  ];
  const text = rulesetScript('portplane_1', [quoted(1, 8001, 'in')], NOTHING_HELD, LIMITS, closed);
  assert.match(text, /add element inet portplane_1 tcp_closed \{ 8009 timeout 42s \}/);
  assert.match(
    text,
    /stop_prerouting ct status dnat meta l4proto tcp tcp flags & rst == 0 ct original proto-dst @tcp_closed reject/,
  );
});

test('with no quota and no port closed, the stop chains are empty: nothing for each packet to pass', () => {
  const plain: KernelRule = { ...quoted(1, 8001, 'in'), quota: null };
  const text = rulesetScript('portplane_1', [plain], NOTHING_HELD, LIMITS);
  assert.doesNotMatch(text, /add rule inet portplane_1 stop_(prerouting|output)/);
  assert.match(text, /flush chain inet portplane_1 stop_prerouting/);
});

test('closed spans: overlapping ones merged and closed as long as the longest, what a rule carries left out', () => {
  const closed = [
    { port: 30000, last: 30999, seconds: 100 },
    { port: 30500, last: 31499, seconds: 300 },
    { port: 40000, last: 40000, seconds: 50 },
  ];
  const carried = [
    { port: 30100, last: 30199 },
    { port: 31400, last: 32000 },
    { port: 40000, last: 40000 },
  ];
  assert.deepEqual(uncovered(closed, carried), [
    { port: 30000, last: 30099, seconds: 300 },
    { port: 30200, last: 31399, seconds: 300 },
  ]);
});
