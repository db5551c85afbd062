// The SQLite connection of a process: pragmas set and checked at open, numbered migrations,
// and `write(fn)` with group commit: the writes of one event-loop turn share one transaction
// (each in a savepoint of its own) and one fsync, and whoever answers for a write waits for
// `committed()` first, so nothing is acknowledged before it is durable. `longWrite` is the
// one transaction that spans event-loop turns (a batch); while it runs, reads go to a
// second, read-only connection that sees only what is committed, and other writes wait, as
// they do during `holdWrites`, while another connection writes (an import's worker thread).

import { statfsSync } from 'node:fs';
import { dirname } from 'node:path';
import type { DatabaseSync, SQLInputValue, StatementResultingChanges, StatementSync } from 'node:sqlite';
import { formatTime } from '../schema/schema.ts';
import { DomainError } from '../errors/errors.ts';
import {
  INCREMENTAL,
  inTransaction,
  openConnection,
  pragmaOf,
  schemaVersion,
  sqlite,
  type ConnectionOptions,
  type Derivations,
} from './connection.ts';
import type { Position, Recorder } from './recording.ts';
import { CommitFailed, isDiskFull, WritesBusy } from '../errors/storage.ts';

/** A prepared statement. One that changes data runs only inside `write()`. */
export interface Statement {
  run(...params: SQLInputValue[] | [Record<string, SQLInputValue>]): StatementResultingChanges;
  get(...params: SQLInputValue[] | [Record<string, SQLInputValue>]): Record<string, SQLOutputValue> | undefined;
  all(...params: SQLInputValue[] | [Record<string, SQLInputValue>]): Record<string, SQLOutputValue>[];
}
type SQLOutputValue = null | number | bigint | string | Uint8Array;

const CHANGES_DATA = /^\s*(INSERT|UPDATE|DELETE|REPLACE)\b/i;

interface Batch {
  done: Promise<void>;
  resolve: () => void;
  reject: (error: Error) => void;
  after: (() => void)[];
}

/** A savepoint's three statements. */
interface Unit {
  begin: () => void;
  release: () => void;
  undo: () => void;
}

/** Writes held back (a long write, or another connection writing): what waits for the end. */
interface Hold {
  released: Promise<void>;
  release: () => void;
  after: (() => void)[];
  deferred: (() => void)[];
}

/** The most rows one statement of `insertRows` inserts. */
export const ROWS_PER_INSERT = 64;

/** Pages in the log (64 MiB) past which a connection whose checkpoints are done elsewhere does one itself. */
const LOG_PAGES_ALONE = 16_384;

/** Past this, a long write's step yields the event loop (see `longWrite`). */
const STEP_MS = 4;

/** Free bytes on the data dir's disk past which a refusal for a full disk ends (see `wroteThrough`). */
const ROOM_TO_RESUME = 4 * 1024 * 1024;

/** Whether `dir`'s file system has room to write again; where it cannot be asked, the commit that went through says. */
function hasRoom(dir: string): boolean {
  try {
    const disk = statfsSync(dir);
    return disk.bavail * disk.bsize >= ROOM_TO_RESUME;
  } catch {
    return true;
  }
}

export class Database {
  private readonly db: DatabaseSync;
  private inWrite = false;
  private changesRun = 0;
  private batch: Batch | null = null;
  private hold: Hold | null = null;
  /** Writes waiting in line for the hold in progress to end, or let through by its end and not yet made. */
  private waiting = 0;
  private readOnly: DatabaseSync | null = null;
  private readonly failureListeners: (() => void)[] = [];
  private readonly rowListeners = new Map<string, ((id: number) => void)[]>();
  /** Why this connection writes nothing: it reads a standby's copy, which its follower alone changes (see copyOf). */
  private copyOf: string | null = null;
  /** How many onTableChange listeners there are, which name their triggers. */
  private tableListeners = 0;
  /** What records each commit's changes for a standby master, once one asked (see recordChanges). */
  private recorder: Recorder | null = null;
  private sealAfterMs: () => number = () => 0;
  private onGeneration: (start: Position) => void = () => undefined;
  private sealTimer: NodeJS.Timeout | undefined;
  private readonly functions: [string, (...args: SQLOutputValue[]) => SQLInputValue][] = [];
  private readonly elsewhereListeners: (() => void)[] = [];
  private readonly commitListeners: ((seconds: number) => void)[] = [];
  /** Every statement `prepare` was asked for, by its SQL (asked again, it is one), prepared at its first use. */
  private readonly declared = new Map<string, () => StatementSync>();
  private logCopier: (() => Promise<void>) | null = null;
  private callbackFailed: (error: unknown) => void = (error) => console.error('an after-commit callback failed', error);

