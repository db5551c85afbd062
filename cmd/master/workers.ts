// Imports and per-item batches run in worker threads, on SQLite connections of their own:
// decoding, checking and writing a document of 100,000 rules takes seconds of CPU, deleting
// 1,000 rules tens of milliseconds, and on the event loop either would hold every other
// request as long. A worker is this module started again (in the bundle, the master's one
// file), told by `workerData` what it is for: one import, or the batches that come.

import { readdirSync, readlinkSync } from 'node:fs';
import { constants, setPriority } from 'node:os';
import { pathToFileURL } from 'node:url';
import { isMainThread, parentPort, Worker, workerData, type WorkerOptions } from 'node:worker_threads';
import { decodeImport } from '../../internal/api/transfer.ts';
import { runBatch, type BatchJob } from '../../internal/service/batch.ts';
import { exportJson, runImport, type ImportJob } from '../../internal/service/transfer.ts';
import { exportNodeAs, type Exporter, type NodeExport } from '../../internal/service/node-export.ts';
import type { JobCommitted, JobDone, WriteDeps, WriteJob } from '../../internal/service/write.ts';
import { SecretBox } from '../../internal/crypto/box.ts';
import { DomainError } from '../../internal/errors/errors.ts';
import { SchemaMismatch } from '../../internal/store/connection.ts';
import type { Database } from '../../internal/store/database.ts';
import type { ChangeSession } from '../../internal/store/replication.ts';
import { openDatabase, Store } from '../../internal/store/store.ts';
import { SECRET_FIELDS } from '../../internal/domain/secret-fields.ts';
import { VERSION } from '../../internal/version.ts';
import type { Logger } from '../../internal/log/log.ts';
import { formatTime } from '../../internal/schema/schema.ts';

const IMPORT = 'portplane-import';
const BATCHES = 'portplane-batches';
const EXPORT = 'portplane-export';
const CHECKPOINT = 'portplane-checkpoint';

/** How often the checkpoint thread copies the log into the database file. */
const CHECKPOINT_INTERVAL_MS = 100;

/** What a worker writes with: the master's database, and its sealing key (for tunnels' keys). */
export interface WorkerSetup {
  /** The running master's version: a worker of another (an upgrade copied over the file) refuses. */
  version: string;
  databasePath: string;
  sealingKey: Uint8Array;
  /** The worker's heap, past which it ends and its job fails (the master does not). */
  heapMiB?: number;
  /** The largest record of a job's changes it answers with (see outcomeOf); MAX_JOB_CHANGES by default. */
  maxJobChanges?: number;
  /**
   * What a worker runs in place of this file, with the options Node is started with (none, for a bundle): a build of
   * it, where the master runs from source and a worker would compile the source again (300 ms of CPU each).
   */
  program?: { path: string; execArgv: string[] };
}

// A document of 200,000 rules (39 MiB) imports in 256 MiB; one at the 64 MiB body limit needs less than half this.
const HEAP_MIB = 1024;

/** The largest record of a job's changes a worker answers with (see outcomeOf). */
const MAX_JOB_CHANGES = 16 * 1024 * 1024;

/** How long the batch worker waits for the next batch before it ends: a script's batches come one after another. */
const BATCH_WORKER_IDLE_MS = 10_000;

type Task =
  | { role: typeof IMPORT; setup: WorkerSetup; job: ImportJob }
  | { role: typeof BATCHES; setup: WorkerSetup }
  | { role: typeof EXPORT; setup: WorkerSetup; exportedAt: string; node?: NodeExport };

/** What a worker answers: the job done, refused for the caller's fault, or failed (a bug, a full disk). */
type Outcome = { done: JobDone } | { refused: Pick<DomainError, 'code' | 'detail' | 'facts'> } | { failed: string };

/** What the batch worker says after each outcome: its pages are in the database file, other writes may go on. */
interface Checkpointed {
  checkpointed: true;
}

/** What the batch worker is told besides jobs: to close its connection and end. */
interface Close {
  close: true;
}

