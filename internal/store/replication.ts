// Replication in SQLite's own terms. On the primary, what the master's connection commits, as the session extension
// records it (a changeset: every row inserted, updated or deleted, triggers' work included), in one session of every
// table (see ChangeSession), sealed outside any transaction into numbered changes of a generation: at every commit, or
// (async mode) at most every tenth of a second, a sealed change then being the net effect of the commits since the one
// before (a session compares what it saw first with what is there now: a change rolled back leaves nothing). A seal
// costs hundreds of microseconds whatever the transactions did, the session's recording a few a row; the primary
// writes nothing for it. A snapshot is sealed first and read in one read transaction opened at that moment, so it
// stands exactly at the last change, which its copy is told (replication_position). On a copy, each change applied in
// order, checked by its SHA-256 and its number, with the position it brings, in one transaction: a change that does
// not follow, does not match or does not apply cleanly is refused whole, and the copy is seeded anew.

import { createHash, randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import type { DatabaseSync, Session } from 'node:sqlite';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sqlite } from './connection.ts';
import type { Database } from './database.ts';
import type { Position, RecordedChange, Recorder } from './recording.ts';
import { derivations } from './derived.ts';

/** What a copy derives itself from the rows it is given (see Derivation.derivedOnCopies). */
const derivedOnCopies = derivations().filter((derivation) => derivation.derivedOnCopies);
const derivedTables = new Set(derivedOnCopies.flatMap((derivation) => derivation.derivedOnCopies!));
const derivingTriggers = new Set(derivedOnCopies.flatMap((derivation) => derivation.triggers.map((t) => t.name)));

/** Each master's own tables: recorded by a primary's session (they have keys), never applied on a copy. */
export const ownTables: ReadonlySet<string> = new Set(['replication_position', 'master_fence']);

/**
 * Tables no changeset carries: SQLite's own, where a copy stands and what fenced a master (each master's own to
 * write), and what a copy derives.
 */
export const notReplicated = (table: string) =>
  table.startsWith('sqlite_') || ownTables.has(table) || derivedTables.has(table);

/** The triggers a copy keeps: those that write what no changeset carries (see notReplicated). */
export const keptOnCopies = (trigger: string) => derivingTriggers.has(trigger);

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

/**
 * Where a promoted copy stands: in no primary's record but its own. Its follower, were it started toward another
 * master, asks from there (and stops, that master being of an older epoch); an election counts it a database of its
 * own, as it does one that never was a copy (no position).
 */
export const OWN_GENERATION = 'own';

export function markOwn(db: Pick<DatabaseSync, 'prepare'>): void {
  setPosition(db, { generation: OWN_GENERATION, seq: 0 });
}

const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

/**
 * What a connection commits, as one session of every table records it: `take` returns it as one changeset, between
 * transactions, and records afresh. What copies derive is not recorded but for FTS5's own tables (skipped where a copy
 * applies a change): a session passes over a table without a primary key, and the tables derived on copies have none
 * (migration 38). One session, where one a table cost every write 5-9 us more: SQLite's hook goes through each session
 * at every row changed.
 */
export class ChangeSession {
  private session: Session;

  constructor(private readonly db: DatabaseSync) {
    this.session = db.createSession();
  }

  take(): Uint8Array {
    if (this.db.isTransaction) throw new Error('changes are taken between transactions, never within one');
    const changeset = this.session.changeset();
    // A session's changeset holds all it saw since it began: one that saw something begins again.
    if (changeset.length > 0) {
      this.session.close();
      this.session = this.db.createSession();
    }
    return changeset;
  }

  close(): void {
    this.session.close();
  }
}

/**
 * Records what `db` commits from now on for standby masters (see Database.recordChanges), each change sealed told to
 * `onChange`; returns where the record starts.
 */
export function recordChanges(
  db: Database,
  onChange: (change: RecordedChange) => void,
  onGeneration: (start: Position) => void,
  sealAfterMs: () => number,
): Position {
  return db.recordChanges((connection) => new ChangeRecorder(connection, onChange), onGeneration, sealAfterMs);
}

/**
 * The primary's recorder, on the connection every write of the master goes through: `seal` outside any transaction
 * tells what was committed since the last seal as the next change. A generation starts with the recorder, and again
 * whenever the database is written other than through it but not told as a change (see `adopt`): a copy from before
 * must be seeded anew.
 */
export class ChangeRecorder implements Recorder {
  private session: ChangeSession;
  private position: Position;

  constructor(
    private readonly db: DatabaseSync,
    private readonly onChange: (change: RecordedChange) => void,
  ) {
    this.position = { generation: randomUUID(), seq: 0 };
    this.session = new ChangeSession(db);
  }

  get current(): Position {
    return { ...this.position };
  }

  /** Outside any transaction: what was committed since the last seal becomes the next change, and is told. */
  seal(): void {
    this.adopt(this.session.take());
  }

  /**
   * What another connection committed, recorded there as one changeset (an import's worker, with this connection's
   * writes held meanwhile, and sealed before): the next change.
   */
  adopt(changeset: Uint8Array): void {
    if (changeset.length === 0) return;
    this.position = { generation: this.position.generation, seq: this.position.seq + 1 };
    this.onChange({ ...this.position, at: Date.now(), sha256: sha256(changeset), changeset });
  }

