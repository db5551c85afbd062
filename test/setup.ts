// What a run makes once before its test files (npm test's processes, and npm run test:e2e's and test:unit's runner):
// what each file would otherwise make again.

import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { makeSeed, SEED_ENV } from './helpers.ts';

/** Prepares this process and those it starts for a run of test files; returns what removes the run's files. */
export async function prepareRun(): Promise<() => void> {
  // Every temporary file and folder of the run, whoever makes it (a test, the master or agent under test, a process a
  // test starts), goes under one folder of the run's (os.tmpdir() reads TMPDIR), removed at its end: a run left
  // gigabytes behind when each test had to remember its own.
  const scratch = mkdtempSync(join(tmpdir(), 'portplane-run-'));
  // Searchable by every user: a test that runs something as another (install-ssh's login) reaches its own folders.
  chmodSync(scratch, 0o711);
  process.env.TMPDIR = scratch;
  // Each process compiles the master's modules again, and each worker thread the master's bundle: kept here, the
  // first compiles them for the rest (a tenth of a second of CPU a file).
  process.env.NODE_COMPILE_CACHE ??= resolve('node_modules/.cache/node-compile');
  // The data dir startMaster copies: a master's first start applies every migration and hashes its admin's password,
  // and the login hashes it again (half a second of CPU a file).
  process.env[SEED_ENV] = JSON.stringify(await makeSeed(mkdtempSync(join(tmpdir(), 'portplane-seed-'))));
  return () => rmSync(scratch, { recursive: true, force: true });
}
