// SQL for node vitals: the latest on the node's row (rendered into its JSON), a point a minute for its chart, folded
// into hours and days as it ages (history.ts): an hour's point is the average of its minutes', weighted by `points`.

import type { Database } from './database.ts';
import { trigger, type Derivation } from './trigger.ts';
import { HistorySeries, weighted, type Retention } from './history.ts';

/** One minute of a node's vitals. */
export interface VitalsPoint {
  cpu_percent: number | null;
  load1: number;
  memory_used_bytes: number;
  rx_bytes_per_second: number | null;
  tx_bytes_per_second: number | null;
}

export interface VitalsSeriesPoint extends VitalsPoint {
  /** Unix seconds: the start of the step. */
  at: number;
}

export class VitalsStore {
  private readonly history: HistorySeries;
  private readonly latestStmt;
  private readonly pointStmt;
  private readonly seriesStmt;
  private readonly allStmt;

  constructor(db: Database) {
    this.history = new HistorySeries(db, {
      table: 'node_vitals',
      subject: 'node_id',
      time: 'minute',
      unit: 60,
      values: {
        cpu_percent: weighted('cpu_percent'),
        load1: weighted('load1'),
        memory_used_bytes: `CAST(${weighted('memory_used_bytes')} AS INTEGER)`,
        rx_bytes_per_second: weighted('rx_bytes_per_second'),
        tx_bytes_per_second: weighted('tx_bytes_per_second'),
        points: 'CAST(total(points) AS INTEGER)',
      },
    });
    this.latestStmt = db.prepare('UPDATE nodes SET vitals = ? WHERE id = ?');
    // A second report within a minute replaces the first: a point is the minute's last word.
    this.pointStmt = db.prepare(`INSERT INTO node_vitals (node_id, minute, cpu_percent, load1, memory_used_bytes,
        rx_bytes_per_second, tx_bytes_per_second)
      SELECT :node_id, :minute, :cpu_percent, :load1, :memory_used_bytes, :rx, :tx WHERE EXISTS
        (SELECT 1 FROM nodes WHERE id = :node_id)
      ON CONFLICT (node_id, minute) DO UPDATE SET cpu_percent = excluded.cpu_percent, load1 = excluded.load1,
        memory_used_bytes = excluded.memory_used_bytes, rx_bytes_per_second = excluded.rx_bytes_per_second,
        tx_bytes_per_second = excluded.tx_bytes_per_second`);
    this.seriesStmt = db.prepare(`SELECT (minute * 60 / CAST(:step AS INTEGER)) * CAST(:step AS INTEGER) AS at,
        ${weighted('cpu_percent')} AS cpu_percent,
        ${weighted('load1')} AS load1, CAST(${weighted('memory_used_bytes')} AS INTEGER) AS memory_used_bytes,
        ${weighted('rx_bytes_per_second')} AS rx_bytes_per_second,
        ${weighted('tx_bytes_per_second')} AS tx_bytes_per_second
      FROM node_vitals WHERE node_id = :node_id AND minute >= :from / 60 AND minute < :to / 60
      GROUP BY 1 ORDER BY 1`);
    this.allStmt = db.prepare('SELECT id, name, vitals FROM nodes WHERE vitals IS NOT NULL ORDER BY id');
  }

  /** Inside a write: the node's latest vitals (`json`, as the API shows them) and the point of their minute. */
  record(nodeId: number, json: string, atSeconds: number, point: VitalsPoint): void {
    this.latestStmt.run(json, nodeId);
    this.pointStmt.run({
      node_id: nodeId,
      minute: Math.floor(atSeconds / 60),
      cpu_percent: point.cpu_percent,
      load1: point.load1,
      memory_used_bytes: point.memory_used_bytes,
      rx: point.rx_bytes_per_second,
      tx: point.tx_bytes_per_second,
    });
  }

  /** A node's points from `from` to `to` (Unix seconds), averaged per `step` seconds (a multiple of 60). */
  series(nodeId: number, from: number, to: number, step: number): VitalsSeriesPoint[] {
    return this.seriesStmt.all({ node_id: nodeId, from, to, step }) as unknown as VitalsSeriesPoint[];
  }

  /** Every node's latest vitals, as JSON text: for the metrics. */
  latest(): { id: number; name: string; vitals: string }[] {
    return this.allStmt.all() as unknown as { id: number; name: string; vitals: string }[];
  }

  /** Inside a write: a step of rolling the points up (history.ts). Returns whether there is more to do. */
  rollUp(now: number, keep: Retention): boolean {
    return this.history.step(now, keep);
  }
}

/** A node's vitals go with it (traffic history outlives what it counts; vitals describe a machine no longer ours). */
export const vitalsDerivations: readonly Derivation[] = [
  {
    name: 'node_vitals',
    triggers: [
      trigger(
        'node_vitals_delete',
        `AFTER DELETE ON nodes BEGIN
    DELETE FROM node_vitals WHERE node_id = OLD.id;
  END`,
      ),
    ],
    rebuild: 'DELETE FROM node_vitals WHERE node_id NOT IN (SELECT id FROM nodes)',
  },
];
