// The shipped artefact: one file that runs from an empty folder on the pinned runtime.

import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { VERSION } from '../internal/version.ts';
import { call, login } from './helpers.ts';
import { until } from './net.ts';
import { built } from './dist.ts';

// dist/ as test/dist.ts keeps it: built by `npm test` first, or here when this file runs alone.

test('the version constant matches package.json', () => {
  assert.equal(VERSION, JSON.parse(readFileSync('package.json', 'utf8')).version);
});

test('each bundle is one ESM file with a shebang that imports only node: builtins', () => {
  for (const file of [built('master'), built('agent'), built('license')]) {
    const text = readFileSync(file, 'utf8');
    assert.ok(text.startsWith('#!/usr/bin/env node\n'), file);
    const imports = [
      ...text.matchAll(/^\s*import\s[^'"]*['"]([^'"]+)['"]/gm),
      ...text.matchAll(/\bimport\(\s*['"]([^'"]+)['"]/g),
      ...text.matchAll(/\brequire\(\s*['"]([^'"]+)['"]/g),
    ].map((m) => m[1]);
    assert.ok(imports.length > 0, file);
    for (const spec of imports) assert.match(spec!, /^node:/, `${file} imports ${spec}`);
  }
});

test(
  'a copy of dist/master.mjs runs alone from an empty folder, prints the first admin ' +
    'password once, imports in a worker thread of itself, and drains on SIGTERM',
  async () => {
    const dir = mkdtempSync(join(tmpdir(), 'portplane-bundle-'));
    try {
      copyFileSync(built('master'), join(dir, 'master.mjs'));
      assert.deepEqual(readdirSync(dir), ['master.mjs']);
      const child = spawn(process.execPath, ['master.mjs', '--listen', '127.0.0.1:0', '--data-dir', 'state'], {
        cwd: dir,
        env: { PATH: process.env.PATH ?? '' },
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
      const lines: Record<string, unknown>[] = [];
      const waitFor = (msg: string) =>
        new Promise<Record<string, unknown>>((resolve) => {
          const seen = lines.find((l) => l.msg === msg);
          if (seen) return resolve(seen);
          const onLine = (line: Record<string, unknown>) => line.msg === msg && resolve(line);
          listeners.push(onLine);
        });
      const listeners: ((line: Record<string, unknown>) => void)[] = [];
      createInterface({ input: child.stdout! }).on('line', (text) => {
        const line = JSON.parse(text) as Record<string, unknown>;
        lines.push(line);
        for (const listener of listeners) listener(line);
      });

      const admin = await waitFor('created the first admin; this password is shown only now');
      const listening = await waitFor('listening');
      const url = listening.url as string;
      const token = await login(url, 'admin', admin.password as string);
      const me = await call(url, 'GET', '/api/auth/me', { token });
      assert.equal(me.body.user.username, 'admin');
      assert.ok(existsSync(join(dir, 'state', 'master.db')));
      // The import's worker is the bundle again, started as a worker: it imports, and starts no second master.
      const node = { name: 'edge', host: 'edge.example.net', ssh_port: 22, ssh_user: 'root', tags: [] };
      const rule = { name: 'web', node: 'edge', protocol: 'tcp', listen_port: 80, targets: ['10.0.0.1:80'] };
      const body = { format: 'portplane-export', version: 1, nodes: [node], tunnels: [], rules: [rule] };
      const imported = await call(url, 'POST', '/api/import', { token, body });
      assert.equal(imported.status, 200, JSON.stringify(imported.body));
      assert.equal(imported.body.rules[0].outcome, 'created');
      // The import's thread runs at the lowest priority and ends soon after it answers; no thread left carries that
      // priority (the main thread above all) but the one that copies the database's log, which always does.
      if (process.platform === 'linux')
        await until('every thread of the master back at priority 0, the checkpoint thread aside', () => {
          const read = (tid: string, file: string) => {
            try {
              return readFileSync(`/proc/${child.pid}/task/${tid}/${file}`, 'utf8');
            } catch {
              return null; // a thread that ended between the listing and the read
            }
          };
          const niceOf = (tid: string) => {
            const stat = read(tid, 'stat');
            return stat === null ? 0 : Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]);
          };
          const tids = readdirSync(`/proc/${child.pid}/task`);
          const checkpoint = tids.filter((tid) => read(tid, 'comm')?.trim() === 'portplane-check');
          return (
            checkpoint.length === 1 &&
            niceOf(checkpoint[0]!) === 19 &&
            tids.every((tid) => checkpoint.includes(tid) || niceOf(tid) === 0)
          );
        });

      child.kill('SIGTERM');
      assert.equal(await exited, 0);
      assert.ok(lines.some((l) => l.msg === 'stopped'));
      const requestLines = lines.filter((l) => l.msg === 'request');
      assert.equal(requestLines.length, 3);
      assert.equal(lines.filter((l) => l.msg === 'listening').length, 1);
      assert.ok(!JSON.stringify(requestLines).includes(token), 'bearer secrets are never logged');
      assert.equal(
        lines.filter((l) => JSON.stringify(l).includes(admin.password as string)).length,
        1,
        'the password is printed once',
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);

/** A node binary on PATH older than 24, other than the pinned one (CI machines carry one). */
function olderNode(): string | undefined {
  return (process.env.PATH ?? '')
    .split(delimiter)
    .map((dir) => join(dir, 'node'))
    .filter((bin) => existsSync(bin))
    .find((bin) => {
      const version = /^v(\d+)/.exec(spawnSync(bin, ['--version'], { encoding: 'utf8' }).stdout.trim());
      return version !== null && Number(version[1]) < 24;
    });
}

test('the master refuses an older Node.js with a clear message', (t) => {
  const older = olderNode();
  if (!older) return t.skip('no Node.js older than 24 on PATH');
  const result = spawnSync(older, [built('master'), '--version'], { encoding: 'utf8' });
  assert.equal(result.status, 1);
  assert.match(result.stderr, /needs Node\.js 24\.0\.0 or newer/);
});

test('the agent bundle runs on the older Node.js that nodes may carry', (t) => {
  const older = olderNode();
  if (!older) return t.skip('no Node.js older than 24 on PATH');
  const version = spawnSync(older, [built('agent'), '--version'], { encoding: 'utf8' });
  assert.equal(version.stdout, `agent ${VERSION}\n`, version.stderr);
  const bad = spawnSync(older, [built('agent'), '--master', 'ftp://x'], { encoding: 'utf8', env: {} });
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /must be http\(s\):\/\/HOST/);
});

test('--help and --version answer without starting; bad flags exit 2', () => {
  const run = (...args: string[]) => spawnSync(process.execPath, [built('master'), ...args], { encoding: 'utf8' });
  assert.match(run('--help').stdout, /--listen HOST:PORT/);
  assert.equal(run('--version').stdout, `master ${VERSION}\n`);
  const bad = run('--lisen', ':1');
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /unknown option '--lisen'/);
});
