// npm test's runner. A test file run in a process of its own (node --test's default) paid about a second of CPU to
// start it (Node, the runner, tsx, the master's modules), a hundred seconds of a run's four hundred. Here a few
// processes, one more than there are cores since the tests mostly wait on sockets and clocks, each run the files one
// after another (test/queue.ts), each taking the next file none has taken: one slow file does not hold the rest back.
//
// node --import tsx test/run.ts [--processes=N] [flags for each process's node, e.g. --test-name-pattern=WORDS] GLOB...
//
// Each process's output is printed a file at a time (a file's tests are one suite, named after it), whole, and the
// counts of all at the end, as one run's.

import { spawn } from 'node:child_process';
import { globSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';

const COUNTS = ['tests', 'suites', 'pass', 'fail', 'cancelled', 'skipped', 'todo'] as const;

const args = process.argv.slice(2);
const processesFlag = args.find((arg) => arg.startsWith('--processes='));
const processes = processesFlag ? Number(processesFlag.slice('--processes='.length)) : availableParallelism() + 1;
if (!Number.isInteger(processes) || processes < 1) throw new Error(`--processes must be a whole number, 1 or more`);
const flags = args.filter((arg) => arg.startsWith('--') && arg !== processesFlag);
const files = args
  .filter((arg) => !arg.startsWith('--'))
  .flatMap((pattern) => globSync(pattern).sort())
  .map((file) => resolve(file));
if (files.length === 0) throw new Error(`no test file matches ${args.join(' ')}`);

// A run of its own even when started by a test run's process (test/run.test.ts), whose node:test would otherwise
// report to that run rather than print.
const { NODE_TEST_CONTEXT: _, ...env } = process.env;
const queue = mkdtempSync(join(tmpdir(), 'portplane-queue-'));
writeFileSync(join(queue, 'files.json'), JSON.stringify(files));
const started = performance.now();
const counts = new Map<string, number>(COUNTS.map((name) => [name, 0]));
const children = Array.from({ length: Math.min(processes, files.length) }, () => runQueue());
for (const signal of ['SIGINT', 'SIGTERM'] as const)
  process.on(signal, () => children.forEach((child) => child.process.kill(signal)));
const codes = await Promise.all(children.map((child) => child.exited));
rmSync(queue, { recursive: true, force: true });
for (const [name, count] of counts) console.log(`ℹ ${name} ${count}`);
console.log(`ℹ duration_ms ${Math.round(performance.now() - started)}`);
process.exitCode = codes.every((code) => code === 0) ? 0 : 1;

function runQueue() {
  const child = spawn(process.execPath, ['--import', 'tsx', '--test-reporter=spec', ...flags, 'test/queue.ts', queue], {
    env,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  // A file's lines are held until its suite's last line (unindented, after its tests: passed, failed or skipped), so
  // that files run side by side do not interleave, and the failures the process lists at its end until it ends; its
  // own count lines are summed instead.
  let held: string[] = [];
  let listingFailures = false;
  createInterface({ input: child.stdout }).on('line', (line) => {
    const count = /^ℹ (\w+) (\d+)$/.exec(line);
    if (count && counts.has(count[1]!)) return void counts.set(count[1]!, counts.get(count[1]!)! + Number(count[2]));
    if (line.startsWith('ℹ duration_ms')) return;
    held.push(line);
    listingFailures ||= line === '✖ failing tests:';
    if (!listingFailures && /^[✔✖﹣] /.test(line)) {
      console.log(held.join('\n'));
      held = [];
    }
  });
  const exited = new Promise<number>((resolveExit) =>
    child.on('close', (code, signal) => {
      if (held.length > 0) console.log(held.join('\n'));
      // Its counts never came (what it printed of the file it was running is above): the run fails.
      if (signal) console.log(`✖ a test process was ended by ${signal}`);
      resolveExit(code ?? 1);
    }),
  );
  return { process: child, exited };
}
