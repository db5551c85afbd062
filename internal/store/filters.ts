// List queries with optional filters. Only the filters in use go into the statement: a condition written once for
// all cases, `(:node_id IS NULL OR node_id = :node_id)`, keeps SQLite from any index on the column, and one node's
// page of a million rules took 47 ms scanning them all. A statement is prepared once per combination of filters.

import type { SQLInputValue } from 'node:sqlite';
import { DomainError } from '../errors/errors.ts';
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

/** Where a page in a sort order ended: its last row's sort key and id. */
export interface KeysetPosition {
  key: SQLInputValue;
  id: number;
}

/**
 * Pages of a list in the order of a key, ties broken by id (so the order is total and paging stable however rows
 * change), each read from where the last one ended, past (key, id), not at an offset: a late page costs what the first
 * does wherever an index has the key in order.
 */
export class KeysetQuery<F extends string> {
  private readonly first: FilteredQuery<F>;
  private readonly next: FilteredQuery<F>;

  constructor(
    db: Database,
    shape: {
      /** The columns to read; `sort_key` is added. */
      select: string;
      /** FROM and any JOIN. */
      from: string;
      id: string;
      key: string;
      descending: boolean;
    },
    conditions: Record<F, string>,
  ) {
    const { select, from, id, key, descending } = shape;
    const direction = descending ? 'DESC' : 'ASC';
    const head = `SELECT ${select}, ${key} AS sort_key FROM ${from} WHERE`;
    const tail = `{filters} ORDER BY ${key} ${direction}, ${id} ${direction} LIMIT :limit + 1`;
    this.first = new FilteredQuery(db, `${head} 1 ${tail}`, conditions);
    // Written out rather than as a row value, (key, id) > (:key, :after): SQLite seeks an index on the key for
    // `key >= :key`, where it scanned the index from its start for the row value (17 ms for a page in the middle of a
    // million rules, against under one).
    const [past, reached] = descending ? ['<', '<='] : ['>', '>='];
    this.next = new FilteredQuery(
      db,
      `${head} ${key} ${reached} :key AND (${key} ${past} :key OR ${id} ${past} :after) ${tail}`,
      conditions,
    );
  }

  /** How SQLite runs the first page with `filters` in use (see FilteredQuery.plan). */
  plan(filters: readonly F[]): string[] {
    return this.first.plan(filters);
  }

  /** Up to `limit + 1` rows after `position` (from the start when null), with their `sort_key`. */
  rows(
    position: KeysetPosition | null,
    limit: number,
    conditions: Record<F, SQLInputValue>,
  ): Record<string, unknown>[] {
    return position === null
      ? this.first.all({ ...conditions, limit })
      : this.next.all({ ...conditions, limit, key: position.key, after: position.id });
  }
}

/** A list's order: by `name` (a key of the store's sorts), ascending or not, from `position` (null: the start). */
export interface SortedPage {
  sort: { name: string; descending: boolean };
  position: KeysetPosition | null;
}

/**
 * The most matches a list may order where no index has them in order: SQLite then reads and sorts every match on the
 * main thread for each page (every rule by traffic at 210,000 rules took 0.3-0.45 s a page, and eight clients held
 * every other request for seconds). Past it the list is refused with what to narrow it by.
 */
const MAX_SORTED_MATCHES = 10_000;

/**
 * The KeysetQuery of each sort of a list, made when first asked for: `keys` maps a sort's name to its SQL key. A sort
 * that SQLite would carry out by sorting (its plan says so, for the filters in use) is refused past
 * MAX_SORTED_MATCHES, which are counted through the filters' indexes and no further.
 */
export class KeysetQueries<F extends string> {
  private readonly queries = new Map<string, KeysetQuery<F>>();
  /**
   * Per sort and set of filters in use: whether SQLite sorts the matches (no index has them in order), and whether it
   * finds them by reading every row (no index serves the filters: a name search, say).
   */
  private readonly plans = new Map<string, { sorts: boolean; scans: boolean }>();
  private readonly bounded: FilteredCount<F>;
  /** Whether the list holds more than MAX_SORTED_MATCHES at all, read no further than that. */
  private readonly large: Statement;

