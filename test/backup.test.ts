// A backup restores only intact: every byte of the archive is checked (headers and padding by
// the tar reader, files against the manifest, the manifest against its own SHA-256) and the
// database by SQLite before anything is written; a damaged or crafted backup is refused with
// the reason and leaves the data dir as it found it.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { test } from 'node:test';
import { writeTar, type Entry } from '../internal/backup/archive.ts';
import { backupDataDir, MANIFEST, MANIFEST_SUM, restoreDataDir, verifyBackup } from '../internal/backup/backup.ts';
import { openDatabase } from '../internal/store/store.ts';
import { masterCommand } from './bundled.ts';

function scratch(): string {
  return mkdtempSync(join(tmpdir(), 'portplane-backup-test-'));
}

/** A data dir with a master's database (migrated, one node and rule) and the files a master keeps beside it. */
function dataDir(): string {
  const dir = scratch();
  const db = openDatabase(join(dir, 'master.db'));
  db.write(() => {
    db.prepare(
      `INSERT INTO nodes (name, host, ssh_port, ssh_user, ssh_auth, tags, agent_token_hash, created_at,
      updated_at) VALUES ('edge', 'edge.example.net', 22, 'root', 'none', '[]', x'01', 'now', 'now')`,
    ).run();
  });
  db.close();
  writeFileSync(join(dir, 'secret.key'), 'sealing key');
  writeFileSync(join(dir, 'license.json'), '{}');
  return dir;
}

const file = (name: string, data: Buffer | string = 'x'): Entry => ({ name, mode: 0o600, data: Buffer.from(data) });
const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

/** An archive of `files` with a manifest that matches them: for what only the checks past the hashes can refuse. */
function signed(files: Entry[], schemaVersion = 1): Buffer {
  const manifest = Buffer.from(
    JSON.stringify({
      format: 'portplane-backup',
      version: 1,
      created_at: '2026-11-25T10:00:00Z',
      master_version: 'test',
      schema_version: schemaVersion,
      files: files.map(({ name, data }) => ({ name, size: data.length, sha256: sha256(data) })),
    }),
  );
  return writeTar([file(MANIFEST, manifest), ...files, file(MANIFEST_SUM, `${sha256(manifest)}  ${MANIFEST}\n`)]);
}

/** A connection of another program to `path`, foreign keys off, that writes as the master's connections do. */
function writer(path: string): DatabaseSync {
  const db = new DatabaseSync(path, { enableForeignKeyConstraints: false });
  // The journal's triggers stamp with the master's clock, which every writing connection defines.
  db.function('app_time', () => '2026-11-23T10:00:00Z');
  return db;
}

/** The database of a fresh master, with `sql` run on it with foreign keys off. */
function database(sql = ''): Buffer {
  const path = join(scratch(), 'master.db');
  openDatabase(path).close();
  const db = writer(path);
  db.exec(sql);
  db.close();
  return readFileSync(path);
}

/** Refused with `reason`, leaving a fresh data dir empty and nothing beside it. */
function refused(archive: Buffer, reason: RegExp, what: string): void {
  const parent = scratch();
  const target = join(parent, 'data');
  assert.throws(() => verifyBackup(archive), reason, `${what}: verify`);
  assert.throws(() => restoreDataDir(target, archive), reason, `${what}: restore`);
  assert.deepEqual(readdirSync(target), [], `${what}: the data dir is left empty`);
  assert.deepEqual(readdirSync(parent), ['data'], `${what}: nothing lands beside it`);
}

test('a backup restores into an empty data dir: every file as it was, 0600, the database readable', async () => {
  const source = dataDir();
  // What a data dir may also hold, and a backup never carries.
  for (const stray of ['notes.txt', 'master.ready', 'secret.key.1234.ab.tmp']) writeFileSync(join(source, stray), 'x');
  const archive = await backupDataDir(source);
  const { manifest } = verifyBackup(archive);
  assert.deepEqual(
    manifest.files.map((f) => f.name),
    ['master.db', 'license.json', 'secret.key'],
  );
  assert.equal(manifest.schema_version > 1, true);
  const target = join(scratch(), 'data');
  assert.deepEqual(restoreDataDir(target, archive), ['master.db', 'license.json', 'secret.key']);
  assert.equal(readFileSync(join(target, 'secret.key'), 'utf8'), 'sealing key');
  for (const name of readdirSync(target)) assert.equal(statSync(join(target, name)).mode & 0o777, 0o600, name);
  const db = new DatabaseSync(join(target, 'master.db'));
  assert.deepEqual({ ...db.prepare('SELECT name FROM nodes').get() }, { name: 'edge' });
  db.close();
});