/** A job's answer, with `finished` for after it; resolves or rejects what waits for it. */
function settle(
  outcome: Outcome,
  finished: Promise<void>,
  resolve: (committed: JobCommitted) => void,
  reject: (error: Error) => void,
): void {
  if ('done' in outcome) {
    const { status, json, nodes, changes } = outcome.done;
    // Posted, a Buffer arrives as a plain Uint8Array over the same memory.
    resolve({ status, json: Buffer.from(json.buffer, json.byteOffset, json.byteLength), nodes, changes, finished });
  } else if ('refused' in outcome)
    reject(new DomainError(outcome.refused.code, outcome.refused.detail, outcome.refused.facts));
  else reject(new Error(`the job failed: ${outcome.failed}`));
}

/** A worker's uncaught throw, or its heap exhausted: its connection closes, SQLite undoes what it had not committed. */
function workerFailure(error: NodeJS.ErrnoException, heap: number, what: string, smaller: string): Error {
  return error.code === 'ERR_WORKER_OUT_OF_MEMORY'
    ? new DomainError('payload_too_large', `${what} needs more than the ${heap} MiB it may use; ${smaller}`)
    : new Error(`${what} failed in its worker thread: ${error.stack ?? error}`);
}

/**
 * Runs each import in a worker thread of its own, which ends with it (its memory with it). It answers once the import
 * is committed; `finished` resolves when the worker has ended, its pages copied into the database file, or rejects
 * with what failed after the answer (the copy is then left to the master's next commit). The document moves to the
 * worker where it can (see `movable`), leaving the job's empty, and the answer's bytes move back.
 */
export function importInWorker(setup: WorkerSetup): (job: ImportJob) => Promise<JobCommitted> {
  return (job) =>
    new Promise((resolve, reject) => {
      const task: Task = { role: IMPORT, setup, job };
      const heap = setup.heapMiB ?? HEAP_MIB;
      const worker = startWorker(task, {
        transferList: movable(job.document),
        resourceLimits: { maxOldGenerationSizeMb: heap },
      });
      let failedAfterAnswer: (error: Error) => void = () => undefined;
      const finished = new Promise<void>((ended, failed) => {
        worker.once('exit', () => ended());
        failedAfterAnswer = failed;
      });
      // Only a committed import's caller waits for `finished`.
      finished.catch(() => undefined);
      let answered = false;
      worker.once('message', (outcome: Outcome) => {
        answered = true;
        settle(outcome, finished, resolve, reject);
      });
      worker.once('error', (error: NodeJS.ErrnoException) =>
        (answered ? failedAfterAnswer : reject)(
          workerFailure(error, heap, 'importing this document', 'import it in parts'),
        ),
      );
      worker.once('exit', (code) => {
        if (!answered) reject(new Error(`the import's worker exited (code ${code}) before it answered`));
      });
    });
}

/**
 * Makes each export in a worker thread of its own, on a connection of its own, in one read snapshot: reading and
 * encoding every rule takes time that grows with them, which on the event loop every request would wait out.
 */
export function exportInWorker(setup: WorkerSetup): Exporter {
  return (exportedAt, node) =>
    new Promise((resolve, reject) => {
      const heap = setup.heapMiB ?? HEAP_MIB;
      const worker = startWorker(
        { role: EXPORT, setup, exportedAt, ...(node ? { node } : {}) },
        { resourceLimits: { maxOldGenerationSizeMb: heap } },
      );
      let answered = false;
      worker.once('message', (outcome: Outcome) => {
        answered = true;
        if ('done' in outcome) resolve(outcome.done.json);
        else settle(outcome, Promise.resolve(), () => undefined, reject);
      });
      worker.once('error', (error: NodeJS.ErrnoException) => {
        if (!answered) reject(workerFailure(error, heap, 'exporting', 'export less (delete what is not needed)'));
      });
      worker.once('exit', (code) => {
        if (!answered) reject(new Error(`the export's worker exited (code ${code}) before it answered`));
      });
    });
}

