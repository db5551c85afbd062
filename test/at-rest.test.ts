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
import { randomUUID } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { openDatabase } from '../internal/store/store.ts';
import { BYTES_PER_USER, IdempotencyStore, KEYS_IN_TOTAL, KEYS_PER_USER } from '../internal/store/idempotency.ts';
import { ADMIN_PASSWORD, call, node, startMaster } from './helpers.ts';

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
    // Every secret an alert channel holds: a webhook's signing secret, a bot's token, a mail server's password.
    const channelSecrets = ['whsec_' + Buffer.alloc(32, 7).toString('base64'), '424242:' + 'Q'.repeat(35), 'mail-pw-7'];
    for (const body of [
      { name: 'hook', type: 'webhook', url: 'https://hooks.example.com/a', secret: channelSecrets[0] },
      { name: 'chat', type: 'telegram', chat_id: '1', bot_token: channelSecrets[1] },
      {
        ...{ name: 'mail', type: 'email', smtp_host: 'smtp.example.com', smtp_username: 'alerts' },
        ...{ smtp_password: channelSecrets[2], from: 'a@example.com', to: ['b@example.com'] },
      },
    ])
      assert.equal((await call(m.url, 'POST', '/api/channels', { token: m.admin, body })).status, 201);
    await m.app.store.committed();
    assert.equal(statSync(secretKeyPath).mode & 0o777, 0o600);
    assert.ok(!existsSync(join(m.dataDir, 'secret.key')), 'no key in the data dir');
    const files = readdirSync(m.dataDir)
      .filter((f) => f.startsWith('master.db'))
      .map((f) => readFileSync(join(m.dataDir, f)));
    for (const secret of ['hunter2-for-the-node', created.agent_token, token, m.admin, ...channelSecrets]) {
      assert.ok(
        files.every((bytes) => !bytes.includes(secret)),
        `${secret.slice(0, 8)}... is not on disk in the clear`,
      );
    }
  },
);

test('stored replays are bounded per user, over all its tokens and sessions, in count and bytes, and in total', () => {
  const db = openDatabase(':memory:');
  db.write(() => {
    for (const user of ['u', 'v'])
      db.prepare(
        "INSERT INTO users (username, password_hash, scopes, created_at, updated_at) VALUES (?, 'x', '[]', '', '')",
      ).run(user);
    // Three tokens of user 1 (an API token and two logins), one of user 2.
    for (const [user, secret] of [
      [1, 'a'],
      [1, 'b'],
      [1, 'c'],
      [2, 'd'],
    ] as const)
      db.prepare(
        "INSERT INTO tokens (kind, name, user_id, scopes, secret_hash, created_at) VALUES ('api', 't', ?, '[]', ?, '')",
      ).run(user, Buffer.from(secret));
  });
  const replays = new IdempotencyStore(db);
  const at = (i: number) => new Date(Date.UTC(2026, 0, 1) + i * 1000).toISOString();
  const answer = (bytes = 0) => ({ fingerprint: 'f', status: 201, headers: {}, body: Buffer.alloc(bytes) });
  const count = (where = '1') =>
    (db.prepare(`SELECT count(*) AS n FROM idempotency_keys WHERE ${where}`).get() as { n: number }).n;
  db.write(() => {
    for (let i = 0; i < KEYS_PER_USER + 30; i++) replays.save(1 + (i % 3), `key-${i}`, answer(), at(i));
    replays.save(4, 'other-user', answer(), at(0));
  });
  assert.equal(count('token_id IN (1, 2, 3)'), KEYS_PER_USER, 'however many logins it makes');
  assert.equal(replays.find(1, 'key-0', ''), undefined, 'the oldest went first');
  const newest = KEYS_PER_USER + 29;
  assert.ok(replays.find(1 + (newest % 3), `key-${newest}`, ''), 'the newest stays');
  assert.ok(replays.find(4, 'other-user', ''), "another user's are its own");
  db.write(() => {
    for (let i = 0; i < 5; i++) replays.save(3, `big-${i}`, answer(BYTES_PER_USER / 4), at(10_000 + i));
  });
  const bytes = (
    db.prepare('SELECT sum(length(body)) AS n FROM idempotency_keys WHERE token_id IN (1, 2, 3)').get() as {
      n: number;
    }
  ).n;
  assert.ok(bytes <= BYTES_PER_USER, `${bytes} bytes kept`);
  assert.ok(replays.find(3, 'big-4', ''), 'the newest is kept');
  // In all: fill the table past its bound, then keep one more.
  db.write(() => {
    db.prepare(
      `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${KEYS_IN_TOTAL})
      INSERT INTO idempotency_keys (token_id, key, fingerprint, status, headers, body, created_at)
      SELECT 4, 'bulk-' || i, 'f', 201, '{}', x'', '2025-01-01T00:00:00Z' FROM n`,
    ).run();
    const next = (db.prepare('SELECT max(rowid) AS n FROM idempotency_keys').get() as { n: number }).n + 1;
    // Keys are looked at in total every 100th kept: fill up to the next.
    for (let id = next; id % 100 !== 0; id++) replays.save(4, `pad-${id}`, answer(), at(20_000));
    replays.save(4, 'last', answer(), at(20_001));
  });
  assert.ok(count() <= KEYS_IN_TOTAL, `${count()} kept in all`);
  assert.ok(replays.find(4, 'last', ''));
});

