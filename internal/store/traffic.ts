// SQL for traffic: per-rule minute buckets, read back as a time series at any step, and the
// report streams of each node that make a resent report count once. Every count saturates at
// 2^53-1, so whatever an agent reports, it reads back as a safe integer.

import type { Database } from './database.ts';
import { FilteredQuery } from './filters.ts';

/** The largest count stored or shown: Number.MAX_SAFE_INTEGER, as SQL. */
const MAX_COUNT = '9007199254740991';

/** `expression` (a count) as a safe integer, also when the database holds a value out of that range. */
export function safeCount(expression: string): string {
  return `max(0, min(${expression}, ${MAX_COUNT}))`;
}

/** A sum of counts that cannot overflow: total() is a float, cut to a safe integer. */
function safeSum(column: string): string {
  return `CAST(min(total(${column}), ${MAX_COUNT}) AS INTEGER)`;
}

/** How many report streams a node keeps; an agent makes a new one only with a new state dir. */
const STREAMS_PER_NODE = 8;

export interface TrafficPoint {
  at: number;
  bytes_in: number;
  bytes_out: number;
}

export class TrafficStore {
  private readonly seriesQuery;
  private readonly totalsStmt;
  private readonly pruneStmt;
  private readonly bucketStmt;
  private readonly ruleTotalStmt;
  private readonly nodeTotalStmt;
  private readonly exitTotalStmt;
  private readonly streamStmt;
  private readonly countedAtStmt;
  private readonly advanceStmt;
  private readonly trimStreamsStmt;

  constructor(db: Database) {
    this.seriesQuery = new FilteredQuery(
      db,
      `SELECT (bucket_start / CAST(:step AS INTEGER)) * CAST(:step AS INTEGER) AS at,
        ${safeSum(safeCount('bytes_in'))} AS bytes_in, ${safeSum(safeCount('bytes_out'))} AS bytes_out
      FROM traffic_buckets
      WHERE bucket_start >= :from AND bucket_start < :to {filters}
      GROUP BY 1 ORDER BY 1`,
      { node_id: 'node_id = :node_id', rule_id: 'rule_id = :rule_id' },
    );
    // Kept by the triggers of migration 9, each rule's count cut to a safe integer as it is added.
    this.totalsStmt = db.prepare(
      `SELECT ${safeSum('max(0, bytes_in)')} AS bytes_in, ${safeSum('max(0, bytes_out)')} AS bytes_out ` +
        'FROM rule_tallies',
    );
    this.pruneStmt = db.prepare('DELETE FROM traffic_buckets WHERE bucket_start < ?');
    this.bucketStmt =
      db.prepare(`INSERT INTO traffic_buckets (rule_id, node_id, bucket_start, bytes_in, bytes_out) VALUES (?, ?, ?,
        ?, ?)
      ON CONFLICT (rule_id, bucket_start) DO UPDATE SET bytes_in = ${safeCount('bytes_in + excluded.bytes_in')},
        bytes_out = ${safeCount('bytes_out + excluded.bytes_out')}`);
    // A rule with a quota counts the bytes its quota bills (migration 13) in the same write.
    this.ruleTotalStmt = db.prepare(
      `UPDATE rules SET bytes_in = ${safeCount('bytes_in + ?1')}, bytes_out = ${safeCount('bytes_out + ?2')}, ` +
        `refused = ${safeCount('refused + ?5')}, quota_used = CASE quota_direction ` +
        `WHEN 'in' THEN ${safeCount('quota_used + ?1')} WHEN 'out' THEN ${safeCount('quota_used + ?2')} ` +
        `WHEN 'both' THEN ${safeCount('quota_used + ?1 + ?2')} ELSE quota_used END ` +
        'WHERE id = ?3 AND node_id = ?4',
    );
    this.nodeTotalStmt = db.prepare(
      `UPDATE nodes SET bytes_in = ${safeCount('bytes_in + ?1')}, bytes_out = ${safeCount('bytes_out + ?2')} ` +
        `WHERE id = ?3`,
    );
    this.exitTotalStmt = db.prepare(
      `UPDATE nodes SET bytes_in = ${safeCount('bytes_in + ?1')}, bytes_out = ${safeCount('bytes_out + ?2')} ` +
        `WHERE id = (SELECT t.exit_node_id FROM rules r JOIN tunnels t ON t.id = r.tunnel_id WHERE r.id = ?3)`,
    );
    this.streamStmt = db.prepare('SELECT seq FROM traffic_streams WHERE node_id = ? AND stream = ?');
    this.countedAtStmt = db.prepare('SELECT max(seen_at) AS at FROM traffic_streams WHERE node_id = ?');
    this.advanceStmt =
      db.prepare(`INSERT INTO traffic_streams (node_id, stream, seq, seen_at) VALUES (:node_id, :stream, :seq, :at)
      ON CONFLICT (node_id, stream) DO UPDATE SET seq = excluded.seq, seen_at = excluded.seen_at`);
    this.trimStreamsStmt = db.prepare(`DELETE FROM traffic_streams WHERE node_id = :node_id AND stream NOT IN
      (SELECT stream FROM traffic_streams WHERE node_id = :node_id ORDER BY seen_at DESC,
        rowid DESC LIMIT ${STREAMS_PER_NODE})`);
  }

