import assert from 'node:assert/strict';
import { mkdtempSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { test, type TestContext } from 'node:test';
import { type Database } from '../../internal/store/database.ts';
import { openDatabase, Store } from '../../internal/store/store.ts';
import { migrations } from '../../internal/store/migrations.ts';
import { RULE_JSON } from '../../internal/store/rule-view.ts';
import { CommitFailed, WritesBusy } from '../../internal/errors/storage.ts';
import { fill, smallDisk } from '../disk.ts';

const AT = '2026-11-23T10:00:00Z';

function open(t: { after: (fn: () => void) => void }) {
  const path = join(mkdtempSync(join(tmpdir(), 'portplane-db-')), 'master.db');
  const db = openDatabase(path);
  const reader = new DatabaseSync(path, { readOnly: true });
  t.after(() => {
    reader.close();
    db.close();
  });
  const names = () =>
    (reader.prepare('SELECT key FROM settings ORDER BY key').all() as { key: string }[]).map((r) => r.key);
  const put = (key: string) => db.prepare("INSERT INTO settings (key, value) VALUES (?, '1')").run(key);
  return { path, db, reader, names, put };
}

test('writes of one turn commit together, and are not visible elsewhere before committed() resolves', async (t) => {
  const { db, names, put } = open(t);
  db.write(() => put('a'));
  db.write(() => put('b'));
  assert.equal(db.committed(), db.committed(), 'one batch');
  assert.deepEqual(names(), [], 'nothing is durable yet, so nothing may be acknowledged');
  await db.committed();
  assert.deepEqual(names(), ['a', 'b']);
});

test('a failing write undoes only itself; the rest of its batch commits', async (t) => {
  const { db, names, put } = open(t);
  db.write(() => put('kept'));
  assert.throws(() =>
    db.write(() => {
      put('undone');
      throw new Error('no');
    }),
  );
  assert.throws(() => db.write(() => Promise.resolve()), /synchronous/);
  await db.committed();
  assert.deepEqual(names(), ['kept']);
});

test('afterCommit runs once the data is durable; with nothing pending, at once', async (t) => {
  const { db, names, put } = open(t);
  const seen: string[][] = [];
  db.afterCommit(() => seen.push(['immediate', ...names()]));
  db.write(() => put('x'));
  db.afterCommit(() => seen.push(['after', ...names()]));
  assert.deepEqual(seen, [['immediate']]);
  await db.committed();
  assert.deepEqual(seen, [['immediate'], ['after', 'x']]);
});

test('close commits what is pending', async (t) => {
  const path = join(mkdtempSync(join(tmpdir(), 'portplane-db-')), 'master.db');
  const db = openDatabase(path);
  db.write(() => db.prepare("INSERT INTO settings (key, value) VALUES ('late', '1')").run());
  db.close();
  const reader = new DatabaseSync(path, { readOnly: true });
  t.after(() => reader.close());
  assert.deepEqual(
    reader
      .prepare('SELECT key FROM settings')
      .all()
      .map((r) => (r as { key: string }).key),
    ['late'],
  );
});

test('a commit that fails rejects every waiter, tells the listeners, and keeps nothing', async (t) => {
  const { db, names, put } = open(t);
  let told = 0;
  db.onCommitFailure(() => (told += 1));
  // A deferred foreign key is checked only at COMMIT: the way to make a commit itself fail here.
  db.write(() => db.prepare('CREATE TABLE parent (id INTEGER PRIMARY KEY) STRICT').run());
  db.write(() =>
    db
      .prepare('CREATE TABLE child (parent_id INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED) STRICT')
      .run(),
  );
  await db.committed();
  db.write(() => put('lost'));
  db.write(() => db.prepare('INSERT INTO child (parent_id) VALUES (42)').run());
  const ran: string[] = [];
  db.afterCommit(() => ran.push('after'));
  await assert.rejects(db.committed(), /FOREIGN KEY/);
  assert.equal(told, 1);
  assert.deepEqual(ran, [], 'after-commit work does not run for a failed commit');
  assert.deepEqual(names(), []);
  db.write(() => put('next'));
  await db.committed();
  assert.deepEqual(names(), ['next'], 'the next batch works');
});

test('a change outside write() is refused: every change goes through the one write path', (t) => {
  const { db, put } = open(t);
  assert.throws(() => put('stray'), /a change outside write\(\): INSERT INTO settings/);
  // Reads need no write.
  assert.equal(db.prepare('SELECT count(*) AS n FROM settings').get()?.n, 0);
});

test('a write inside a write is a unit of its own: its failure undoes only itself', async (t) => {
  const { db, names, put } = open(t);
  db.write(() => {
    put('outer');
    assert.throws(() =>
      db.write(() => {
        put('inner');
        throw new Error('the inner write fails');
      }),
    );
    put('after');
  });
  await db.committed();
  assert.deepEqual(names(), ['after', 'outer']);
});

test('a long write spans turns; meanwhile reads see the last commit and writes wait for it', async (t) => {
  const { db, names, put } = open(t);
  const keys = () => (db.prepare('SELECT key FROM settings ORDER BY key').all() as { key: string }[]).map((r) => r.key);
  db.write(() => put('before'));
  const order: string[] = [];
  let turns = 0;
  const writing = db.longWrite(async (step) => {
    assert.deepEqual(names(), ['before'], 'the batch open when it starts is committed first');
    for (let i = 0; turns < 3; i++) {
      put(`bulk-${String(i).padStart(5, '0')}`);
      const turnEnds = step();
      if (turnEnds) {
        turns += 1;
        await turnEnds;
      }
    }
    assert.equal(keys().length > 1, true, 'inside, its own changes are seen');
    db.afterCommit(() => order.push(`after commit: ${names().length} committed`));
    return 'done';
  });
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(db.writesHeld, true);
  assert.deepEqual(keys(), ['before'], 'outside, nothing of it is seen');
  assert.throws(() => db.write(() => put('now')), /wait for writable/);
  db.whenWritable(() => order.push('deferred 1'));
  db.whenWritable(() => order.push('deferred 2'));
  const waited = db.writable().then(() => order.push('writable'));
  assert.deepEqual(order, []);
  assert.equal(await writing, 'done');
  await waited;
  assert.equal(order.length, 4);
  assert.match(order[0]!, /^after commit: [1-9][0-9]+ committed$/);
  assert.deepEqual(order.slice(1), ['deferred 1', 'deferred 2', 'writable']);
  assert.equal(db.writesHeld, false);
  assert.equal(turns, 3);
  assert.equal(keys().length, names().length, 'committed: seen everywhere');
  db.write(() => put('after'));
  await db.committed();
  assert.deepEqual(names().slice(0, 2), ['after', 'before'], 'and writes go on as before');
});

test('a long write that throws, or is a dry run, leaves nothing', async (t) => {
  const { db, names, put } = open(t);
  await assert.rejects(
    db.longWrite(async (step) => {
      put('a');
      await (step() ?? Promise.resolve());
      throw new Error('item 2 is wrong');
    }),
    /item 2 is wrong/,
  );
  const ran: string[] = [];
  const preview = db.longWrite(
    async () => {
      put('b');
      db.afterCommit(() => ran.push('after'));
      return 'previewed';
    },
    { commit: false },
  );
  assert.equal(await preview, 'previewed');
  assert.deepEqual(names(), []);
  assert.deepEqual(ran, [], "a dry run's after-commit work does not run");
  assert.equal(db.writesHeld, false);
  db.write(() => put('c'));
  await db.committed();
  assert.deepEqual(names(), ['c']);
});

test('a long write that restarts keeps only what it did since, and only that after-commit work runs', async (t) => {
  const { db, names, put } = open(t);
  const ran: string[] = [];
  await db.longWrite(async (_step, restart) => {
    put('undone');
    db.afterCommit(() => ran.push('undone'));
    restart();
    put('kept');
    db.afterCommit(() => ran.push('kept'));
  });
  assert.deepEqual(names(), ['kept']);
  assert.deepEqual(ran, ['kept']);
});

test('closing the database during a long write abandons it: nothing of it is kept', async (t) => {
  const { db, names, put } = open(t);
  let written = 0;
  const writing = db.longWrite(async (step) => {
    for (;;) {
      put(`bulk-${written++}`);
      const turnEnds = step();
      if (turnEnds) await turnEnds;
    }
  });
  while (written < 10) await new Promise((resolve) => setImmediate(resolve));
  db.close();
  await assert.rejects(writing, /the database closed during a long write/);
  assert.deepEqual(names(), []);
});

test('a connection without automatic checkpoints leaves its commits in the log until checkpoint()', async (t) => {
  const { path, db } = open(t);
  const other = openDatabase(path, { migrate: false, autoCheckpoint: false });
  t.after(() => other.close());
  const size = () => statSync(path).size;
  // Past the thousand pages at which a commit would copy them itself.
  const insert = (on: Database) => () =>
    on.write(() => {
      const put = on.prepare('INSERT INTO settings (key, value) VALUES (?, ?)');
      for (let i = 0; i < 1200; i++) put.run(`${on === db ? 'auto' : 'manual'}-${i}`, 'x'.repeat(4000));
    });
  const before = size();
  insert(other)();
  await other.committed();
  assert.equal(size(), before, 'committed, and only in the log');
  other.checkpoint();
  const copied = size();
  assert.ok(copied - before > 4_000_000, `copied into the database file: ${before} -> ${copied}`);
  insert(db)();
  await db.committed();
  assert.ok(size() - copied > 4_000_000, 'a connection opened as usual copies at commit');
});

test('writes held for another connection wait for `until`; caches of rows are told at its commit', async (t) => {
  const { path, db, names } = open(t);
  const other = openDatabase(path, { migrate: false });
  t.after(() => other.close());
  let told = 0;
  db.onWrittenElsewhere(() => (told += 1));
  let finish!: () => void;
  const finished = new Promise<void>((resolve) => (finish = resolve));
  const answer = await db.holdWrites(
    async () => {
      other.write(() => other.prepare("INSERT INTO settings (key, value) VALUES ('elsewhere', '1')").run());
      await other.committed();
      return 'committed';
    },
    () => finished,
  );
  assert.equal(answer, 'committed');
  assert.deepEqual([told, names()], [1, ['elsewhere']]);
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(db.writesHeld, true, 'held until `until` settles');
  finish();
  await db.writable();
  assert.equal(db.writesHeld, false);
});

test('what fails after another connection committed is reported, and writes are let go', async (t) => {
  const { db } = open(t);
  const reported: unknown[] = [];
  db.onCallbackError((error) => reported.push(error));
  const answer = await db.holdWrites(
    async () => 'committed',
    () => Promise.reject(new Error('the checkpoint failed')),
  );
  assert.equal(answer, 'committed');
  await db.writable();
  assert.equal(db.writesHeld, false);
  assert.match(String(reported[0]), /the checkpoint failed/);
});

test('insertRows inserts rows many to a statement, in order, and returns their ids', async (t) => {
  const { db, reader } = open(t);
  const insert = db.insertRows(
    'INSERT INTO audit_log (at, actor_type, actor_name, action, resource, status) VALUES',
    6,
  );
  const rows = Array.from({ length: 150 }, (_, i) => [AT, 'system', 'test', `a.${i}`, 'rule', 'success']);
  assert.throws(() => insert(rows), /outside write/);
  const first = db.write(() => insert(rows.slice(0, 1)));
  // Over two statements of the most rows one takes, and one of the rest.
  const rest = db.write(() => insert(rows.slice(1)));
  await db.committed();
  const stored = reader.prepare('SELECT id, action FROM audit_log ORDER BY id').all() as {
    id: number;
    action: string;
  }[];
  assert.deepEqual(
    stored.map(({ action }) => action),
    rows.map((row) => row[3]),
  );
  assert.deepEqual(
    [...first, ...rest],
    stored.map(({ id }) => id),
  );
});

test('migrations are frozen text: none is built from code that could change', async () => {
  const source = (await import('node:fs')).readFileSync('internal/store/migrations.ts', 'utf8');
  assert.doesNotMatch(source, /\$\{/, 'no interpolation in a migration');
  assert.doesNotMatch(source.split('export const migrations')[0]!, /^import /m, 'migrations import nothing');
});

/** A long write on `db` that holds writes until the returned `end()` is called. */
function holding(db: Database, put: (key: string) => void, key: string) {
  let end!: () => void;
  const ended = new Promise<void>((resolve) => (end = resolve));
  let started = false;
  const done = db.longWrite(async (step) => {
    started = true;
    put(key);
    let over = false;
    void ended.then(() => (over = true));
    while (!over) await (step() ?? new Promise((resolve) => setImmediate(resolve)));
  });
  return { end, done, started: () => started };
}

test('a write in its turn waits for the long write in progress, then goes before the next one', async (t) => {
  const { db, names, put } = open(t);
  const first = holding(db, put, 'first');
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(db.writesHeld, true);
  const order: string[] = [];
  const live = db.writeInTurn(() => {
    order.push(`live saw ${names().join(',')}`);
    put('live');
  }, 10_000);
  const second = holding(db, put, 'second');
  await new Promise((resolve) => setTimeout(resolve, 30));
  assert.deepEqual(order, [], 'the live write waits');
  assert.equal(second.started(), false);
  first.end();
  await first.done;
  await live;
  assert.deepEqual(order, ['live saw first'], 'it ran once the first long write had committed');
  assert.deepEqual(names(), ['first', 'live'], 'and was committed before the second long write began');
  await new Promise((resolve) => setTimeout(resolve, 30));
  assert.equal(second.started(), true);
  second.end();
  await second.done;
  assert.deepEqual(names(), ['first', 'live', 'second']);
});

test('a write that waits past its bound is refused with WritesBusy and writes nothing', async (t) => {
  const { db, names, put } = open(t);
  const hold = holding(db, put, 'bulk');
  await new Promise((resolve) => setImmediate(resolve));
  const started = performance.now();
  await assert.rejects(
    db.writeInTurn(() => put('live'), 100),
    (error: unknown) => error instanceof WritesBusy && error.waitedMs >= 100,
  );
  assert.ok(performance.now() - started < 1000);
  hold.end();
  await hold.done;
  assert.deepEqual(names(), ['bulk']);
  await db.writeInTurn(() => put('later'), 100);
  assert.deepEqual(names(), ['bulk', 'later'], 'writes go on once the hold has ended');
});

test('a write in its turn whose commit fails rejects with CommitFailed', async (t) => {
  const { db, names, put } = open(t);
  await db.writeInTurn(() => {
    db.prepare('CREATE TABLE parent (id INTEGER PRIMARY KEY) STRICT').run();
    db.prepare(
      'CREATE TABLE child (parent_id INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED) STRICT',
    ).run();
  });
  await assert.rejects(
    db.writeInTurn(() => {
      put('lost');
      db.prepare('INSERT INTO child (parent_id) VALUES (42)').run();
    }),
    (error: unknown) => error instanceof CommitFailed && /FOREIGN KEY/.test(error.message),
  );
  assert.deepEqual(names(), []);
});

const REBUILD =
  'a migration that rebuilds the rules table keeps every rule, its port claims and the ids deleted rules had, and ' +
  'each renders as the API shows it; what was made before owners belongs to the first administrator';

test(REBUILD, () => {
  const path = join(mkdtempSync(join(tmpdir(), 'portplane-db-')), 'master.db');
  const old = new DatabaseSync(path);
  old.exec('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL) STRICT');
  for (let version = 1; version < 23; version++) {
    old.exec(migrations[version - 1]!);
    old.prepare('INSERT INTO schema_migrations VALUES (?, ?)').run(version, '2026-01-01T00:00:00Z');
  }
  const at = '2026-01-01T00:00:00Z';
  old
    .prepare(
      `INSERT INTO users (id, username, password_hash, scopes, created_at, updated_at)
       VALUES (1, 'viewer', 'x', '["rules:read"]', ?1, ?1), (2, 'admin', 'x', '["*"]', ?1, ?1)`,
    )
    .run(at);
  old
    .prepare(
      `INSERT INTO nodes (id, name, host, ssh_port, ssh_user, ssh_auth, tags, agent_token_hash, created_at, updated_at)
       VALUES (1, 'edge', 'edge.example', 22, 'root', 'none', '[]', x'01', ?, ?)`,
    )
    .run(at, at);
  const insertRule = old.prepare(
    `INSERT INTO rules (id, name, node_id, protocol, listen_port, targets, strategy, enabled, created_at, updated_at,
       max_connections, sync_path, relay_reason)
     VALUES (?, ?, 1, 'tcp', ?, '["192.0.2.1:80"]', 'failover', 1, ?, ?, 50, 'relay', 'the rule asks for the relay')`,
  );
  for (const id of [1, 2, 3]) {
    insertRule.run(id, `r${id}`, 9000 + id, at, at);
    old
      .prepare("INSERT INTO port_claims (node_id, protocol, port, rule_id) VALUES (1, 'tcp', ?, ?)")
      .run(9000 + id, id);
  }
  // Rule 9 was the last made, and deleted: no rule is to be given its id again.
  old.prepare("UPDATE sqlite_sequence SET seq = 9 WHERE name = 'rules'").run();
  old.close();

  const db = openDatabase(path, { time: () => at });
  const raw = db;
  const rows = raw.prepare('SELECT id, strategy, weights, preserve_source, max_connections, owner_id FROM rules').all();
  assert.deepEqual(
    rows.map((row) => ({ ...row })),
    [1, 2, 3].map((id) => ({
      id,
      strategy: 'failover',
      weights: null,
      preserve_source: 0,
      max_connections: 50,
      owner_id: 2,
    })),
  );
  assert.equal((raw.prepare("SELECT seq FROM sqlite_sequence WHERE name = 'rules'").get() as { seq: number }).seq, 9);
  const view = JSON.parse(
    (raw.prepare(`SELECT ${RULE_JSON} AS json FROM rules WHERE id = 2`).get() as { json: string }).json,
  );
  assert.deepEqual(
    [view.weights, view.preserve_source, view.sync.relayed_because, view.owner_id],
    [null, false, 'the rule asks for the relay', 2],
  );
  assert.equal((raw.prepare('SELECT count(*) AS n FROM port_claims').get() as { n: number }).n, 3);
  assert.equal((raw.prepare('PRAGMA foreign_keys').get() as { foreign_keys: number }).foreign_keys, 1);
  assert.deepEqual(raw.prepare('PRAGMA foreign_key_check').all(), []);
  // The claims still follow their rule.
  db.write(() => raw.prepare('DELETE FROM rules WHERE id = 1').run());
  assert.equal((raw.prepare('SELECT count(*) AS n FROM port_claims').get() as { n: number }).n, 2);
  db.close();
});

test('migration 56 widens what a channel may be and keeps every channel, its secret, deliveries and ids', () => {
  const path = join(mkdtempSync(join(tmpdir(), 'portplane-db-')), 'master.db');
  const old = new DatabaseSync(path);
  old.exec('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL) STRICT');
  for (let version = 1; version < 56; version++) {
    old.exec(migrations[version - 1]!);
    old.prepare('INSERT INTO schema_migrations VALUES (?, ?)').run(version, '2026-01-01T00:00:00Z');
  }
  const at = '2026-01-01T00:00:00Z';
  old
    .prepare(
      `INSERT INTO channels (id, name, type, config, secret, created_at, updated_at)
       VALUES (3, 'ops', 'webhook', '{"url":"https://hooks.example.com/a"}', x'0102', ?1, ?1)`,
    )
    .run(at);
  old
    .prepare(
      `INSERT INTO deliveries (message_id, channel_id, payload, state, created_at)
       VALUES ('msg_1', 3, '{}', 'pending', ?)`,
    )
    .run(at);
  // Channel 7 was the last made, and deleted: no channel is to be given its id again.
  old.prepare("UPDATE sqlite_sequence SET seq = 7 WHERE name = 'channels'").run();
  old.close();

  const db = openDatabase(path, { time: () => at });
  const raw = db;
  assert.deepEqual(
    { ...(raw.prepare('SELECT id, name, type, hex(secret) AS secret FROM channels').get() as object) },
    { id: 3, name: 'ops', type: 'webhook', secret: '0102' },
  );
  assert.equal(
    (raw.prepare("SELECT seq FROM sqlite_sequence WHERE name = 'channels'").get() as { seq: number }).seq,
    7,
  );
  assert.deepEqual(raw.prepare('PRAGMA foreign_key_check').all(), []);
  db.write(() =>
    raw
      .prepare(`INSERT INTO channels (name, type, config, created_at, updated_at) VALUES ('chat', 'slack', '{}', ?, ?)`)
      .run(at, at),
  );
  assert.equal((raw.prepare("SELECT id FROM channels WHERE name = 'chat'").get() as { id: number }).id, 8);
  assert.throws(() =>
    db.write(() =>
      raw
        .prepare(`INSERT INTO channels (name, type, config, created_at, updated_at) VALUES ('x', 'irc', '{}', ?, ?)`)
        .run(at, at),
    ),
  );
  // The deliveries still follow their channel.
  db.write(() => raw.prepare('DELETE FROM channels WHERE id = 3').run());
  assert.equal((raw.prepare('SELECT count(*) AS n FROM deliveries').get() as { n: number }).n, 0);
  db.close();
});

test('a data dir that allowed local targets allows them to rules and channels both, under their own names', () => {
  const path = join(mkdtempSync(join(tmpdir(), 'portplane-db-')), 'master.db');
  const old = new DatabaseSync(path);
  old.exec('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL) STRICT');
  for (let version = 1; version <= 40; version++) {
    old.exec(migrations[version - 1]!);
    old.prepare('INSERT INTO schema_migrations VALUES (?, ?)').run(version, AT);
  }
  old.prepare("INSERT INTO settings (key, value) VALUES ('allow_local_targets', '1')").run();
  old.close();
  const db = openDatabase(path, { time: () => AT });
  const settings = db.prepare('SELECT key, value FROM settings ORDER BY key').all();
  assert.deepEqual(
    settings.map((row) => ({ ...row })),
    [
      { key: 'allow_local_channel_targets', value: '1' },
      { key: 'allow_local_rule_targets', value: '1' },
    ],
  );
  db.close();
});

test('every statement the store declares fits the schema its migrations make (they are prepared at first use)', (t) => {
  const { db } = open(t);
  const store = new Store(db, { secretFields: new Set() });
  assert.ok(store.users, 'the store is whole');
  db.prepareAll();
  assert.throws(() => {
    db.prepare('SELECT no_such_column FROM nodes');
    db.prepareAll();
  }, /no such column/);
});

/**
 * A database on a disk of its own, filled (as root; null elsewhere): its log copied into the file first, so that the
 * next transaction writes the log from its start again, into room the file already has (the pages a small write needs
 * on a full disk). `put` writes a setting of `bytes`; `free` gives the room back.
 */
function onFullDisk(t: TestContext) {
  const dir = smallDisk(t, 8);
  if (!dir) return null;
  const db = openDatabase(join(dir, 'master.db'));
  t.after(() => db.close());
  const put = (key: string, bytes: number) =>
    db.prepare('INSERT INTO settings (key, value) VALUES (?, ?)').run(key, 'x'.repeat(bytes));
  db.checkpoint();
  return { db, put, free: fill(dir) };
}

const LARGER_THAN_THE_DISK = 8 * 1024 * 1024;

test('on a full disk a small commit that still fits does not end the refusal; room on the disk does', async (t) => {
  const disk = onFullDisk(t);
  if (!disk) return t.skip('cannot mount a tmpfs here (needs root)');
  const { db, put, free } = disk;
  await assert.rejects(async () => {
    db.write(() => put('large', LARGER_THAN_THE_DISK));
    await db.committed();
  }, /full/);
  assert.equal(db.writesRefused?.reason, 'the disk is full');
  db.write(() => put('small', 10));
  await db.committed();
  assert.equal(db.writesRefused?.reason, 'the disk is full', 'a write into pages the database holds');
  free();
  db.write(() => put('after', 10));
  await db.committed();
  assert.equal(db.writesRefused, null);
});

const UNDONE_BY_SQLITE =
  'a statement the full disk makes SQLite undo its transaction fails its batch, and the turn goes on in a new one';

test(UNDONE_BY_SQLITE, async (t) => {
  const disk = onFullDisk(t);
  if (!disk) return t.skip('cannot mount a tmpfs here (needs root)');
  const { db, put } = disk;
  db.write(() => put('before', 10));
  const first = db.committed();
  assert.throws(
    () => db.write(() => put('large', LARGER_THAN_THE_DISK)),
    /full/,
    'the full disk, not a lost savepoint',
  );
  await assert.rejects(first, (error) => error instanceof CommitFailed, 'the earlier write of the batch is told');
  db.write(() => put('later', 10));
  await db.committed();
  const kept = db.prepare("SELECT key FROM settings WHERE key IN ('before', 'large', 'later')").all();
  assert.deepEqual(
    kept.map((row) => row.key),
    ['later'],
  );
});
