// Restore from a backup archive an operator hands in: a damaged or crafted one is refused
// with the reason and leaves the data dir as empty as it found it.

import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { test } from 'node:test';
import { writeTar, type Entry } from '../internal/backup/archive.ts';
import { restoreDataDir } from '../internal/backup/backup.ts';

function scratch(): string {
  return mkdtempSync(join(tmpdir(), 'portplane-backup-test-'));
}

function database(): Buffer {
  const path = join(scratch(), 'master.db');
  const db = new DatabaseSync(path);
  db.exec("CREATE TABLE kept (value TEXT); INSERT INTO kept VALUES ('restored')");
  db.close();
  return readFileSync(path);
}

/** `archive` with its first header edited and its checksum made to match again. */
function resigned(archive: Buffer, edit: (header: Buffer) => void): Buffer {
  const header = archive.subarray(0, 512);
  edit(header);
  header.write('        ', 148);
  const sum = header.reduce((total, byte) => total + byte, 0);
  header.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148);
  return archive;
}

const file = (name: string, data: Buffer | string = 'x'): Entry => ({ name, mode: 0o644, data: Buffer.from(data) });

test('a backup restores into an empty data dir, every file 0600, the database readable', () => {
  const dataDir = join(scratch(), 'data');
  const names = restoreDataDir(dataDir, writeTar([file('master.db', database()), file('ssh/known_hosts', 'pins')]));
  assert.deepEqual(names, ['master.db', 'ssh/known_hosts']);
  assert.equal(readFileSync(join(dataDir, 'ssh/known_hosts'), 'utf8'), 'pins');
  assert.equal(statSync(join(dataDir, 'master.db')).mode & 0o777, 0o600);
  const db = new DatabaseSync(join(dataDir, 'master.db'));
  assert.deepEqual({ ...db.prepare('SELECT value FROM kept').get() }, { value: 'restored' });
  db.close();
});

test('a damaged or crafted backup is refused with the reason and leaves the data dir empty', () => {
  const good = writeTar([file('master.db', database())]);
  const badChecksum = Buffer.from(good);
  badChecksum[0] = badChecksum[0]! ^ 1;
  const badSize = resigned(writeTar([file('master.db', database())]), (header) => header.write('-0000000001', 124));
  const cases: [string, Buffer, RegExp][] = [
    ['a header checksum that does not match', badChecksum, /damaged/],
    ['a size that is not one', badSize, /size is not a number/],
    ['a truncated archive', good.subarray(0, 1024), /truncated/],
    ['no database', writeTar([file('license.json')]), /holds no master\.db/],
    ['a file outside the data dir', writeTar([file('master.db', database()), file('../escaped')]), /outside/],
    ['an absolute path', writeTar([file('master.db', database()), file('/etc/escaped')]), /outside/],
    ['a planted lock', writeTar([file('master.db', database()), file('master.lock', '1')]), /master\.lock/],
    ['a planted WAL', writeTar([file('master.db', database()), file('master.db-wal')]), /master\.db-wal/],
    ['a database that is not one', writeTar([file('license.json'), file('master.db', 'not sqlite')]), /not a database/],
  ];
  for (const [what, archive, reason] of cases) {
    const parent = scratch();
    const dataDir = join(parent, 'data');
    assert.throws(() => restoreDataDir(dataDir, archive), reason, what);
    assert.deepEqual(readdirSync(dataDir), [], `${what}: the data dir is left empty`);
    assert.deepEqual(readdirSync(parent), ['data'], `${what}: nothing lands beside it`);
  }
  assert.equal(existsSync('/etc/escaped'), false);
});

test('a used data dir is refused and left as it was', () => {
  const dataDir = scratch();
  writeFileSync(join(dataDir, 'master.db'), 'live');
  assert.throws(() => restoreDataDir(dataDir, writeTar([file('master.db', database())])), /not empty/);
  assert.equal(readFileSync(join(dataDir, 'master.db'), 'utf8'), 'live');
});