/** Reads the export (the whole document, or one node's rules in another tool's format) in this worker, and answers. */
async function exportOnce(setup: WorkerSetup, exportedAt: string, node: NodeExport | undefined): Promise<void> {
  const store = openStore(setup);
  if (!(store instanceof Store)) return answer(store);
  try {
    const read = () =>
      node ? Buffer.from(exportNodeAs(store, node.id, node.format).text) : exportJson(store, exportedAt);
    answer(await outcomeOf(async () => ({ status: 200, json: read(), nodes: [] })));
  } finally {
    store.close();
  }
}

/** Runs batches one after another in a worker thread kept while they come (see `batchesInWorker`). */
export interface Batcher {
  run(job: BatchJob): Promise<JobCommitted>;
  /** Ends the worker once the batch in progress, if any, has finished. */
  close(): Promise<void>;
}

/**
 * Runs per-item batches in one worker thread, started at the first and ended once none has come for `idleMs`: a
 * thread's start (160-280 ms here) would otherwise cost more than most batches. Each answers once committed;
 * `finished` resolves once the worker has copied its pages into the database file, or rejects with what failed after
 * the answer (the worker is then ended, and the next batch starts another).
 */
export function batchesInWorker(setup: WorkerSetup, idleMs = BATCH_WORKER_IDLE_MS): Batcher {
  const heap = setup.heapMiB ?? HEAP_MIB;
  let worker: Worker | null = null;
  let idle: NodeJS.Timeout | undefined;
  let queue: Promise<unknown> = Promise.resolve();

  const stop = (): Promise<unknown> => {
    const ending = worker;
    worker = null;
    if (!ending) return Promise.resolve();
    const exited = new Promise((ended) => ending.once('exit', ended));
    // Until it has ended, as the checkpoint thread: whoever waits for the stop would otherwise see the process end
    // first when nothing else keeps it alive (the master closes its server after, but a test's own batches do not).
    ending.ref();
    ending.postMessage({ close: true } satisfies Close);
    return exited;
  };

  const running = (): Worker => {
    if (worker) return worker;
    const started = startWorker({ role: BATCHES, setup }, { resourceLimits: { maxOldGenerationSizeMb: heap } });
    // Kept between batches, it must not keep the master's process alive.
    started.unref();
    started.once('exit', () => {
      if (worker === started) worker = null;
    });
    return (worker = started);
  };

  // A job's turn ends when the worker says it has checkpointed, whatever it answered: the next job is posted only
  // then, so that no message of one job ever reaches the listener of the next.
  const runOne = (job: BatchJob): { answer: Promise<JobCommitted>; finished: Promise<void> } => {
    clearTimeout(idle);
    const thread = running();
    let answered = false;
    let resolveAnswer!: (committed: JobCommitted) => void;
    let rejectAnswer!: (error: Error) => void;
    const answer = new Promise<JobCommitted>((resolve, reject) => {
      resolveAnswer = resolve;
      rejectAnswer = reject;
    });
    let ended!: () => void;
    let failedAfterAnswer!: (error: Error) => void;
    const finished = new Promise<void>((resolve, reject) => {
      ended = resolve;
      failedAfterAnswer = reject;
    });
    finished.catch(() => undefined);
    const fail = (error: Error) => {
      done();
      if (worker === thread) void stop();
      if (!answered) rejectAnswer(error);
      failedAfterAnswer(error);
    };
    const onMessage = (message: Outcome | Checkpointed) => {
      if ('checkpointed' in message) {
        done();
        ended();
        idle = setTimeout(() => void stop(), idleMs).unref();
        return;
      }
      answered = true;
      settle(message, finished, resolveAnswer, rejectAnswer);
    };
    const onError = (error: NodeJS.ErrnoException) =>
      fail(workerFailure(error, heap, 'this batch', 'send fewer items'));
    const onExit = (code: number) => fail(new Error(`the batch worker exited (code ${code}) during a batch`));
    const done = () => {
      thread.off('message', onMessage);
      thread.off('error', onError);
      thread.off('exit', onExit);
    };
    thread.on('message', onMessage);
    thread.once('error', onError);
    thread.once('exit', onExit);
    thread.postMessage(job);
    return { answer, finished };
  };

  return {
    run(job) {
      const turn = queue.then(() => runOne(job));
      queue = turn.then((started) => started.finished).catch(() => undefined);
      return turn.then((started) => started.answer);
    },
    async close() {
      await queue;
      clearTimeout(idle);
      await stop();
    },
  };
}

