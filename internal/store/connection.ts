// The SQLite connection itself: opened with its pragmas set and checked, the file looked over whole, the schema brought
// up to date by the numbered migrations, and what triggers keep installed (derived.ts, handed in: the stores that
// define derivations are written against the Database, which is built on this). The commit machinery is database.ts.

import type { DatabaseSync } from 'node:sqlite';
import { LEGACY_TRAFFIC, migrations, tableRebuilds } from './migrations.ts';

// Loaded at call time rather than imported, so that the bundle can first tell a user with
// an old Node.js what to install instead of failing on a missing builtin.
export function sqlite(): typeof import('node:sqlite') {
  return process.getBuiltinModule('node:sqlite') as typeof import('node:sqlite');
}

/** A connection that may not migrate found a schema other than the one its code knows. */
export class SchemaMismatch extends Error {}

/** The database file is not one, or SQLite found it damaged: what is in it cannot be trusted. */
export class DatabaseDamaged extends Error {}

/** SQLite's primary result codes for a file that is not a database (26) or is corrupt (11). */
function isDamage(error: unknown): boolean {
  const code = (error as { errcode?: number }).errcode;
  return code !== undefined && [11, 26].includes(code & 0xff);
}

/** PRAGMA auto_vacuum's value for incremental. */
export const INCREMENTAL = 2;

/** What triggers keep (derived.ts), as the connection installs it. */
export interface Derivations {
  /** Inside a write transaction: installs every derivation, rebuilding what it keeps from the tables. */
  install(db: DatabaseSync): unknown;
  /** Inside a write transaction: drops every trigger (a migration that rebuilds a table runs without them). */
  drop(db: DatabaseSync): void;
}

export interface ConnectionOptions {
  /** False for a second connection of a running master (an import's): it joins, checking the schema is this code's. */
  migrate?: boolean;
  /** False: commits leave what they wrote in the write-ahead log, for a checkpoint to copy into the database file. */
  autoCheckpoint?: boolean;
  /** The master's clock as stored (RFC 3339, seconds), which triggers stamp what they write with (see derived.ts). */
  time: () => string;
}

/**
 * Opens `path`, bringing its schema up to date (or, with `migrate: false`, throwing SchemaMismatch unless it is the one
 * this code knows) and installing `derived`. Throws DatabaseDamaged for a file that is not a sound database.
 */
export function openConnection(
  path: string,
  { migrate = true, autoCheckpoint = true, time }: ConnectionOptions,
  derived: Derivations,
): DatabaseSync {
  const { DatabaseSync } = sqlite();
  const db = new DatabaseSync(path, { enableForeignKeyConstraints: true, timeout: 5000 });
  db.function('app_time', time);
  try {
    db.exec(
      'PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; PRAGMA temp_store = MEMORY; ' +
        // A log that grew (a long import, a roll-up) is cut back to this when it starts over.
        'PRAGMA journal_size_limit = 67108864;',
    );
    // The connection that migrates is the one a master opens first: it looks at every page before serving from them
    // (a 60 MB database in 60 ms here), so a damaged file stops the start rather than failing requests later.
    if (migrate) checkIntact(db);
  } catch (error) {
    db.close();
    if (isDamage(error) || error instanceof DatabaseDamaged)
      throw new DatabaseDamaged(`${path} is damaged: ${(error as Error).message}`, { cause: error });
    throw error;
  }
  if (!autoCheckpoint) db.exec('PRAGMA wal_autocheckpoint = 0');
  expectPragma(db, 'journal_mode', path === ':memory:' ? 'memory' : 'wal');
  expectPragma(db, 'synchronous', 2);
  expectPragma(db, 'foreign_keys', 1);
  if (migrate) {
    migrateSchema(db, derived);
    useIncrementalVacuum(db);
    inTransaction(db, () => derived.install(db));
  } else {
    const version = schemaVersion(db);
    if (version !== migrations.length)
      throw new SchemaMismatch(
        `the database is at schema version ${version}, and this code knows ${migrations.length}`,
      );
  }
  return db;
}

