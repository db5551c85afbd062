// The API contract, judged by tools nobody here wrote: the served OpenAPI document passes
// Redocly's recommended lint with no error and no warning, and a client generated from it
// by openapi-typescript type-checks against test/contract/client.ts and works against the
// real master.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { call, startMaster } from './helpers.ts';

const quiet = { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true', NO_COLOR: '1' };

/** Runs a program without blocking this process, whose event loop serves the master the program may call. */
function run(command: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = execFile(command, args, { env: quiet, timeout: 60_000 }, (error, stdout, stderr) =>
      resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
    );
    child.stdin?.end();
  });
}

const bin = (name: string) => join('node_modules', '.bin', name);

test('the served document lints clean, and a client generated from it type-checks and works', async (t) => {
  const m = await startMaster(t);
  const served = await call(m.url, 'GET', '/api/openapi.json');
  assert.equal(served.status, 200);
  const file = join(mkdtempSync(join(tmpdir(), 'portplane-contract-')), 'openapi.json');
  writeFileSync(file, JSON.stringify(served.body));

  const lint = await run(bin('redocly'), ['lint', file, '--format=json']);
  const report = JSON.parse(lint.stdout);
  assert.deepEqual(report.totals, { errors: 0, warnings: 0, ignored: 0 }, JSON.stringify(report.problems, null, 2));

  // Fields with a default stay optional: the same component types requests, where they may be left out.
  const generated = await run(bin('openapi-typescript'), [
    file,
    '--default-non-nullable=false',
    '-o',
    'test/contract/api.gen.ts',
  ]);
  assert.equal(generated.code, 0, generated.stderr);
  const typecheck = await run(bin('tsc'), ['-p', 'test/contract/tsconfig.json']);
  assert.equal(typecheck.code, 0, typecheck.stdout);

  const client = await run(process.execPath, ['--import', 'tsx', 'test/contract/client.ts', m.url, m.admin]);
  assert.equal(client.code, 0, client.stderr);
  assert.deepEqual(JSON.parse(client.stdout), { node: 'contract-edge', status: 'new', rule: 1, state: 'pending' });
});