  // Savepoints prepared once rather than parsed at each use: every write runs one, and a bulk write
  // redone item by item one per item.
  private readonly writeUnit: Unit;
  private readonly itemUnit: Unit;

  /**
   * Opens `path` (see openConnection: the schema brought up to date, or with `migrate: false` only joined), with
   * `derived` installed there and again when a standby's copy becomes the primary's database (see takeOver). With
   * `autoCheckpoint: false` its commits leave what they wrote in the write-ahead log, for `checkpoint()` to copy into
   * the database file. `time` is the master's clock as stored, which triggers stamp what they write with.
   */
  constructor(
    readonly path: string,
    private readonly derived: Derivations,
    options: Partial<ConnectionOptions> = {},
  ) {
    this.db = openConnection(path, { ...options, time: options.time ?? (() => formatTime(Date.now())) }, derived);
    this.writeUnit = this.unit('write');
    this.itemUnit = this.unit('item');
  }

  private unit(name: string): Unit {
    const statement = (sql: string) => {
      const prepared = this.db.prepare(sql);
      return () => void prepared.run();
    };
    return {
      begin: statement(`SAVEPOINT ${name}`),
      release: statement(`RELEASE ${name}`),
      undo: statement(`ROLLBACK TO ${name}`),
    };
  }

  /** Runs `fn` within the savepoint `unit`: if it throws, what it did is undone and the error passed on. */
  private within<T>(unit: Unit, fn: () => T): T {
    unit.begin();
    try {
      const result = fn();
      if (result instanceof Promise) throw new Error('a write transaction must be synchronous');
      unit.release();
      return result;
    } catch (error) {
      if (this.db.isTransaction) {
        unit.undo();
        unit.release();
      } else this.transactionUndone(error);
      if (isDiskFull(error)) this.refusedWrite();
      throw error;
    }
  }

  /**
   * SQLite undid the whole transaction itself, as it may when a statement meets a full disk, an I/O error or no
   * memory: the open batch's other writes are gone with it, so its waiters are told at once, and a write later in
   * this turn opens a new batch rather than running outside any transaction. A long write's own catch sees the
   * transaction gone.
   */
  private transactionUndone(error: unknown): void {
    const batch = this.batch;
    if (!batch) return;
    this.batch = null;
    for (const listener of this.failureListeners) listener();
    batch.reject(new CommitFailed(`the transaction was undone: ${(error as Error).message}`, { cause: error }));
  }

  /**
   * Why the last write was refused by the disk (SQLITE_FULL), until the disk has room again; null while writes go
   * through. Health says so: reads go on, every write answers 507.
   */
  writesRefused: { since: number; reason: string } | null = null;

  /** SQLite's words stay in the log: health is public, and says only what an operator acts on. */
  private refusedWrite(): void {
    this.writesRefused ??= { since: Date.now(), reason: 'the disk is full' };
  }

  /**
   * A commit went through. On a full disk a small one still fits in pages SQLite already holds (the log it reuses
   * after a checkpoint, free pages) while a rule's write is refused: only a commit with room left on the disk ends
   * the refusal, or health would flap between full and ok at every roll-up.
   */
  private wroteThrough(): void {
    if (this.writesRefused && (this.path === ':memory:' || hasRoom(dirname(this.path)))) this.writesRefused = null;
  }

  /**
   * A statement of `sql`. If it changes data, running it outside `write()` throws: every
   * change goes through the one write path, in a transaction, with its audit entry. One that
   * reads runs, while a long write is in progress, on the read-only connection, unless it
   * is part of a write.
   */
  prepare(sql: string): Statement {
    // Prepared at its first use: a start (a master's, a worker's) prepares only what it runs, not the store's 300.
    let prepared: StatementSync | undefined;
    const statement = () => (prepared ??= this.db.prepare(sql));
    this.declared.set(sql, statement);
    if (!CHANGES_DATA.test(sql)) {
      let committedOnly: Statement | undefined;
      const pick = (): Statement =>
        this.hold && !this.inWrite && this.db.isTransaction
          ? (committedOnly ??= this.reader().prepare(sql) as unknown as Statement)
          : (statement() as unknown as Statement);
      return {
        run: (...params) => pick().run(...params),
        get: (...params) => pick().get(...params),
        all: (...params) => pick().all(...params),
      };
    }
    const guard = () => {
      if (!this.inWrite) throw new Error(`a change outside write(): ${sql.trim().slice(0, 60)}`);
      this.changesRun++;
    };
    return {
      run: (...params) => (guard(), statement().run(...(params as SQLInputValue[]))),
      get: (...params) => (
        guard(),
        statement().get(...(params as SQLInputValue[])) as Record<string, SQLOutputValue> | undefined
      ),
      all: (...params) => (
        guard(),
        statement().all(...(params as SQLInputValue[])) as Record<string, SQLOutputValue>[]
      ),
    };
  }

