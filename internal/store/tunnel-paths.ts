// SQL for the quality of tunnels' paths over time: a point a minute per tunnel of how its path stood then (entry ->
// the exit it chose), and per exit of how that exit's stood (entry -> exit, and exit -> its probe target), sampled by
// the master from what the tunnel's entry last reported (each session up or not, its round trip, the share of its
// PINGs lost, the exit's connect to the probe target), folded into hours and days as it ages (history.ts) as node
// vitals are: an hour's `up` is the share of its minutes the path was up, its round trip and loss the averages of the
// minutes that had one, its `probe_ok` the share of the probed minutes whose probe reached the target.

import type { Database } from './database.ts';
import { HistorySeries, weighted, type Retention } from './history.ts';
import { trigger, type Derivation } from './trigger.ts';
import { ALL_EXITS } from './tunnels.ts';

export interface PathPoint {
  /** Unix seconds: the start of the step. */
  at: number;
  /** The share of the step's minutes the path was up, from 0 to 1. */
  up: number;
  rtt_us: number | null;
  loss_percent: number | null;
}

/** A point of one exit's path: the entry's session to it, and its own connect to the probe target. */
export interface ExitPathPoint extends PathPoint {
  probe_us: number | null;
  /** The share of the step's probed minutes whose probe reached the target; null: none probed. */
  probe_ok: number | null;
}

export class TunnelPathStore {
  private readonly history: HistorySeries;
  private readonly exitHistory: HistorySeries;
  private readonly sampleStmt;
  private readonly seriesStmt;
  private readonly exitPathsStmts;
  private readonly exitSampleStmt;
  private readonly exitSeriesStmt;

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
    this.exitHistory = new HistorySeries(db, {
      table: 'exit_path_points',
      subject: 'path_id',
      time: 'minute',
      unit: 60,
      values: {
        up: weighted('up'),
        rtt_us: weighted('rtt_us'),
        loss_percent: weighted('loss_percent'),
        probe_us: weighted('probe_us'),
        probe_ok: weighted('probe_ok'),
        points: 'CAST(total(points) AS INTEGER)',
      },
    });
    // A path for each exit of each tunnel, and none for an exit a tunnel no longer has (its points go with it).
    this.exitPathsStmts = [
      db.prepare(
        `INSERT OR IGNORE INTO tunnel_exit_paths (tunnel_id, node_id) SELECT tunnel_id, node_id FROM ${ALL_EXITS}`,
      ),
      db.prepare(`DELETE FROM tunnel_exit_paths WHERE NOT EXISTS (SELECT 1 FROM ${ALL_EXITS} x
        WHERE x.tunnel_id = tunnel_exit_paths.tunnel_id AND x.node_id = tunnel_exit_paths.node_id)`),
    ];
    // What the entry last said of each exit, while it is up itself (else every exit's path is down, measured by none).
    this.exitSampleStmt = db.prepare(`INSERT INTO exit_path_points (path_id, minute, up, rtt_us, loss_percent, probe_us,
        probe_ok)
      SELECT path_id, :minute, CASE WHEN live THEN 1.0 ELSE 0.0 END, CASE WHEN live THEN rtt_us END,
          CASE WHEN live THEN loss_percent END, CASE WHEN live THEN probe_us END,
          CASE WHEN NOT live THEN NULL WHEN probe_failed THEN 0.0 WHEN probe_us IS NOT NULL THEN 1.0 END
        FROM (SELECT p.id AS path_id, t.entry_status = 'up' AND x.value ->> 'state' = 'up' AS live,
            x.value ->> 'rtt_us' AS rtt_us, x.value ->> 'loss_percent' AS loss_percent,
            x.value ->> 'probe_us' AS probe_us, x.value ->> 'probe_failed' AS probe_failed
          FROM tunnels t, json_each(t.exit_paths) x
            JOIN tunnel_exit_paths p ON p.tunnel_id = t.id AND p.node_id = x.value ->> 'node_id'
          WHERE t.exit_paths IS NOT NULL)
        WHERE true
      ON CONFLICT (path_id, minute) DO UPDATE SET up = excluded.up, rtt_us = excluded.rtt_us,
        loss_percent = excluded.loss_percent, probe_us = excluded.probe_us, probe_ok = excluded.probe_ok`);
    this.exitSeriesStmt = db.prepare(`SELECT (minute * 60 / CAST(:step AS INTEGER)) * CAST(:step AS INTEGER) AS at,
        ${weighted('up')} AS up, ${weighted('rtt_us')} AS rtt_us, ${weighted('loss_percent')} AS loss_percent,
        ${weighted('probe_us')} AS probe_us, ${weighted('probe_ok')} AS probe_ok
      FROM exit_path_points
      WHERE path_id = (SELECT id FROM tunnel_exit_paths WHERE tunnel_id = :tunnel_id AND node_id = :node_id)
        AND minute >= :from / 60 AND minute < :to / 60
      GROUP BY 1 ORDER BY 1`);
    this.seriesStmt = db.prepare(`SELECT (minute * 60 / CAST(:step AS INTEGER)) * CAST(:step AS INTEGER) AS at,
        ${weighted('up')} AS up, ${weighted('rtt_us')} AS rtt_us, ${weighted('loss_percent')} AS loss_percent
      FROM tunnel_paths WHERE tunnel_id = :tunnel_id AND minute >= :from / 60 AND minute < :to / 60
      GROUP BY 1 ORDER BY 1`);
  }

  /**
   * Inside a write: every tunnel's point for `minute` (Unix minutes), and every exit's that its entry said how it
   * stands (agents older than several exits say nothing of them), from how they stand now.
   */
  sample(minute: number): void {
    this.sampleStmt.run({ minute });
    for (const statement of this.exitPathsStmts) statement.run();
    this.exitSampleStmt.run({ minute });
  }

  /** The points of tunnel `tunnelId`'s path through exit node `nodeId`, as `series` gives the tunnel's. */
  exitSeries(tunnelId: number, nodeId: number, from: number, to: number, step: number): ExitPathPoint[] {
    return this.exitSeriesStmt.all({
      tunnel_id: tunnelId,
      node_id: nodeId,
      from,
      to,
      step,
    }) as unknown as ExitPathPoint[];
  }

  /** A tunnel's points from `from` to `to` (Unix seconds), averaged per `step` seconds (a multiple of 60). */
  series(tunnelId: number, from: number, to: number, step: number): PathPoint[] {
    return this.seriesStmt.all({ tunnel_id: tunnelId, from, to, step }) as unknown as PathPoint[];
  }

  /** Inside a write: a step of rolling the points up (history.ts). Returns whether there is more to do. */
  rollUp(now: number, keep: Retention): boolean {
    return this.history.step(now, keep) || this.exitHistory.step(now, keep);
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
  {
    name: 'exit_path_points',
    triggers: [
      trigger(
        'exit_path_points_delete',
        `AFTER DELETE ON tunnel_exit_paths BEGIN
    DELETE FROM exit_path_points WHERE path_id = OLD.id;
  END`,
      ),
    ],
    rebuild: 'DELETE FROM exit_path_points WHERE path_id NOT IN (SELECT id FROM tunnel_exit_paths)',
  },
];