  constructor(
    private readonly db: Database,
    private readonly shape: { select: string; from: string; id: string },
    private readonly keys: Record<string, string>,
    private readonly conditions: Record<F, string>,
  ) {
    this.bounded = new FilteredCount(
      db,
      `SELECT count(*) AS n FROM (SELECT 1 FROM ${shape.from} WHERE 1 {filters} LIMIT ${MAX_SORTED_MATCHES + 1})`,
      conditions,
    );
    const first = `SELECT 1 FROM ${shape.from} LIMIT ${MAX_SORTED_MATCHES + 1}`;
    this.large = db.prepare(`SELECT count(*) > ${MAX_SORTED_MATCHES} AS large FROM (${first})`);
  }

  /**
   * Throws `invalid_query` when `page`'s sort would order more than MAX_SORTED_MATCHES matches by sorting them, or,
   * where no index serves its filters, would read more rows than that to find them: counting the matches would then
   * read every row as well.
   */
  private checkBounded(page: SortedPage, query: KeysetQuery<F>, conditions: Record<F, SQLInputValue>): void {
    const used = (Object.keys(conditions) as F[]).filter(
      (name) => conditions[name] !== null && conditions[name] !== undefined,
    );
    const id = `${page.sort.name}:${page.sort.descending}:${used.sort().join()}`;
    let plan = this.plans.get(id);
    if (plan === undefined) {
      const steps = query.plan(used);
      plan = {
        sorts: steps.some((step) => /TEMP B-TREE FOR (RIGHT PART OF )?ORDER BY/.test(step)),
        scans: used.length > 0 && steps.some((step) => /^SCAN /.test(step)),
      };
      this.plans.set(id, plan);
    }
    if (!plan.sorts) return;
    const tooMany = plan.scans
      ? Number((this.large.get() as { large: number }).large) === 1
      : this.bounded.total(conditions) > MAX_SORTED_MATCHES;
    if (!tooMany) return;
    throw new DomainError(
      'invalid_query',
      `sort=${page.sort.descending ? '-' : ''}${page.sort.name} orders every match, and more than ` +
        `${MAX_SORTED_MATCHES} ${plan.scans ? 'would be read to find them' : 'match'}: narrow the list with a filter ` +
        'an index serves (a node, a tag, a state...) or sort by a key read in order (id, name)',
    );
  }

  /** Up to `limit + 1` rows of `page`'s order, and the sort key of the page's last row when another follows. */
  rows<R extends { id: number }>(
    page: SortedPage,
    limit: number,
    conditions: Record<F, SQLInputValue>,
  ): { rows: R[]; lastKey: unknown } {
    const { name, descending } = page.sort;
    const id = `${name}:${descending}`;
    let query = this.queries.get(id);
    if (!query) {
      const key = this.keys[name];
      if (key === undefined) throw new Error(`no sort ${name} here`);
      query = new KeysetQuery(this.db, { ...this.shape, key, descending }, this.conditions);
      this.queries.set(id, query);
    }
    this.checkBounded(page, query, conditions);
    const rows = query.rows(page.position, limit, conditions) as unknown as (R & { sort_key: unknown })[];
    return { rows, lastKey: rows.length > limit ? rows[limit - 1]!.sort_key : undefined };
  }

  /** `rows` for a list whose JSON is cached by id (Rendered): the ids of the page, one past it if another follows. */
  ids(page: SortedPage, limit: number, conditions: Record<F, SQLInputValue>): { ids: number[]; lastKey: unknown } {
    const { rows, lastKey } = this.rows(page, limit, conditions);
    return { ids: rows.map((row) => row.id), lastKey };
  }
}
