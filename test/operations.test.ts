// Running the master as an operator does, with the bundled program: one master per data
// dir, a killed master's lock taken over, start-up failures that end at once and say why,
// and a first admin that is only made once the master serves.

import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { until } from './net.ts';

const PASSWORD = { MASTER_ADMIN_PASSWORD: 'admin-password-for-tests' };

interface Program extends ChildProcess {
  output: string[];
}

function master(t: TestContext, args: string[], env: Record<string, string> = PASSWORD): Program {
  const child = spawn(process.execPath, ['dist/master.mjs', '--listen', '127.0.0.1:0', ...args], {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  }) as Program;
  child.output = [];
  for (const stream of [child.stdout!, child.stderr!]) {
    stream.setEncoding('utf8').on('data', (chunk: string) => child.output.push(...chunk.split('\n').filter(Boolean)));
  }
  t.after(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  return child;
}

const listening = (child: Program) =>
  until('the listening line', () => child.output.find((l) => /"msg":"listening"/.test(l)));

/** Runs the master to its end; it must end by itself (a start-up failure), not by the time-out. */
function failedStart(args: string[], env: Record<string, string> = PASSWORD) {
  const result = spawnSync(process.execPath, ['dist/master.mjs', ...args], {
    encoding: 'utf8',
    env: { PATH: process.env.PATH ?? '', ...env },
    timeout: 10_000,
  });
  assert.equal(result.signal, null, `${args.join(' ')} did not end by itself`);
  return result;
}

test(
  'one master per data dir: a second is refused naming the holder; ' +
    'a killed master leaves a lock that is taken over',
  async (t) => {
    const dataDir = mkdtempSync(join(tmpdir(), 'portplane-lock-'));
    const first = master(t, ['--data-dir', dataDir]);
    await listening(first);
    const second = failedStart(['--listen', '127.0.0.1:0', '--data-dir', dataDir]);
    assert.equal(second.status, 1);
    assert.match(
      second.stderr,
      new RegExp(`the data dir ${dataDir} is in use by another master \\(pid ${first.pid}\\)`),
    );

    first.kill('SIGKILL');
    await once(first, 'exit');
    const third = master(t, ['--data-dir', dataDir]);
    await listening(third);
    third.kill('SIGTERM');
    const [code] = await once(third, 'exit');
    assert.equal(code, 0);
  },
);

test('start-up failures end at once with what could not be used and what to do, on stderr', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'portplane-fail-'));
  const file = join(dir, 'a-file');
  writeFileSync(file, 'not a directory');
  const taken = createServer().listen(0, '127.0.0.1');
  await once(taken, 'listening');
  const port = (taken.address() as AddressInfo).port;
  const cases: [string[], RegExp][] = [
    [
      ['--data-dir', '/proc/portplane-test'],
      /cannot use the data dir \/proc\/portplane-test: .*give --data-dir a directory/,
    ],
    [['--data-dir', file], /cannot use the data dir .*a-file: .*is not a directory/],
    [
      ['--data-dir', join(dir, 'd1'), '--listen', `127.0.0.1:${port}`],
      new RegExp(`cannot listen on 127.0.0.1:${port}: the address is in use`),
    ],
    [
      ['--data-dir', join(dir, 'd2'), '--tls-cert', '/nonexistent.pem', '--tls-key', '/nonexistent.key'],
      /cannot use the TLS certificate and key: .*check --tls-cert/,
    ],
    [
      ['--data-dir', join(dir, 'd3'), '--license-key', '/nonexistent.pem'],
      /cannot use the license key \/nonexistent\.pem: .*check --license-key/,
    ],
  ];
  for (const [args, message] of cases) {
    const result = failedStart(['--listen', '127.0.0.1:0', ...args]);
    assert.equal(result.status, 1, args.join(' '));
    assert.match(result.stderr, message);
  }
  taken.close();
});

test(
  'the first admin is made only once the master serves: ' + 'a failed first start never hides its password',
  async (t) => {
    const dataDir = mkdtempSync(join(tmpdir(), 'portplane-first-'));
    const taken = createServer().listen(0, '127.0.0.1');
    await once(taken, 'listening');
    const failed = failedStart(
      ['--listen', `127.0.0.1:${(taken.address() as AddressInfo).port}`, '--data-dir', dataDir],
      {},
    );
    taken.close();
    assert.equal(failed.status, 1);
    assert.doesNotMatch(failed.stdout, /created the first admin/);
    const started = master(t, ['--data-dir', dataDir], {});
    const line = await until('the password', () => started.output.find((l) => /shown only now/.test(l)));
    assert.match(JSON.parse(line).password, /^[A-Za-z0-9_-]{24}$/);
  },
);