/**
 * Copies the write-ahead log into the database file from a thread of its own (COPY_LOG), every
 * CHECKPOINT_INTERVAL_MS and whenever `db.logCopied()` asks, without holding any writer back (a passive checkpoint, as
 * `Database.copyLog`). Left to the master's commits (SQLite's own, at a thousand pages of
 * log), the copy and its fsync took 10-15 ms of the event loop at every thousandth page written: the tail of every
 * request's latency while anything wrote. Should the thread end, whatever the reason, the commits take it back.
 */
export function checkpointInWorker(databasePath: string, db: Database, log: Logger): { close(): Promise<void> } {
  const before = new Set(threadIds());
  const worker = new Worker(COPY_LOG, {
    eval: true,
    workerData: { path: databasePath, intervalMs: CHECKPOINT_INTERVAL_MS },
    name: CHECKPOINT,
    // Its heap stays near 3 MiB; under 16 MiB, V8 collects over and over while the thread starts (20 ms of CPU more a
    // start, the same memory after).
    resourceLimits: { maxOldGenerationSizeMb: 16 },
  });
  const made = threadIds().filter((id) => !before.has(id));
  if (made.length === 1) yieldToLiveRequests(made[0]!);
  // It never keeps the process alive: whatever it has not copied, the next connection to open will.
  worker.unref();
  const waiting = new Map<number, () => void>();
  let asked = 0;
  db.copyLogWith(
    () =>
      new Promise<void>((resolve) => {
        waiting.set(++asked, resolve);
        worker.postMessage({ copy: asked });
      }),
  );
  worker.on('message', (message: { copied: number }) => {
    waiting.get(message.copied)?.();
    waiting.delete(message.copied);
  });
  let closing = false;
  const ended = new Promise<void>((resolve) =>
    worker.once('exit', (code) => {
      if (db.isOpen) db.copyLogWith(null);
      for (const done of waiting.values()) done();
      if (!closing) log.error('the checkpoint thread ended; commits copy the log themselves', { code });
      resolve();
    }),
  );
  worker.on('error', (error) => log.error('the checkpoint thread failed', { error: error.stack ?? String(error) }));
  let online = false;
  worker.once('online', () => (online = true));
  return {
    close() {
      closing = true;
      // A thread not yet running is stopped where it is rather than waited for (it would start, only to close): what
      // it has not copied, the next connection to open will, as when it ends any other way.
      if (!online) void worker.terminate();
      else {
        // Until it has ended: nothing else may be left to keep the process alive for the rest of the stop.
        worker.ref();
        worker.postMessage({ close: true });
      }
      return ended;
    },
  };
}

/**
 * The checkpoint thread's whole program: a connection that copies the log every intervalMs, and when asked (`copy`,
 * answered with `copied`). It loads nothing of the master's: a thread costs the memory of what it loads (the master's
 * bundle took 20 MiB more). A failed copy is tried again at the next round.
 */
const COPY_LOG = `
const { parentPort, workerData } = require('node:worker_threads');
const { DatabaseSync } = require('node:sqlite');
const db = new DatabaseSync(workerData.path);
const copy = () => {
  try {
    db.exec('PRAGMA wal_checkpoint(PASSIVE)');
  } catch {}
};
const timer = setInterval(copy, workerData.intervalMs);
parentPort.on('message', (message) => {
  if (message.copy !== undefined) {
    copy();
    return parentPort.postMessage({ copied: message.copy });
  }
  clearInterval(timer);
  db.close();
  parentPort.close();
});
`;

