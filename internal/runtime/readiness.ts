// A master's readiness, as a file in its data dir for whoever started it to wait on: written once the master serves
// everything, removed when it stops. systemd's ExecStartPost waits on it (`master wait-ready`), so that
// `systemctl start` returns when the master is ready rather than when its process exists.

import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { writeFileAtomic } from './files.ts';
import { isAlive, processIdentity, stillRuns } from './pid.ts';

export const READY_FILE = 'master.ready';

export interface Readiness {
  pid: number;
  /** Which run of `pid` it is (see `processIdentity`), where the system tells. */
  identity: string | null;
  url: string;
}

function pathOf(dataDir: string): string {
  return join(dataDir, READY_FILE);
}

/** Says that this process serves at `url` from `dataDir`. */
export function markReady(dataDir: string, url: string): void {
  const ready: Readiness = { pid: process.pid, identity: processIdentity(process.pid), url };
  writeFileAtomic(pathOf(dataDir), `${JSON.stringify(ready)}\n`);
}

/** Withdraws what `markReady` said, if this process said it. */
export function clearReady(dataDir: string): void {
  if (readReady(dataDir)?.pid === process.pid) rmSync(pathOf(dataDir), { force: true });
}

function readReady(dataDir: string): Readiness | null {
  try {
    const parsed = JSON.parse(readFileSync(pathOf(dataDir), 'utf8')) as Partial<Readiness>;
    return Number.isSafeInteger(parsed.pid) && typeof parsed.url === 'string'
      ? { pid: parsed.pid!, identity: typeof parsed.identity === 'string' ? parsed.identity : null, url: parsed.url }
      : null;
  } catch {
    return null;
  }
}

/**
 * Resolves with where the master of process `pid` serves, once it is ready. Throws when that process ends first or
 * `timeoutMs` passes. A file left by an earlier master (another pid, or the same pid in an earlier run) is not this
 * one's readiness.
 */
export async function waitReady(dataDir: string, pid: number, timeoutMs: number): Promise<Readiness> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const ready = readReady(dataDir);
    if (ready?.pid === pid && stillRuns(pid, ready.identity)) return ready;
    if (!isAlive(pid)) throw new Error(`the master (pid ${pid}) ended before it was ready; see its log`);
    if (Date.now() > deadline) throw new Error(`the master (pid ${pid}) was not ready within ${timeoutMs / 1000} s`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