test('a byte flipped anywhere in a backup is refused by verify and by restore', async () => {
  const archive = await backupDataDir(dataDir());
  // Every byte of each header, of the manifest and its sum, of the padding after each file and of the end blocks;
  // every 509th byte of the files themselves (a prime: each falls at another place in its page), and the first and
  // last of each.
  const positions: number[] = [];
  let at = 0;
  verifyBackup(archive);
  for (const entry of readEntries(archive)) {
    const dataStart = at + 512;
    const end = dataStart + Math.ceil(entry.size / 512) * 512;
    const whole = entry.name === MANIFEST || entry.name === MANIFEST_SUM;
    for (let i = at; i < end; i++) {
      const inData = i >= dataStart && i < dataStart + entry.size;
      if (!inData || whole || (i - dataStart) % 509 === 0 || i === dataStart + entry.size - 1) positions.push(i);
    }
    at = end;
  }
  for (let i = at; i < archive.length; i++) positions.push(i);
  assert.equal(positions.at(-1), archive.length - 1);
  let accepted = 0;
  // Flipped in place and back: a copy of the archive per position cost more than verifying it.
  for (const position of positions) {
    archive[position] = archive[position]! ^ 0x20;
    try {
      verifyBackup(archive);
      accepted += 1;
    } catch (error) {
      assert.match((error as Error).message, /damaged|truncated|not a backup|manifest/, `byte ${position}`);
    } finally {
      archive[position] = archive[position]! ^ 0x20;
    }
  }
  assert.equal(accepted, 0, `${accepted} of ${positions.length} flipped bytes went unnoticed`);
  refused(flip(archive, 512 + 10), /damaged/, 'a flipped byte in the manifest');
});

/** The archive's entries with their sizes, as laid out: header, data, padding. */
function readEntries(archive: Buffer): { name: string; size: number }[] {
  const out: { name: string; size: number }[] = [];
  for (let at = 0; !archive.subarray(at, at + 512).every((b) => b === 0);) {
    const name = archive.toString('ascii', at, at + 100).replace(/\0.*$/s, '');
    const size = parseInt(archive.toString('ascii', at + 124, at + 136), 8);
    out.push({ name, size });
    at += 512 + Math.ceil(size / 512) * 512;
  }
  return out;
}

function flip(archive: Buffer, position: number): Buffer {
  const damaged = Buffer.from(archive);
  damaged[position] = damaged[position]! ^ 1;
  return damaged;
}

test('a database that hashes right but is inconsistent, foreign, newer or not one is refused', () => {
  const cases: [string, Buffer, RegExp][] = [
    [
      'a rule whose node is not there',
      signed([
        file(
          'master.db',
          database(`INSERT INTO rules (name, node_id, protocol, listen_port, targets, strategy, enabled, created_at,
            updated_at) VALUES ('orphan', 99, 'tcp', 80, '[]', 'round_robin', 1, 'now', 'now')`),
        ),
      ]),
      // The rule's row and its port's claim, which names the node too.
      /foreign key check: 2 rows/,
    ],
    [
      'a database of a newer master',
      signed([file('master.db', database('INSERT INTO schema_migrations VALUES (999, 0)'))]),
      /newer than this master/,
    ],
    [
      'a database of something else',
      signed([file('master.db', databaseOf('CREATE TABLE kept (value TEXT)'))]),
      /not a portplane master's/,
    ],
    ['a file that is not a database', signed([file('master.db', 'not sqlite')]), /not a database/],
    ['an index that does not match its table', signed([file('master.db', brokenIndex())]), /integrity check/],
  ];
  for (const [what, archive, reason] of cases) refused(archive, reason, what);
});

/** `archive` with its first header's ustar prefix field set (and its checksum made to match again). */
function prefixed(archive: Buffer): Buffer {
  const header = archive.subarray(0, 512);
  header.write('elsewhere', 345);
  header.write('        ', 148);
  const sum = header.reduce((total, byte) => total + byte, 0);
  header.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148);
  return archive;
}

/** A SQLite file with only `sql` in it. */
function databaseOf(sql: string): Buffer {
  const path = join(scratch(), 'other.db');
  const db = new DatabaseSync(path);
  db.exec(sql);
  db.close();
  return readFileSync(path);
}

/** A master's database whose nodes' name index no longer matches the table: its entry edited in the file. */
function brokenIndex(): Buffer {
  const path = join(scratch(), 'master.db');
  openDatabase(path).close();
  const db = writer(path);
  db.exec(`INSERT INTO nodes (name, host, ssh_port, ssh_user, ssh_auth, tags, agent_token_hash, created_at, updated_at)
    VALUES ('edge-node', 'h', 22, 'root', 'none', '[]', x'01', 'now', 'now')`);
  const { rootpage } = db
    .prepare("SELECT rootpage FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'nodes' ORDER BY name LIMIT 1")
    .get() as { rootpage: number };
  const { page_size: pageSize } = db.prepare('PRAGMA page_size').get() as { page_size: number };
  db.close();
  const bytes = readFileSync(path);
  const page = bytes.subarray((rootpage - 1) * pageSize, rootpage * pageSize);
  const at = page.indexOf('edge-node');
  assert.ok(at >= 0, 'the index holds the name');
  page.write('edge-nodf', at);
  return bytes;
}

