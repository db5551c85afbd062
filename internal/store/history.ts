// Time series kept at falling resolution: a row a minute while recent, then a row an hour, then a row a day, then
// nothing. Rows are written at the resolution their time has (a late report lands in the hour or day that holds it),
// and the maintenance folds aged rows into coarser ones in small steps, each its own short transaction, subject by
// subject through the primary key: no step reads more than about STEP_ROWS rows, whatever the table holds, and no
// index beyond the key is needed. A fold replaces rows by their aggregate in one transaction, so a reader sees either
// the fine rows or the coarse one, never both nor neither.

import type { Database, Statement } from './database.ts';

const MINUTE = 60;
const HOUR = 3600;
const DAY = 86_400;

/**
 * The average of `column` over a group of points in SQL, each weighing the minutes it stands for (its `points`); null
 * if none has it: how a series of averages (vitals, tunnels' paths) folds and is read per step.
 */
export function weighted(column: string): string {
  return `total(${column} * 1.0 * points) / nullif(total(CASE WHEN ${column} IS NULL THEN 0 ELSE points END), 0)`;
}

/**
 * `align` in SQL: the start of the minute, hour or day that holds `column` (Unix seconds), given the parameters
 * `:hours_until` and `:days_until` of `resolutions()`.
 */
export function alignedSql(column: string): string {
  const floor = (step: number) => `${column} - ((${column} % ${step}) + ${step}) % ${step}`;
  return `CASE WHEN ${column} < :days_until THEN ${floor(DAY)} WHEN ${column} < :hours_until THEN ${floor(HOUR)}
    ELSE ${floor(MINUTE)} END`;
}

/** Rows one roll-up step reads or writes, give or take a bucket's: a few milliseconds of the write lock. */
export const STEP_ROWS = 500;

/** How long a series keeps each resolution, in seconds of age. */
export interface Retention {
  /** Minutes are folded into hours once older than this. */
  minutes: number;
  /** Hours are folded into days once older than this. */
  hours: number;
  /** Anything older than this is deleted. */
  all: number;
}

/** A table of rows (subject, time, values...) keyed by subject and time. */
export interface SeriesShape {
  table: string;
  /** The column naming what a row counts (a rule, a node). */
  subject: string;
  time: string;
  /** Seconds per unit of the time column. */
  unit: number;
  /** Each value column and the SQL aggregate that makes a coarser row of the finer ones of a group. */
  values: Record<string, string>;
}

/** A roll-up under way: folding [from, until) to `resolution` (or deleting it), at `subject`, up to `at`. */
interface Pass {
  kind: 'fold' | 'prune';
  resolution: number;
  from: number;
  until: number;
  subject: number;
  at: number;
}

export interface Bounds {
  hours_until: number;
  days_until: number;
  pruned_until: number;
}

export class HistorySeries {
  private bounds: Bounds;
  private pass: Pass | null;
  private readonly unit: number;
  private readonly saveStmt: Statement;
  private readonly nextSubjectStmt: Statement;
  private readonly firstStmt: Statement;
  private readonly nthStmt: Statement;
  private readonly foldedStmt: Statement;
  private readonly deleteStmt: Statement;
  private readonly insertStmt: Statement;

  constructor(
    db: Database,
    private readonly shape: SeriesShape,
  ) {
    const { table, subject, time, values } = shape;
    this.unit = shape.unit;
    const saved = db
      .prepare('SELECT hours_until, days_until, pruned_until, pass FROM history_rollups WHERE series = ?')
      .get(table) as (Bounds & { pass: string | null }) | undefined;
    this.bounds = saved ?? { hours_until: 0, days_until: 0, pruned_until: 0 };
    this.pass = saved?.pass ? (JSON.parse(saved.pass) as Pass) : null;
    this.saveStmt = db.prepare(`INSERT INTO history_rollups (series, hours_until, days_until, pruned_until, pass)
      VALUES (:series, :hours_until, :days_until, :pruned_until, :pass)
      ON CONFLICT (series) DO UPDATE SET hours_until = excluded.hours_until, days_until = excluded.days_until,
        pruned_until = excluded.pruned_until, pass = excluded.pass`);
    this.nextSubjectStmt = db.prepare(`SELECT ${subject} AS s FROM ${table} WHERE ${subject} > ? ORDER BY ${subject}
      LIMIT 1`);
    const range = `${subject} = :s AND ${time} >= :a AND ${time} < :b`;
    this.firstStmt = db.prepare(`SELECT ${time} AS t FROM ${table} WHERE ${range} ORDER BY ${time} LIMIT 1`);
    this.nthStmt = db.prepare(`SELECT ${time} AS t FROM ${table} WHERE ${range} ORDER BY ${time} LIMIT 1
      OFFSET ${STEP_ROWS}`);
    const columns = Object.keys(values);
    // A number is bound as a real: cast, or the division would not round down.
    this.foldedStmt = db.prepare(`SELECT (${time} / CAST(:r AS INTEGER)) * CAST(:r AS INTEGER) AS t,
        ${columns.map((c) => `${values[c]} AS ${c}`)}
      FROM ${table} WHERE ${range} GROUP BY 1`);
    this.deleteStmt = db.prepare(`DELETE FROM ${table} WHERE ${range}`);
    this.insertStmt = db.prepare(`INSERT INTO ${table} (${subject}, ${time}, ${columns})
      VALUES (:s, :t, ${columns.map((c) => `:${c}`)})`);
  }

