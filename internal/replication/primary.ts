// A primary's side of replication: the record of changes standbys follow (started by the first to ask), a snapshot to
// seed one from, and sync mode's wait for a standby to hold what a write committed.

import type { Logger } from '../log/log.ts';
import { singleFlight } from '../runtime/single-flight.ts';
import type { Settings } from '../settings/settings.ts';
import type { Database } from '../store/database.ts';
import { snapshotOf } from '../store/replication.ts';
import { ReplicationFeed } from './feed.ts';

/**
 * In async mode, how long after a commit its changes are sealed for standbys, with any others committed meanwhile. A
 * seal has a cost of its own whatever it holds (about 240 us: the session is made anew, and reads each
 * table's schema again at its first change), besides 4-5 us a write: at 10 ms a rule create under load cost 35-45
 * us more than without a standby, at 100 ms 13-19 us. 100 ms of lag is still little beside the second allowed.
 */
const SEAL_AFTER_MS = 100;

export interface PrimaryDeps {
  db: Database;
  settings: Settings;
  log: Logger;
  now: () => number;
}

export class PrimaryReplication {
  private current: ReplicationFeed | null = null;
  /** Since when a write was answered without a standby holding it, in sync mode (see held); null: in step. */
  lapsedSince: number | null = null;

  constructor(private readonly deps: PrimaryDeps) {}

  /** The record of changes standby masters follow, started by the first of them to ask. */
  feed(): ReplicationFeed {
    const { db, settings } = this.deps;
    // Changes are told after a commit, never during the call that starts the record.
    this.current ??= new ReplicationFeed(
      db.recordChanges(
        (change) => this.current!.add(change),
        (start) => this.current!.restart(start),
        // In sync mode a write waits for a standby to hold it: it is sealed before it is answered.
        () => (settings.get('replication_mode') === 'sync' ? 0 : SEAL_AFTER_MS),
      ),
    );
    return this.current;
  }

  /** A copy of the database for standbys to seed from, and where it stands; one at a time (see singleFlight). */
  readonly snapshot = singleFlight(async () => {
    this.feed();
    const { reader, position } = await this.deps.db.openSnapshot();
    return { bytes: await snapshotOf(reader, position), position };
  });

  /**
   * In sync mode, once a standby follows: resolves once it holds what was committed so far, or after
   * replication_sync_timeout_seconds, after which writes go on without waiting until it is in step again.
   */
  async held(): Promise<void> {
    const { settings, log, now } = this.deps;
    const feed = this.current;
    if (!feed || settings.get('replication_mode') !== 'sync') return;
    const target = feed.position;
    if (this.lapsedSince !== null) {
      if (feed.holds(target)) this.lapsedSince = null;
      return;
    }
    const timeout = settings.get('replication_sync_timeout_seconds');
    if (await feed.held(target, timeout * 1000)) return;
    this.lapsedSince = now();
    log.error('no standby held a write within the sync timeout: the primary goes on alone', {
      timeout_seconds: timeout,
    });
  }

  /** Answers standbys waiting for a change at once: the master is stopping. */
  stop(): void {
    this.current?.close();
  }
}