  /**
   * Adds bytes counted for a rule on a node at `atSeconds` to its minute bucket and to the
   * rule's and node's totals, so buckets and totals always agree; for a rule through a tunnel,
   * also to the exit node's total, which relayed the same bytes (the entry's count is the one
   * count: the rule is never counted twice). Counts nothing (and returns false) unless the
   * rule exists on that node: an agent reports only its own rules. `refused` (connections and datagrams the node
   * turned away) counts on the rule alone, and so does its quota's count. Call inside a write.
   */
  record(ruleId: number, nodeId: number, atSeconds: number, bytesIn: number, bytesOut: number, refused = 0): boolean {
    if (Number(this.ruleTotalStmt.run(bytesIn, bytesOut, ruleId, nodeId, refused).changes) === 0) return false;
    if (bytesIn === 0 && bytesOut === 0) return true;
    this.bucketStmt.run(ruleId, nodeId, atSeconds - (atSeconds % 60), bytesIn, bytesOut);
    this.nodeTotalStmt.run(bytesIn, bytesOut, nodeId);
    this.exitTotalStmt.run(bytesIn, bytesOut, ruleId);
    return true;
  }

  /** When the node's last report was counted (RFC 3339), or null when none was. */
  countedAt(nodeId: number): string | null {
    return (this.countedAtStmt.get(nodeId) as { at: string | null }).at;
  }

  /** The highest report `seq` counted on the node's `stream`, or 0 for a stream not seen (or long forgotten). */
  streamSeq(nodeId: number, stream: string): number {
    return (this.streamStmt.get(nodeId, stream) as { seq: number } | undefined)?.seq ?? 0;
  }

  /**
   * Records that `stream` has been counted up to `seq` (from `previous`, what streamSeq said).
   * A node keeps its STREAMS_PER_NODE most recently used streams. Call inside a write.
   */
  advanceStream(nodeId: number, stream: string, previous: number, seq: number, at: string): void {
    this.advanceStmt.run({ node_id: nodeId, stream, seq, at });
    if (previous === 0) this.trimStreamsStmt.run({ node_id: nodeId });
  }

  /** Buckets in [from, to) (Unix seconds) summed per `step` seconds; only steps with traffic. */
  series(filter: {
    from: number;
    to: number;
    step: number;
    node_id: number | null;
    rule_id: number | null;
  }): TrafficPoint[] {
    return this.seriesQuery.all(filter) as unknown as TrafficPoint[];
  }

  /** Bytes counted on all current rules. */
  totals(): { bytes_in: number; bytes_out: number } {
    return this.totalsStmt.get() as { bytes_in: number; bytes_out: number };
  }

  prune(beforeUnixSeconds: number): number {
    return Number(this.pruneStmt.run(beforeUnixSeconds).changes);
  }
}
