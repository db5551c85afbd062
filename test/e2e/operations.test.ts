// Running the master as an operator does, with the bundled program: one master per data
// dir, a killed master's lock taken over, start-up failures that end at once and say why,
// and a first admin that is only made once the master serves.

import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { request } from 'node:http';
import { DatabaseSync } from 'node:sqlite';
import { processIdentity } from '../../internal/runtime/pid.ts';
import { call, login, ruleBodies } from '../helpers.ts';
import { until } from '../net.ts';
import { built } from '../dist.ts';

const PASSWORD = { MASTER_ADMIN_PASSWORD: 'admin-password-for-tests' };

interface Program extends ChildProcess {
  output: string[];
}

function master(t: TestContext, args: string[], env: Record<string, string> = PASSWORD): Program {
  const child = spawn(process.execPath, [built('master'), '--listen', '127.0.0.1:0', ...args], {
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
  const result = spawnSync(process.execPath, [built('master'), ...args], {
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

test('a lock naming a pid that now belongs to another process (a reboot, a reused pid) is taken over', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'portplane-lock-'));
  // A live process that is no master: its pid, as a lock left by a master of another boot or run would name it.
  const other = spawn('sleep', ['30']);
  t.after(() => void other.kill());
  await once(other, 'spawn');
  const identity = processIdentity(other.pid!);
  assert.ok(identity, 'this system tells runs of a pid apart (/proc)');
  writeFileSync(join(dataDir, 'master.lock'), `${other.pid} ${identity.split(':')[0]}:1\n`);
  const taking = master(t, ['--data-dir', dataDir]);
  await listening(taking);
  taking.kill('SIGTERM');
  await once(taking, 'exit');
  // The same pid with its own identity is a live holder: refused, named.
  writeFileSync(join(dataDir, 'master.lock'), `${other.pid} ${identity}\n`);
  const refused = failedStart(['--listen', '127.0.0.1:0', '--data-dir', dataDir]);
  assert.equal(refused.status, 1);
  assert.match(refused.stderr, new RegExp(`in use by another master \\(pid ${other.pid}\\)`));
});

test(
  'a damaged database stops the start within 2 s, saying so and how to restore, and is left ' + 'as it was',
  async (t) => {
    const garbage = mkdtempSync(join(tmpdir(), 'portplane-damaged-'));
    writeFileSync(join(garbage, 'master.db'), 'not a database at all, '.repeat(500), { mode: 0o600 });
    const dataDir = mkdtempSync(join(tmpdir(), 'portplane-damaged-'));
    const first = master(t, ['--data-dir', dataDir]);
    await listening(first);
    const url = JSON.parse(first.output.find((l) => /"msg":"listening"/.test(l))!).url as string;
    const token = await login(url, 'admin', PASSWORD.MASTER_ADMIN_PASSWORD);
    const edge = (await call(url, 'POST', '/api/nodes', { token, body: { name: 'edge', host: 'edge.example.net' } }))
      .body;
    const made = await call(url, 'POST', '/api/rules/batch-create', {
      token,
      body: { rules: ruleBodies(edge.id, 1000) },
    });
    assert.equal(made.status, 201);
    await stop(first);
    // A run of bytes overwritten in the middle of the file, as a failing disk or a stray write would.
    const path = join(dataDir, 'master.db');
    const bytes = readFileSync(path);
    const middle = Math.floor(bytes.length / 4096 / 2) * 4096;
    for (let i = middle + 100; i < middle + 4000; i += 3) bytes[i] = bytes[i]! ^ 0x5a;
    writeFileSync(path, bytes);
    for (const [dir, found] of [
      [garbage, /file is not a database/],
      [dataDir, /quick_check found/],
    ] as const) {
      const before = readFileSync(join(dir, 'master.db'));
      const started = performance.now();
      const result = failedStart(['--listen', '127.0.0.1:0', '--data-dir', dir]);
      assert.ok(performance.now() - started < 2000, `it ended after ${Math.round(performance.now() - started)} ms`);
      assert.equal(result.status, 1);
      assert.match(result.stderr, /master\.db is damaged: /);
      assert.match(result.stderr, found);
      assert.match(result.stderr, /restore the last backup into an empty one: master restore --data-dir NEW-DIR/);
      assert.ok(readFileSync(join(dir, 'master.db')).equals(before), 'the damaged file is left as it was');
    }
  },
);

test('a SIGTERM while the master starts stops it cleanly once it is up, never by the default action', async (t) => {
  const starting = master(t, ['--data-dir', mkdtempSync(join(tmpdir(), 'portplane-early-'))]);
  // The license line comes during the start, before the listening line.
  await until('the license line', () => starting.output.find((l) => /"msg":"license"/.test(l)));
  starting.kill('SIGTERM');
  const [code, signal] = await once(starting, 'exit');
  assert.deepEqual([code, signal], [0, null], starting.output.join('\n'));
  assert.ok(starting.output.some((l) => /"msg":"stopping"/.test(l)));
});

test('a second signal while the master starts ends it at once, before it listens', async (t) => {
  const starting = master(t, ['--data-dir', mkdtempSync(join(tmpdir(), 'portplane-early-'))]);
  await until('the license line', () => starting.output.find((l) => /"msg":"license"/.test(l)));
  starting.kill('SIGTERM');
  starting.kill('SIGINT');
  const [code, signal] = await once(starting, 'exit');
  assert.deepEqual([code, signal], [1, null], starting.output.join('\n'));
  assert.ok(!starting.output.some((l) => /"msg":"listening"/.test(l)));
  assert.ok(starting.output.some((l) => /"msg":"stopped while starting"/.test(l)));
});

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
  // A start that failed made no admin whose generated password nobody saw: the next start makes (and prints) it.
  for (const failed of ['d1', 'd2']) {
    const db = new DatabaseSync(join(dir, failed, 'master.db'), { readOnly: true });
    assert.deepEqual({ ...db.prepare('SELECT count(*) AS n FROM users').get() }, { n: 0 }, failed);
    db.close();
  }
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

const urlOf = async (child: Program) => (JSON.parse(await listening(child)) as { url: string }).url;

async function stop(child: Program): Promise<void> {
  child.kill('SIGTERM');
  const [code] = await once(child, 'exit');
  assert.equal(code, 0);
}

function command(args: string[], input = '') {
  return spawnSync(process.execPath, [built('master'), ...args], {
    encoding: 'utf8',
    input,
    env: { PATH: process.env.PATH ?? '' },
    timeout: 30_000,
  });
}

/** The status of an agent-link upgrade with `token`: 101 when the master takes it. */
function linkStatus(base: string, token: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(`${base}/agent/v1/link`, {
      headers: { Connection: 'Upgrade', Upgrade: 'portplane-agent/1', Authorization: `Bearer ${token}` },
    });
    req.on('upgrade', (res, socket) => (socket.destroy(), resolve(res.statusCode!)));
    req.on('response', (res) => (res.resume(), resolve(res.statusCode!)));
    req.on('error', reject);
    req.end();
  });
}