  /** Where each resolution starts now, and before when nothing is kept (Unix seconds; see `alignedSql`). */
  resolutions(): Bounds {
    return { ...this.bounds };
  }

  /** The time (Unix seconds) at which a row for `seconds` belongs: the start of its minute, hour or day. */
  align(seconds: number): number {
    const resolution = seconds < this.bounds.days_until ? DAY : seconds < this.bounds.hours_until ? HOUR : MINUTE;
    return seconds - (((seconds % resolution) + resolution) % resolution);
  }

  /**
   * Inside a write: rolls up about `budget` rows' worth (deleted, inserted or looked at) of what has aged past `keep`
   * at `now` (Unix seconds). Returns whether there is more to do.
   */
  step(now: number, keep: Retention, budget = STEP_ROWS): boolean {
    let done = 0;
    while (done < budget) {
      this.pass ??= this.begin(now, keep);
      if (!this.pass) break;
      done += this.advance(this.pass, budget - done);
    }
    this.saveStmt.run({ series: this.shape.table, ...this.bounds, pass: this.pass && JSON.stringify(this.pass) });
    return this.pass !== null || this.due(now, keep) !== null;
  }

  /** The pass that is due at `now`, moving its bound (so rows written from now on are written at its resolution). */
  private begin(now: number, keep: Retention): Pass | null {
    const due = this.due(now, keep);
    if (!due) return null;
    const { bound, resolution, kind } = due;
    const u = this.unit;
    // A prune looks from the start of time: it costs a seek a subject, and nothing is left behind.
    const from = kind === 'prune' ? 0 : this.bounds[bound] / u;
    const pass = { kind, resolution: resolution / u, from, until: due.until / u, subject: -1 };
    this.bounds = { ...this.bounds, [bound]: due.until };
    return { ...pass, at: pass.from };
  }

  private due(now: number, keep: Retention) {
    const hours = floorTo(now - keep.minutes, HOUR);
    const days = floorTo(now - keep.hours, DAY);
    const pruned = floorTo(now - keep.all, DAY);
    if (hours > this.bounds.hours_until)
      return { kind: 'fold' as const, bound: 'hours_until' as const, resolution: HOUR, until: hours };
    if (days > this.bounds.days_until)
      return { kind: 'fold' as const, bound: 'days_until' as const, resolution: DAY, until: days };
    if (pruned > this.bounds.pruned_until)
      return { kind: 'prune' as const, bound: 'pruned_until' as const, resolution: 1, until: pruned };
    return null;
  }

  /** Works through `pass` for about `budget` rows; closes it when every subject is done. Returns the rows' worth. */
  private advance(pass: Pass, budget: number): number {
    let done = 0;
    while (done < budget) {
      const first = pass.subject < 0 ? undefined : this.time(this.firstStmt, pass.subject, pass.at, pass.until);
      done++;
      if (first === undefined) {
        const next = this.nextSubjectStmt.get(pass.subject) as { s: number } | undefined;
        if (!next) {
          this.pass = null;
          break;
        }
        pass.subject = next.s;
        pass.at = pass.from;
        continue;
      }
      const start = floorTo(first, pass.resolution);
      const nth = this.time(this.nthStmt, pass.subject, start, pass.until);
      let end = nth === undefined ? pass.until : floorTo(nth, pass.resolution);
      if (end <= start) end = Math.min(start + pass.resolution, pass.until);
      const range = { s: pass.subject, a: start, b: end };
      const folded =
        pass.kind === 'fold'
          ? (this.foldedStmt.all({ ...range, r: pass.resolution }) as Record<string, number | null>[])
          : [];
      done += Number(this.deleteStmt.run(range).changes);
      for (const row of folded) this.insertStmt.run({ s: pass.subject, ...row });
      done += folded.length;
      pass.at = end;
    }
    return done;
  }

  private time(statement: Statement, s: number, a: number, b: number): number | undefined {
    return (statement.get({ s, a, b }) as { t: number } | undefined)?.t;
  }
}

function floorTo(value: number, step: number): number {
  return value - (((value % step) + step) % step);
}
