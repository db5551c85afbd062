// The API contract, judged by a tool nobody here wrote: a client generated from the served OpenAPI document by
// openapi-typescript type-checks against test/contract/client.ts and works against the real master. (Spectral and
// Redocly lint the same document, docs/openapi.json, in npm run check.)

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { call, startMaster } from './helpers.ts';

const quiet = { ...process.env, NO_COLOR: '1' };

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

test('a client generated from the served document type-checks and works', async (t) => {
  const m = await startMaster(t);
  const served = await call(m.url, 'GET', '/api/openapi.json');
  assert.equal(served.status, 200);
  const file = join(mkdtempSync(join(tmpdir(), 'portplane-contract-')), 'openapi.json');
  writeFileSync(file, JSON.stringify(served.body));

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