/**
 * This file started again as a worker thread for `task`, yielding to live requests from its start: the master lowers
 * the new thread's priority as soon as it exists, so that loading this file (80-100 ms of CPU here) already yields;
 * left to the worker, the load ran at the master's priority and was most of an import's cost to live reads (p99
 * 1.4-1.9x idle during an import, 1.0-1.1x after). Node makes the thread within the constructor, so it is the one
 * the listing of the process's threads gains; the worker lowers itself again once loaded, in case another thread was
 * made at the same moment and the master could not tell which.
 */
function startWorker(task: Task, options: Omit<WorkerOptions, 'workerData' | 'name'>): Worker {
  const before = new Set(threadIds());
  const { program } = task.setup;
  const url = program ? pathToFileURL(program.path) : new URL(import.meta.url);
  const given = program ? { execArgv: program.execArgv } : {};
  const worker = new Worker(url, { ...options, ...given, workerData: task, name: task.role });
  const made = threadIds().filter((id) => !before.has(id));
  if (made.length === 1) yieldToLiveRequests(made[0]!);
  return worker;
}

/** The ids of this process's threads (Linux; elsewhere none). */
function threadIds(): number[] {
  try {
    return readdirSync('/proc/self/task').map(Number);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw error;
  }
}

/**
 * Live requests first: the worker runs on the CPU they leave. On a core the main thread keeps busy, a worker of
 * the same priority takes turns of a scheduler slice (4-5 ms), in which no request is answered; at the lowest
 * priority (nice 19) it gets about 1.5% of a busy core (its jobs, and writes waiting for them, take longer) and all
 * of an idle one. Linux's idle scheduling class (chrt --idle) did better beside our own requests, preempted the
 * moment a request wakes the main thread, but it yields to every process on the host as well (a test beside two
 * busy loops took 70 s instead of 2; 8 s at nice 19), and a process without CAP_SYS_NICE cannot leave it again.
 * Linux sets the priority of a thread (by its id); elsewhere the worker keeps its own.
 * Threads started from this one would inherit it, so a worker must not be the first to use libuv's pool
 * (asynchronous fs, crypto or zlib): it uses none (SQLite and its hashing are synchronous), and a job run first
 * thing after a start leaves the master with no pool thread at all.
 */
function yieldToLiveRequests(threadId: number): void {
  try {
    setPriority(threadId, constants.priority.PRIORITY_LOW);
  } catch (error) {
    // A system call filter in the way, or the thread already gone: it runs at the priority it has.
    if ((error as NodeJS.ErrnoException).code !== 'ERR_SYSTEM_ERROR') throw error;
  }
}

/** This thread's id for `yieldToLiveRequests` (Linux), or null. */
function ownThreadId(): number | null {
  try {
    return Number(readlinkSync('/proc/thread-self').split('/').pop());
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw error;
  }
}

/**
 * The worker's connection, or why it refuses to write. It loads the program file anew: an upgrade may have copied
 * another over it, whose code must not write for the master still running, let alone migrate its database. Its
 * commits leave what they wrote in the log, copied into the database file after each job has answered.
 */
/** The time of the job this thread writes now (see writerFor). */
let jobTime = formatTime(Date.now());

function openStore(setup: WorkerSetup): Store | Outcome {
  const changed = (why: string): Outcome => ({
    refused: {
      code: 'unavailable',
      detail: `the master's program file changed since it started (${why}); restart the master`,
      facts: {},
    },
  });
  if (setup.version !== VERSION) return changed(`version ${VERSION} on disk, ${setup.version} running`);
  try {
    return new Store(
      openDatabase(setup.databasePath, {
        migrate: false,
        autoCheckpoint: false,
        // What triggers write lands at the time of the job they are part of, as every row and audit entry does.
        time: () => jobTime,
      }),
      {
        secretFields: SECRET_FIELDS,
      },
    );
  } catch (error) {
    if (!(error instanceof SchemaMismatch)) throw error;
    return changed(error.message);
  }
}

