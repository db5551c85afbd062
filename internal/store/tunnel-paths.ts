// SQL for the quality of tunnels' paths over time (entry -> exit): a point a minute per tunnel of how its path stood
// then, sampled by the master from what the tunnel's entry last reported (its session to the exit up or not, its round
// trip, the share of its PINGs lost), folded into hours and days as it ages (history.ts) as node vitals are: an
// hour's `up` is the share of its minutes the path was up, its round trip and loss the averages of the minutes that had
// one.

import type { Database } from './database.ts';
import { HistorySeries, weighted, type Retention } from './history.ts';
import { trigger, type Derivation } from './trigger.ts';

export interface PathPoint {
  /** Unix seconds: the start of the step. */
  at: number;
  /** The share of the step's minutes the path was up, from 0 to 1. */
  up: number;
  rtt_us: number | null;
  loss_percent: number | null;
}

export class TunnelPathStore {
  private readonly history: HistorySeries;
  private readonly sampleStmt;
  private readonly seriesStmt;

  constructor(db: Database) {
    this.history = new HistorySeries(db, {
      table: 'tunnel_paths',
      subject: 'tunnel_id',
      time: 'minute',
      unit: 60,
      values: {
        up: weighted('up'),
        rtt_us: weighted('rtt_us'),
        loss_percent: weighted('loss_percent'),
        points: 'CAST(total(points) AS INTEGER)',
      },
    });
    // One statement for every tunnel: its status as it stands is the minute's point (a second sample replaces it).
    this.sampleStmt = db.prepare(`INSERT INTO tunnel_paths (tunnel_id, minute, up, rtt_us, loss_percent)
        SELECT id, :minute, CASE WHEN entry_status = 'up' THEN 1.0 ELSE 0.0 END, rtt_us, loss_percent FROM tunnels
        WHERE true
      ON CONFLICT (tunnel_id, minute) DO UPDATE SET up = excluded.up, rtt_us = excluded.rtt_us,
        loss_percent = excluded.loss_percent`);
    this.seriesStmt = db.prepare(`SELECT (minute * 60 / CAST(:step AS INTEGER)) * CAST(:step AS INTEGER) AS at,
        ${weighted('up')} AS up, ${weighted('rtt_us')} AS rtt_us, ${weighted('loss_percent')} AS loss_percent
      FROM tunnel_paths WHERE tunnel_id = :tunnel_id AND minute >= :from / 60 AND minute < :to / 60
      GROUP BY 1 ORDER BY 1`);
  }

  /** Inside a write: every tunnel's point for `minute` (Unix minutes), from how it stands now. */
  sample(minute: number): void {
    this.sampleStmt.run({ minute });
  }

  /** A tunnel's points from `from` to `to` (Unix seconds), averaged per `step` seconds (a multiple of 60). */
  series(tunnelId: number, from: number, to: number, step: number): PathPoint[] {
    return this.seriesStmt.all({ tunnel_id: tunnelId, from, to, step }) as unknown as PathPoint[];
  }

  /** Inside a write: a step of rolling the points up (history.ts). Returns whether there is more to do. */
  rollUp(now: number, keep: Retention): boolean {
    return this.history.step(now, keep);
  }
}

/** A tunnel's path history goes with it. */
export const tunnelPathDerivations: readonly Derivation[] = [
  {
    name: 'tunnel_paths',
    triggers: [
      trigger(
        'tunnel_paths_delete',
        `AFTER DELETE ON tunnels BEGIN
    DELETE FROM tunnel_paths WHERE tunnel_id = OLD.id;
  END`,
      ),
    ],
    rebuild: 'DELETE FROM tunnel_paths WHERE tunnel_id NOT IN (SELECT id FROM tunnels)',
  },
];
