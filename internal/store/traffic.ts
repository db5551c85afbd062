// SQL for traffic: each rule's, each node's and the master's history (minutes, hours, days: history.ts), read back
// as a time series at any step, and the report streams of each node that make a resent report count once. Every count
// saturates at 2^53-1, so whatever an agent reports, it reads back as a safe integer.

import type { Database, Statement } from './database.ts';
import { safeCount, safeSum } from './counts.ts';
import { HistorySeries, type Retention } from './history.ts';
import { LegacyTraffic } from './legacy-traffic.ts';
import { LEGACY_TRAFFIC } from './migrations.ts';

/** How many report streams a node keeps; an agent makes a new one only with a new state dir. */
const STREAMS_PER_NODE = 8;

/** Rows of past days forgotten at most in one step of the housekeeping. */
const PRUNED_DAYS = 10_000;

/** The start of the UTC day that holds `seconds`. */
const dayOf = (seconds: number) => seconds - (((seconds % 86_400) + 86_400) % 86_400);

/** A rule or node and what it carried on a day. */
export interface Busiest {
  id: number;
  name: string;
  /** A rule's node; absent for a node. */
  node_id?: number;
  bytes_in: number;
  bytes_out: number;
}

export interface TrafficPoint {
  at: number;
  bytes_in: number;
  bytes_out: number;
}

type Subject = 'rule' | 'node' | 'total';

const TABLES: Record<Subject, string> = { rule: 'traffic_by_rule', node: 'traffic_by_node', total: 'traffic_total' };

export class TrafficStore {
  private readonly history: Record<Subject, HistorySeries>;
  private readonly db: Database;
  private seriesStmts!: Record<Subject, Statement>;
  /** The minute buckets of before migration 20, while some are still to be moved into the history. */
  private legacy: LegacyTraffic | null;
  private readonly addStmts: Record<Subject, Statement>;
  private readonly ruleOnNodeStmt;
  private readonly totalsStmt;
  private readonly ruleTotalStmt;
  private readonly nodeTotalStmt;
  private readonly exitTotalStmt;
  private readonly streamStmt;
  private readonly countedAtStmt;
  private readonly advanceStmt;
  private readonly trimStreamsStmt;
  private readonly todayStmt;
  private readonly busiestStmts;
  private readonly busiestOwnedStmt;
  private readonly pruneTodayStmt;

