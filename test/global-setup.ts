// Run once before a run's test files (npm test, npm run test:e2e, npm run test:unit): what each file's process would
// otherwise make again.

import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { tsImport } from 'tsx/esm/api';

// The runner loads this file before `--import tsx` takes hold of it, with types stripped only: the master's source,
// which needs tsx, is loaded through it here.
const { makeSeed, SEED_ENV } = (await tsImport('./helpers.ts', import.meta.url)) as typeof import('./helpers.ts');

let scratch: string | null = null;

export async function globalSetup(): Promise<void> {
  // Every temporary file and folder of the run, whoever makes it (a test, the master or agent under test, a process a
  // test starts), goes under one folder of the run's (os.tmpdir() reads TMPDIR), removed at its end: a run left
  // gigabytes behind when each test had to remember its own.
  scratch = mkdtempSync(join(tmpdir(), 'portplane-run-'));
  // Searchable by every user: a test that runs something as another (install-ssh's login) reaches its own folders.
  chmodSync(scratch, 0o711);
  process.env.TMPDIR = scratch;
  // Each file's process compiles the master's modules again, and each worker thread the master's bundle: kept here,
  // the first compiles them for the rest (a tenth of a second of CPU a file).
  process.env.NODE_COMPILE_CACHE ??= resolve('node_modules/.cache/node-compile');
  // The data dir startMaster copies: a master's first start applies every migration and hashes its admin's password,
  // and the login hashes it again (half a second of CPU a file).
  process.env[SEED_ENV] = JSON.stringify(await makeSeed(mkdtempSync(join(tmpdir(), 'portplane-seed-'))));
}

export async function globalTeardown(): Promise<void> {
  if (scratch) rmSync(scratch, { recursive: true, force: true });
}