test(
  'a backup taken while the master writes restores into an empty data dir with every acknowledged write, ' +
    'and tokens, users and agent tokens still work',
  async (t) => {
    const dataDir = mkdtempSync(join(tmpdir(), 'portplane-backup-'));
    const first = master(t, ['--data-dir', dataDir]);
    const url = await urlOf(first);
    const admin = await login(url, 'admin', PASSWORD.MASTER_ADMIN_PASSWORD);
    const token = (await call(url, 'POST', '/api/tokens', { token: admin, body: { name: 'cron', scopes: ['*'] } })).body
      .token as string;
    const edge = (
      await call(url, 'POST', '/api/nodes', {
        token,
        body: { name: 'edge', host: 'edge.example.net', ssh_password: 'sealed-password' },
      })
    ).body;

    // Writes go on while the backup runs; those acknowledged before it started must all be in it.
    const acknowledged: number[] = [];
    let writing = true;
    const writer = (async () => {
      for (let port = 1; writing; port++) {
        const made = await call(url, 'POST', '/api/rules', {
          token,
          body: { name: `r${port}`, node_id: edge.id, protocol: 'tcp', listen_port: port, targets: ['10.0.0.1:80'] },
        });
        assert.equal(made.status, 201);
        acknowledged.push(made.body.id);
      }
    })();
    await until('some writes', () => acknowledged.length >= 20);
    const before = [...acknowledged];
    const file = join(mkdtempSync(join(tmpdir(), 'portplane-file-')), 'master.backup');
    const backedUp = command(['backup', '--data-dir', dataDir, file]);
    assert.equal(backedUp.status, 0, backedUp.stderr);
    writing = false;
    await writer;
    const remote = await fetch(`${url}/api/backup`, { headers: { authorization: `Bearer ${token}` } });
    assert.equal(remote.status, 200);
    assert.equal(remote.headers.get('content-type'), 'application/x-tar');
    const downloaded = `${file}.remote`;
    writeFileSync(downloaded, Buffer.from(await remote.arrayBuffer()));
    const checked = command(['verify', downloaded]);
    assert.equal(checked.status, 0, checked.stderr);
    assert.match(checked.stdout, /is intact: \d+ files match their SHA-256 in the manifest/);
    // What a download that failed leaves, saved in its place, is no backup.
    writeFileSync(downloaded, JSON.stringify((await call(url, 'GET', '/api/backup')).body));
    const refused = command(['verify', downloaded]);
    assert.equal(refused.status, 1);
    assert.match(refused.stderr, /this is not a backup/);
    const audit = await call(url, 'GET', '/api/audit-logs?action=backup.download', { token });
    assert.equal(audit.body.items.length, 1, 'a download is audited');
    await stop(first);

    const target = join(mkdtempSync(join(tmpdir(), 'portplane-restore-')), 'data');
    assert.equal(command(['restore', '--data-dir', dataDir, file]).status, 1, 'a used data dir is refused');
    const restored = command(['restore', '--data-dir', target, file]);
    assert.equal(restored.status, 0, restored.stderr);
    assert.match(restored.stdout, /verified and restored \d+ files/);

    const second = master(t, ['--data-dir', target]);
    const again = await urlOf(second);
    assert.equal((await call(again, 'GET', '/api/auth/me', { token })).status, 200, 'the API token still works');
    await login(again, 'admin', PASSWORD.MASTER_ADMIN_PASSWORD);
    const ids = new Set(
      (await call(again, 'GET', '/api/rules?limit=1000', { token })).body.items.map((r: { id: number }) => r.id),
    );
    assert.deepEqual(
      before.filter((id) => !ids.has(id)),
      [],
      'every write acknowledged before the backup is in it',
    );
    assert.equal(
      (await call(again, 'GET', `/api/nodes/${edge.id}`, { token })).body.ssh_auth,
      'password',
      'the sealed credential came along',
    );
    assert.equal(await linkStatus(again, edge.agent_token), 101, 'the agent reconnects without a reinstall');
  },
);