  /** Prepares every statement declared so far: SQL that does not fit the schema fails here, not at its first use. */
  prepareAll(): void {
    for (const statement of this.declared.values()) statement();
  }

  /**
   * An INSERT of many rows: `sql` ends in VALUES, and each row has `width` values. Rows go in
   * statements of up to ROWS_PER_INSERT rows, each size prepared once: an import's 100,000
   * rules spent half as long in SQLite as with a statement per row, each statement's call
   * costing more than its row. Returns the rowids in order (consecutive within a statement).
   */
  insertRows(sql: string, width: number): (rows: readonly SQLInputValue[][]) => number[] {
    const bySize = new Map<number, Statement>();
    const tuple = `(${Array.from({ length: width }, () => '?').join(', ')})`;
    return (rows) => {
      const ids: number[] = [];
      for (let start = 0; start < rows.length; start += ROWS_PER_INSERT) {
        const count = Math.min(ROWS_PER_INSERT, rows.length - start);
        let statement = bySize.get(count);
        if (!statement) {
          statement = this.prepare(`${sql} ${Array.from({ length: count }, () => tuple).join(', ')}`);
          bySize.set(count, statement);
        }
        // A single row (every write but a bulk one) is bound as it is.
        let params = rows[start]!;
        if (count > 1) {
          params = [];
          for (let row = start; row < start + count; row++) for (const value of rows[row]!) params.push(value);
        }
        const last = Number(statement.run(...params).lastInsertRowid);
        for (let i = count - 1; i >= 0; i--) ids.push(last - i);
      }
      return ids;
    };
  }

  /**
   * Runs `fn` in the open batch transaction (starting one, committed at the end of this
   * event-loop turn) and returns its result; if `fn` throws, only its own changes are undone.
   * `fn` must be synchronous: awaiting inside would let other requests' statements run
   * between its statements. Callers that answer for the write await `committed()` first.
   */
  write<T>(fn: () => T): T {
    // A write inside a write is a unit of its own: its failure undoes only itself.
    if (this.inWrite) return this.savepoint(fn);
    this.refuseOnCopy();
    if (this.hold) throw new Error('a write while a long write is in progress: wait for writable() first');
    if (!this.batch) this.openBatch();
    this.inWrite = true;
    try {
      return this.within(this.writeUnit, fn);
    } finally {
      this.inWrite = false;
    }
  }

  /**
   * `write(fn)` in its turn, resolving with `fn`'s result once it is committed. While another connection's long write
   * holds writes back, it waits in line for the end, at most `maxWaitMs` (then it rejects with WritesBusy, having
   * written nothing); writes in line go before the next long write starts. Rejects with CommitFailed when the
   * transaction it joined could not be committed.
   */
  async writeInTurn<T>(fn: () => T, maxWaitMs = Infinity): Promise<T> {
    if (this.hold) {
      this.waiting++;
      const started = performance.now();
      try {
        while (this.hold) {
          const left = started + maxWaitMs - performance.now();
          if (left <= 0) throw new WritesBusy(performance.now() - started);
          await this.endOfHold(left);
        }
      } finally {
        this.waiting--;
      }
    }
    // No await between the last look at the hold and the write: nothing can start one in between.
    const result = this.write(fn);
    await this.committed();
    return result;
  }

  /**
   * Runs `fn` as a transaction of its own, committed at once without waiting for the disk: a power cut may lose it
   * (whole, never half of it), and it costs the event loop no fsync. For work the master redoes by itself when it is
   * lost (the history's roll-ups), never for a write anyone is told of: it waits for the open batch's commit first,
   * and nothing else can join it. The next durable commit makes it durable too (one log, synced in order).
   */
  async writeRedoable<T>(fn: () => T): Promise<T> {
    this.refuseOnCopy();
    await this.betweenWrites();
    this.db.exec('PRAGMA synchronous = NORMAL; BEGIN IMMEDIATE');
    this.inWrite = true;
    try {
      const result = this.within(this.writeUnit, fn);
      this.db.exec('COMMIT');
      this.changesCommitted();
      this.wroteThrough();
      return result;
    } catch (error) {
      if (this.db.isTransaction) this.db.exec('ROLLBACK');
      if (isDiskFull(error)) this.refusedWrite();
      throw error;
    } finally {
      this.inWrite = false;
      this.db.exec('PRAGMA synchronous = FULL');
    }
  }

