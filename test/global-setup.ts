// Run once before a run's test files: the seed data dir startMaster copies, made here rather than in each file (a
// master's first start applies every migration and hashes its admin's password, and the login hashes it again: half a
// second of CPU a file).

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { tsImport } from 'tsx/esm/api';

// The runner loads this file before `--import tsx` takes hold of it, with types stripped only: the master's source,
// which needs tsx, is loaded through it here.
const { makeSeed, SEED_ENV } = (await tsImport('./helpers.ts', import.meta.url)) as typeof import('./helpers.ts');

let dir: string | null = null;

export async function globalSetup(): Promise<void> {
  dir = mkdtempSync(join(tmpdir(), 'portplane-seed-'));
  process.env[SEED_ENV] = JSON.stringify(await makeSeed(dir));
}

export async function globalTeardown(): Promise<void> {
  if (dir) rmSync(dir, { recursive: true, force: true });
}
