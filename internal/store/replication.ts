// Replication in SQLite's own terms. On the primary, the changes of each transaction the master's connection commits,
// as the session extension records them (a changeset: every row inserted, updated or deleted, triggers' work
// included), numbered in order within a generation; the database holds where it stands (replication_position,
// written in the same transaction), so any consistent copy of it says which change follows. On a copy, each change
// applied in order, checked by its SHA-256 and its number, with the position it brings, in one transaction: a change
// that does not follow, does not match or does not apply cleanly is refused whole, and the copy is seeded anew.

import { createHash, randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { DatabaseSync, Session } from 'node:sqlite';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sqlite, type Database } from './database.ts';
import { copyDatabaseFile } from './files.ts';

/** One committed transaction of the primary. */
export interface RecordedChange {
  generation: string;
  seq: number;
  /** When it was committed, by the primary's clock (ms). */
  at: number;
  sha256: string;
  changeset: Uint8Array;
}

export interface Position {
  generation: string;
  seq: number;
}

/**
 * Tables no changeset carries: SQLite's own, and the name index's full-text tables, which only their module may write
 * (a copy keeps them with their triggers, from the rules it is given).
 */
export const notReplicated = (table: string) => table === 'sqlite_sequence' || table.startsWith('rule_names');

/** The triggers a copy keeps: those that write what no changeset carries (see notReplicated). */
export const keptOnCopies = (trigger: string) => trigger.startsWith('rule_names');

const positionSql = 'SELECT generation, seq FROM replication_position WHERE id = 1';

/** Where the database at `db` stands in its primary's record; null: nowhere yet (never recorded, or seeded). */
export function positionOf(db: Pick<DatabaseSync, 'prepare'>): Position | null {
  const row = db.prepare(positionSql).get() as Position | undefined;
  return row ? { generation: row.generation, seq: Number(row.seq) } : null;
}

function setPosition(db: Pick<DatabaseSync, 'prepare'>, position: Position): void {
  db.prepare(
    `INSERT INTO replication_position (id, generation, seq) VALUES (1, :generation, :seq)
      ON CONFLICT (id) DO UPDATE SET generation = excluded.generation, seq = excluded.seq`,
  ).run({ ...position });
}

const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

/**
 * The primary's recorder, on the connection every write of the master goes through. `seal` inside each transaction
 * before its COMMIT, then `committed` or `rolledBack`. A generation starts with the recorder, and again whenever the
 * database is written other than through it (an import's worker, a restore): a copy from before must be seeded anew.
 */
export class ChangeRecorder {
  private session: Session;
  private position: Position;
  private sealed: RecordedChange | null = null;

  constructor(
    private readonly db: DatabaseSync,
    private readonly onChange: (change: RecordedChange) => void,
  ) {
    this.position = { generation: randomUUID(), seq: 0 };
    this.session = db.createSession();
  }

  get current(): Position {
    return { ...this.position };
  }

  /**
   * Inside a write: writes where the record stands, so that the database says so before any other change (a copy
   * taken now knows which change follows it; the write is itself the generation's first change).
   */
  touch(): void {
    setPosition(this.db, this.position);
  }

  /** Inside the transaction, before it commits: what it changed, numbered, with the position written beside it. */
  seal(): void {
    const changeset = this.session.changeset();
    if (changeset.length === 0) return;
    const next = { generation: this.position.generation, seq: this.position.seq + 1 };
    setPosition(this.db, next);
    this.sealed = { ...next, at: Date.now(), sha256: sha256(changeset), changeset };
  }

  /** The transaction committed: its change is told, and the next transaction is recorded afresh. */
  committed(): void {
    const change = this.sealed;
    this.restart();
    if (!change) return;
    this.position = { generation: change.generation, seq: change.seq };
    this.onChange(change);
  }

  rolledBack(): void {
    this.restart();
  }

  /** The database was written other than through this connection: what follows is a new generation. */
  newGeneration(): void {
    this.position = { generation: randomUUID(), seq: 0 };
  }

  close(): void {
    this.session.close();
  }

  private restart(): void {
    this.sealed = null;
    this.session.close();
    this.session = this.db.createSession();
  }
}

/** Why a copy cannot take a change: it is seeded anew. */
export class ReplicaDiverged extends Error {}

/**
 * Applies `changes` to the copy at `db`, in order, each in a transaction of its own with the position it brings.
 * Throws ReplicaDiverged (having applied those before) for one that does not follow where the copy stands, whose
 * bytes are not those numbered, or that does not apply cleanly (a row missing, or there already).
 */