  /** Resolves when the hold in progress ends, or after `ms`, whichever comes first. */
  private endOfHold(ms: number): Promise<void> {
    if (ms === Infinity) return this.hold!.released;
    let timer: NodeJS.Timeout | undefined;
    return Promise.race([
      this.hold!.released,
      new Promise<void>((resolve) => (timer = setTimeout(resolve, ms))),
    ]).finally(() => clearTimeout(timer));
  }

  /** Resolves once every write made so far is committed; rejects if their commit failed. */
  committed(): Promise<void> {
    return this.batch?.done ?? Promise.resolve();
  }

  /** The commit of the writes made so far, if one is still to come: null when everything written is committed. */
  pendingCommit(): Promise<void> | null {
    return this.batch?.done ?? null;
  }

  /** Runs `fn` after the writes made so far are committed (at once if there are none). */
  afterCommit(fn: () => void): void {
    if (this.hold && this.inWrite) this.hold.after.push(fn);
    else if (this.batch) this.batch.after.push(fn);
    else fn();
  }

  /**
   * Calls `fn` with the id of each row of `table` that a statement of this connection updates
   * or deletes, as it happens (so also for a change later rolled back), whichever statement
   * it is: for caches of rows, which this keeps from missing a change.
   */
  onRowChange(table: string, fn: (id: number) => void): void {
    let listeners = this.rowListeners.get(table);
    if (!listeners) {
      if (!/^[a-z_]+$/.test(table)) throw new Error(`not a table name: ${table}`);
      const all: ((id: number) => void)[] = [];
      const name = `row_changed_${table}`;
      this.db.function(name, (id) => {
        for (const listener of all) listener(Number(id));
        return null;
      });
      this.db.exec(`CREATE TEMP TRIGGER ${name}_update AFTER UPDATE ON main.${table} BEGIN SELECT ${name}(OLD.id); END;
        CREATE TEMP TRIGGER ${name}_delete AFTER DELETE ON main.${table} BEGIN SELECT ${name}(OLD.id); END;`);
      this.rowListeners.set(table, all);
      listeners = all;
    }
    listeners.push(fn);
  }

  /**
   * Calls `fn` with the value of `column` of each row of `table` that a statement of this connection inserts or
   * deletes, and with both values of one whose `column` it sets: for caches of what rows count by that key.
   */
  onKeyChange(table: string, column: string, fn: (key: number) => void): void {
    const name = `key_changed_${table}_${column}`;
    let listeners = this.rowListeners.get(name);
    if (!listeners) {
      if (!/^[a-z_]+$/.test(table) || !/^[a-z_]+$/.test(column)) throw new Error(`not a name: ${table}.${column}`);
      const all: ((key: number) => void)[] = [];
      this.db.function(name, (key) => {
        if (typeof key === 'number' || typeof key === 'bigint') for (const listener of all) listener(Number(key));
        return null;
      });
      this.db.exec(`CREATE TEMP TRIGGER ${name}_insert AFTER INSERT ON main.${table}
          BEGIN SELECT ${name}(NEW.${column}); END;
        CREATE TEMP TRIGGER ${name}_delete AFTER DELETE ON main.${table} BEGIN SELECT ${name}(OLD.${column}); END;
        CREATE TEMP TRIGGER ${name}_update AFTER UPDATE OF ${column} ON main.${table}
          WHEN OLD.${column} IS NOT NEW.${column} BEGIN SELECT ${name}(OLD.${column}), ${name}(NEW.${column}); END;`);
      this.rowListeners.set(name, all);
      listeners = all;
    }
    listeners.push(fn);
  }