/** Runs `fn` in a write transaction of its own, committed at once. */
export function inTransaction(db: DatabaseSync, fn: () => void): void {
  db.exec('BEGIN IMMEDIATE');
  try {
    fn();
    db.exec('COMMIT');
  } catch (error) {
    db.exec('ROLLBACK');
    throw error;
  }
}

export function schemaVersion(db: DatabaseSync): number {
  const row = db.prepare('SELECT max(version) AS version FROM schema_migrations').get() as { version: number | null };
  return row.version ?? 0;
}

export function pragmaOf(db: DatabaseSync, name: string): number {
  const row = db.prepare(`PRAGMA ${name}`).get() as Record<string, number>;
  return row[name]!;
}

/** Throws DatabaseDamaged unless SQLite's quick_check finds every page sound. */
function checkIntact(db: DatabaseSync): void {
  const found = (db.prepare('PRAGMA quick_check(10)').all() as { quick_check: string }[]).map((r) => r.quick_check);
  if (found.length !== 1 || found[0] !== 'ok') throw new DatabaseDamaged(`quick_check found ${found.join('; ')}`);
}

function expectPragma(db: DatabaseSync, name: string, want: string | number): void {
  const row = db.prepare(`PRAGMA ${name}`).get() as Record<string, string | number>;
  const got = row[name];
  if (got !== want) throw new Error(`SQLite pragma ${name} is ${got}, expected ${want}`);
}

/**
 * Free pages are given back to the file system in steps (`Database.reclaim`) rather than by a VACUUM that holds every
 * write back. The mode takes a VACUUM to change once the file exists (WAL mode makes it at once): a new database, or
 * one made before of up to 64 MiB, is rewritten so at open (well under a second); a larger one keeps its size, reusing
 * its free pages, until restored from a backup. So is one that still holds minute buckets of before migration 20
 * (about 0.3 s a million of them here): moving them frees most of it, which only this mode gives back while serving.
 */
function useIncrementalVacuum(db: DatabaseSync): void {
  if (pragmaOf(db, 'auto_vacuum') === INCREMENTAL) return;
  if (pragmaOf(db, 'page_count') * pragmaOf(db, 'page_size') <= 64 * 2 ** 20 || holdsLegacyTraffic(db))
    db.exec('PRAGMA auto_vacuum = INCREMENTAL; VACUUM');
}

function holdsLegacyTraffic(db: DatabaseSync): boolean {
  const table = db.prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?").get(LEGACY_TRAFFIC);
  return table !== undefined && db.prepare(`SELECT 1 FROM ${LEGACY_TRAFFIC} LIMIT 1`).get() !== undefined;
}

/** Throws when a rebuild left a row referring to one that is not there (migration `version` is then rolled back). */
function expectNoDanglingKeys(db: DatabaseSync, version: number): void {
  const dangling = db.prepare('PRAGMA foreign_key_check').all() as { table: string; parent: string }[];
  if (dangling.length > 0) {
    const { table, parent } = dangling[0]!;
    throw new Error(`migration ${version} left rows of ${table} referring to missing rows of ${parent}`);
  }
}

function migrateSchema(db: DatabaseSync, derived: Derivations): void {
  db.exec(
    'CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL) STRICT',
  );
  const current = schemaVersion(db);
  const latest = migrations.length;
  if (current > latest) {
    throw new Error(
      `the database is at schema version ${current}, newer than this master (${latest}); run a newer master`,
    );
  }
  const record = db.prepare('INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)');
  // Each migration commits on its own, at once: the schema must be in place before anything runs.
  for (let version = current + 1; version <= latest; version++) {
    const rebuild = tableRebuilds.has(version);
    // Outside a transaction, where the pragma takes effect (see migrations.ts).
    if (rebuild) db.exec('PRAGMA foreign_keys = OFF');
    try {
      inTransaction(db, () => {
        if (rebuild) derived.drop(db);
        db.exec(migrations[version - 1]!);
        if (rebuild) expectNoDanglingKeys(db, version);
        record.run(version, new Date().toISOString());
      });
    } finally {
      if (rebuild) db.exec('PRAGMA foreign_keys = ON');
    }
  }
}