  /** The database was written other than through this connection: what follows is a new generation. */
  newGeneration(): void {
    this.position = { generation: randomUUID(), seq: 0 };
    this.session.close();
    this.session = new ChangeSession(this.db);
  }

  close(): void {
    this.session.close();
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

/**
 * The database as `reader` reads it, in the read transaction it holds (see Database.openSnapshot), told that it stands
 * at `position`: a consistent copy however the database is written meanwhile. Ends the transaction and closes
 * `reader`.
 */
export async function snapshotOf(reader: DatabaseSync, position: Position): Promise<Buffer> {
  const dir = mkdtempSync(join(tmpdir(), 'portplane-snapshot-'));
  try {
    const copy = join(dir, 'master.db');
    await sqlite().backup(reader, copy);
    const db = new (sqlite().DatabaseSync)(copy);
    try {
      setPosition(db, position);
      // What fenced the master it was taken from is that master's: a copy starts unfenced.
      db.exec('DELETE FROM master_fence');
    } finally {
      db.close();
    }
    // Off the event loop: the copy is the size of the database.
    return await readFile(copy);
  } finally {
    if (reader.isOpen) reader.close();
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
      await writeFile(next, snapshot, { mode: 0o600 });
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

/**
 * The primaries' epoch, which each promotion raises (1 before the first); and the newer primary that fenced this
 * master, which a promotion past it forgets.
 */
export class EpochStore {
  private readonly getStmt;
  private readonly raiseStmt;
  private readonly electedStmt;
  private readonly fenceStmt;
  private readonly fencedStmt;
  private readonly outgrowStmt;

  constructor(db: Database) {
    this.electedStmt = db.prepare(`INSERT INTO master_epoch (id, epoch, promoted_at) VALUES (1, :epoch, :at)
      ON CONFLICT (id) DO UPDATE SET epoch = max(epoch, :epoch), promoted_at = :at RETURNING epoch`);
    this.getStmt = db.prepare('SELECT epoch FROM master_epoch WHERE id = 1');
    this.raiseStmt = db.prepare(`INSERT INTO master_epoch (id, epoch, promoted_at) VALUES (1, 2, :at)
      ON CONFLICT (id) DO UPDATE SET epoch = epoch + 1, promoted_at = :at RETURNING epoch`);
    this.fenceStmt = db.prepare(`INSERT INTO master_fence (id, epoch, primary_url, fenced_at)
      VALUES (1, :epoch, :primary, :at)
      ON CONFLICT (id) DO UPDATE SET epoch = excluded.epoch, primary_url = excluded.primary_url, fenced_at = :at
      WHERE excluded.epoch > epoch OR (excluded.epoch = epoch AND primary_url IS NULL)`);
    this.fencedStmt = db.prepare('SELECT epoch, primary_url FROM master_fence WHERE id = 1');
    this.outgrowStmt = db.prepare('DELETE FROM master_fence WHERE epoch <= :epoch');
  }

  current(): number {
    return Number((this.getStmt.get() as { epoch: number } | undefined)?.epoch ?? 1);
  }

  /** Inside a write: this master becomes the primary of the next epoch; returns it. */
  raise(at: string): number {
    return this.outgrow(Number((this.raiseStmt.get({ at }) as { epoch: number }).epoch));
  }

  /** Inside a write: this master was elected the leader of `epoch` (see election.ts); never lowers it. */
  elected(epoch: number, at: string): number {
    return this.outgrow(Number((this.electedStmt.get({ epoch, at }) as { epoch: number }).epoch));
  }

  /** Inside a write: a primary of `epoch` (at `primary`, if known) took over from this master. */
  fence(epoch: number, primary: string | null, at: string): void {
    this.fenceStmt.run({ epoch, primary, at });
  }

  /** The newer primary that fenced this master, kept across its restarts; null: none. */
  fencedBy(): { epoch: number; primary: string | null } | null {
    const row = this.fencedStmt.get() as { epoch: number; primary_url: string | null } | undefined;
    return row ? { epoch: Number(row.epoch), primary: row.primary_url } : null;
  }

  /** A fence of an epoch up to `epoch` is this master's past once it leads `epoch`. */
  private outgrow(epoch: number): number {
    this.outgrowStmt.run({ epoch });
    return epoch;
  }
}

/**
 * Where the database at `path` stands, read before anything opens it to write: its epoch, and where a copy stands in
 * its leader's record (a database of its own: the source); null when there is none.
 */
export function standingOnDisk(
  path: string,
): { epoch: number; generation: string | null; seq: number | null; source: boolean } | null {
  if (!existsSync(path)) return null;
  const db = new (sqlite().DatabaseSync)(path, { readOnly: true });
  try {
    const epoch = db.prepare('SELECT epoch FROM master_epoch WHERE id = 1').get() as { epoch: number } | undefined;
    const position = positionOf(db);
    const copy = position !== null && position.generation !== OWN_GENERATION;
    return {
      epoch: Number(epoch?.epoch ?? 1),
      generation: copy ? position.generation : null,
      seq: copy ? position.seq : null,
      source: !copy,
    };
  } catch {
    // A database from before replication (no such tables yet) is its own.
    return { epoch: 1, generation: null, seq: null, source: true };
  } finally {
    db.close();
  }
}
