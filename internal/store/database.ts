// The one SQLite connection of a process: pragmas set and checked at open, numbered
// migrations, and `write(fn)` transactions that commit only when `fn` returns.

import type { DatabaseSync, StatementSync } from 'node:sqlite';
import { migrations } from './migrations.ts';

// Loaded at call time rather than imported, so that the bundle can first tell a user with
// an old Node.js what to install instead of failing on a missing builtin.
function sqlite(): typeof import('node:sqlite') {
  return process.getBuiltinModule('node:sqlite') as typeof import('node:sqlite');
}

export class Database {
  private readonly db: DatabaseSync;
  private inWrite = false;

  constructor(path: string) {
    const { DatabaseSync } = sqlite();
    this.db = new DatabaseSync(path, { enableForeignKeyConstraints: true, timeout: 5000 });
    this.db.exec('PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;');
    this.expectPragma('journal_mode', path === ':memory:' ? 'memory' : 'wal');
    this.expectPragma('synchronous', 2);
    this.expectPragma('foreign_keys', 1);
    this.migrate();
  }

  prepare(sql: string): StatementSync {
    return this.db.prepare(sql);
  }

  /**
   * Runs `fn` inside BEGIN IMMEDIATE..COMMIT and returns its result; rolls back if it
   * throws. `fn` must be synchronous: awaiting inside would let other requests' statements
   * run in this transaction on the shared connection.
   */
  write<T>(fn: () => T): T {
    if (this.inWrite) return fn();
    this.db.exec('BEGIN IMMEDIATE');
    this.inWrite = true;
    try {
      const result = fn();
      if (result instanceof Promise) throw new Error('a write transaction must be synchronous');
      this.db.exec('COMMIT');
      return result;
    } catch (error) {
      this.db.exec('ROLLBACK');
      throw error;
    } finally {
      this.inWrite = false;
    }
  }

  /**
   * Inside `write`: runs `fn` so that if it throws, only its own changes are undone and
   * the surrounding transaction goes on (one item of a batch failing alone).
   */
  savepoint<T>(fn: () => T): T {
    if (!this.inWrite) throw new Error('a savepoint needs an open write transaction');
    this.db.exec('SAVEPOINT item');
    try {
      const result = fn();
      this.db.exec('RELEASE item');
      return result;
    } catch (error) {
      this.db.exec('ROLLBACK TO item');
      this.db.exec('RELEASE item');
      throw error;
    }
  }

  schemaVersion(): number {
    const row = this.db.prepare('SELECT max(version) AS version FROM schema_migrations').get() as { version: number | null };
    return row.version ?? 0;
  }

  close(): void {
    if (this.db.isOpen) this.db.close();
  }

  private expectPragma(name: string, want: string | number): void {
    const row = this.db.prepare(`PRAGMA ${name}`).get() as Record<string, string | number>;
    const got = row[name];
    if (got !== want) throw new Error(`SQLite pragma ${name} is ${got}, expected ${want}`);
  }

  private migrate(): void {
    this.db.exec('CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL) STRICT');
    const current = this.schemaVersion();
    const latest = migrations.length;
    if (current > latest) {
      throw new Error(`the database is at schema version ${current}, newer than this master (${latest}); run a newer master`);
    }
    const record = this.db.prepare('INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)');
    for (let version = current + 1; version <= latest; version++) {
      this.write(() => {
        this.db.exec(migrations[version - 1]!);
        record.run(version, new Date().toISOString());
      });
    }
  }
}
