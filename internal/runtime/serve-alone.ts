// A primary that waits for its peers before its first write (in sync mode, when none of the masters it knows answers)
// says so by a file in its data dir; `master serve-alone` asks it to go on without them, by another it takes once.
// Both are gone once it serves, so that no request outlives the wait it was meant for.

import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { writeFileAtomic } from './files.ts';

const WAITING_FILE = 'master.waiting-for-peers';
const ASKED_FILE = 'master.serve-alone';

/** Says that the master of `dataDir` waits for its peers, and why. */
export function markWaiting(dataDir: string, why: string): void {
  writeFileAtomic(join(dataDir, WAITING_FILE), `${JSON.stringify({ pid: process.pid, why })}\n`);
}

/** The wait is over (it served, or it stops): the mark and any request go. */
export function clearWaiting(dataDir: string): void {
  for (const file of [WAITING_FILE, ASKED_FILE]) rmSync(join(dataDir, file), { force: true });
}

/** Whether an operator asked the waiting master to serve without its peers. */
export function servingAloneAsked(dataDir: string): boolean {
  return existsSync(join(dataDir, ASKED_FILE));
}

/** Asks the master waiting on `dataDir` to serve without its peers; what it waited for. Throws when none waits. */
export function askToServeAlone(dataDir: string): string {
  let why: string;
  try {
    why = String((JSON.parse(readFileSync(join(dataDir, WAITING_FILE), 'utf8')) as { why?: unknown }).why);
  } catch {
    throw new Error(`no master serving from ${dataDir} waits for its peers`);
  }
  writeFileAtomic(join(dataDir, ASKED_FILE), `${JSON.stringify({ asked_at: new Date().toISOString() })}\n`);
  return why;
}