  /**
   * Records what this connection commits from now on, for a standby master, with the recorder `start` makes on it (see
   * ChangeRecorder), sealed `sealAfterMs()` after a commit (0: at once, before the commit's writers are answered);
   * returns where the record starts. Writes through another connection start a new generation, told to `onGeneration`,
   * unless they come as a change of their own (see holdWrites).
   */
  recordChanges(
    start: (db: DatabaseSync) => Recorder,
    onGeneration: (start: Position) => void,
    sealAfterMs: () => number,
  ): Position {
    if (!this.recorder) {
      this.recorder = start(this.db);
      this.sealAfterMs = sealAfterMs;
      this.onGeneration = onGeneration;
    }
    return this.recorder.current;
  }

  /** Whether what is committed is recorded for standbys (see recordChanges). */
  get recording(): boolean {
    return this.recorder !== null;
  }

  /**
   * On a connection of a job's own (a worker's): records what it commits to the replicated tables, which `take` returns
   * as one changeset, for the master's connection to tell as a change of its own (see holdWrites).
   */
  recordJob<T>(start: (db: DatabaseSync) => T): T {
    return start(this.db);
  }

  /**
   * A read transaction on a connection of its own, opened at a moment between this connection's transactions, and
   * where the record of changes stood then (everything committed sealed first): a snapshot a standby can follow on
   * from (see snapshotOf). Waits for a long write in progress, and the open batch, to end. Needs recordChanges first.
   */
  async openSnapshot(): Promise<{ reader: DatabaseSync; position: Position }> {
    await this.betweenWrites();
    if (!this.recorder) throw new Error('no record of changes to take a snapshot in');
    this.sealChanges();
    const reader = new (sqlite().DatabaseSync)(this.path, { readOnly: true });
    reader.exec('BEGIN');
    // The read transaction begins with its first read: from here it sees the database as it is now.
    reader.prepare('SELECT count(*) FROM schema_migrations').get();
    return { reader, position: this.recorder.current };
  }

  /** Between transactions: seals what was committed since the last change at once, rather than soon. */
  sealChanges(): void {
    clearTimeout(this.sealTimer);
    this.sealTimer = undefined;
    this.recorder?.seal();
  }

  /**
   * After a commit: its changes are sealed now, or soon (see recordChanges). Never throws: the commit went through, and
   * its writers are told so whatever a seal meets (reported as a failed callback; what it held goes with the next).
   */
  private changesCommitted(): void {
    const recorder = this.recorder;
    if (!recorder) return;
    const seal = () => {
      this.sealTimer = undefined;
      // A transaction open now (a long write's) seals at its own commit.
      if (!this.db.isTransaction) recorder.seal();
    };
    const ms = this.sealAfterMs();
    if (ms === 0) {
      clearTimeout(this.sealTimer);
      return this.runCallback(seal);
    }
    this.sealTimer ??= setTimeout(() => this.runCallback(seal), ms);
  }

  /**
   * Calls `fn` after any row of `table` is inserted, updated or deleted by this connection (or the connection is
   * written elsewhere): for what a cache renders from a small table as a whole.
   */
  onTableChange(table: string, fn: () => void): void {
    if (!/^[a-z_]+$/.test(table)) throw new Error(`not a table name: ${table}`);
    const name = `table_changed_${table}_${this.tableListeners++}`;
    this.db.function(name, () => {
      fn();
      return null;
    });
    this.db.exec(
      ['INSERT', 'UPDATE', 'DELETE']
        .map(
          (on) =>
            `CREATE TEMP TRIGGER ${name}_${on.toLowerCase()} AFTER ${on} ON main.${table} BEGIN SELECT ${name}(); END;`,
        )
        .join('\n'),
    );
    this.onWrittenElsewhere(fn);
  }

  /**
   * Makes `fn` callable from this connection's SQL as `name` (and from the read-only connection's): for what a row
   * shows that lives in memory rather than in the database, such as whether a node's agent is linked now.
   */
  defineFunction(name: string, fn: (...args: SQLOutputValue[]) => SQLInputValue): void {
    this.functions.push([name, fn]);
    this.db.function(name, { directOnly: true }, fn);
    this.readOnly?.function(name, { directOnly: true }, fn);
  }

  /**
   * How many times a statement that may change data has run on this connection: unchanged across a piece of
   * work means it wrote nothing (so a failure in it has nothing to undo).
   */
  get changeStatementsRun(): number {
    return this.changesRun;
  }

  /**
   * True when this connection holds no uncommitted change: what a read returns now is committed. Writes held for
   * another connection (`holdWrites`) leave it so: what that one has not committed does not show here.
   */
  get settled(): boolean {
    return !this.db.isTransaction;
  }

  /** True while writes are held (a long write, or `holdWrites`): `write()` throws, reads see the last commit. */
  get writesHeld(): boolean {
    return this.hold !== null;
  }