test('a crafted backup is refused with the reason: paths outside, planted files, no database, no manifest', () => {
  const db = database();
  const cases: [string, Buffer, RegExp][] = [
    ['a file outside the data dir', signed([file('master.db', db), file('../escaped')]), /no backup holds/],
    ['an absolute path', signed([file('master.db', db), file('/etc/escaped')]), /no backup holds/],
    ['a file a data dir does not hold', signed([file('master.db', db), file('notes.txt')]), /no backup holds/],
    ['a key beside the pins', signed([file('master.db', db), file('known_hosts/1/../../x')]), /no backup holds/],
    ['a name in the ustar prefix', prefixed(signed([file('master.db', db)])), /name prefix/],
    ['a planted lock', signed([file('master.db', db), file('master.lock', '1')]), /master\.lock/],
    ['a planted WAL', signed([file('master.db', db), file('master.db-wal')]), /master\.db-wal/],
    ['a planted readiness', signed([file('master.db', db), file('master.ready')]), /master\.ready/],
    ['a name given twice', signed([file('master.db', db), file('master.db', db)]), /twice/],
    ['no database', signed([file('license.json')]), /holds no master\.db/],
    ['no manifest (an older master)', writeTar([file('master.db', db)]), /no manifest/],
    ['an error page saved as the backup', Buffer.from('{"status":401,"code":"unauthorized"}'), /not a backup/],
  ];
  for (const [what, archive, reason] of cases) refused(archive, reason, what);
  assert.equal(existsSync('/etc/escaped'), false);
});

test('a used data dir is refused and left as it was', async () => {
  const target = scratch();
  writeFileSync(join(target, 'master.db'), 'live');
  assert.throws(() => restoreDataDir(target, signed([file('master.db', database())])), /not empty/);
  assert.equal(readFileSync(join(target, 'master.db'), 'utf8'), 'live');
  assert.deepEqual(readdirSync(target), ['master.db']);
});

test(
  'master backup writes through nothing that was there: a planted FILE.tmp symlink and a ' +
    'loose FILE are left alone',
  async () => {
    const source = dataDir();
    const out = scratch();
    const file = join(out, 'master.backup');
    const target = join(out, 'someone-elses');
    writeFileSync(target, 'untouched');
    symlinkSync(target, `${file}.tmp`);
    writeFileSync(file, 'an older backup', { mode: 0o644 });
    const made = await masterCommand(['backup', '--data-dir', source, file]);
    assert.equal(made.code, 0, made.stderr);
    assert.equal(readFileSync(target, 'utf8'), 'untouched');
    assert.equal(statSync(file).mode & 0o777, 0o600, 'the new file is 0600, not the old one with its mode');
    assert.deepEqual(readdirSync(out).sort(), ['master.backup', 'master.backup.tmp', 'someone-elses']);
    assert.equal((await masterCommand(['verify', file])).code, 0);
  },
);

const compacted =
  "a restored database has no free pages and gives pages freed later back: an old data dir's way to its size";

test(compacted, async () => {
  const source = dataDir();
  // As a master before incremental vacuum left a large data dir: a file that kept the size of rows long deleted.
  const path = join(source, 'master.db');
  const db = new DatabaseSync(path);
  db.exec('PRAGMA auto_vacuum = NONE; VACUUM; CREATE TABLE filler (x TEXT)');
  const insert = db.prepare('INSERT INTO filler VALUES (?)');
  for (let i = 0; i < 5000; i++) insert.run('x'.repeat(1000));
  db.exec('DROP TABLE filler; PRAGMA wal_checkpoint(TRUNCATE)');
  const pragma = (name: string) => (db.prepare(`PRAGMA ${name}`).get() as Record<string, number>)[name]!;
  assert.equal(pragma('auto_vacuum'), 0);
  assert.ok(pragma('freelist_count') > 1000);
  db.close();
  const target = join(scratch(), 'data');
  restoreDataDir(target, await backupDataDir(source));
  assert.ok(statSync(join(target, 'master.db')).size < statSync(path).size / 4);
  const restored = new DatabaseSync(join(target, 'master.db'));
  const restoredPragma = (name: string) => (restored.prepare(`PRAGMA ${name}`).get() as Record<string, number>)[name]!;
  assert.equal(restoredPragma('auto_vacuum'), 2, 'incremental');
  assert.equal(restoredPragma('freelist_count'), 0);
  assert.deepEqual({ ...restored.prepare('SELECT name FROM nodes').get()! }, { name: 'edge' });
  restored.close();
});
