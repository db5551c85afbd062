// One master per data dir: a lock file naming the master that owns the dir (its pid and, where
// the system tells, its boot and start time). A second master is refused, naming the holder;
// the lock of a master that is gone (killed, or the machine restarted, even if its pid now
// belongs to another process) is taken over.

import { closeSync, linkSync, openSync, readFileSync, rmSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { processIdentity, stillRuns } from '../runtime/pid.ts';

interface Holder {
  pid: number;
  identity: string | null;
}

function holderOf(path: string): Holder | null {
  try {
    const [pidText = '', identity = null] = readFileSync(path, 'utf8').trim().split(' ');
    const pid = Number(pidText);
    return Number.isSafeInteger(pid) && pid > 0 ? { pid, identity } : null;
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
  const identity = processIdentity(process.pid);
  writeSync(fd, `${process.pid}${identity ? ` ${identity}` : ''}\n`);
  closeSync(fd);
  try {
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        // A hard link appears whole or not at all: the lock never holds half a pid.
        linkSync(mine, path);
        // Released only while it is still ours: a second close must not free another master's lock.
        return { release: () => holderOf(path)?.pid === process.pid && rmSync(path, { force: true }) };
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      }
      const holder = holderOf(path);
      if (holder !== null && holder.pid !== process.pid && stillRuns(holder.pid, holder.identity)) {
        throw new Error(
          `the data dir ${dir} is in use by another master (pid ${holder.pid}); ` +
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
