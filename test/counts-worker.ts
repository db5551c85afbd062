// A thread claiming and releasing places on one listener's shared counts (relay/listener-counts.ts) beside others, for
// test/unit/listener-counts.test.ts, started with the others (see threads.ts).

import { parentPort, workerData } from 'node:worker_threads';
import { ListenerCounts } from '../internal/relay/listener-counts.ts';
import { reached } from './threads.ts';

export interface CountsWork {
  counts: SharedArrayBuffer;
  /** Its place in the counts' threads (from 1: 0 is the test's). */
  thread: number;
  maxOpen: number;
  perSource: number;
  /** The addresses it claims for, each `tries` times, in turn; then releases the `release` first of what it holds. */
  sources: string[];
  tries: number;
  release: number;
}

/** How many places it holds of each address, once done. */
export type CountsDone = Record<string, number>;

const {
  counts: buffer,
  thread,
  flags,
  maxOpen,
  perSource,
  sources,
  tries,
  release,
} = workerData as CountsWork & {
  flags: SharedArrayBuffer;
};
const counts = new ListenerCounts(maxOpen, buffer, thread);
const held: string[] = [];
reached(flags, 'ready', 0);
for (let i = 0; i < tries; i++)
  for (const source of sources) if (counts.claim(source, maxOpen, perSource)) held.push(source);
for (const source of held.splice(0, release)) counts.release(source);
const done: CountsDone = {};
for (const source of held) done[source] = (done[source] ?? 0) + 1;
parentPort!.postMessage(done);
