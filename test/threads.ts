// Worker threads started at once, for the tests of what the relay's threads share (a rule's cells, a listener's
// counts, a rule's targets): each worker is given `flags`, says it is ready and waits for the test to raise flag 0
// once every one is, then may stop at named steps (flag 1, 2, ... raised once every worker reached it), and answers
// with its outcome, the first message that is not a step's name.

import { parentPort, Worker } from 'node:worker_threads';

/** In the test: runs a worker of `script` for each of `data`, started together; each one's outcome. */
export async function together<Out>(script: URL, data: object[], steps: readonly string[] = []): Promise<Out[]> {
  const flags = new Int32Array(new SharedArrayBuffer(4 * (1 + steps.length)));
  const workers = data.map((one) => new Worker(script, { workerData: { ...one, flags: flags.buffer } }));
  const outcomes = workers.map(
    (worker) =>
      new Promise<Out>((resolve, reject) => {
        worker.on('error', reject);
        worker.on('message', (message) => typeof message !== 'string' && resolve(message as Out));
      }),
  );
  for (const [index, step] of ['ready', ...steps].entries()) {
    await Promise.all(workers.map((worker) => said(worker, step)));
    Atomics.store(flags, index, 1);
    Atomics.notify(flags, index);
  }
  const done = await Promise.all(outcomes);
  await Promise.all(workers.map((worker) => worker.terminate()));
  return done;
}

function said(worker: Worker, step: string): Promise<void> {
  return new Promise((resolve) => {
    const listen = (message: unknown) => {
      if (message !== step) return;
      worker.off('message', listen);
      resolve();
    };
    worker.on('message', listen);
  });
}

/** In a worker: says `step` ('ready' first, then the test's steps in order) and waits until every worker has. */
export function reached(flags: SharedArrayBuffer, step: string, index: number): void {
  parentPort!.postMessage(step);
  Atomics.wait(new Int32Array(flags), index, 0);
}