export function applyChanges(db: DatabaseSync, changes: readonly RecordedChange[]): void {
  for (const change of changes) {
    const at = positionOf(db);
    if (!at || at.generation !== change.generation || change.seq !== at.seq + 1)
      throw new ReplicaDiverged(
        `change ${change.generation}/${change.seq} does not follow ${at ? `${at.generation}/${at.seq}` : 'a seed'}`,
      );
    if (sha256(change.changeset) !== change.sha256)
      throw new ReplicaDiverged(`change ${change.seq} is not the bytes the primary numbered (SHA-256 differs)`);
    db.exec('BEGIN IMMEDIATE');
    try {
      const clean = db.applyChangeset(change.changeset, {
        filter: (table) => !notReplicated(table),
        // Any conflict means the copy is not what the primary changed: nothing of it is kept.
        onConflict: () => 2,
      });
      if (!clean) throw new ReplicaDiverged(`change ${change.seq} does not apply to this copy`);
      setPosition(db, { generation: change.generation, seq: change.seq });
      db.exec('COMMIT');
    } catch (error) {
      if (db.isTransaction) db.exec('ROLLBACK');
      if (error instanceof ReplicaDiverged) throw error;
      throw new ReplicaDiverged(`change ${change.seq} failed: ${(error as Error).message}`);
    }
  }
}

/**
 * Makes a seeded copy at `db` ready to take changes: the triggers that derive what changesets carry are dropped (the
 * primary's work arrives with them; run again here they would write it twice), those of what no changeset carries
 * kept.
 */
export function prepareCopy(db: DatabaseSync): void {
  const rows = db.prepare("SELECT name FROM sqlite_master WHERE type = 'trigger'").all() as { name: string }[];
  db.exec('BEGIN IMMEDIATE');
  try {
    for (const { name } of rows) if (!keptOnCopies(name)) db.exec(`DROP TRIGGER ${name}`);
    db.exec('COMMIT');
  } catch (error) {
    db.exec('ROLLBACK');
    throw error;
  }
}

/** A consistent copy of the database at `path` (taken while it is written), and where it stands. */
export async function snapshotOf(path: string): Promise<{ bytes: Buffer; position: Position | null }> {
  const dir = mkdtempSync(join(tmpdir(), 'portplane-snapshot-'));
  try {
    const copy = join(dir, 'master.db');
    await copyDatabaseFile(path, copy);
    const db = new (sqlite().DatabaseSync)(copy, { readOnly: true });
    let position: Position | null;
    try {
      position = positionOf(db);
    } finally {
      db.close();
    }
    return { bytes: readFileSync(copy), position };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * A copy's connection: without foreign key actions, since a change carries what the primary's did (a node's delete
 * comes with its rules' deletes; a cascade here would delete them first, and the change would not apply).
 */
const openCopy = (path: string) => new (sqlite().DatabaseSync)(path, { enableForeignKeyConstraints: false });

/** A copy of a primary's database at `path`, which takes its changes (see applyChanges). */
export class Replica {
  private constructor(private readonly db: DatabaseSync) {}

  /** Opens the copy at `path`; null when there is none, or it was never seeded. */
  static open(path: string): Replica | null {
    try {
      const db = openCopy(path);
      const replica = new Replica(db);
      if (replica.position()) return replica;
      db.close();
    } catch {
      // none, or not a database: to be seeded
    }
    return null;
  }

  /**
   * Replaces the copy at `path` with `snapshot` (a database file's bytes), made ready to take changes, through SQLite's
   * backup into the file in place: other connections to it (a standby serving reads) see the new copy, never a file
   * replaced under them. `current` is closed first.
   */
  static async seed(path: string, snapshot: Buffer, current: Replica | null): Promise<Replica> {
    const dir = mkdtempSync(join(tmpdir(), 'portplane-seed-'));
    try {
      const next = join(dir, 'master.db');
      writeFileSync(next, snapshot, { mode: 0o600 });
      const db = openCopy(next);
      try {
        if (!positionOf(db)) throw new ReplicaDiverged("the snapshot says nowhere in its primary's record");
        prepareCopy(db);
        current?.close();
        await sqlite().backup(db, path);
      } finally {
        db.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    const replica = new Replica(openCopy(path));
    replica.db.exec('PRAGMA journal_mode = WAL');
    return replica;
  }

  position(): Position | null {
    return positionOf(this.db);
  }

  /** The epoch the copy holds: its primary's, or its own once it was promoted (1 before any promotion). */
  epoch(): number {
    const row = this.db.prepare('SELECT epoch FROM master_epoch WHERE id = 1').get() as { epoch: number } | undefined;
    return Number(row?.epoch ?? 1);
  }

  /** See applyChanges. Throws ReplicaDiverged. */
  apply(changes: readonly RecordedChange[]): void {
    applyChanges(this.db, changes);
  }

  close(): void {
    this.db.close();
  }
}

/** The primaries' epoch, which each promotion raises (1 before the first). */
export class EpochStore {
  private readonly getStmt;
  private readonly raiseStmt;

  constructor(db: Database) {
    this.getStmt = db.prepare('SELECT epoch FROM master_epoch WHERE id = 1');
    this.raiseStmt = db.prepare(`INSERT INTO master_epoch (id, epoch, promoted_at) VALUES (1, 2, :at)
      ON CONFLICT (id) DO UPDATE SET epoch = epoch + 1, promoted_at = :at RETURNING epoch`);
  }

  current(): number {
    return Number((this.getStmt.get() as { epoch: number } | undefined)?.epoch ?? 1);
  }

  /** Inside a write: this master becomes the primary of the next epoch; returns it. */
  raise(at: string): number {
    return Number((this.raiseStmt.get({ at }) as { epoch: number }).epoch);
  }
}