  /** Resolves at a moment with no long write in progress and no batch open: this connection in no transaction. */
  private async betweenWrites(): Promise<void> {
    while (this.hold || this.batch) {
      if (this.hold) await this.writable();
      else await this.batch!.done.catch(() => undefined);
    }
  }

  /** Resolves when `write()` may be called: no long write is in progress. */
  async writable(): Promise<void> {
    while (this.hold) await this.hold.released;
  }

  /** Runs `fn` now, or in order with the others deferred when the long write in progress ends. */
  whenWritable(fn: () => void): void {
    if (this.hold) this.hold.deferred.push(fn);
    else this.runCallback(fn);
  }

  /**
   * Holds this connection's writes back while `fn` writes through a connection of its own
   * (an import in a worker thread), as `longWrite` does, committing the open batch first.
   * Reads meanwhile see what is committed. When it ends, however it ends, what listens to
   * `onWrittenElsewhere` is told, since this connection's triggers saw nothing of it. The
   * hold ends then too, or if `fn` succeeds and `until` is given, once the promise `until`
   * makes of its result settles: the other connection's work after its commit (an import's
   * worker copying its pages from the log into the database file) is not taken over by
   * this connection's next commit, on the event loop. What `changesOf` finds in the result
   * (the other connection's record of what it committed, see recordJob) is told to standbys
   * as the change after this connection's last; without it, they seed anew.
   */
  async holdWrites<T>(
    fn: () => Promise<T>,
    until?: (result: T) => Promise<unknown>,
    changesOf?: (result: T) => Uint8Array | null,
  ): Promise<T> {
    this.refuseOnCopy();
    const hold = await this.takeHold();
    // What this connection committed goes before what the other one will.
    this.sealChanges();
    let ended: Promise<unknown> | undefined;
    let changes: Uint8Array | null = null;
    try {
      const result = await fn();
      changes = changesOf?.(result) ?? null;
      ended = until?.(result);
      return result;
    } finally {
      this.changedElsewhere(changes);
      if (ended) void ended.catch((error) => this.callbackFailed(error)).finally(() => this.releaseHold(hold, false));
      else this.releaseHold(hold, false);
    }
  }

  /**
   * Makes this connection a reader of a standby's copy of `primary`'s database (null: a writer again): every write
   * through it is refused, whoever asks, so that nothing but the primary's changes reaches the copy.
   */
  readCopyOf(primary: string | null): void {
    this.copyOf = primary;
  }

  private refuseOnCopy(): void {
    if (this.copyOf !== null)
      throw new DomainError('read_only', `this master is a standby of ${this.copyOf}: it writes nothing`, {
        data: { primary: this.copyOf },
      });
  }

  /**
   * A standby's copy becomes the primary's database: the triggers its copy went without are installed again, and
   * what they keep rebuilt from the tables, in one transaction; it stands in its own record from now on (see markOwn).
   */
  takeOver(markOwn: (db: DatabaseSync) => void): void {
    inTransaction(this.db, () => {
      this.derived.install(this.db);
      markOwn(this.db);
    });
    this.changedElsewhere();
  }

  /**
   * Tells what listens to `onWrittenElsewhere` that another connection changed rows (a standby's copy applying), and
   * standbys: `changes`, that connection's record of them, or (without it) a new generation to seed anew from.
   */
  changedElsewhere(changes: Uint8Array | null = null): void {
    const recorder = this.recorder;
    if (recorder)
      this.runCallback(() => {
        if (changes) return recorder.adopt(changes);
        recorder.newGeneration();
        this.onGeneration(recorder.current);
      });
    for (const listener of this.elsewhereListeners) this.runCallback(listener);
  }

  /** Called after another connection may have changed any row (see `holdWrites`), for caches of rows. */
  onWrittenElsewhere(fn: () => void): void {
    this.elsewhereListeners.push(fn);
  }

  /**
   * Waits for the long write in progress, the writes in line behind it and the open batch to end, then holds writes
   * back: a live write waits for at most one long write, however many are queued.
   */
  private async takeHold(): Promise<Hold> {
    while (this.hold || this.batch || this.waiting > 0) {
      if (this.hold) await this.hold.released;
      else if (this.batch) await this.batch.done.catch(() => undefined);
      // Writes in line were let through by the hold's end and are about to be made, in this event-loop turn.
      else await new Promise((resolve) => setImmediate(resolve));
    }
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const hold: Hold = { released, release, after: [], deferred: [] };
    this.hold = hold;
    return hold;
  }

