// A thread choosing targets for a rule's connections beside others, for test/unit/target-picker-threads.test.ts: a
// picker over the rule's shared open counts, holding what it picks, started with the others (see threads.ts).

import { parentPort, workerData } from 'node:worker_threads';
import type { Strategy } from '../internal/domain/rules.ts';
import { TargetPicker, type Target } from '../internal/relay/targets.ts';
import { reached } from './threads.ts';

export interface PickerWork {
  targets: Target[];
  strategy: Strategy;
  counts: SharedArrayBuffer;
  /** Its place among the threads counted (the test's is 0). */
  thread: number;
  /** Connections it opens, each to the first target the strategy picks, or all to `only` (an index). */
  picks: number;
  only?: number;
  /** Then gives back every one it holds. */
  releaseAll: boolean;
}

/** How many it holds to each target, by index, once done. */
export type PickerDone = number[];

const { targets, strategy, counts, thread, flags, picks, only, releaseAll } = workerData as PickerWork & {
  flags: SharedArrayBuffer;
};
const picker = new TargetPicker(targets, strategy, null, () => null, null, { buffer: counts, thread });
const held: { index: number; release: () => void }[] = [];
reached(flags, 'ready', 0);
for (let i = 0; i < picks; i++) {
  const target = only === undefined ? picker.order()[0]! : targets[only]!;
  held.push({ index: targets.indexOf(target), release: picker.hold(target) });
}
const done: PickerDone = targets.map(() => 0);
for (const { index } of held) done[index]!++;
if (releaseAll) for (const { release } of held) release();
parentPort!.postMessage(done);
