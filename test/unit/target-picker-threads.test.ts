// A rule's least_conn across threads: each thread's picker counts the connections it opens in the rule's shared open
// counts (relay/targets.ts), so the connections one thread holds steer the others. Real worker threads.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { TargetPicker, type Target } from '../../internal/relay/targets.ts';
import type { PickerDone, PickerWork } from '../picker-worker.ts';
import { together as threads } from '../threads.ts';

const targets: Target[] = [
  { host: '192.0.2.1', port: 80 },
  { host: '192.0.2.2', port: 80 },
  { host: '192.0.2.3', port: 80 },
];

type Job = Pick<PickerWork, 'picks' | 'only' | 'releaseAll'>;

/** Runs one job a thread over the picker's counts, started at once, as threads 1 to N; what each held. */
function together(counts: SharedArrayBuffer, jobs: Job[]): Promise<PickerDone[]> {
  const data = jobs.map(
    (job, i) => ({ ...job, targets, strategy: 'least_conn', counts, thread: i + 1 }) satisfies PickerWork,
  );
  return threads<PickerDone>(new URL('../picker-worker.ts', import.meta.url), data);
}

test('least_conn in one thread steers by the connections other threads hold, and every count is exact', async () => {
  const picker = new TargetPicker(targets, 'least_conn', null, () => null, null, { threads: 5 });
  // One thread holds 300 connections to the first target.
  const [first] = await together(picker.counts, [{ picks: 300, only: 0, releaseAll: false }]);
  assert.deepEqual(first, [300, 0, 0]);
  // Three threads then open 100 each, at once: none to the first target, the other two evenly (the picks racing).
  const rest = await together(
    picker.counts,
    Array.from({ length: 3 }, () => ({ picks: 100, releaseAll: false })),
  );
  const spread = targets.map((_, i) => rest.reduce((sum, held) => sum + held[i]!, 0));
  assert.equal(spread[0], 0);
  assert.equal(spread[1]! + spread[2]!, 300);
  assert.ok(Math.abs(spread[1]! - spread[2]!) <= 6, `${spread}`);
  // This thread's picker sees the same counts: its next goes to the least loaded of the two.
  assert.deepEqual(picker.order()[0], spread[1]! <= spread[2]! ? targets[1] : targets[2]);
  // Four threads opening and closing 1,000 each at once leave every count where it was.
  await together(
    picker.counts,
    Array.from({ length: 4 }, () => ({ picks: 1000, releaseAll: true })),
  );
  assert.deepEqual(picker.openTo(), [300, spread[1], spread[2]]);
  // A thread that ends gives back exactly what its connections held, once: thread 2 held its 100 of the second round;
  // thread 1 the first round's 300 and its 100 of the second.
  picker.reclaim(2);
  const afterTwo = [300, spread[1]! - rest[1]![1]!, spread[2]! - rest[1]![2]!];
  assert.deepEqual(picker.openTo(), afterTwo);
  picker.reclaim(2);
  assert.deepEqual(picker.openTo(), afterTwo, 'a second reclaim gives back nothing');
  picker.reclaim(1);
  assert.deepEqual(picker.openTo(), [0, rest[2]![1], rest[2]![2]]);
  // The least loaded is now the first target, which nothing holds.
  assert.deepEqual(picker.order()[0], targets[0]);
});

test('a picker kept for a number of threads refuses a thread past them', () => {
  const main = new TargetPicker(targets, 'least_conn', null, () => null, null, { threads: 2 });
  assert.throws(
    () => new TargetPicker(targets, 'least_conn', null, () => null, null, { buffer: main.counts, thread: 2 }),
    /thread 2 of 2 counted/,
  );
});
