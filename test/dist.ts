// The bundled programs (dist/) as tests run them: built first when one is missing or older than a source, so that a
// test file runs alone without `npm run build` (npm test builds them before any test starts, and nothing is rebuilt).

import { execFileSync } from 'node:child_process';
import { mkdirSync, readdirSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';

const SOURCES = ['cmd', 'internal', 'web', 'build.mjs', 'package.json'];
const PROGRAMS = ['agent', 'master', 'license'] as const;
/** Held by the test process building (several may find dist/ stale at once); older than this, its holder died. */
const LOCK = 'dist.building';
const STALE_LOCK_MS = 120_000;

function newest(path: string): number {
  const stat = statSync(path);
  if (!stat.isDirectory()) return stat.mtimeMs;
  return Math.max(0, ...readdirSync(path).map((name) => newest(join(path, name))));
}

function stale(): boolean {
  const built = PROGRAMS.map((name) => {
    try {
      return statSync(`dist/${name}.mjs`).mtimeMs;
    } catch {
      return 0;
    }
  });
  return Math.min(...built) < Math.max(...SOURCES.map(newest));
}

function sleep(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

let current = false;

/** The path of dist/NAME.mjs, current with the sources. */
export function built(name: (typeof PROGRAMS)[number]): string {
  while (!current && stale()) {
    try {
      mkdirSync(LOCK);
    } catch {
      const held = statSync(LOCK, { throwIfNoEntry: false });
      if (held && Date.now() - held.mtimeMs > STALE_LOCK_MS) rmSync(LOCK, { recursive: true, force: true });
      sleep(200);
      continue;
    }
    try {
      if (stale()) execFileSync(process.execPath, ['build.mjs'], { stdio: 'ignore' });
    } finally {
      rmSync(LOCK, { recursive: true, force: true });
    }
    // Built once, whatever the clock says of a source edited meanwhile or dated in the future: never built again.
    break;
  }
  current = true;
  return `dist/${name}.mjs`;
}