  /** Lets writes go on: after-commit work first (if it committed), then what waited, in order. */
  private releaseHold(hold: Hold, committed: boolean): void {
    this.inWrite = false;
    this.hold = null;
    hold.release();
    if (committed) for (const after of hold.after) this.runCallback(after);
    for (const deferred of hold.deferred) this.whenWritable(deferred);
  }

  /**
   * Runs `fn` as one transaction that spans event-loop turns, for bulk work that would
   * otherwise hold the process: `fn` calls `step()` between items, which returns a promise
   * to await (it yields the event loop) once the current turn has run STEP_MS, else null.
   * Meanwhile other requests are served: reads see the last commit (never part of this
   * transaction), and writes wait for `writable()`. Committed when `fn` resolves, or with
   * `commit: false` (a dry run) rolled back; rolled back if it throws. The batch open when
   * it starts is committed first. `fn` awaits nothing but what `step()` returns: anything
   * else would let other code run inside its transaction. `restart()` undoes all it did so
   * far and goes on in a new transaction, still holding other writes back.
   */
  async longWrite<T>(
    fn: (step: () => Promise<void> | null, restart: () => void) => Promise<T>,
    { commit = true } = {},
  ): Promise<T> {
    this.refuseOnCopy();
    const hold = await this.takeHold();
    let turnStarted = performance.now();
    const yieldTurn = async () => {
      this.inWrite = false;
      await new Promise((resolve) => setImmediate(resolve));
      if (!this.db.isOpen || !this.db.isTransaction) throw new Error('the database closed during a long write');
      this.inWrite = true;
      turnStarted = performance.now();
    };
    const step = () => (performance.now() - turnStarted < STEP_MS ? null : yieldTurn());
    const restart = () => {
      if (this.hold !== hold || !this.inWrite) throw new Error('restart() outside its long write');
      this.db.exec('ROLLBACK');
      hold.after.length = 0;
      this.db.exec('BEGIN IMMEDIATE');
    };
    let committed = false;
    try {
      this.db.exec('BEGIN IMMEDIATE');
      this.inWrite = true;
      const result = await fn(step, restart);
      if (commit) {
        this.commitLong();
        committed = true;
      } else this.db.exec('ROLLBACK');
      return result;
    } catch (error) {
      if (this.db.isOpen && this.db.isTransaction) this.db.exec('ROLLBACK');
      throw error;
    } finally {
      // A dry run's after-commit work has nothing to follow.
      this.releaseHold(hold, committed);
    }
  }

  private commitLong(): void {
    const started = performance.now();
    try {
      this.db.exec('COMMIT');
    } catch (error) {
      for (const listener of this.failureListeners) listener();
      throw error;
    }
    this.changesCommitted();
    this.committedIn((performance.now() - started) / 1000);
  }

  private committedIn(seconds: number): void {
    this.wroteThrough();
    for (const listener of this.commitListeners) this.runCallback(() => listener(seconds));
  }

  /** The read-only connection, opened at the first read during a long write. */
  private reader(): DatabaseSync {
    if (this.path === ':memory:') return this.db;
    if (!this.readOnly) {
      const { DatabaseSync } = sqlite();
      this.readOnly = new DatabaseSync(this.path, { timeout: 5000 });
      this.readOnly.exec('PRAGMA query_only = ON; PRAGMA temp_store = MEMORY;');
      for (const [name, fn] of this.functions) this.readOnly.function(name, { directOnly: true }, fn);
    }
    return this.readOnly;
  }

  private runCallback(fn: () => void): void {
    try {
      fn();
    } catch (error) {
      this.callbackFailed(error);
    }
  }

  /** Called with what an afterCommit callback threw: it is reported, and the other callbacks still run. */
  onCallbackError(fn: (error: unknown) => void): void {
    this.callbackFailed = fn;
  }

  /** Called after each commit of this connection with how long it (and its fsync) took, in seconds. */
  onCommitted(fn: (seconds: number) => void): void {
    this.commitListeners.push(fn);
  }

  /** Called when a commit fails, so in-memory copies of the data can be reloaded. */
  onCommitFailure(fn: () => void): void {
    this.failureListeners.push(fn);
  }

  private openBatch(): void {
    let resolve!: () => void;
    let reject!: (error: Error) => void;
    const done = new Promise<void>((res, rej) => ((resolve = res), (reject = rej)));
    // A failed commit is reported to every waiter; an unobserved one must not crash the process.
    done.catch(() => undefined);
    this.batch = { done, resolve, reject, after: [] };
    this.db.exec('BEGIN IMMEDIATE');
    setImmediate(() => this.commit());
  }

