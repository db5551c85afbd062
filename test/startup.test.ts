// Ready means ready: until the master serves everything (its first admin made, the console and
// the agent link wired), every request is a 503 `starting`, never a 401 for the right password.

import assert from 'node:assert/strict';
import { pbkdf2 } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { test } from 'node:test';
import { start } from '../cmd/master/start.ts';
import { silentLogger } from '../internal/log/log.ts';
import { ADMIN_PASSWORD, call, plainConfig, type Answer } from './helpers.ts';
import { freePort } from './net.ts';
import { link } from './rawlink.ts';
import { bundledMaster, masterCommand } from './bundled.ts';

/** Sends `send` until the port answers at all; returns the first answer. */
async function firstAnswer(send: () => Promise<Answer>): Promise<Answer> {
  for (;;) {
    try {
      return await send();
    } catch {
      await new Promise((resolve) => setImmediate(resolve));
    }
  }
}

const loginBody = { username: 'admin', password: ADMIN_PASSWORD };

test(
  'while the master starts, every request is a 503 starting with Retry-After and health says ' +
    'so; then all of it serves',
  async (t) => {
    const dataDir = mkdtempSync(join(tmpdir(), 'portplane-start-'));
    t.after(() => rmSync(dataDir, { recursive: true, force: true }));
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    // The first admin's password is hashed on the thread pool: held busy for a second or so, the master stays starting
    // that long whatever the machine's load, while the requests below are made (under CI's load, the hash alone was
    // once done before the last of them).
    const poolSize = Number(process.env.UV_THREADPOOL_SIZE ?? 4);
    const held = Promise.all(
      Array.from({ length: poolSize }, () => promisify(pbkdf2)('hold', 'the pool', 5_000_000, 32, 'sha256')),
    );
    const starting = start(plainConfig(dataDir, port), silentLogger);
    // The first admin's password is being hashed (scrypt, on the thread pool) while the port already answers.
    const health = await firstAnswer(() => call(base, 'GET', '/api/health'));
    const login = await call(base, 'POST', '/api/auth/login', { body: loginBody });
    const page = await call(base, 'GET', '/');
    const agentLink = await link({ url: base }, 'mat_1_whatever');
    const master = await starting;
    t.after(() => master.close());
    await held;

    assert.equal(health.status, 503);
    assert.equal(health.body.status, 'starting');
    assert.equal(health.headers.get('retry-after'), '1');
    for (const answer of [login, page]) {
      assert.equal(answer.status, 503, JSON.stringify(answer.body));
      assert.equal(answer.body.code, 'unavailable');
      assert.match(answer.body.detail, /starting/);
      assert.equal(answer.headers.get('retry-after'), '1');
    }
    assert.deepEqual('status' in agentLink && [agentLink.status, agentLink.body.code], [503, 'unavailable']);

    assert.equal((await call(base, 'GET', '/api/health')).body.status, 'ok');
    assert.equal((await call(base, 'POST', '/api/auth/login', { body: loginBody })).status, 200);
    assert.equal((await call(base, 'GET', '/')).status, 200);
  },
);

test(
  'a script that logs in as soon as the port opens never gets a 401; wait-ready returns once ' + 'the master serves',
  async (t) => {
    const dataDir = mkdtempSync(join(tmpdir(), 'portplane-start-'));
    t.after(() => rmSync(dataDir, { recursive: true, force: true }));
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    const master = bundledMaster(t, dataDir, port);
    const waited = masterCommand(['wait-ready', '--data-dir', dataDir, String(master.pid)]);

    const statuses: number[] = [];
    let answer = await firstAnswer(() => call(base, 'POST', '/api/auth/login', { body: loginBody }));
    statuses.push(answer.status);
    while (answer.status === 503) {
      answer = await call(base, 'POST', '/api/auth/login', { body: loginBody });
      statuses.push(answer.status);
    }
    assert.equal(answer.status, 200, `logins answered ${statuses.join(', ')}`);
    assert.ok(
      statuses.every((status) => status === 503 || status === 200),
      statuses.join(', '),
    );

    const waitedFor = await waited;
    assert.equal(waitedFor.code, 0, waitedFor.stderr);
    assert.equal(waitedFor.stdout, `the master (pid ${master.pid}) serves at ${base}\n`);
    assert.equal((await call(base, 'GET', '/api/health')).body.status, 'ok');

    // Stopped, it withdraws its readiness: waiting again on its pid fails once it has gone.
    master.kill('SIGTERM');
    await once(master, 'exit');
    const again = await masterCommand(['wait-ready', '--data-dir', dataDir, String(master.pid)]);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /ended before it was ready/);
  },
);
