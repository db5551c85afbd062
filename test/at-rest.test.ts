// Secrets at rest: what the data dir holds, and with which modes, at every start.

import assert from 'node:assert/strict';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { Database } from '../internal/store/database.ts';
import { IdempotencyStore, KEYS_PER_TOKEN } from '../internal/store/idempotency.ts';
import { call, node, startMaster } from './helpers.ts';

function modes(dir: string): Record<string, string> {
  const out: Record<string, string> = { '.': (statSync(dir).mode & 0o777).toString(8) };
  for (const entry of readdirSync(dir, { recursive: true }) as string[])
    out[entry] = (statSync(join(dir, entry)).mode & 0o777).toString(8);
  return out;
}

test('the data dir is 0700 and every file in it 0600 at every start, whatever modes it had', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'portplane-modes-'));
  chmodSync(dataDir, 0o755);
  mkdirSync(join(dataDir, 'known_hosts'), { mode: 0o755 });
  writeFileSync(join(dataDir, 'known_hosts', '1'), 'pinned', { mode: 0o644 });
  writeFileSync(join(dataDir, 'license.json'), '{}', { mode: 0o644 });
  const m = await startMaster(t, { dataDir });
  await node(m, 'edge', { ssh_password: 'sealed-at-rest' });
  for (const [path, mode] of Object.entries(modes(dataDir))) {
    const dir = path === '.' || path === 'known_hosts';
    assert.equal(mode, dir ? '700' : '600', `${path} is ${mode}`);
  }
  assert.ok(existsSync(join(dataDir, 'master.db-wal')), 'the WAL is among them');
});

test(
  'the sealing key can live outside the data dir; the database alone holds no readable ' +
    'credential or bearer secret',
  async (t) => {
    const keyDir = mkdtempSync(join(tmpdir(), 'portplane-key-'));
    const secretKeyPath = join(keyDir, 'sealing.key');
    const m = await startMaster(t, { secretKeyPath });
    const created = await node(m, 'edge', { ssh_password: 'hunter2-for-the-node' });
    const token = (
      await call(m.url, 'POST', '/api/tokens', {
        token: m.admin,
        body: { name: 'ci', scopes: ['audit:read'] },
        headers: { 'idempotency-key': 'k1' },
      })
    ).body.token;
    await m.app.store.committed();
    assert.equal(statSync(secretKeyPath).mode & 0o777, 0o600);
    assert.ok(!existsSync(join(m.dataDir, 'secret.key')), 'no key in the data dir');
    const files = readdirSync(m.dataDir)
      .filter((f) => f.startsWith('master.db'))
      .map((f) => readFileSync(join(m.dataDir, f)));
    for (const secret of ['hunter2-for-the-node', created.agent_token, token, m.admin]) {
      assert.ok(
        files.every((bytes) => !bytes.includes(secret)),
        `${secret.slice(0, 8)}... is not on disk in the clear`,
      );
    }
  },
);

test('a token keeps at most its most recent stored replays', () => {
  const db = new Database(':memory:');
  db.write(() => {
    db.prepare(
      "INSERT INTO users (username, password_hash, scopes, created_at, updated_at) VALUES ('u', 'x', '[]', '', '')",
    ).run();
    db.prepare(
      "INSERT INTO tokens (kind, name, user_id, scopes, secret_hash, created_at) VALUES ('api', 't', 1, '[]', " +
        "x'00', '')",
    ).run();
  });
  const replays = new IdempotencyStore(db);
  const at = (i: number) => new Date(Date.UTC(2026, 0, 1) + i * 1000).toISOString();
  db.write(() => {
    for (let i = 0; i < KEYS_PER_TOKEN + 5; i++)
      replays.save(1, `key-${i}`, { fingerprint: 'f', status: 201, headers: {}, body: Buffer.alloc(0) }, at(i));
  });
  assert.equal((db.prepare('SELECT count(*) AS n FROM idempotency_keys').get() as { n: number }).n, KEYS_PER_TOKEN);
  assert.equal(replays.find(1, 'key-4', ''), undefined, 'the oldest went first');
  assert.ok(replays.find(1, 'key-5', ''));
  assert.ok(replays.find(1, `key-${KEYS_PER_TOKEN + 4}`, ''));
});
