// A master's database as a file, for backups and restores: copied while a master writes to it, checked before
// anything is restored from it, rewritten once restored. The only SQL outside the stores' connections, and here so
// that the store holds all of it.

import { sqlite } from './connection.ts';
import { migrations } from './migrations.ts';

/** Copies the database at `source` to `target` while a master may be writing to it (SQLite's online backup). */
export async function copyDatabaseFile(source: string, target: string): Promise<void> {
  const { DatabaseSync, backup } = sqlite();
  const db = new DatabaseSync(source, { readOnly: true });
  try {
    await backup(db, target);
  } finally {
    db.close();
  }
}

/** The schema version of the database file at `path`. */
export function schemaVersionOfFile(path: string): number {
  const db = new (sqlite().DatabaseSync)(path, { readOnly: true });
  try {
    return (db.prepare('SELECT max(version) AS version FROM schema_migrations').get() as { version: number }).version;
  } finally {
    db.close();
  }
}

/** Refuses a database this master cannot start on, or one SQLite finds damaged or inconsistent. */
export function checkDatabaseFile(path: string): void {
  const { DatabaseSync } = sqlite();
  let db: InstanceType<typeof DatabaseSync>;
  try {
    db = new DatabaseSync(path, { readOnly: true });
    db.prepare('SELECT count(*) FROM sqlite_schema').get();
  } catch (error) {
    throw new Error(`the backup's database is not a database: ${(error as Error).message}`);
  }
  try {
    const version = (
      db.prepare("SELECT name FROM sqlite_schema WHERE name = 'schema_migrations'").get()
        ? db.prepare('SELECT max(version) AS version FROM schema_migrations').get()
        : undefined
    ) as { version: number | null } | undefined;
    if (!version?.version) throw new Error("the backup's database is not a portplane master's");
    if (version.version > migrations.length)
      throw new Error(
        `the backup's database is at schema version ${version.version}, newer than this master ` +
          `(${migrations.length}); restore it with the master that made it`,
      );
    const integrity = db.prepare('PRAGMA integrity_check').all() as { integrity_check: string }[];
    if (integrity.length !== 1 || integrity[0]!.integrity_check !== 'ok')
      throw new Error(
        `the backup's database fails its integrity check: ${integrity.map((r) => r.integrity_check).join('; ')}`,
      );
    const orphans = db.prepare('PRAGMA foreign_key_check').all() as { table: string; parent: string }[];
    if (orphans.length > 0)
      throw new Error(
        `the backup's database fails its foreign key check: ${orphans.length} rows refer to rows that are not ` +
          `there (first: ${orphans[0]!.table} -> ${orphans[0]!.parent})`,
      );
  } finally {
    db.close();
  }
}

/**
 * Rewrites a restored database without its free pages, and so that it gives pages freed later back in steps (see
 * Database.useIncrementalVacuum): for a data dir made before the history kept at falling resolution, whose file kept
 * the size of every minute it once held, a restore is the way to its size. The master is stopped meanwhile.
 */
export function compactDatabaseFile(path: string): void {
  const db = new (sqlite().DatabaseSync)(path);
  try {
    db.exec('PRAGMA auto_vacuum = INCREMENTAL; VACUUM');
  } finally {
    db.close();
  }
}
