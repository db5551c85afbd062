// One of test/run.ts's processes: takes the next test file of the run that no other process has taken, runs its tests
// as a suite named after it, and so on until none is left. A file is taken by making its numbered folder in the run's
// queue folder, which only one process can.

import { after, describe } from 'node:test';
import { mkdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { pathToFileURL } from 'node:url';
import { prepareRun } from './setup.ts';

const queue = process.argv[2];
if (!queue) throw new Error('test/queue.ts is run by test/run.ts, given the queue folder');
void runAll(queue);

async function runAll(queue: string): Promise<void> {
  const teardown = await prepareRun();
  const files = JSON.parse(readFileSync(join(queue, 'files.json'), 'utf8')) as string[];
  for (let index = 0; index < files.length; index++) {
    if (!taken(queue, index)) continue;
    const file = files[index]!;
    // Registered from here, outside any test, the suite is one of the run's own; the next file is taken once its
    // hooks have run.
    await new Promise<void>((done) =>
      describe(relative(process.cwd(), file), async () => {
        after(() => setImmediate(done));
        await import(pathToFileURL(file).href);
      }),
    );
  }
  teardown();
}

function taken(queue: string, index: number): boolean {
  try {
    mkdirSync(join(queue, String(index)));
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw error;
  }
}
