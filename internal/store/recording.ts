// What a primary records of its commits for its standbys, as the commit machinery (database.ts) drives it; the
// recorder itself is replication.ts's.

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

/** Records what a connection commits, a change at each seal (see ChangeRecorder). */
export interface Recorder {
  readonly current: Position;
  /** Outside any transaction: what was committed since the last seal becomes the next change. */
  seal(): void;
  /** What another connection committed, recorded there as one changeset: the next change. */
  adopt(changeset: Uint8Array): void;
  /** The database was written other than through this connection: what follows is a new generation. */
  newGeneration(): void;
  close(): void;
}
