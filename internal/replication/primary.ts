// A primary's side of replication: the record of changes standbys follow (started by the first to ask), a snapshot to
// seed one from, and sync mode's wait for a standby to hold what a write committed.

import { DomainError } from '../errors/errors.ts';
import type { Logger } from '../log/log.ts';
import { singleFlight } from '../runtime/single-flight.ts';
import type { Settings } from '../settings/settings.ts';
import type { Database } from '../store/database.ts';
import { recordChanges, snapshotOf } from '../store/replication.ts';
import type { Position } from '../store/recording.ts';
import { ReplicationFeed } from './feed.ts';

/**
 * In async mode, how long after a commit its changes are sealed for standbys, with any others committed meanwhile. A
 * seal has a cost of its own whatever it holds (about 240 us: the session is made anew, and reads each
 * table's schema again at its first change), besides 4-5 us a write: at 10 ms a rule create under load cost 35-45
 * us more than without a standby, at 100 ms 13-19 us. 100 ms of lag is still little beside the second allowed.
 */
const SEAL_AFTER_MS = 100;

/**
 * Which standby a sync-mode primary waits for. Without one of its own (two masters), any standby; elected through
 * etcd, the one it chose and published there (see election.ts), so that a standby that takes over knows it holds
 * every acknowledged write.
 */
export interface StandbyChoice {
  /** The standby chosen; null: any (or none chosen yet). */
  current(): string | null;
  /** Chooses `standby` (null: none holds the writes), where standbys deciding who takes over read it. */
  choose(standby: string | null): Promise<void>;
}

const ANY_STANDBY: StandbyChoice = { current: () => null, choose: async () => {} };

/** The later of two positions; of another generation (the record started anew), `position`. */
const later = (answered: Position | null, position: Position): Position =>
  answered !== null && answered.generation === position.generation && answered.seq > position.seq ? answered : position;

export interface PrimaryDeps {
  db: Database;
  settings: Settings;
  log: Logger;
  now: () => number;
  choice?: StandbyChoice;
}

export class PrimaryReplication {
  private current: ReplicationFeed | null = null;
  /** Since when a write was answered without a standby holding it, in sync mode (see held); null: in step. */
  lapsedSince: number | null = null;
  /** Whether a write answered while lapsed is watched for a standby to hold it (see held). */
  private watching = false;
  /** The latest write answered as held by a standby (see held); null before the first. */
  private answered: Position | null = null;
  /** The decisions of writes held, one at a time (see held). */
  private deciding: Promise<void> = Promise.resolve();

  constructor(private readonly deps: PrimaryDeps) {}

  /** The record of changes standby masters follow, started by the first of them to ask. */
  feed(): ReplicationFeed {
    const { db, settings } = this.deps;
    // Changes are told after a commit, never during the call that starts the record.
    this.current ??= new ReplicationFeed(
      recordChanges(
        db,
        (change) => this.current!.add(change),
        (start) => this.current!.restart(start),
        // In sync mode a write waits for a standby to hold it: it is sealed before it is answered.
        () => (settings.get('replication_mode') === 'sync' ? 0 : SEAL_AFTER_MS),
      ),
    );
    return this.current;
  }

  /** Where the record of changes stands; null before a standby asked (none is kept). */
  position(): Position | null {
    return this.current?.position ?? null;
  }

  /** The standbys that asked since this master started (none before the first asks: the record is not started). */
  standbys(nowMs: number) {
    return this.current?.standbys(nowMs) ?? [];
  }

  /** A copy of the database for standbys to seed from, and where it stands; one at a time (see singleFlight). */
  readonly snapshot = singleFlight(async () => {
    this.feed();
    const { reader, position } = await this.deps.db.openSnapshot();
    return { bytes: await snapshotOf(reader, position), position };
  });

  /**
   * In sync mode: resolves once a standby holds what was committed so far (the chosen one, or another that holds it
   * when the chosen one did not in time, chosen in its place), or after replication_sync_timeout_seconds, after
   * which writes go on without waiting until a standby holds one of them again. No standby having asked since this
   * master started counts as none holding it (the record starts here), not as nothing to wait for. Throws
   * `unavailable` when a choice cannot be published (an elected primary that no longer leads, etcd not answering).
   */
  async held(): Promise<void> {
    const { settings, log, now } = this.deps;
    const choice = this.deps.choice ?? ANY_STANDBY;
    if (settings.get('replication_mode') !== 'sync') {
      this.lapsedSince = null;
      return;
    }
    const feed = this.feed();
    const target = feed.position;
    const timeoutMs = settings.get('replication_sync_timeout_seconds') * 1000;
    if (this.lapsedSince !== null) {
      // The write is not held up; the first one a standby holds ends the lapse (one such watch at a time).
      if (this.watching) return;
      this.watching = true;
      void feed
        .held(target, timeoutMs)
        .then(async (held) => {
          if (!held || this.lapsedSince === null) return;
          await choice.choose(feed.holder(target));
          // What was answered while lapsed was promised to no standby: from here, what follows is.
          this.answered = target;
          this.lapsedSince = null;
          log.info('a standby holds the writes again: each waits for it');
        })
        .catch((error: Error) => log.warn('a standby holds the writes, but cannot be chosen', { error: error.message }))
        .finally(() => (this.watching = false));
      return;
    }
    const held = await feed.held(target, timeoutMs, choice.current() ?? undefined);
    // Decided one write at a time, in the order they get here: the standby chosen must hold every write answered so
    // far, not only this one, or a write answered while another standby was chosen could be on none that may take
    // over (two writes, each held by a different standby, each choosing its own).
    const decided = this.deciding.then(async () => {
      const needed = later(this.answered, target);
      const current = choice.current();
      const holder = current !== null && feed.holds(needed, current) ? current : feed.holder(needed);
      // Without a choice to publish (two masters), a standby holding this write is enough, as it always was.
      if (holder !== null || (held && this.deps.choice === undefined)) {
        if (holder !== null) await choice.choose(holder);
        this.answered = needed;
        return;
      }
      await choice.choose(null);
      this.lapsedSince = now();
      log.error('no standby held a write within the sync timeout: the primary goes on alone', {
        timeout_seconds: timeoutMs / 1000,
      });
    });
    this.deciding = decided.catch(() => {});
    return decided.catch((error: Error) => {
      // Committed here, but not promised to a standby that may take over: the caller cannot know whether it stays.
      throw new DomainError(
        'unavailable',
        'the write committed here, but the standby holding it could not be published in etcd (this master may no ' +
          'longer lead): read it back from the primary before sending it again',
        { retryAfterSeconds: 1 },
        error,
      );
    });
  }

  /** Answers standbys waiting for a change at once: the master is stopping. */
  stop(): void {
    this.current?.close();
  }
}
