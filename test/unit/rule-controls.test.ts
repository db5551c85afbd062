// Rule controls as the relay and the master compute them, without a master or a socket: PROXY headers, address
// blocks, the gate, quota periods, the target picker. What they do end to end is in test/rule-controls.test.ts.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { quotaPeriodAt, type Quota } from '../../internal/domain/quota.ts';
import { controlDefaults as NO_CONTROLS } from '../../internal/domain/rules.ts';
import { Gate } from '../../internal/relay/gate.ts';
import { proxyHeader } from '../../internal/relay/proxy-protocol.ts';
import { TargetPicker } from '../../internal/relay/targets.ts';
import { parseCidr } from '../../internal/schema/net.ts';

test('the PROXY header of an IPv6 client, and of one whose addresses cannot be told', () => {
  const v6 = { address: '2001:db8::1', port: 5000 };
  const to = { address: '2001:db8::a:2', port: 443 };
  assert.equal(
    proxyHeader('v1', v6, to).toString(),
    'PROXY TCP6 2001:db8:0:0:0:0:0:1 2001:db8:0:0:0:0:a:2 5000 443\r\n',
  );
  const v2 = proxyHeader('v2', v6, to);
  assert.deepEqual([v2[12], v2[13], v2.readUInt16BE(14), v2.length], [0x21, 0x21, 36, 16 + 36]);
  assert.deepEqual([...v2.subarray(16, 32)], [0x20, 0x01, 0x0d, 0xb8, ...Array(11).fill(0), 1]);
  const mapped = proxyHeader('v1', { address: '::ffff:192.0.2.9', port: 1 }, { address: '::ffff:10.0.0.1', port: 2 });
  assert.equal(mapped.toString(), 'PROXY TCP4 192.0.2.9 10.0.0.1 1 2\r\n', 'IPv4-mapped addresses as IPv4');
  const mixed = [{ address: '192.0.2.9', port: 1 }, to] as const;
  assert.equal(proxyHeader('v1', ...mixed).toString(), 'PROXY UNKNOWN\r\n');
  assert.deepEqual([...proxyHeader('v2', ...mixed).subarray(12)], [0x20, 0, 0, 0], 'v2 LOCAL, no addresses');
});

test('address blocks: what is a block, and what a client matches', () => {
  for (const block of ['0.0.0.0/0', '::/0', '192.0.2.0/24', '192.0.2.7', '2001:db8::/32', 'fe80::1/128'])
    assert.ok(parseCidr(block), block);
  const notBlocks = ['192.0.2.1/24', '2001:db8::1/32', '1.2.3.4/', '1.2.3.4/x', '1.2.3.4/8/8', '', '::1/129'];
  for (const block of [...notBlocks, 'fe80::1%eth0', 'fe80::1%eth0/128']) assert.equal(parseCidr(block), null, block);
  const gate = new Gate({
    allow_sources: ['192.0.2.0/24', '2001:db8::/32'],
    deny_sources: ['192.0.2.7'],
    max_connections: null,
    max_new_connections_per_second: null,
    bandwidth_limit: null,
    expires_at: null,
    quota: null,
    allow_hours: null,
  });
  const admitted = ['192.0.2.1', '::ffff:192.0.2.200', '2001:db8:1::5', '192.0.2.7', '198.51.100.1', '2001:db9::1'].map(
    (address) => gate.admit(address),
  );
  assert.deepEqual(admitted, [true, true, true, false, false, false]);
  assert.equal(gate.drainRefused(), 3);
  assert.equal(gate.drainRefused(), 0);
});

test("a rule's gate counts its TCP connections and UDP sessions together, and refuses all once it expires", () => {
  const controls = { ...NO_CONTROLS, max_connections: 2, quota: null };
  const gate = new Gate(controls);
  assert.deepEqual([gate.admit('192.0.2.1'), gate.admit('192.0.2.2'), gate.admit('192.0.2.3')], [true, true, false]);
  gate.release();
  assert.equal(gate.admit('192.0.2.3'), true, 'a place freed is taken');
  gate.update({ ...controls, max_connections: null, expires_at: '2020-01-01T00:00:00Z' });
  assert.equal(gate.admit('192.0.2.4'), false, 'past its expiry');
  assert.equal(gate.drainRefused(), 2);
});