/** What the job's code writes with: the worker's connection and key, at the job's time and under its license. */
function writerFor(store: Store, box: SecretBox, job: WriteJob): WriteDeps {
  jobTime = job.timestamp;
  return {
    store,
    box,
    timestamp: () => job.timestamp,
    licenseView: () => job.license,
    targetPolicy: () => job.targets,
    channelPolicy: () => job.channels,
  };
}

/**
 * What `run` did, as its worker answers: with `recordOn`, what it committed to its store too, as one changeset (none
 * past its limit: standbys seed anew, cheaper than a change that size in the feed and on the wire).
 */
async function outcomeOf(
  run: () => Promise<JobDone>,
  recordOn: { store: Store; limit: number } | null = null,
): Promise<Outcome> {
  const recording = recordOn?.store.recordJob() ?? null;
  try {
    const done = await run();
    return { done: { ...done, changes: recording && changesOf(recording, recordOn!.limit) } };
  } catch (error) {
    if (error instanceof DomainError)
      return { refused: { code: error.code, detail: error.detail, facts: error.facts } };
    return { failed: (error as Error)?.stack ?? String(error) };
  } finally {
    recording?.close();
  }
}

/**
 * What a job committed, as one changeset; null past MAX_JOB_CHANGES, or when it cannot be read: the job is done
 * whatever happens here, and standbys seed anew.
 */
function changesOf(recording: ChangeSession, limit: number): Uint8Array | null {
  try {
    const changes = recording.take();
    return changes.length <= limit ? changes : null;
  } catch {
    return null;
  }
}

function answer(outcome: Outcome): void {
  const bytes = 'done' in outcome ? [outcome.done.json, outcome.done.changes] : [];
  parentPort!.postMessage(
    outcome,
    bytes.flatMap((moved) => (moved ? movable(moved) : [])),
  );
}

async function importOnce(setup: WorkerSetup, job: ImportJob): Promise<void> {
  const store = openStore(setup);
  if (!(store instanceof Store)) return answer(store);
  try {
    answer(
      await outcomeOf(
        () => runImport(writerFor(store, SecretBox.of(setup.sealingKey), job), job, decodeImport),
        job.recordChanges ? { store, limit: setup.maxJobChanges ?? MAX_JOB_CHANGES } : null,
      ),
    );
    store.db.checkpoint();
  } finally {
    store.close();
  }
}

function serveBatches(setup: WorkerSetup): void {
  const store = openStore(setup);
  const box = SecretBox.of(setup.sealingKey);
  let queue = Promise.resolve();
  parentPort!.on('message', (message: BatchJob | Close) => {
    queue = queue.then(async () => {
      if ('close' in message) {
        if (store instanceof Store) store.close();
        return parentPort!.close();
      }
      if (!(store instanceof Store)) answer(store);
      else {
        const run = () => runBatch(writerFor(store, box, message), message);
        const limit = setup.maxJobChanges ?? MAX_JOB_CHANGES;
        answer(await outcomeOf(run, message.recordChanges ? { store, limit } : null));
        store.db.checkpoint();
      }
      parentPort!.postMessage({ checkpointed: true } satisfies Checkpointed);
    });
  });
}

/**
 * The memory of `bytes` to transfer to another thread rather than copy it there (16 MiB took 55 ms to copy), when it
 * is all theirs: a small Buffer may share Node's pool with others, and is copied.
 */
function movable(bytes: Uint8Array): ArrayBuffer[] {
  const own = bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength;
  return own && bytes.buffer instanceof ArrayBuffer ? [bytes.buffer] : [];
}

const task = isMainThread ? undefined : (workerData as Task | undefined);
if (task?.role === IMPORT || task?.role === BATCHES || task?.role === EXPORT) {
  const self = ownThreadId();
  if (self !== null) yieldToLiveRequests(self);
  if (task.role === IMPORT) await importOnce(task.setup, task.job);
  else if (task.role === EXPORT) await exportOnce(task.setup, task.exportedAt, task.node);
  else serveBatches(task.setup);
}
