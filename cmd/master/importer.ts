// Imports run in a worker thread, on a SQLite connection of their own: decoding, checking
// and writing a document of 100,000 rules takes seconds of CPU, which on the event loop
// would hold every other request as long. The worker is this module started again (in the
// bundle, the master's one file), told by `workerData` which import to run.

import { readlinkSync } from 'node:fs';
import { constants, setPriority } from 'node:os';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { runImport, type ImportCommitted, type ImportDone, type ImportJob } from '../../internal/api/transfer.ts';
import { SecretBox } from '../../internal/crypto/box.ts';
import { DomainError } from '../../internal/errors/errors.ts';
import { Database, SchemaMismatch } from '../../internal/store/database.ts';
import { Store } from '../../internal/store/store.ts';
import { VERSION } from '../../internal/version.ts';

const ROLE = 'portplane-import';

/** What the worker writes with: the master's database, and its sealing key (for tunnels' keys). */
export interface ImportSetup {
  /** The running master's version: a worker of another (an upgrade copied over the file) refuses. */
  version: string;
  databasePath: string;
  sealingKey: Uint8Array;
  /** The worker's heap, past which it ends and its import fails (the master does not). */
  heapMiB?: number;
}

// A document of 200,000 rules (39 MiB) imports in 256 MiB; one at the 64 MiB body limit needs less than half this.
const HEAP_MIB = 1024;

interface Task {
  role: typeof ROLE;
  setup: ImportSetup;
  job: ImportJob;
}

/** What the worker answers: the import done, refused for the caller's fault, or failed (a bug, a full disk). */
type Outcome = { done: ImportDone } | { refused: Pick<DomainError, 'code' | 'detail' | 'facts'> } | { failed: string };

/**
 * Runs each import in a worker thread of its own, which ends with it (its memory with it). It answers once the import
 * is committed; `finished` resolves when the worker has ended, its pages copied into the database file, or rejects
 * with what failed after the answer (the copy is then left to the master's next commit). The document moves to the
 * worker where it can (see `movable`), leaving the job's empty, and the answer's bytes move back.
 */
export function importInWorker(setup: ImportSetup): (job: ImportJob) => Promise<ImportCommitted> {
  return (job) =>
    new Promise((resolve, reject) => {
      const task: Task = { role: ROLE, setup, job };
      const heap = setup.heapMiB ?? HEAP_MIB;
      const worker = new Worker(new URL(import.meta.url), {
        workerData: task,
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
        if ('done' in outcome) {
          const { json, nodes } = outcome.done;
          // Posted, a Buffer arrives as a plain Uint8Array over the same memory.
          resolve({ json: Buffer.from(json.buffer, json.byteOffset, json.byteLength), nodes, finished });
        } else if ('refused' in outcome)
          reject(new DomainError(outcome.refused.code, outcome.refused.detail, outcome.refused.facts));
        else reject(new Error(`the import failed: ${outcome.failed}`));
      });
      // An uncaught throw, or its heap exhausted: its connection closes, and SQLite undoes what it had not committed.
      worker.once('error', (error: NodeJS.ErrnoException) =>
        (answered ? failedAfterAnswer : reject)(
          error.code === 'ERR_WORKER_OUT_OF_MEMORY'
            ? new DomainError(
                'payload_too_large',
                `importing this document needs more than the ${heap} MiB an import may use; import it in parts`,
              )
            : new Error(`the import's worker failed: ${error.stack ?? error}`),
        ),
      );
      worker.once('exit', (code) => {
        if (!answered) reject(new Error(`the import's worker exited (code ${code}) before it answered`));
      });
    });
}

/**
 * Live requests first: the import runs on the CPU they leave. On a core the main thread keeps busy, a worker of
 * the same priority takes turns of a scheduler slice (4-5 ms), in which no request is answered; at the lowest
 * priority it gets about 1.5% of a busy core (the import, and writes waiting for it, take longer) and all of an
 * idle one. Linux sets the priority of a thread (its id read from /proc); elsewhere the worker keeps its own.
 * Threads started from this one would inherit it, so the import must not be the first to use libuv's pool
 * (asynchronous fs, crypto or zlib): it uses none (SQLite and its hashing are synchronous), and an import run first
 * thing after a start leaves the master with no pool thread at all.
 */
function yieldToLiveRequests(): void {
  try {
    setPriority(Number(readlinkSync('/proc/thread-self').split('/').pop()), constants.priority.PRIORITY_LOW);
  } catch (error) {
    // Not Linux (no such file), or a system call filter in the way: the import runs at normal priority.
    if (!['ENOENT', 'ERR_SYSTEM_ERROR'].includes((error as NodeJS.ErrnoException).code ?? '')) throw error;
  }
}

async function work({ setup, job }: Task, answer: (outcome: Outcome) => void): Promise<void> {
  yieldToLiveRequests();
  // The worker loads the program file anew: an upgrade may have copied another over it, whose code must not
  // write for the master still running, let alone migrate its database.
  const changed = (why: string): Outcome => ({
    refused: {
      code: 'unavailable',
      detail: `the master's program file changed since it started (${why}); restart the master`,
      facts: {},
    },
  });
  if (setup.version !== VERSION) return answer(changed(`version ${VERSION} on disk, ${setup.version} running`));
  let store: Store;
  try {
    // The pages an import writes are copied from the log into the database file after it answers, not in its commit.
    store = new Store(new Database(setup.databasePath, { migrate: false, autoCheckpoint: false }));
  } catch (error) {
    if (!(error instanceof SchemaMismatch)) throw error;
    return answer(changed(error.message));
  }
  try {
    const app = {
      store,
      box: SecretBox.of(setup.sealingKey),
      timestamp: () => job.timestamp,
      licenseView: () => job.license,
    };
    answer(await outcomeOf(() => runImport(app, job)));
    store.db.checkpoint();
  } finally {
    store.close();
  }
}

async function outcomeOf(run: () => Promise<ImportDone>): Promise<Outcome> {
  try {
    return { done: await run() };
  } catch (error) {
    if (error instanceof DomainError)
      return { refused: { code: error.code, detail: error.detail, facts: error.facts } };
    return { failed: (error as Error)?.stack ?? String(error) };
  }
}

/**
 * The memory of `bytes` to transfer to another thread rather than copy it there (16 MiB took 55 ms to copy), when it
 * is all theirs: a small Buffer may share Node's pool with others, and is copied.
 */
function movable(bytes: Uint8Array): ArrayBuffer[] {
  const own = bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength;
  return own && bytes.buffer instanceof ArrayBuffer ? [bytes.buffer] : [];
}

if (!isMainThread && (workerData as Task | undefined)?.role === ROLE)
  await work(workerData as Task, (outcome) =>
    parentPort!.postMessage(outcome, 'done' in outcome ? movable(outcome.done.json) : []),
  );
