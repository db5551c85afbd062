// A thread relaying a rule beside others, for test/unit/rule-cells.test.ts: a gate over the rule's shared cells, made
// to admit, move bytes or bill a quota as the test says, starting when every thread is ready.

import { parentPort, workerData } from 'node:worker_threads';
import { Gate, type GateRule } from '../internal/relay/gate.ts';
import { RuleCells } from '../internal/relay/cells.ts';
import { reached } from './threads.ts';

export type GateJob =
  /** Tries to admit `admit` clients, holding each. */
  | { admit: number }
  /** Admits and releases at random `churn` times, checking the open count against the cap after each admission. */
  | { churn: number }
  /** Moves `chunk` bytes at a time for `ms`, waiting as the bandwidth says. */
  | { flow: number; chunk: number; ms: number }
  /** Bills `reads` reads of `bill` bytes, then (once the test says, every thread done) tries to admit one client. */
  | { bill: number; reads: number };

export interface GateWork {
  cells: SharedArrayBuffer;
  /** Its place in the cells' threads (from 1: 0 is the test's). */
  thread: number;
  rule: GateRule;
  job: GateJob;
}

export interface GateDone {
  admitted: number;
  held: number;
  /** Admissions after which more were open than the cap. */
  overCap: number;
  moved: number;
  toldSpent: number;
  admittedAfter: boolean;
  /** When its admissions began and ended (ms, alike in every thread). */
  from: number;
  to: number;
}

const { cells: buffer, thread, flags, rule, job } = workerData as GateWork & { flags: SharedArrayBuffer };
const cells = new RuleCells(buffer, thread);
const gate = new Gate(rule, cells);
let toldSpent = 0;
gate.onSpent = () => toldSpent++;
const nap = new Int32Array(new SharedArrayBuffer(4));
reached(flags, 'ready', 0);
const clock = () => performance.timeOrigin + performance.now();
const done: GateDone = {
  admitted: 0,
  held: 0,
  overCap: 0,
  moved: 0,
  toldSpent: 0,
  admittedAfter: false,
  from: clock(),
  to: 0,
};
if ('admit' in job) {
  for (let i = 0; i < job.admit; i++) if (gate.admit('192.0.2.7')) done.admitted++;
  done.held = done.admitted;
} else if ('churn' in job) {
  for (let i = 0; i < job.churn; i++) {
    if (gate.admit('192.0.2.7')) {
      done.admitted++;
      done.held++;
      if (cells.open > rule.max_connections!) done.overCap++;
    }
    if (done.held > 0 && Math.random() < 0.5) {
      gate.release();
      done.held--;
    }
  }
} else if ('flow' in job) {
  const until = performance.now() + job.ms;
  while (performance.now() < until) {
    const wait = gate.flowed('in', job.chunk);
    done.moved += job.chunk;
    if (wait > 0) Atomics.wait(nap, 0, 0, Math.min(wait, until - performance.now()));
  }
} else {
  for (let i = 0; i < job.reads; i++) gate.read('in', job.bill, job.bill);
  reached(flags, 'billed', 1);
  done.admittedAfter = gate.admit('192.0.2.7');
}
done.toldSpent = toldSpent;
done.to = clock();
parentPort!.postMessage(done);