  private commit(): void {
    const batch = this.batch;
    if (!batch) return;
    this.batch = null;
    const started = performance.now();
    try {
      this.db.exec('COMMIT');
      this.changesCommitted();
      this.committedIn((performance.now() - started) / 1000);
    } catch (error) {
      if (this.db.isTransaction) this.db.exec('ROLLBACK');
      if (isDiskFull(error)) this.refusedWrite();
      for (const listener of this.failureListeners) listener();
      batch.reject(new CommitFailed(`the commit failed: ${(error as Error).message}`, { cause: error }));
      return;
    }
    batch.resolve();
    for (const fn of batch.after) this.runCallback(fn);
  }

  /**
   * Inside `write`: runs `fn` so that if it throws, only its own changes are undone and
   * the surrounding transaction goes on (one item of a batch failing alone).
   */
  savepoint<T>(fn: () => T): T {
    if (!this.inWrite) throw new Error('a savepoint needs an open write transaction');
    return this.within(this.itemUnit, fn);
  }

  /**
   * Runs `fn`'s reads in one read transaction, so that they see one moment however long they take (what others commit
   * meanwhile is not seen). For a connection of its own (a worker's): it throws while a write is open on this one.
   */
  snapshot<T>(fn: () => T): T {
    if (this.inWrite || this.batch || this.hold) throw new Error('a snapshot on a connection with a write open');
    this.db.exec('BEGIN DEFERRED');
    try {
      return fn();
    } finally {
      this.db.exec('COMMIT');
    }
  }

  schemaVersion(): number {
    return schemaVersion(this.db);
  }

  /**
   * Copies all the write-ahead log holds into the database file: the work a commit does itself past a thousand pages in
   * the log, unless the connection opened with `autoCheckpoint: false`. It waits (up to the busy timeout) for readers
   * still on an older snapshot, which take a statement's time: a passive checkpoint stopped at the first such reader
   * and left the rest of an import in the log, for the master's next commit to copy on its event loop.
   */
  checkpoint(): void {
    this.db.exec('PRAGMA wal_checkpoint(FULL)');
  }

  /**
   * Copies what the log holds into the database file as far as no reader's snapshot needs it, waiting for nothing and
   * holding no writer back: for a connection whose only work this is (the master's checkpoint thread).
   */
  copyLog(): void {
    this.db.exec('PRAGMA wal_checkpoint(PASSIVE)');
  }

  /**
   * Hands copying the log into the database file to `copy` (another connection's `copyLog`, resolving once done), or
   * with null back to this connection's commits. While another copies it, this connection's commits do it only once
   * the log is past LOG_PAGES_ALONE pages, as a safety valve should the other fall behind.
   */
  copyLogWith(copy: (() => Promise<void>) | null): void {
    this.logCopier = copy;
    this.db.exec(`PRAGMA wal_autocheckpoint = ${copy ? LOG_PAGES_ALONE : 1000}`);
  }

  /**
   * Resolves once the log has been copied into the database file as far as it can be. The log starts over only when
   * a write begins with all of it copied: a writer that writes much and never pauses (the roll-up) waits on this now
   * and then, or the log grows for as long as it writes (857 MiB in a roll-up of 12,000 steps).
   */
  async logCopied(): Promise<void> {
    if (this.logCopier) await this.logCopier();
    else this.copyLog();
  }

  get isOpen(): boolean {
    return this.db.isOpen;
  }

  /** Commits what is pending, then closes. */
  close(): void {
    if (!this.db.isOpen) return;
    // A long write still in progress is abandoned: all or nothing.
    if (this.hold && this.db.isTransaction) this.db.exec('ROLLBACK');
    this.commit();
    clearTimeout(this.sealTimer);
    this.recorder?.close();
    this.readOnly?.close();
    this.db.close();
  }

  /**
   * Inside a write: gives up to `pages` free pages back to the file system, where the database allows it (see
   * useIncrementalVacuum). Returns how many free pages are left to give back.
   */
  reclaim(pages: number): number {
    if (pragmaOf(this.db, 'auto_vacuum') !== INCREMENTAL) return 0;
    this.db.exec(`PRAGMA incremental_vacuum(${Math.floor(pages)})`);
    return pragmaOf(this.db, 'freelist_count');
  }
}
