// Processes for benchmarks: start a program pinned to a CPU, read its peak memory, stop it.

import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, fstatSync, openSync, readFileSync, readSync } from 'node:fs';
import { createInterface } from 'node:readline';

export const hasTaskset = spawnSync('taskset', ['-c', '0', 'true']).status === 0;

// Whatever happens to the bench (a crash included), nothing it started outlives it: a stale
// relay holding a port, or a stray process taking CPU, would spoil the next run's figures.
const children = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
});

/** Moves this process, every thread of it, to `cpu` where taskset works. */
export function pinSelf(cpu: number): void {
  if (hasTaskset) spawnSync('taskset', ['-a', '-p', '-c', String(cpu), String(process.pid)], { stdio: 'ignore' });
}

/** argv prefixed with `taskset -c cpu` where taskset works. */
export function pinned(cpu: number, argv: string[]): string[] {
  return hasTaskset ? ['taskset', '-c', String(cpu), ...argv] : argv;
}

export interface Running {
  child: ChildProcess;
  lines: Record<string, unknown>[];
  /** Resolves with the first JSON log line whose msg is `msg` and that `accept` takes. */
  waitFor(
    msg: string,
    timeoutMs?: number,
    accept?: (line: Record<string, unknown>) => boolean,
  ): Promise<Record<string, unknown>>;
  stop(): Promise<void>;
}

/**
 * Starts a program that logs JSON lines on stdout: into a pipe, or with `logFile` appended to that file as a service
 * writes its log (read back from it every 100 ms). Request log lines are skipped unparsed: reading thousands a second
 * would take CPU from the process being measured.
 */
export function start(argv: string[], env: NodeJS.ProcessEnv = {}, logFile?: string): Running {
  const [command, ...args] = argv;
  const out = logFile ? openSync(logFile, 'a', 0o600) : 'pipe';
  // What an earlier run left in the file is not this one's.
  const from = typeof out === 'number' ? fstatSync(out).size : 0;
  const child = spawn(command!, args, { env: { ...process.env, ...env }, stdio: ['ignore', out, 'inherit'] });
  if (typeof out === 'number') closeSync(out);
  children.add(child);
  child.once('exit', () => children.delete(child));
  const lines: Record<string, unknown>[] = [];
  const waiters: [string, (line: Record<string, unknown>) => boolean, (line: Record<string, unknown>) => void][] = [];
  const onLine = (text: string) => {
    if (text.includes('"msg":"request"')) return;
    let line: Record<string, unknown>;
    try {
      line = JSON.parse(text);
    } catch {
      return;
    }
    lines.push(line);
    for (const waiter of [...waiters]) {
      const [msg, accept, resolve] = waiter;
      if (line.msg !== msg || !accept(line)) continue;
      waiters.splice(waiters.indexOf(waiter), 1);
      resolve(line);
    }
  };
  if (logFile) follow(logFile, from, child, onLine);
  else createInterface({ input: child.stdout! }).on('line', onLine);
  return {
    child,
    lines,
    waitFor(msg, timeoutMs = 120_000, accept = () => true) {
      const seen = lines.find((l) => l.msg === msg && accept(l));
      if (seen) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`${argv.join(' ')}: no '${msg}' within ${timeoutMs} ms`)),
          timeoutMs,
        );
        waiters.push([msg, accept, (line) => (clearTimeout(timer), resolve(line))]);
      });
    },
    async stop() {
      if (child.exitCode !== null) return;
      child.kill('SIGTERM');
      await new Promise((resolve) => child.once('exit', resolve));
    },
  };
}

/** Calls `onLine` with each line of `file` from byte `from` on, as they are appended, until `child` has exited. */
function follow(file: string, from: number, child: ChildProcess, onLine: (text: string) => void): void {
  const fd = openSync(file, 'r');
  const chunk = Buffer.alloc(1 << 20);
  let position = from;
  let partial = '';
  const read = () => {
    for (let n; (n = readSync(fd, chunk, 0, chunk.length, position)) > 0; position += n) {
      const text = partial + chunk.toString('utf8', 0, n);
      const lines = text.split('\n');
      partial = lines.pop()!;
      for (const line of lines) onLine(line);
    }
  };
  const timer = setInterval(read, 100);
  child.once('exit', () => {
    clearInterval(timer);
    read();
    closeSync(fd);
  });
}

/** Resident and peak resident memory of a process, in MiB (Linux). */
export function memory(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (name: string) => Number(new RegExp(`${name}:\\s+(\\d+) kB`).exec(status)?.[1] ?? 0);
  return { rss: kib('VmRSS') / 1024, peak: kib('VmHWM') / 1024 };
}

/**
 * CPU time a process has used, user and system, in microseconds (Linux; 10 ms ticks). On a machine whose neighbours
 * move a rate by tens of percent, the CPU a request costs is the steadier figure.
 */
export function cpuMicros(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command's name (in parentheses, which may hold spaces): utime and stime are the 12th and 13th.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}