test("a rule's gate takes new clients at its rate, a second's worth at once, and counts those it refuses", async () => {
  const controls = { ...NO_CONTROLS, max_new_connections_per_second: 5, quota: null };
  const gate = new Gate(controls);
  const burst = Array.from({ length: 8 }, (_, i) => gate.admit(`192.0.2.${i + 1}`));
  assert.deepEqual(burst, [true, true, true, true, true, false, false, false], 'a burst of five');
  assert.equal(gate.drainRefused(), 3);
  await new Promise((resolve) => setTimeout(resolve, 450));
  assert.deepEqual([gate.admit('192.0.2.9'), gate.admit('192.0.2.10'), gate.admit('192.0.2.11')], [true, true, false]);
  // A client the lists refuse takes no place in the second's allowance.
  gate.update({ ...controls, deny_sources: ['198.51.100.0/24'], max_new_connections_per_second: 2 });
  assert.deepEqual(
    [gate.admit('198.51.100.1'), gate.admit('198.51.100.2'), gate.admit('192.0.2.12'), gate.admit('192.0.2.13')],
    [false, false, true, true],
  );
  gate.update({ ...controls, max_new_connections_per_second: null });
  assert.ok(Array.from({ length: 100 }, (_, i) => gate.admit(`192.0.2.${i}`)).every(Boolean), 'no limit: all');
});

test('quota periods: a day from its hour, a month from its day and hour, in UTC', () => {
  const at = (iso: string) => Date.parse(iso);
  const period = (quota: Partial<Quota>, now: string) => {
    const { start, next } = quotaPeriodAt(
      { bytes: 1, period: 'month', direction: 'both', reset_day: 1, reset_hour: 0, ...quota },
      at(now),
    );
    return [new Date(start).toISOString(), next === null ? null : new Date(next).toISOString()];
  };
  const cases: [Partial<Quota>, string, string, string | null][] = [
    [{ period: 'day', reset_hour: 6 }, '2026-11-26T05:59:59Z', '2026-11-25T06:00:00.000Z', '2026-11-26T06:00:00.000Z'],
    [{ period: 'day', reset_hour: 6 }, '2026-11-26T06:00:00Z', '2026-11-26T06:00:00.000Z', '2026-11-27T06:00:00.000Z'],
    [{ reset_day: 15, reset_hour: 12 }, '2026-11-15T11:00:00Z', '2026-10-15T12:00:00.000Z', '2026-11-15T12:00:00.000Z'],
    [{ reset_day: 15, reset_hour: 12 }, '2026-11-15T12:00:00Z', '2026-11-15T12:00:00.000Z', '2026-12-15T12:00:00.000Z'],
    [{ reset_day: 28 }, '2027-01-10T00:00:00Z', '2026-12-28T00:00:00.000Z', '2027-01-28T00:00:00.000Z'],
    [{ reset_day: 1 }, '2026-12-31T23:59:59Z', '2026-12-01T00:00:00.000Z', '2027-01-01T00:00:00.000Z'],
    [{ period: 'none' }, '2026-11-26T10:00:00Z', '2026-11-26T10:00:00.000Z', null],
  ];
  for (const [quota, now, start, next] of cases)
    assert.deepEqual(period(quota, now), [start, next], `${JSON.stringify(quota)} at ${now}`);
});

