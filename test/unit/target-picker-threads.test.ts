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

/** Runs one job a thread over the picker's counts, started at once; what each held. */
function together(counts: SharedArrayBuffer, jobs: Job[]): Promise<PickerDone[]> {
  const data = jobs.map((job) => ({ ...job, targets, strategy: 'least_conn', counts }) satisfies PickerWork);
  return threads<PickerDone>(new URL('../picker-worker.ts', import.meta.url), data);
}

test('least_conn in one thread steers by the connections other threads hold, and every count is exact', async () => {
  const picker = new TargetPicker(targets, 'least_conn');
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
  const before = [...new Int32Array(picker.counts)];
  await together(
    picker.counts,
    Array.from({ length: 4 }, () => ({ picks: 1000, releaseAll: true })),
  );
  assert.deepEqual([...new Int32Array(picker.counts)], before);
  assert.deepEqual(before, [300, spread[1], spread[2]]);
});
