// Which process a file names (a lock, a readiness mark): its pid, and where the system can
// tell, which run of that pid it was, so a pid reused after a restart is not taken for it.

import { readFileSync } from 'node:fs';

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: the process exists but belongs to someone else.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * The boot and the start time of process `pid` (Linux: /proc), which no other process has had or will have; null
 * where it cannot be read (no /proc, or a process of another user hidden from this one).
 */
export function processIdentity(pid: number): string | null {
  try {
    const boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // After the name in parentheses (which may hold spaces): state is field 3, starttime field 22.
    const started = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
    return started ? `${boot}:${started}` : null;
  } catch {
    return null;
  }
}

/** Whether the process a file named (`identity` as `processIdentity` gave it then, if it could) still runs. */
export function stillRuns(pid: number, identity: string | null): boolean {
  if (!isAlive(pid)) return false;
  return identity === null || processIdentity(pid) === identity;
}
