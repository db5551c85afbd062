// A disk that fills: a small file system of the test's own (tmpfs, as root), and a filler that takes its room.

import { closeSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';

/** A small file system of its own (tmpfs), or null where this host cannot mount one (not root). */
export function smallDisk(t: TestContext, megabytes: number): string | null {
  const dir = mkdtempSync(join(tmpdir(), 'portplane-disk-'));
  if (spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${megabytes}m,mode=0700`, 'tmpfs', dir]).status !== 0) return null;
  t.after(() => {
    spawnSync('umount', ['-l', dir]);
    rmSync(dir, { recursive: true, force: true });
  });
  return dir;
}

/**
 * Fills `dir`'s file system: writes until it is full (a write that does not fit writes what does, the next is refused).
 * The room is not measured first: the master's own writes, its checkpoint thread's among them, may take some of it
 * meanwhile. Returns how to free it again.
 */
export function fill(dir: string): () => void {
  const filler = join(dir, 'filler');
  const chunk = Buffer.alloc(256 * 1024);
  const fd = openSync(filler, 'w');
  try {
    for (;;) writeSync(fd, chunk);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOSPC') throw error;
  } finally {
    closeSync(fd);
  }
  return () => rmSync(filler);
}
