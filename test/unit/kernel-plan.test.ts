// How the agent writes its nftables table after the first time: the difference from what it last wrote
// (kernel/ruleset.ts planScript), which nftables applies in a fraction of the time a whole table of 10,000 rules takes.
// What the kernel makes of it is tested across namespaces (test/e2e/kernel-netns.test.ts).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  heldIn,
  NOTHING_HELD,
  outlineOf,
  planScript,
  tablePlan,
  type KernelRule,
} from '../../internal/kernel/ruleset.ts';

const LIMITS = { perSource: 100, tcpIdleSeconds: 300 };

function plain(id: number, port: number, address = '192.0.2.1'): KernelRule {
  const target = { index: 0, weight: 1, v4: { address, port: 80 }, v6: null };
  return { id, protocol: 'tcp', listen_port: port, targets: [target], spread: 'round_robin' };
}

const DIFFERENCE =
  'a changed target, a new rule and a removed one: the elements that differ, old ones out before new ones in, the ' +
  "removed rule's counters deleted, and no chain or declaration written again";

test(DIFFERENCE, () => {
  const before = [plain(1, 8001), plain(2, 8002), plain(3, 8003)];
  const after = [plain(1, 8001, '192.0.2.9'), plain(2, 8002), plain(4, 8004)];
  const written = tablePlan(before, LIMITS);
  const script = planScript('portplane_1', tablePlan(after, LIMITS), heldIn(outlineOf(written)), written)
    .trim()
    .split('\n');
  assert.ok(!script.some((line) => line.startsWith('flush chain')), script.join('\n'));
  const declared = script.filter((line) => line.startsWith('  '));
  assert.deepEqual(declared, ['  counter r4_in { }', '  counter r4_out { }'], 'only what the new rule declares');
  const at = (text: string) => script.findIndex((line) => line.includes(text));
  assert.ok(at('delete element inet portplane_1 tcp4 { 8001, 8003 }') >= 0, script.join('\n'));
  assert.ok(at('add element inet portplane_1 tcp4 { 8001 : 192.0.2.9 . 80, 8004 : 192.0.2.1 . 80 }') > at('delete'));
  assert.ok(at('delete counter inet portplane_1 r3_in') > at('delete element inet portplane_1 tcp_in'));
});

test('a rule whose chain rules change rewrites that chain alone; without what was written, everything', () => {
  const sourced = { ...plain(2, 8002), sources: { allow: ['10.0.0.0/8'], deny: [] } };
  const written = tablePlan([plain(1, 8001)], LIMITS);
  const script = planScript(
    'portplane_1',
    tablePlan([plain(1, 8001), sourced], LIMITS),
    heldIn(outlineOf(written)),
    written,
  );
  const flushed = script.split('\n').filter((line) => line.startsWith('flush chain'));
  assert.deepEqual(flushed, ['flush chain inet portplane_1 sources', 'flush chain inet portplane_1 sources_local']);
  const whole = planScript('portplane_1', tablePlan([plain(1, 8001)], LIMITS), NOTHING_HELD);
  assert.match(whole, /flush chain inet portplane_1 prerouting/);
  assert.match(whole, /flush map inet portplane_1 tcp4\n/);
});

const IDLE_TIMEOUT_REPLACED =
  'an idle timeout of another value is deleted once the chain of new connections no longer names it, in the same write';

test(IDLE_TIMEOUT_REPLACED, () => {
  const written = tablePlan([plain(1, 8001)], LIMITS);
  const script = planScript(
    'portplane_1',
    tablePlan([plain(1, 8001)], { ...LIMITS, tcpIdleSeconds: 60 }),
    heldIn(outlineOf(written)),
    written,
  );
  const lines = script.trim().split('\n');
  const rewritten = lines.indexOf('flush chain inet portplane_1 fresh_tcp');
  assert.ok(rewritten >= 0, script);
  for (const family of [4, 6])
    assert.ok(lines.indexOf(`delete ct timeout inet portplane_1 tcp_idle${family}_300`) > rewritten, script);
  assert.ok(
    lines.some((line) => line.includes('ct timeout tcp_idle4_60 {')),
    'the new one declared',
  );
});