/** Every file under `dir`, at any depth. */
function everyFile(dir: string): { path: string; bytes: Buffer }[] {
  return (readdirSync(dir, { recursive: true }) as string[])
    .map((entry) => join(dir, entry))
    .filter((path) => statSync(path).isFile())
    .map((path) => ({ path, bytes: readFileSync(path) }));
}

test(
  'no secret the API issues or is given is kept anywhere in the data dir or the log, with or without ' +
    'an Idempotency-Key; replays show it redacted',
  async (t) => {
    const logged: string[] = [];
    const log = {
      info: (msg: string, fields?: object) => logged.push(JSON.stringify({ msg, ...fields })),
      warn: (msg: string, fields?: object) => logged.push(JSON.stringify({ msg, ...fields })),
      error: (msg: string, fields?: object) => logged.push(JSON.stringify({ msg, ...fields })),
    };
    const m = await startMaster(t, { log });
    const given: string[] = [ADMIN_PASSWORD];
    const issued: string[] = [m.admin];
    const replayed: unknown[] = [];
    const post = async (path: string, body: unknown, key?: string) => {
      const headers: Record<string, string> = key ? { 'idempotency-key': key } : {};
      const answer = await call(m.url, 'POST', path, { token: m.admin, body, headers });
      assert.ok(answer.status < 300, `${path}: ${answer.status} ${JSON.stringify(answer.body)}`);
      if (key) {
        const again = await call(m.url, 'POST', path, { token: m.admin, body, headers });
        assert.equal(again.headers.get('idempotent-replayed'), 'true');
        replayed.push(again.body);
      }
      return answer.body;
    };
    for (const key of [undefined, 'with-a-key']) {
      const suffix = key ? 'k' : 'n';
      // Credentials given: an SSH password and key for nodes, a password for users.
      const sshPassword = `ssh-password-${suffix}-${randomUUID()}`;
      const keyLine = `PRIVATEKEYLINE${suffix}${randomUUID().replace(/-/g, '')}`;
      const sshKey = `-----BEGIN OPENSSH PRIVATE KEY-----\n${keyLine}\n-----END OPENSSH PRIVATE KEY-----\n`;
      const userPassword = `user-password-${suffix}-${randomUUID()}`;
      const newPassword = `new-password-${suffix}-${randomUUID()}`;
      given.push(sshPassword, keyLine, userPassword, newPassword);
      // Secrets issued: agent tokens (and the commands that carry them), API tokens, sessions.
      const made = await post(
        '/api/nodes',
        { name: `pw-${suffix}`, host: 'a.example.net', ssh_password: sshPassword },
        key,
      );
      assert.ok(made.agent_command.includes(made.agent_token));
      const rekeyed = await call(m.url, 'PUT', `/api/nodes/${made.id}`, {
        token: m.admin,
        body: { name: `pw-${suffix}`, host: 'a.example.net', ssh_private_key: sshKey },
      });
      assert.equal(rekeyed.status, 200);
      const token = await post('/api/tokens', { name: `t-${suffix}`, scopes: ['rules:read'] }, key && `${key}-3`);
      const user = await post(
        '/api/users',
        { username: `u-${suffix}`, password: userPassword, scopes: [] },
        key && `${key}-4`,
      );
      const changed = await call(m.url, 'PUT', `/api/users/${user.id}`, {
        token: m.admin,
        body: { username: `u-${suffix}`, password: newPassword, scopes: [] },
      });
      assert.equal(changed.status, 200);
      // A login is public: keys are kept per token, so it has none to replay.
      const session = await post('/api/auth/login', { username: `u-${suffix}`, password: newPassword });
      const imported = await post(
        '/api/import',
        {
          format: 'portplane-export',
          version: 1,
          nodes: [{ name: `imp-${suffix}`, host: 'c.example.net', ssh_port: 22, ssh_user: 'root', tags: [] }],
          tunnels: [],
          rules: [],
        },
        key && `${key}-6`,
      );
      issued.push(made.agent_token, made.agent_command, token.token, session.token);
      issued.push(imported.nodes[0].agent_token);
    }
    assert.equal(issued.filter((secret) => typeof secret !== 'string' || secret.length < 20).length, 0);
    await m.app.store.committed();
    const secrets = [...given, ...issued];
    const scan = () => {
      const kept = everyFile(m.dataDir);
      assert.ok(
        kept.some((f) => f.path.endsWith('master.db-wal')),
        'the write-ahead log is scanned too',
      );
      for (const secret of secrets)
        for (const { path, bytes } of kept)
          assert.ok(!bytes.includes(secret), `${secret.slice(0, 16)}... is in ${path}`);
    };
    scan();
    for (const secret of secrets)
      assert.ok(!logged.some((line) => line.includes(secret)), `${secret.slice(0, 16)}... is in the log`);
    // What a retry gets: the answer, with its secrets redacted.
    const shown = JSON.stringify(replayed);
    for (const secret of issued.slice(1)) assert.ok(!shown.includes(secret), `${secret.slice(0, 16)}... replayed`);
    assert.equal(
      shown.match(/"\[redacted\]"/g)?.length,
      4,
      "the node's agent_token and agent_command, the token, the imported node's agent_token",
    );
    // The audit log says a credential was set without saying which.
    const audit = await call(m.url, 'GET', '/api/audit-logs?limit=1000', { token: m.admin });
    assert.match(JSON.stringify(audit.body), /"ssh_password":"\[redacted\]"/);
    assert.match(JSON.stringify(audit.body), /"ssh_private_key":"\[redacted\]"/);
    assert.match(JSON.stringify(audit.body), /"password":"\[redacted\]"/);
  },
);
