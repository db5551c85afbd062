// The minute buckets of before migration 20 (a row a rule a minute, with the rule's node), moved into the history
// (history.ts) once, straight into the minute, hour or day their time has: SQL sums a range of buckets at a time, as a
// fold does, and none is read into JavaScript.
//
// The nodes' and the master's sums are counted in one pass before a primary first serves (`countNodes`): read from
// the old table, their series grew with it (2.3 s for the master's 30 days over 8.6 million buckets). Each rule's
// buckets then move in steps of the maintenance, in the order of the table's key (migration 58 clustered it so): a
// step sums a range of neighbouring rows into the rule's history and deletes them in the same write, so what is left
// is what has not moved, which a rule's series reads beside its history, and the pages a step frees are given back
// while the move goes on. Once the table is empty it is dropped.

import type { Database, Statement } from './database.ts';
import { safeCount, safeSum } from './counts.ts';
import { alignedSql, type HistorySeries, type Retention } from './history.ts';
import { LEGACY_TRAFFIC } from './migrations.ts';

/** Buckets read a step: each group of them writes a row (a minute's bucket, a row of its own). */
const STEP_BUCKETS = 2_000;

/** Where the moved buckets go: the history of rules, of nodes and the master's, by table. */
export interface LegacyTargets {
  rule: { table: string; history: HistorySeries };
  node: { table: string; history: HistorySeries };
  total: { table: string; history: HistorySeries };
}

/** SQL adding a row's counts to the one at its key. */
const ADD = `ON CONFLICT (id, start) DO UPDATE SET bytes_in = ${safeCount('bytes_in + excluded.bytes_in')},
  bytes_out = ${safeCount('bytes_out + excluded.bytes_out')}`;

const SUMS = `${safeSum(safeCount('bytes_in'))} AS bytes_in, ${safeSum(safeCount('bytes_out'))} AS bytes_out`;

/** The bounds of `history` as the parameters of `alignedSql` and the time before which nothing is kept. */
function bounds(history: HistorySeries) {
  const { hours_until, days_until, pruned_until } = history.resolutions();
  return { hours_until, days_until, pruned_until };
}

export class LegacyTraffic {
  private readonly countedStmt: Statement;
  private readonly markCountedStmt: Statement;
  private readonly firstStmt: Statement;
  private readonly nthStmt: Statement;
  private readonly countStmt: Statement;
  private readonly moveStmt: Statement;
  private readonly removeStmt: Statement;

  /** Null when this database has no old table (left); see migration 58. */
  static open(db: Database, targets: LegacyTargets): LegacyTraffic | null {
    const found = db
      .prepare('SELECT 1 AS yes FROM sqlite_schema WHERE type = ? AND name = ?')
      .get('table', LEGACY_TRAFFIC);
    return found ? new LegacyTraffic(db, targets) : null;
  }

  private constructor(
    private readonly db: Database,
    private readonly targets: LegacyTargets,
  ) {
    this.countedStmt = db.prepare('SELECT 1 AS yes FROM history_rollups WHERE series = ?');
    this.markCountedStmt = db.prepare('INSERT OR IGNORE INTO history_rollups (series) VALUES (?)');
    this.firstStmt = db.prepare(`SELECT rule_id AS r, bucket_start AS t FROM ${LEGACY_TRAFFIC}
      ORDER BY rule_id, bucket_start LIMIT 1`);
    this.nthStmt = db.prepare(`SELECT bucket_start AS t FROM ${LEGACY_TRAFFIC} WHERE rule_id = ?
      ORDER BY bucket_start LIMIT 1 OFFSET ?`);
    this.countStmt = db.prepare(`SELECT count(*) AS n FROM ${LEGACY_TRAFFIC} WHERE rule_id = ?`);
    this.moveStmt = db.prepare(`INSERT INTO ${targets.rule.table} (id, start, bytes_in, bytes_out)
      SELECT rule_id, ${alignedSql('bucket_start')}, ${SUMS} FROM ${LEGACY_TRAFFIC}
      WHERE rule_id = :rule AND bucket_start >= :pruned_until AND bucket_start < :until GROUP BY 2 ORDER BY 2 ${ADD}`);
    this.removeStmt = db.prepare(`DELETE FROM ${LEGACY_TRAFFIC} WHERE rule_id = ? AND bucket_start < ?`);
  }

  /** Whether the nodes' and the master's sums are still to be counted (see countNodes). */
  nodesPending(): boolean {
    return !this.countedStmt.get(LEGACY_TRAFFIC);
  }

  /**
   * Inside a write: counts every bucket into its node's and the master's history, in one pass over the table (about
   * 0.8 s a million buckets here), once each series' bounds are where `now` puts them, so that old buckets land in
   * hours and days at once. Returns the rows written.
   */
  countNodes(now: number, keep: Retention): number {
    const { node, total } = this.targets;
    while (node.history.step(now, keep) || total.history.step(now, keep));
    // Nodes and the master share their bounds, both brought to `now` above.
    const { pruned_until, ...aligned } = bounds(node.history);
    this.db.prepare('DROP TABLE IF EXISTS temp.legacy_node_sums').run();
    this.db
      .prepare(
        `CREATE TEMP TABLE legacy_node_sums AS SELECT node_id AS id, ${alignedSql('bucket_start')} AS start,
        ${SUMS} FROM ${LEGACY_TRAFFIC} WHERE bucket_start >= :pruned_until GROUP BY 1, 2`,
      )
      .run({ ...aligned, pruned_until });
    const into = (table: string, id: string, group: string) =>
      Number(
        this.db
          .prepare(
            `INSERT INTO ${table} (id, start, bytes_in, bytes_out)
            SELECT ${id}, start, ${SUMS} FROM temp.legacy_node_sums GROUP BY ${group} ORDER BY 1, 2 ${ADD}`,
          )
          .run().changes,
      );
    const rows = into(node.table, 'id', 'id, start') + into(total.table, '0', 'start');
    this.db.prepare('DROP TABLE temp.legacy_node_sums').run();
    this.markCountedStmt.run(LEGACY_TRAFFIC);
    return rows;
  }

  /**
   * Inside a write, once the nodes are counted: moves about STEP_BUCKETS buckets of rules into their history, or drops
   * the table once it is empty. Returns false once it is dropped (this object is done with then).
   */
  step(): boolean {
    const aligned = bounds(this.targets.rule.history);
    for (let budget = STEP_BUCKETS; budget > 0;) {
      const first = this.firstStmt.get() as { r: number; t: number } | undefined;
      if (!first) {
        this.db.prepare(`DROP TABLE ${LEGACY_TRAFFIC}`).run();
        this.db.prepare('DELETE FROM history_rollups WHERE series = ?').run(LEGACY_TRAFFIC);
        return false;
      }
      const rule = first.r;
      const nth = (this.nthStmt.get(rule, budget) as { t: number } | undefined)?.t;
      const until = nth ?? Number.MAX_SAFE_INTEGER;
      budget = nth === undefined ? budget - 1 - (this.countStmt.get(rule) as { n: number }).n : 0;
      this.moveStmt.run({ ...aligned, rule, until });
      this.removeStmt.run(rule, until);
    }
    return true;
  }
}
