// One master per data dir: a lock file holding the pid of the master that owns the dir. A
// second master is refused, naming the holder; the lock of a master that was killed (its pid
// gone) is taken over.

import { closeSync, linkSync, openSync, readFileSync, rmSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { isAlive } from '../runtime/pid.ts';

function holderOf(path: string): number | null {
  try {
    const pid = Number(readFileSync(path, 'utf8').trim());
    return Number.isSafeInteger(pid) && pid > 0 ? pid : null;
  } catch {
    return null;
  }
}

export interface DataDirLock {
  release(): void;
}

/** Takes `dir`'s lock for this process. Throws naming the holder when a live master holds it. */
export function lockDataDir(dir: string): DataDirLock {
  const path = join(dir, 'master.lock');
  const mine = `${path}.${process.pid}`;
  const fd = openSync(mine, 'w', 0o600);
  writeSync(fd, `${process.pid}\n`);
  closeSync(fd);
  try {
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        // A hard link appears whole or not at all: the lock never holds half a pid.
        linkSync(mine, path);
        // Released only while it is still ours: a second close must not free another master's lock.
        return { release: () => holderOf(path) === process.pid && rmSync(path, { force: true }) };
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      }
      const holder = holderOf(path);
      if (holder !== null && holder !== process.pid && isAlive(holder)) {
        throw new Error(
          `the data dir ${dir} is in use by another master (pid ${holder}); ` +
            'stop it, or give this one another --data-dir',
        );
      }
      // The holder is gone (killed, or the machine restarted): its lock is stale.
      unlinkSync(path);
    }
    throw new Error(`cannot take the lock ${path}: another master is starting at the same time`);
  } finally {
    rmSync(mine, { force: true });
  }
}