test(
  "reset-password sets a user's password offline (from stdin, or generated and shown) and ends its sessions; " +
    'a running master refuses it',
  async (t) => {
    const dataDir = mkdtempSync(join(tmpdir(), 'portplane-reset-'));
    const first = master(t, ['--data-dir', dataDir]);
    const url = await urlOf(first);
    const session = await login(url, 'admin', PASSWORD.MASTER_ADMIN_PASSWORD);
    const refused = command(['reset-password', '--data-dir', dataDir, 'admin'], 'another-password-1\n');
    assert.equal(refused.status, 1);
    assert.match(refused.stderr, new RegExp(`in use by another master \\(pid ${first.pid}\\)`));
    await stop(first);

    const set = command(['reset-password', '--data-dir', dataDir, 'admin'], 'another-password-1\n');
    assert.equal(set.status, 0, set.stderr);
    assert.equal(command(['reset-password', '--data-dir', dataDir, 'nobody'], 'another-password-1\n').status, 1);
    const generated = command(['reset-password', '--data-dir', dataDir, 'admin']);
    assert.equal(generated.status, 0, generated.stderr);
    const password = /shown only now\): (\S+)/.exec(generated.stdout)![1]!;

    const second = master(t, ['--data-dir', dataDir]);
    const again = await urlOf(second);
    assert.equal((await call(again, 'GET', '/api/auth/me', { token: session })).status, 401, 'the old session ended');
    assert.equal(
      (await call(again, 'POST', '/api/auth/login', { body: { username: 'admin', password: 'another-password-1' } }))
        .status,
      401,
    );
    const fresh = await login(again, 'admin', password);
    const audit = await call(again, 'GET', '/api/audit-logs?action=user.reset_password', { token: fresh });
    assert.deepEqual(
      audit.body.items.map((e: { actor_type: string }) => e.actor_type),
      ['system', 'system'],
    );
  },
);

