// The bundled master (dist/master.mjs, current: see test/dist.ts) as a child process, for
// what only a real process shows: a kill -9, a start seen from outside, its commands.

import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import type { TestContext } from 'node:test';
import { ADMIN_PASSWORD } from './helpers.ts';
import { built } from './dist.ts';

/** The master serving `dataDir` on loopback `port`, its first admin's password ADMIN_PASSWORD; killed after `t`. */
export function bundledMaster(t: TestContext, dataDir: string, port: number): ChildProcess {
  const child = spawn(process.execPath, [built('master'), '--listen', `127.0.0.1:${port}`, '--data-dir', dataDir], {
    env: { PATH: process.env.PATH ?? '', MASTER_ADMIN_PASSWORD: ADMIN_PASSWORD },
    stdio: 'ignore',
  });
  t.after(() => void child.kill('SIGKILL'));
  return child;
}

/** Runs `master ARGS` (a command: wait-ready, verify, ...) to its end. */
export async function masterCommand(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [built('master'), ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  // 'close', not 'exit': a child's output may still be on its way when it has exited (seen under load: promote's line).
  const [code] = (await once(child, 'close')) as [number | null];
  return { code, stdout, stderr };
}
