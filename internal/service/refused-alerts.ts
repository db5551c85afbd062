// The one alert that cannot go through the outbox: the master refusing writes (its disk is full), when nothing can be
// written, the outbox and the alerts' states included. While it lasts, each writes_refused rule held for its
// for_seconds has its channels told directly, each once (tried again every 30 s until it goes through), under one
// message id; once writes go through again, the resolution goes through the outbox as any other. What was told is
// kept in memory: a master restarted meanwhile tells it again.

import { randomUUID } from 'node:crypto';
import { alertPayload, type AlertNotice } from '../domain/alerts.ts';
import { formatTime } from '../schema/schema.ts';
import type { AlertRule } from '../store/alerts.ts';
import type { Outbox } from './outbox.ts';
import { theMaster } from './master.ts';
import { transact, type Committer } from './write.ts';
import { enqueueNotices } from './alerting.ts';

/** What the watch needs of the master: to write, its clock in milliseconds, its outbox. */
export interface RefusalWatched extends Committer {
  clock: { now(): number };
  outbox: Outbox;
}

const RETRY_MS = 30_000;

/** A rule's turn while writes are refused: the notice, and the channels still to tell (with when last tried). */
interface Told {
  rule: AlertRule;
  notice: AlertNotice;
  messageId: string;
  untold: Set<number>;
  triedAt: number;
}

/** A clock's watch of refused writes (see above): call it every second. */
export function refusedWritesWatch(app: RefusalWatched): () => Promise<void> {
  const told = new Map<number, Told>();
  return async () => {
    const refused = app.store.db.writesRefused;
    const now = app.clock.now();
    if (refused) {
      for (const rule of app.store.alertRules.enabled()) {
        if (rule.condition !== 'writes_refused' || told.has(rule.id)) continue;
        // The refusal is timed by the system's clock (the database's own), not the master's.
        if (Date.now() - refused.since < rule.for_seconds * 1000) continue;
        const notice: AlertNotice = {
          status: 'firing',
          alert_rule: { id: rule.id, name: rule.name },
          condition: rule.condition,
          resource: 'database',
          resource_id: 0,
          summary: `the master refuses writes: ${refused.reason}`,
          since: formatTime(refused.since),
          repeat: false,
          resolved_at: null,
        };
        told.set(rule.id, {
          rule,
          notice,
          messageId: `msg_${randomUUID()}`,
          untold: new Set(rule.channel_ids),
          triedAt: 0,
        });
      }
      await Promise.all(
        [...told.values()]
          .filter((t) => t.untold.size > 0 && now - t.triedAt >= RETRY_MS)
          .map((t) => tell(app, t, now)),
      );
      return;
    }
    if (told.size === 0) return;
    const resolved = [...told.values()];
    const at = formatTime(now);
    await transact(app, theMaster('alert.evaluate'), () => {
      const byChannel = new Map<number, AlertNotice[]>();
      for (const { rule, notice } of resolved) {
        const done: AlertNotice = { ...notice, status: 'resolved', resolved_at: at };
        app.store.events.append('alert.resolved', 'alert_rule', rule.id, done, at);
        for (const id of rule.channel_ids) byChannel.set(id, [...(byChannel.get(id) ?? []), done]);
      }
      enqueueNotices(app, byChannel, at);
    });
    // Forgotten once the resolution is written: a write that fails again tries again at the next tick.
    for (const { rule } of resolved) told.delete(rule.id);
  };
}

async function tell(app: RefusalWatched, told: Told, now: number): Promise<void> {
  told.triedAt = now;
  for (const id of [...told.untold]) {
    const channel = app.store.channels.find(id);
    if (!channel) told.untold.delete(id);
    else if (await app.outbox.direct(channel, told.messageId, alertPayload([told.notice], formatTime(now))))
      told.untold.delete(id);
  }
}
