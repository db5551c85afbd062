import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ExitChoice, scoreOf, usableScores, type Measure } from '../../internal/tunnel/choice.ts';

const SWITCHING = { rounds: 3, gain_ms: 20, gain_percent: 15, cooldown_ms: 30_000 };
const up = (rtt_ms: number, extra: Partial<Measure> = {}): Measure => ({
  up: true,
  rtt_ms,
  loss_percent: 0,
  probe_ms: null,
  probe_failed: false,
  ...extra,
});
const down: Measure = { up: false, rtt_ms: null, loss_percent: null, probe_ms: null, probe_failed: false };

test('a score is the round trip plus the probe, and a lost PING costs its share of a retransmission timeout', () => {
  assert.equal(scoreOf(up(30)), 30);
  assert.equal(scoreOf(up(30, { probe_ms: 12 })), 42);
  assert.equal(scoreOf(up(30, { loss_percent: 10 })), 50, 'a tenth of 200 ms');
  assert.equal(scoreOf(up(300, { loss_percent: 50 })), 600, 'half of twice the path');
  assert.equal(scoreOf(down), null);
  assert.deepEqual(usableScores([up(10, { probe_failed: true }), up(50, { probe_ms: 1 })]), [null, 51]);
  assert.deepEqual(usableScores([up(10, { probe_failed: true }), up(50, { probe_failed: true })]), [10, 50]);
});

test('lowest_latency moves after the rounds, by both margins, past the cooldown; a chosen exit down at once', () => {
  const choice = new ExitChoice('lowest_latency', SWITCHING);
  assert.deepEqual(choice.look([100, null], 0, false), { from: null, to: 0, reason: 'first_up' });
  const rounds = (scores: (number | null)[], from: number, count: number) =>
    Array.from({ length: count }, (_, i) => choice.look(scores, from + i * 1000, true));
  // Ahead by 25 ms but under 15 %: no gain.
  assert.deepEqual(rounds([200, 175], 40_000, 5), [null, null, null, null, null]);
  // Ahead by both: the third round in a row moves.
  assert.deepEqual(rounds([100, 50], 50_000, 3).slice(0, 2), [null, null]);
  assert.equal(choice.chosen, 1);
  // A better one again at once is held by the cooldown, then taken.
  assert.deepEqual(rounds([10, 50], 53_000, 5), [null, null, null, null, null]);
  assert.equal(choice.chosen, 1);
  assert.deepEqual(choice.look([10, 50], 90_000, true), { from: 1, to: 0, reason: 'lower_latency' });
  // A round that is not better breaks the streak.
  rounds([100, 50], 200_000, 2);
  choice.look([100, 95], 202_000, true);
  assert.deepEqual(rounds([100, 50], 203_000, 2), [null, null]);
  assert.equal(choice.chosen, 0);
  assert.deepEqual(choice.look([null, 50], 203_500, false), { from: 0, to: 1, reason: 'exit_down' });
  assert.deepEqual(choice.look([null, null], 204_000, false), { from: 1, to: null, reason: 'exit_down' });
  assert.deepEqual(choice.look([null, 70], 204_500, false), { from: null, to: 1, reason: 'first_up' });
});

test('failover takes the first exit up, and goes back to an earlier one only once it stayed up the rounds', () => {
  const choice = new ExitChoice('failover', { ...SWITCHING, cooldown_ms: 0 });
  assert.equal(choice.look([null, 80, 10], 0, false)?.to, 1, 'the first up, not the fastest');
  assert.equal(choice.look([null, 80, 10], 1000, true), null);
  assert.equal(choice.look([500, 80, 10], 2000, true), null);
  assert.equal(choice.look([500, 80, 10], 3000, true), null);
  assert.deepEqual(choice.look([500, 80, 10], 4000, true), { from: 1, to: 0, reason: 'preferred_back' });
});
