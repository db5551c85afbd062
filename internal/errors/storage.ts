// What a write meets below the domain (the database, the disk), as the API answers it: each its own class, so that one
// place maps them to problem+json without knowing SQLite.

/** A write's transaction could not be committed (a full disk, an I/O error): none of its writes were kept. */
export class CommitFailed extends Error {}

/** A write waited its bound for another connection's long write to end, and wrote nothing. */
export class WritesBusy extends Error {
  constructor(readonly waitedMs: number) {
    super(`writes were held by a long write for ${Math.round(waitedMs)} ms`);
  }
}

/** Whether `error`, or what it was caused by, is SQLite finding the disk full (SQLITE_FULL, 13). */
export function isDiskFull(error: unknown): boolean {
  for (let at = error; at; at = (at as { cause?: unknown }).cause) {
    const code = (at as { errcode?: number }).errcode;
    if (code !== undefined && (code & 0xff) === 13) return true;
  }
  return false;
}
