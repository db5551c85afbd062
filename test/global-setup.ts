// node --test's global setup (npm run test:e2e, npm run test:unit): the run's preparation (test/setup.ts), in the
// runner's process, whose test files' processes inherit it.

import { tsImport } from 'tsx/esm/api';

// The runner loads this file before `--import tsx` takes hold of it, with types stripped only: the master's source,
// which needs tsx, is loaded through it here. (npm test's processes, where tsx already runs, import test/setup.ts
// directly: tsImport starts a thread of tsx's own.)
const { prepareRun } = (await tsImport('./setup.ts', import.meta.url)) as typeof import('./setup.ts');

let teardown: (() => void) | null = null;

export async function globalSetup(): Promise<void> {
  teardown = await prepareRun();
}

export async function globalTeardown(): Promise<void> {
  teardown?.();
}
