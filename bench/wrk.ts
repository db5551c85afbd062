// Runs wrk (Debian's) on CPU 1 and reads its throughput and latency percentiles.

import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pinned } from './procs.ts';

export interface WrkResult {
  rps: number;
  p50: number;
  p99: number;
  requests: number;
  non2xx: number;
}

const dir = mkdtempSync(join(tmpdir(), 'portplane-wrk-'));
let scripts = 0;

function ms(value: string, unit: string): number {
  const n = Number(value);
  return unit === 'us' ? n / 1000 : unit === 's' ? n * 1000 : n;
}

/**
 * `lua` is a wrk script (headers, request function); durations in seconds. With `warmup`, the same load runs that long
 * first and is not counted: a new master's first second under load (V8 compiling what it runs most, connections
 * opening) was 10-15% slower, with a p99 of 50-80 ms.
 */
export function wrk(
  url: string,
  options: { connections: number; seconds: number; lua?: string; warmup?: number },
): WrkResult {
  const args = (seconds: number) => ['wrk', '-t1', `-c${options.connections}`, `-d${seconds}s`, '--latency'];
  const rest: string[] = [];
  if (options.lua) {
    const script = join(dir, `s${scripts++}.lua`);
    writeFileSync(script, options.lua);
    rest.push('-s', script);
  }
  rest.push(url);
  if (options.warmup) run([...args(options.warmup), ...rest]);
  const text = run([...args(options.seconds), ...rest]);
  const pct = (p: string) => {
    const m = new RegExp(`\\s${p}%\\s+([\\d.]+)(us|ms|s)`).exec(text);
    return m ? ms(m[1]!, m[2]!) : NaN;
  };
  return {
    rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(text)?.[1] ?? NaN),
    p50: pct('50'),
    p99: pct('99'),
    requests: Number(/(\d+) requests in/.exec(text)?.[1] ?? 0),
    non2xx: Number(/Non-2xx or 3xx responses: (\d+)/.exec(text)?.[1] ?? 0),
  };
}

function run(argv: string[]): string {
  const [command, ...rest] = pinned(1, argv);
  const out = spawnSync(command!, rest, { encoding: 'utf8' });
  if (out.status !== 0) throw new Error(`wrk failed: ${out.stderr || out.stdout}`);
  return out.stdout;
}

/** A wrk script that sends a bearer token (and optionally a fixed method and body). */
export function bearer(token: string, method = 'GET', body?: string): string {
  const lines = [`wrk.method = "${method}"`, `wrk.headers["Authorization"] = "Bearer ${token}"`];
  if (body !== undefined) lines.push('wrk.headers["Content-Type"] = "application/json"', `wrk.body = [[${body}]]`);
  return `${lines.join('\n')}\n`;
}
