// npm test's runner (test/run.ts), run on files of its own (test/fixtures/runner/).

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import test from 'node:test';
import { promisify } from 'node:util';

test('the runner runs each file once in one of its processes, prints it whole, fails with its failure', async () => {
  const run = await promisify(execFile)(
    process.execPath,
    ['--import', 'tsx', 'test/run.ts', '--processes=2', 'test/fixtures/runner/*.test.ts'],
    { encoding: 'utf8' },
  ).then(
    () => assert.fail('a run with a failing test succeeded'),
    (error: { code: number; stdout: string }) => error,
  );
  assert.equal(run.code, 1);
  const ran = [...run.stdout.matchAll(/^ran (\S+) in \d+$/gm)].map((match) => match[1]);
  assert.deepEqual(ran.sort(), ['fail', 'pass-1', 'pass-2', 'pass-3', 'pass-4', 'pass-5']);
  for (const [name, count] of Object.entries({ tests: 7, suites: 7, pass: 6, fail: 1, cancelled: 0 }))
    assert.match(run.stdout, new RegExp(`^ℹ ${name} ${count}$`, 'm'), name);
  // A file that throws as it loads is a failed suite of its own (node:test counts no test of it).
  assert.match(run.stdout, /^✖ test\/fixtures\/runner\/broken\.test\.ts .*\n/m);
  assert.match(run.stdout, /Error: broken as it loads/);
  // A file's suite: its name, its tests, its end, with no other file's line between.
  const file = 'test/fixtures/runner/fail.test.ts'.replaceAll('.', '\\.');
  // (The files' own lines, written straight to the output, may come between the reporter's: left out here.)
  const reported = run.stdout.replace(/^ran \S+ in \d+\n/gm, '');
  assert.match(reported, new RegExp(`^▶ ${file}\n {2}✖ fails .*\n {2}✔ passes beside it .*\n✖ ${file} `, 'm'));
  // The failures listed at the process's end, whole: the failing test's name, then its error.
  assert.match(run.stdout, /^✖ failing tests:$/m);
  assert.match(run.stdout, /^test at test\/fixtures\/runner\/fail\.test\.ts.*\n✖ fails .*\n {2}AssertionError/m);
});
