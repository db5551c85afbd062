// The primary's latest changes (store/replication.ts), for standby masters to follow: kept in memory, the newest
// MAX_CHANGES or MAX_BYTES of them. A follower further behind, or of another generation, is told to seed anew.

import type { Position, RecordedChange } from '../store/recording.ts';

export const MAX_CHANGES = 10_000;
export const MAX_BYTES = 64 * 1024 * 1024;
/** The most one answer carries. */
export const PAGE_CHANGES = 500;
export const PAGE_BYTES = 8 * 1024 * 1024;
/** The most standbys whose positions are kept apart. */
const MAX_STANDBYS = 32;

const reaches = (at: Position | undefined, position: Position) =>
  at !== undefined && at.generation === position.generation && at.seq >= position.seq;

/** A standby as its primary sees it (see ReplicationFeed.standbys). */
export interface StandbyStanding {
  name: string;
  position: Position | null;
  /** Changes it lacks; null when it stands in another generation (it is to seed anew). */
  behind_changes: number | null;
  lag_seconds: number | null;
  last_asked_at: number;
}

export class ReplicationFeed {
  private readonly changes: RecordedChange[] = [];
  private bytes = 0;
  private readonly waiting = new Set<() => void>();
  private closed = false;
  /**
   * How far each standby said it stands (the position it asked after), by the name it gives ('' for none), the one
   * that spoke last at the end; and who waits for one to reach further.
   */
  private readonly acknowledged = new Map<string, Position>();
  /** When each standby last asked, by its name (ms); as many as `acknowledged` keeps. */
  private readonly asked = new Map<string, number>();
  private readonly holding = new Set<() => void>();

  constructor(
    /** Where the primary's record stands now: where it started, then its last change. */
    private current: Position,
  ) {}

  /** Where the record stands. */
  get position(): Position {
    return { ...this.current };
  }

  /** The record starts a new generation at `start`: followers of the one before are to seed anew. */
  restart(start: Position): void {
    this.current = { ...start };
    // Those of the generation before serve no one now: its followers are told to seed anew.
    this.changes.length = 0;
    this.bytes = 0;
    for (const wake of [...this.waiting]) wake();
  }

  add(change: RecordedChange): void {
    this.current = { generation: change.generation, seq: change.seq };
    this.changes.push(change);
    this.bytes += change.changeset.length;
    while (this.changes.length > MAX_CHANGES || this.bytes > MAX_BYTES) {
      this.bytes -= this.changes.shift()!.changeset.length;
    }
    for (const wake of [...this.waiting]) wake();
  }

  /**
   * The changes that follow `position`, oldest first (a page at most); 'reseed' when they are not all here (another
   * generation, or older than what is kept).
   */
  after(position: Position, standby = '', nowMs = Date.now()): RecordedChange[] | 'reseed' {
    const now = this.current;
    this.asked.delete(standby);
    this.asked.set(standby, nowMs);
    if (this.asked.size > MAX_STANDBYS) this.asked.delete(this.asked.keys().next().value!);
    if (position.generation === now.generation && position.seq <= now.seq && !this.holds(position, standby)) {
      this.acknowledged.delete(standby);
      this.acknowledged.set(standby, { ...position });
      // Names are the standbys' own: those that no longer ask are forgotten first.
      if (this.acknowledged.size > MAX_STANDBYS) this.acknowledged.delete(this.acknowledged.keys().next().value!);
      for (const wake of [...this.holding]) wake();
    }
    if (position.generation !== now.generation || position.seq > now.seq) return 'reseed';
    if (position.seq === now.seq) return [];
    // Kept changes are of one generation and numbered in a row (a new generation empties the record): the one that
    // follows is found by its number.
    const oldest = this.changes[0];
    const first = oldest && oldest.generation === now.generation ? position.seq + 1 - oldest.seq : -1;
    if (first < 0 || first >= this.changes.length) return 'reseed';
    const page: RecordedChange[] = [];
    let bytes = 0;
    for (let i = first; i < this.changes.length && page.length < PAGE_CHANGES && bytes < PAGE_BYTES; i++) {
      page.push(this.changes[i]!);
      bytes += this.changes[i]!.changeset.length;
    }
    return page;
  }

  /**
   * Each standby that asked, the last to ask first: where it said it stands, how many changes it is behind, how long
   * (since the first change it lacks was committed; null when that is no longer kept), and when it last asked.
   */
  standbys(nowMs: number): StandbyStanding[] {
    return [...this.asked].reverse().map(([name, askedAt]) => {
      const at = this.acknowledged.get(name);
      const current = at !== undefined && at.generation === this.current.generation;
      const behind = current ? this.current.seq - at.seq : null;
      // Kept changes are numbered in a row: the first it lacks is found by its number.
      const oldest = this.changes[0];
      const lacking = current && behind !== 0 && oldest ? this.changes[at.seq + 1 - oldest.seq] : undefined;
      return {
        name,
        position: at ?? null,
        behind_changes: behind,
        lag_seconds: behind === 0 ? 0 : lacking ? Math.max(0, Math.round((nowMs - lacking.at) / 1000)) : null,
        last_asked_at: askedAt,
      };
    });
  }

  /**
   * Whether the standby named `standby` (any, when undefined) has said it holds `position` (or a later one of its
   * generation).
   */
  holds(position: Position, standby?: string): boolean {
    return standby === undefined ? this.holder(position) !== null : reaches(this.acknowledged.get(standby), position);
  }

  /** A standby that holds `position`, the last to say so first; null when none does. */
  holder(position: Position): string | null {
    const said = [...this.acknowledged];
    for (let i = said.length - 1; i >= 0; i--) if (reaches(said[i]![1], position)) return said[i]![0];
    return null;
  }

  /**
   * Resolves true once the standby named `standby` (any, when undefined) holds `position`, false after `ms` (or at
   * once, when the master stops).
   */
  held(position: Position, ms: number, standby?: string): Promise<boolean> {
    if (this.holds(position, standby)) return Promise.resolve(true);
    if (this.closed) return Promise.resolve(false);
    return new Promise((resolve) => {
      const done = (held: boolean) => {
        clearTimeout(timer);
        this.holding.delete(check);
        resolve(held);
      };
      const check = () => {
        if (this.holds(position, standby)) done(true);
        else if (this.closed) done(false);
      };
      const timer = setTimeout(() => done(false), ms);
      this.holding.add(check);
    });
  }

  /** Ends every wait for a change at once (the master is stopping), and those asked for later. */
  close(): void {
    this.closed = true;
    for (const wake of [...this.waiting]) wake();
    for (const check of [...this.holding]) check();
  }

  /** Resolves at the next change, or after `ms`. */
  next(ms: number): Promise<void> {
    if (this.closed) return Promise.resolve();
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.waiting.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.waiting.add(wake);
    });
  }
}
