// The master's housekeeping: what has aged out is pruned, traffic and vitals are rolled up into coarser history
// (internal/store/history.ts), and the space this frees is given back to the file system.

import type { Logger } from '../log/log.ts';
import type { Settings } from '../settings/settings.ts';
import type { Retention } from '../store/history.ts';
import type { Store } from '../store/store.ts';

/** What housekeeping needs of the master: its data, settings, log and clock, and what it keeps in memory. */
export interface Housekeeping {
  store: Store;
  settings: Settings;
  log: Logger;
  now(): number;
  timestamp(offsetMs?: number): string;
  /** Stops a roll-up between its steps. */
  readonly draining: boolean;
  /** In-memory records that age out: failed logins, write budgets. */
  throttle: { sweep(windowMs: number): void };
  budget: { sweep(): void };
}

const DAY_MS = 24 * 60 * 60 * 1000;

/** Free pages given back per step: a page moved took 8-60 µs here (256 a step: 2-15 ms), so a step stays near 1 ms. */
const PAGES_PER_STEP = 32;

/** The roll-up under way, per master: one at a time. */
const rollUps = new WeakMap<Housekeeping, Promise<void>>();

/**
 * Prunes what has aged out (audit entries and events, expired credentials, idempotency records) and starts rolling
 * traffic and vitals up, unless a roll-up is already under way. Resolves when the roll-up is done.
 */
export function maintain(app: Housekeeping): Promise<void> {
  const { store, settings } = app;
  const { audit, events, credentials, idempotency, deliveries, silences, days } = store.write(() => ({
    audit: store.audit.prune(app.timestamp(-settings.get('audit_retention_days') * DAY_MS)),
    // An event stream resumes for as long as the audit log remembers the changes it tells of.
    events: store.events.prune(app.timestamp(-settings.get('audit_retention_days') * DAY_MS)),
    credentials: store.tokens.pruneExpired(app.timestamp()).length,
    idempotency: store.idempotency.prune(app.timestamp(-DAY_MS)),
    // The delivery log is kept as the audit log is; what is still pending stays until it is done.
    deliveries: store.deliveries.prune(app.timestamp(-settings.get('audit_retention_days') * DAY_MS)),
    silences: store.silences.prune(app.timestamp(-settings.get('audit_retention_days') * DAY_MS)),
    days: store.traffic.pruneDays(Math.floor(app.now() / 1000)),
  }));
  app.throttle.sweep(settings.get('login_window_seconds') * 1000);
  app.budget.sweep();
  if (audit + events + credentials + idempotency + deliveries + silences + days > 0)
    app.log.info('pruned', { audit, events, credentials, idempotency, deliveries, silences, days });
  let running = rollUps.get(app);
  if (!running) {
    running = rollUp(app).finally(() => rollUps.delete(app));
    rollUps.set(app, running);
  }
  return running;
}

/** Resolves once the roll-up under way, if any, has stopped (it stops between steps while the master drains). */
export function rolledUp(app: Housekeeping): Promise<void> {
  return rollUps.get(app)?.catch(() => undefined) ?? Promise.resolve();
}

/**
 * Before a primary first serves a data dir of before migration 20: counts its minute buckets into the nodes' and the
 * master's history in one write (see store/legacy-traffic.ts), so that their series never read the old table; each
 * rule's buckets then move in the roll-up's steps.
 */
export function countLegacyTraffic(app: Housekeeping): void {
  const { store } = app;
  if (!store.traffic.legacyNodesPending()) return;
  const started = performance.now();
  const now = Math.floor(app.now() / 1000);
  const rows = store.write(() => store.traffic.countLegacyNodes(now, historyRetention(app)));
  app.log.info("counted the traffic of before the history into the nodes' history", {
    rows,
    seconds: Math.round(performance.now() - started) / 1000,
  });
}

/** How long traffic and vitals keep each resolution, from the settings. */
function historyRetention(app: Housekeeping): Retention {
  return {
    minutes: app.settings.get('history_minutes_hours') * 3600,
    hours: app.settings.get('history_hours_days') * 86_400,
    all: app.settings.get('traffic_retention_days') * 86_400,
  };
}

/**
 * Steps of a few hundred rows, each its own commit, with the event loop free between them: a request waits behind one
 * step at most, and writes (which queue with the steps) are never refused for it. Then the freed pages, in steps too.
 * A step lost to a power cut is a step done again: its commit does not wait for the disk. The next one waits instead
 * for the checkpoint thread to have put it on disk (copied and synced), so that no live write's commit, which syncs
 * the log, pays for the roll-up's pages (reads' p99 during a roll-up: 4.5 ms against 3.4 idle, 34 ms without).
 */
async function rollUp(app: Housekeeping): Promise<void> {
  const { store } = app;
  const started = performance.now();
  let steps = 0;
  for (;;) {
    if (app.draining) return;
    const now = Math.floor(app.now() / 1000);
    const keep = historyRetention(app);
    const more = await store.db.writeRedoable(
      () => store.traffic.rollUp(now, keep) || store.vitals.rollUp(now, keep) || store.tunnelPaths.rollUp(now, keep),
    );
    await turn();
    if (!more) break;
    await store.db.logCopied();
    steps++;
  }
  let reclaimed = 0;
  for (let left = Infinity; left > 0 && !app.draining; reclaimed++) {
    left = await store.db.writeRedoable(() => store.db.reclaim(PAGES_PER_STEP));
    await turn();
    // Only a step that follows waits: with nothing left, the last is copied whenever the thread gets to it.
    if (left > 0) await store.db.logCopied();
  }
  if (steps > 0)
    app.log.info('rolled up the history', {
      steps,
      seconds: Math.round(performance.now() - started) / 1000,
      pages_given_back: reclaimed * PAGES_PER_STEP,
    });
}

function turn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
