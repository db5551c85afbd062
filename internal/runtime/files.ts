// Writing a file whole or not at all, through a temp file nobody else can have prepared: made
// fresh (O_EXCL, so never through a file or symlink already there), 0600, flushed to disk,
// then renamed over the path (which replaces a symlink there rather than following it).

import { closeSync, fsyncSync, openSync, renameSync, rmSync, writeSync } from 'node:fs';
import { randomBytes } from 'node:crypto';

/** Writes `data` to `path`, replacing what is there only once all of it is on disk; mode 0600 unless given. */
export function writeFileAtomic(path: string, data: string | Uint8Array, mode = 0o600): void {
  const temp = `${path}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
  const fd = openSync(temp, 'wx', mode);
  try {
    try {
      const bytes = typeof data === 'string' ? Buffer.from(data) : data;
      for (let at = 0; at < bytes.length;) at += writeSync(fd, bytes, at);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(temp, path);
  } catch (error) {
    rmSync(temp, { force: true });
    throw error;
  }
}
