// List queries with optional filters. Only the filters in use go into the statement: a condition written once for
// all cases, `(:node_id IS NULL OR node_id = :node_id)`, keeps SQLite from any index on the column, and one node's
// page of a million rules took 47 ms scanning them all. A statement is prepared once per combination of filters.

import type { SQLInputValue } from 'node:sqlite';
import type { Database, Statement } from './database.ts';

type Params = Record<string, SQLInputValue>;

export class FilteredQuery<F extends string> {
  private readonly statements = new Map<string, Statement>();

  constructor(
    private readonly db: Database,
    /** The statement, with `{filters}` where the conditions go (each is put in as `AND condition`). */
    private readonly sql: string,
    /** Each filter's condition, naming its parameter as `:filter`; used when that parameter is not null. */
    private readonly conditions: Record<F, string>,
  ) {}

  all(params: Params & Record<F, SQLInputValue>): Record<string, unknown>[] {
    const bound: Params = {};
    const used: string[] = [];
    for (const [name, value] of Object.entries(params)) {
      if (!(name in this.conditions)) bound[name] = value;
      else if (value !== null && value !== undefined) {
        bound[name] = value;
        used.push(name);
      }
    }
    return this.statement(used).all(bound);
  }

  /** How SQLite runs the statement with `filters` in use: which index it reads, whether it sorts. */
  plan(filters: readonly F[]): string[] {
    return this.db
      .prepare(`EXPLAIN QUERY PLAN ${this.sqlWith(filters)}`)
      .all()
      .map((row) => String(row.detail));
  }

  private statement(used: string[]): Statement {
    const key = used.join();
    let statement = this.statements.get(key);
    if (!statement) {
      statement = this.db.prepare(this.sqlWith(used as F[]));
      this.statements.set(key, statement);
    }
    return statement;
  }

  private sqlWith(filters: readonly F[]): string {
    return this.sql.replace('{filters}', filters.map((name) => ` AND ${this.conditions[name]}`).join(''));
  }
}

/** A count of the rows a list's filters match: `sql` is `SELECT count(*) AS n FROM ... WHERE ... {filters}`. */
export class FilteredCount<F extends string> {
  private readonly query: FilteredQuery<F>;

  constructor(db: Database, sql: string, conditions: Record<F, string>) {
    this.query = new FilteredQuery(db, sql, conditions);
  }

  total(params: Params & Record<F, SQLInputValue>): number {
    return Number(this.query.all(params)[0]!.n);
  }
}