  constructor(db: Database) {
    this.db = db;
    const fold = { bytes_in: safeSum('bytes_in'), bytes_out: safeSum('bytes_out') };
    const series = (table: string) =>
      new HistorySeries(db, { table, subject: 'id', time: 'start', unit: 1, values: fold });
    this.history = { rule: series(TABLES.rule), node: series(TABLES.node), total: series(TABLES.total) };
    const add = (table: string) =>
      db.prepare(`INSERT INTO ${table} (id, start, bytes_in, bytes_out) VALUES (?, ?, ?, ?)
        ON CONFLICT (id, start) DO UPDATE SET bytes_in = ${safeCount('bytes_in + excluded.bytes_in')},
          bytes_out = ${safeCount('bytes_out + excluded.bytes_out')}`);
    this.addStmts = { rule: add(TABLES.rule), node: add(TABLES.node), total: add(TABLES.total) };
    this.ruleOnNodeStmt = db.prepare('SELECT 1 AS yes FROM rules WHERE id = ? AND node_id = ?');
    this.legacy = LegacyTraffic.open(db, {
      rule: { table: TABLES.rule, history: this.history.rule },
      node: { table: TABLES.node, history: this.history.node },
      total: { table: TABLES.total, history: this.history.total },
    });
    this.prepareSeries();
    // Kept by the tallies' triggers (store/rule-view.ts), each rule's count cut to a safe integer as it is added.
    this.totalsStmt = db.prepare(
      `SELECT ${safeSum('max(0, bytes_in)')} AS bytes_in, ${safeSum('max(0, bytes_out)')} AS bytes_out ` +
        'FROM rule_tallies',
    );
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
        // Of several exits, the one the entry last said it chose: what the bytes most likely left by.
        'WHERE id = (SELECT coalesce(t.chosen_exit_node_id, t.exit_node_id) FROM rules r JOIN tunnels t ' +
        'ON t.id = r.tunnel_id WHERE r.id = ?3)',
    );
    this.streamStmt = db.prepare('SELECT seq FROM traffic_streams WHERE node_id = ? AND stream = ?');
    this.countedAtStmt = db.prepare('SELECT max(seen_at) AS at FROM traffic_streams WHERE node_id = ?');
    this.advanceStmt =
      db.prepare(`INSERT INTO traffic_streams (node_id, stream, seq, seen_at) VALUES (:node_id, :stream, :seq, :at)
      ON CONFLICT (node_id, stream) DO UPDATE SET seq = excluded.seq, seen_at = excluded.seen_at`);
    this.trimStreamsStmt = db.prepare(`DELETE FROM traffic_streams WHERE node_id = :node_id AND stream NOT IN
      (SELECT stream FROM traffic_streams WHERE node_id = :node_id ORDER BY seen_at DESC,
        rowid DESC LIMIT ${STREAMS_PER_NODE})`);
    // A report of a later day starts the row again; one of an earlier day (resent late) is yesterday's, not today's.
    const today = (column: string) =>
      `CASE WHEN excluded.day > day THEN excluded.${column} WHEN excluded.day = day THEN ` +
      `${safeCount(`${column} + excluded.${column}`)} ELSE ${column} END`;
    this.todayStmt = db.prepare(`INSERT INTO traffic_today (kind, id, day, bytes_in, bytes_out, bytes)
      VALUES (:kind, :id, :day, :bytes_in, :bytes_out, ${safeCount(':bytes_in + :bytes_out')})
      ON CONFLICT (kind, id) DO UPDATE SET bytes_in = ${today('bytes_in')}, bytes_out = ${today('bytes_out')},
        bytes = ${today('bytes')}, day = max(day, excluded.day)`);
    // Through the index, busiest first, stopping at the limit; rows of what was deleted are passed over.
    const busiest = (table: string, extra: string) =>
      db.prepare(`SELECT t.id, x.name, ${extra} t.bytes_in, t.bytes_out FROM traffic_today t
        JOIN ${table} x ON x.id = t.id WHERE t.kind = ? AND t.day = ? ORDER BY t.bytes DESC, t.id DESC LIMIT ?`);
    this.busiestStmts = { rule: busiest('rules', 'x.node_id,'), node: busiest('nodes', '') };
    // A tenant's: their rules through the owner's index, so what is sorted is theirs alone (their plan bounds it).
    this.busiestOwnedStmt = db.prepare(`SELECT t.id, r.name, r.node_id, t.bytes_in, t.bytes_out FROM rules r
      JOIN traffic_today t ON t.kind = 'rule' AND t.id = r.id WHERE r.owner_id = ? AND t.day = ?
      ORDER BY t.bytes DESC, t.id DESC LIMIT ?`);
    // A bounded step: at midnight every row is of the day before, and a row a report starts again needs none.
    this.pruneTodayStmt = db.prepare(`DELETE FROM traffic_today WHERE (kind, id) IN (SELECT kind, id FROM traffic_today
      WHERE kind IN ('rule', 'node') AND day < ? LIMIT ${PRUNED_DAYS})`);
  }

  /** A series' statement: its rows in [from, to) summed per step; a rule's with its minute buckets not moved yet. */
  private prepareSeries(): void {
    const statement = (subject: Subject) =>
      this.db.prepare(`SELECT (start / CAST(:step AS INTEGER)) * CAST(:step AS INTEGER) AS at,
          ${safeSum(safeCount('bytes_in'))} AS bytes_in, ${safeSum(safeCount('bytes_out'))} AS bytes_out
        FROM (SELECT start, bytes_in, bytes_out FROM ${TABLES[subject]} WHERE id = :id AND start >= :from
          AND start < :to
        ${
          subject === 'rule' && this.legacy
            ? `UNION ALL SELECT bucket_start, bytes_in, bytes_out FROM ${LEGACY_TRAFFIC} WHERE rule_id = :id
          AND bucket_start >= :from AND bucket_start < :to`
            : ''
        })
        GROUP BY 1 ORDER BY 1`);
    this.seriesStmts = { rule: statement('rule'), node: statement('node'), total: statement('total') };
  }

  /**
   * Adds bytes counted for a rule on a node at `atSeconds` to the rule's, the node's and the master's history (in the
   * minute, hour or day that holds it) and to the rule's and node's totals, so history and totals always agree; for
   * a rule through a tunnel,
   * also to the exit node's total, which relayed the same bytes (the entry's count is the one
   * count: the rule is never counted twice). Counts nothing (and returns false) unless the
   * rule exists on that node: an agent reports only its own rules. `refused` (connections and datagrams the node
   * turned away) counts on the rule alone, and so does its quota's count. Call inside a write.
   */
  record(ruleId: number, nodeId: number, atSeconds: number, bytesIn: number, bytesOut: number, refused = 0): boolean {
    if (Number(this.ruleTotalStmt.run(bytesIn, bytesOut, ruleId, nodeId, refused).changes) === 0) return false;
    if (bytesIn === 0 && bytesOut === 0) return true;
    this.add('rule', ruleId, atSeconds, bytesIn, bytesOut);
    this.add('node', nodeId, atSeconds, bytesIn, bytesOut);
    this.add('total', 0, atSeconds, bytesIn, bytesOut);
    const day = dayOf(atSeconds);
    this.todayStmt.run({ kind: 'rule', id: ruleId, day, bytes_in: bytesIn, bytes_out: bytesOut });
    this.todayStmt.run({ kind: 'node', id: nodeId, day, bytes_in: bytesIn, bytes_out: bytesOut });
    this.nodeTotalStmt.run(bytesIn, bytesOut, nodeId);
    this.exitTotalStmt.run(bytesIn, bytesOut, ruleId);
    return true;
  }

  private add(subject: Subject, id: number, atSeconds: number, bytesIn: number, bytesOut: number): void {
    this.addStmts[subject].run(id, this.history[subject].align(atSeconds), bytesIn, bytesOut);
  }

  /**
   * What carried the most bytes (in and out) on the UTC day of `atSeconds`, busiest first: rules (of `ownerId` alone,
   * unless null) or nodes (what their rules counted).
   */
  busiestToday(kind: 'rule' | 'node', atSeconds: number, limit: number, ownerId: number | null = null): Busiest[] {
    const day = dayOf(atSeconds);
    const statement = ownerId === null ? this.busiestStmts[kind] : this.busiestOwnedStmt;
    return statement.all(...(ownerId === null ? [kind, day, limit] : [ownerId, day, limit])) as unknown as Busiest[];
  }

  /** Inside a write: forgets up to PRUNED_DAYS rows of the days before the UTC day of `atSeconds`. */
  pruneDays(atSeconds: number): number {
    return Number(this.pruneTodayStmt.run(dayOf(atSeconds)).changes);
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

  /**
   * Traffic in [from, to) (Unix seconds) summed per `step` seconds; only steps with traffic. A rule's (and with a node
   * too, none unless the rule is on that node), a node's (what its rules counted), or the master's. Each row is at
   * the start of its minute, hour or day, so a step finer than the rows of its time has points only where they start.
   */
  series(filter: {
    from: number;
    to: number;
    step: number;
    node_id: number | null;
    rule_id: number | null;
  }): TrafficPoint[] {
    const { from, to, step, node_id, rule_id } = filter;
    if (rule_id !== null && node_id !== null && !this.ruleOnNodeStmt.get(rule_id, node_id)) return [];
    const [subject, id]: [Subject, number] =
      rule_id !== null ? ['rule', rule_id] : node_id !== null ? ['node', node_id] : ['total', 0];
    return this.seriesStmts[subject].all({ from, to, step, id }) as unknown as TrafficPoint[];
  }

  /** Bytes counted on all current rules. */
  totals(): { bytes_in: number; bytes_out: number } {
    return this.totalsStmt.get() as { bytes_in: number; bytes_out: number };
  }

  /** Whether the minute buckets of before are still to be counted into the nodes' history (see countLegacyNodes). */
  legacyNodesPending(): boolean {
    return this.legacy?.nodesPending() ?? false;
  }

  /**
   * Inside a write, before a primary serves: counts the minute buckets of before into the nodes' and the master's
   * history, in one pass (see legacy-traffic.ts). Returns the rows written.
   */
  countLegacyNodes(now: number, keep: Retention): number {
    return this.legacy?.countNodes(now, keep) ?? 0;
  }

  /**
   * Inside a write: about STEP_ROWS rows' worth of rolling the history up (history.ts), then of moving the minute
   * buckets of before into it. Returns whether there is more to do.
   */
  rollUp(now: number, keep: Retention): boolean {
    // The history's bounds first (cheap while its tables are young), so old buckets move straight into hours and days.
    if (this.history.rule.step(now, keep) || this.history.node.step(now, keep) || this.history.total.step(now, keep))
      return true;
    if (!this.legacy || this.legacy.nodesPending()) return false;
    if (this.legacy.step()) return true;
    this.legacy = null;
    this.prepareSeries();
    return true;
  }
}
