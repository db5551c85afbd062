// SQL for traffic: per-rule minute buckets, read back as a time series at any step.

import type { Database } from './database.ts';

export interface TrafficPoint {
  at: number;
  bytes_in: number;
  bytes_out: number;
}

export class TrafficStore {
  private readonly seriesStmt;
  private readonly totalsStmt;
  private readonly pruneStmt;
  private readonly bucketStmt;
  private readonly ruleTotalStmt;
  private readonly nodeTotalStmt;

  constructor(db: Database) {
    this.seriesStmt = db.prepare(`SELECT (bucket_start / CAST(:step AS INTEGER)) * CAST(:step AS INTEGER) AS at, sum(bytes_in) AS bytes_in, sum(bytes_out) AS bytes_out
      FROM traffic_buckets
      WHERE bucket_start >= :from AND bucket_start < :to
        AND (:node_id IS NULL OR node_id = :node_id)
        AND (:rule_id IS NULL OR rule_id = :rule_id)
      GROUP BY 1 ORDER BY 1`);
    this.totalsStmt = db.prepare('SELECT coalesce(sum(bytes_in), 0) AS bytes_in, coalesce(sum(bytes_out), 0) AS bytes_out FROM rules');
    this.pruneStmt = db.prepare('DELETE FROM traffic_buckets WHERE bucket_start < ?');
    this.bucketStmt = db.prepare(`INSERT INTO traffic_buckets (rule_id, node_id, bucket_start, bytes_in, bytes_out) VALUES (?, ?, ?, ?, ?)
      ON CONFLICT (rule_id, bucket_start) DO UPDATE SET bytes_in = bytes_in + excluded.bytes_in, bytes_out = bytes_out + excluded.bytes_out`);
    this.ruleTotalStmt = db.prepare('UPDATE rules SET bytes_in = bytes_in + ?, bytes_out = bytes_out + ? WHERE id = ? AND node_id = ?');
    this.nodeTotalStmt = db.prepare('UPDATE nodes SET bytes_in = bytes_in + ?, bytes_out = bytes_out + ? WHERE id = ?');
  }

  /**
   * Adds bytes counted for a rule on a node at `atSeconds` to its minute bucket and to the
   * rule's and node's totals, so buckets and totals always agree. Counts nothing (and returns
   * false) unless the rule exists on that node: an agent reports only its own rules. Call
   * inside a write.
   */
  record(ruleId: number, nodeId: number, atSeconds: number, bytesIn: number, bytesOut: number): boolean {
    if (Number(this.ruleTotalStmt.run(bytesIn, bytesOut, ruleId, nodeId).changes) === 0) return false;
    this.bucketStmt.run(ruleId, nodeId, atSeconds - (atSeconds % 60), bytesIn, bytesOut);
    this.nodeTotalStmt.run(bytesIn, bytesOut, nodeId);
    return true;
  }

  /** Buckets in [from, to) (Unix seconds) summed per `step` seconds; only steps with traffic. */
  series(filter: { from: number; to: number; step: number; node_id: number | null; rule_id: number | null }): TrafficPoint[] {
    return this.seriesStmt.all(filter) as unknown as TrafficPoint[];
  }

  /** Bytes counted on all current rules. */
  totals(): { bytes_in: number; bytes_out: number } {
    return this.totalsStmt.get() as { bytes_in: number; bytes_out: number };
  }

  prune(beforeUnixSeconds: number): number {
    return Number(this.pruneStmt.run(beforeUnixSeconds).changes);
  }
}