test("master import reads a realm config into a stopped master's data dir, previewed, as the API would", async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'portplane-import-'));
  const first = master(t, ['--data-dir', dataDir]);
  const url = await urlOf(first);
  const session = await login(url, 'admin', PASSWORD.MASTER_ADMIN_PASSWORD);
  const made = await call(url, 'POST', '/api/nodes', {
    token: session,
    body: { name: 'edge', host: 'edge.example.net' },
  });
  assert.equal(made.status, 201);
  const file = join(dataDir, '..', `realm-${process.pid}.toml`);
  writeFileSync(file, '[[endpoints]]\nlisten = "0.0.0.0:5000"\nremote = "198.51.100.1:443"\ntcp_timeout = 5\n');
  t.after(() => rmSync(file, { force: true }));
  const args = ['import', '--data-dir', dataDir, '--from', 'realm', '--node', 'edge', file];
  const refused = command(args);
  assert.equal(refused.status, 1);
  assert.match(refused.stderr, /in use by another master/);
  await stop(first);

  const preview = command([...args, '--dry-run']);
  assert.equal(preview.status, 0, preview.stderr);
  const previewed = JSON.parse(preview.stdout);
  assert.equal(previewed.dry_run, true);
  assert.deepEqual(
    previewed.rules.map((r: { name: string; outcome: string; line: number }) => [r.name, r.outcome, r.line]),
    [['realm-tcp-5000', 'created', 1]],
  );
  assert.deepEqual(
    previewed.unmapped.map((u: { line: number }) => u.line),
    [4],
  );
  const bad = command(['import', '--data-dir', dataDir, '--from', 'realm', '--node', 'nowhere', file]);
  assert.equal(bad.status, 1);
  assert.match(bad.stderr, /nowhere/);
  assert.equal(command(['import', '--data-dir', dataDir, '--from', 'socat', file]).status, 2);
  const done = command(args);
  assert.equal(done.status, 0, done.stderr);

  const second = master(t, ['--data-dir', dataDir]);
  const again = await urlOf(second);
  const fresh = await login(again, 'admin', PASSWORD.MASTER_ADMIN_PASSWORD);
  const rules = await call(again, 'GET', '/api/rules', { token: fresh });
  assert.deepEqual(
    rules.body.items.map((r: { name: string; listen_port: number; targets: string[] }) => [r.name, r.targets]),
    [['realm-tcp-5000', ['198.51.100.1:443']]],
  );
  const audit = await call(again, 'GET', '/api/audit-logs?resource=rule', { token: fresh });
  assert.deepEqual(
    audit.body.items.map((e: { action: string; actor_name: string }) => [e.action, e.actor_name]),
    [['rule.create', 'admin']],
  );
});

test('npm start hands SIGTERM to the master, which drains and stops: no orphan is left', async (t) => {
  const npm = process.env.npm_execpath;
  if (!npm) return t.skip('not run through npm (npm_execpath is unset)');
  const dataDir = mkdtempSync(join(tmpdir(), 'portplane-npm-'));
  const child = spawn(process.execPath, [npm, 'start', '--silent'], {
    env: { ...process.env, ...PASSWORD, MASTER_DATA_DIR: dataDir, MASTER_LISTEN: '127.0.0.1:0' },
    stdio: ['ignore', 'pipe', 'pipe'],
  }) as Program;
  child.output = [];
  for (const stream of [child.stdout!, child.stderr!]) {
    stream.setEncoding('utf8').on('data', (chunk: string) => child.output.push(...chunk.split('\n').filter(Boolean)));
  }
  t.after(() => child.exitCode === null && child.kill('SIGKILL'));
  await until('the master to serve', () => child.output.some((l) => /"msg":"listening"/.test(l)), 60_000);
  child.kill('SIGTERM');
  await once(child, 'exit');
  await until('the master to stop', () => child.output.some((l) => /"msg":"stopped"/.test(l)));
});
