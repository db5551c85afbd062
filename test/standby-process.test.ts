// Two masters as processes of their own (the bundled master), over HTTPS with the primary's key pinned: four writers
// at a steady rate, the primary SIGKILLed at a random moment, the standby promoted. In sync mode every write the
// primary answered is on the new primary; in async mode those lost are counted, and were all answered within the
// lag the standby reported.

import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test, { type TestContext } from 'node:test';
import { ADMIN_PASSWORD, call, login, mintToken, trustMaster, type Running } from './helpers.ts';
import { freePort, until } from './net.ts';

interface MasterProcess {
  url: string;
  child: ChildProcess;
  output: () => string;
}

/** The bundled master on its own port, serving HTTPS with the certificate it makes itself; `env` adds settings. */
async function masterProcess(t: TestContext, env: Record<string, string> = {}): Promise<MasterProcess> {
  const dataDir = mkdtempSync(join(tmpdir(), 'portplane-ha-'));
  const port = await freePort();
  const child = spawn(process.execPath, ['dist/master.mjs', '--listen', `0.0.0.0:${port}`, '--data-dir', dataDir], {
    env: { PATH: process.env.PATH ?? '', MASTER_ADMIN_PASSWORD: ADMIN_PASSWORD, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  t.after(() => void child.kill('SIGKILL'));
  let out = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (out += chunk));
  await until('the master listening', () => out.includes('"msg":"listening"'), 30_000);
  const url = `https://127.0.0.1:${port}`;
  trustMaster(url, readFileSync(join(dataDir, 'tls', 'cert.pem'), 'utf8'));
  return { url, child, output: () => out };
}

const pinOf = (master: MasterProcess) => /"tls_pin":"([^"]+)"/.exec(master.output())![1]!;

async function failOver(t: TestContext, mode: 'sync' | 'async') {
  const primary = await masterProcess(t);
  const admin = await login(primary.url, 'admin', ADMIN_PASSWORD);
  const settings = { replication_mode: mode, replication_sync_timeout_seconds: 5 };
  assert.equal((await call(primary.url, 'PATCH', '/api/settings', { token: admin, body: settings })).status, 200);
  const token = await mintToken({ url: primary.url, admin } as Running, ['replication'], 'standby');
  const standby = await masterProcess(t, {
    MASTER_FOLLOW: primary.url,
    MASTER_FOLLOW_TOKEN: token,
    MASTER_FOLLOW_PIN: pinOf(primary),
  });
  const node = await call(primary.url, 'POST', '/api/nodes', {
    token: admin,
    body: { name: 'edge', host: '192.0.2.1' },
  });
  await until(
    'the standby in step',
    async () => (await call(standby.url, 'GET', '/api/health')).body.replication?.lag_seconds === 0,
  );

  // Four writers, each a rule at a time with a short pause, until the primary is gone; what it answered is kept.
  const answered: { id: number; at: number }[] = [];
  let port = 20000;
  let writing = true;
  const writer = async () => {
    while (writing) {
      const made = await call(primary.url, 'POST', '/api/rules', {
        token: admin,
        body: { name: 'w', protocol: 'tcp', node_id: node.body.id, listen_port: port++, targets: ['192.0.2.2:80'] },
      }).catch(() => null);
      if (made?.status === 201) answered.push({ id: made.body.id, at: Date.now() });
      else if (made === null) return;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  };
  const writers = Array.from({ length: 4 }, writer);
  await new Promise((resolve) => setTimeout(resolve, 2000 + Math.random() * 2000));
  const lag = (await call(standby.url, 'GET', '/api/health')).body.replication.lag_seconds as number;
  primary.child.kill('SIGKILL');
  const killedAt = Date.now();
  writing = false;
  await Promise.all(writers);

  const promoted = await call(standby.url, 'POST', '/api/replication/promote', { token: admin });
  assert.equal(promoted.status, 200, JSON.stringify(promoted.body));
  const kept = new Set<number>();
  for (let after = 0; ;) {
    const page = await call(standby.url, 'GET', `/api/rules?limit=1000${after ? `&cursor=${after}` : ''}`, {
      token: admin,
    });
    for (const rule of page.body.items) kept.add(rule.id);
    if (!page.body.next_cursor) break;
    after = page.body.next_cursor;
  }
  const lost = answered.filter((write) => !kept.has(write.id));
  t.diagnostic(`${mode}: ${answered.length} writes answered, ${lost.length} not on the new primary (lag ${lag} s)`);
  assert.ok(answered.length > 50, `${answered.length} writes`);
  return { lost, killedAt, lag };
}

test('sync mode: every write the primary answered is on the promoted standby', async (t) => {
  const { lost } = await failOver(t, 'sync');
  assert.deepEqual(lost, []);
});

test('async mode: writes lost to a killed primary are counted, and were all answered within the lag', async (t) => {
  const { lost, killedAt, lag } = await failOver(t, 'async');
  // Lost ones are the last moments' only: answered within the reported lag (and a second for the report's age).
  for (const write of lost)
    assert.ok(killedAt - write.at <= (lag + 1) * 1000, `write ${write.id} lost from ${killedAt - write.at} ms before`);
});
