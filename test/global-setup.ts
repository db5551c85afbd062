// Run once before a run's test files (npm test, npm run test:e2e): what each file's process would otherwise make again.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { tsImport } from 'tsx/esm/api';

// The runner loads this file before `--import tsx` takes hold of it, with types stripped only: the master's source,
// which needs tsx, is loaded through it here.
const { makeSeed, SEED_ENV } = (await tsImport('./helpers.ts', import.meta.url)) as typeof import('./helpers.ts');

let dir: string | null = null;

export async function globalSetup(): Promise<void> {
  // Each file's process compiles the master's modules again, and each worker thread the master's bundle: kept here,
  // the first compiles them for the rest (a tenth of a second of CPU a file).
  process.env.NODE_COMPILE_CACHE ??= resolve('node_modules/.cache/node-compile');
  // The data dir startMaster copies: a master's first start applies every migration and hashes its admin's password,
  // and the login hashes it again (half a second of CPU a file).
  dir = mkdtempSync(join(tmpdir(), 'portplane-seed-'));
  process.env[SEED_ENV] = JSON.stringify(await makeSeed(dir));
}

export async function globalTeardown(): Promise<void> {
  if (dir) rmSync(dir, { recursive: true, force: true });
}
