// Failed logins counted per user and per source, without a master: how the windows stay bounded, and what a source is.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FailureWindow } from '../../internal/auth/failures.ts';
import { sourceOf } from '../../internal/schema/net.ts';

test('failure windows stay bounded at any number of sources: the source that failed longest ago goes first', () => {
  let now = 0;
  const window = new FailureWindow(() => now, 3);
  for (const key of ['a', 'b', 'c']) window.record(key, 60_000);
  now += 1000;
  window.record('a', 60_000);
  now += 1000;
  window.record('d', 60_000);
  assert.equal(window.size, 3);
  assert.equal(window.count('b', 60_000), 0, 'b failed longest ago: it made room for d');
  assert.deepEqual(
    ['a', 'c', 'd'].map((key) => window.count(key, 60_000)),
    [2, 1, 1],
  );
  now = 61_500;
  window.record('e', 60_000);
  assert.equal(
    window.size,
    2,
    'room made for e, and each failure drops what has aged out, oldest first: c, then a; d stays',
  );
  for (let i = 0; i < 5000; i++) window.record('e', 60_000);
  assert.equal(window.count('e', 60_000), 1024, 'one key keeps at most 1024 failures');
});

test('limits per source count an IPv6 host by its /64 and an IPv4-mapped address as IPv4', () => {
  assert.equal(sourceOf('192.0.2.7'), '192.0.2.7');
  assert.equal(sourceOf('::ffff:192.0.2.7'), '192.0.2.7');
  assert.equal(sourceOf('2001:db8:1:2:aaaa::1'), '2001:db8:1:2::/64');
  assert.equal(sourceOf('2001:db8:1:2:ffff:ffff:ffff:fffe'), '2001:db8:1:2::/64');
  assert.equal(sourceOf('2001:db8::1'), '2001:db8:0:0::/64');
  assert.equal(sourceOf('::1'), '0:0:0:0::/64');
  assert.equal(sourceOf('fe80::1%eth0'), 'fe80:0:0:0::/64');
  assert.equal(sourceOf('unknown'), 'unknown');
});