test('a picker leaves out the targets its checks found down, in the order of its strategy', () => {
  const down = new Set<number>();
  const targets = [1, 2, 3].map((port) => ({ host: '192.0.2.1', port }));
  const health = { isDownAt: (index: number) => down.has(index), fastest: () => null };
  const picker = new TargetPicker(targets, 'round_robin', null, () => health);
  const ports = () => picker.order().map((target) => target.port);
  assert.deepEqual(
    [ports(), ports(), ports()],
    [
      [1, 2, 3],
      [2, 3, 1],
      [3, 1, 2],
    ],
  );
  down.add(1);
  assert.deepEqual(
    [ports(), ports(), ports()],
    [
      [3, 1],
      [1, 3],
      [3, 1],
    ],
  );
  down.add(0).add(2);
  assert.deepEqual(ports(), []);
});

const targetsAt = (...ports: number[]) => ports.map((port) => ({ host: '192.0.2.1', port }));

test('least_conn picks the target with the fewest open connections, in turn among the least', () => {
  const picker = new TargetPicker(targetsAt(1, 2, 3), 'least_conn');
  const first = () => picker.order()[0]!;
  const held = [first(), first(), first()].map((target) => ({ port: target.port, release: picker.hold(target) }));
  assert.deepEqual(
    held.map((h) => h.port),
    [1, 2, 3],
    'each held in turn: every one was among the least',
  );
  const extra = picker.hold(picker.order()[0]!);
  held[1]!.release();
  assert.equal(first().port, 2, 'the one let go of has the fewest');
  held[1]!.release();
  extra();
  assert.equal(picker.order().length, 3, 'failover order still holds every target');
  // A target handed over by an apply that keeps the targets (new objects, the same addresses) is counted all the same.
  const kept = new TargetPicker(targetsAt(1, 2), 'least_conn');
  kept.update(targetsAt(1, 2), 'least_conn', null);
  const release = kept.hold(targetsAt(1)[0]!);
  assert.equal(kept.order()[0]!.port, 2, 'target 1 holds one, target 2 none');
  release();
});

test('lowest_latency goes to the fastest target up, the first up when it knows none', () => {
  const down = new Set<number>();
  let fastest: number | null = null;
  const health = { isDownAt: (index: number) => down.has(index), fastest: () => fastest };
  const picker = new TargetPicker(targetsAt(1, 2, 3), 'lowest_latency', null, () => health);
  const ports = () => picker.order().map((target) => target.port);
  assert.deepEqual(ports(), [1, 2, 3]);
  fastest = 2;
  assert.deepEqual(ports(), [3, 1, 2]);
  down.add(2);
  assert.deepEqual(ports(), [1, 2], 'the fastest down: the first up');
});

test("source_hash keeps a client's target while it is up; a target down moves only its own clients", () => {
  const down = new Set<number>();
  const health = { isDownAt: (index: number) => down.has(index), fastest: () => null };
  const picker = new TargetPicker(targetsAt(1, 2, 3), 'source_hash', [2, 1, 1], () => health);
  const clients = Array.from({ length: 400 }, (_, i) => `198.51.100.${i % 250}.${i}`);
  const before = new Map(clients.map((client) => [client, picker.order(client)[0]!.port]));
  assert.ok(
    clients.every((client) => picker.order(client)[0]!.port === before.get(client)),
    'the same every time',
  );
  const share = [...before.values()].filter((port) => port === 1).length / clients.length;
  assert.ok(share > 0.4 && share < 0.6, `weight 2 of 4 takes about half: ${share}`);
  down.add(1);
  const moved = clients.filter((client) => picker.order(client)[0]!.port !== before.get(client));
  assert.ok(
    moved.every((client) => before.get(client) === 2),
    'only the clients of the target down move',
  );
  assert.equal(moved.length, [...before.values()].filter((port) => port === 2).length);
});

test('weights are spans of the round-robin cycle: 3:1 sends three of every four to the first', () => {
  const picker = new TargetPicker(targetsAt(1, 2), 'round_robin', [3, 1]);
  const firsts = Array.from({ length: 8 }, () => picker.order()[0]!.port);
  assert.deepEqual(firsts, [1, 1, 1, 2, 1, 1, 1, 2]);
});
