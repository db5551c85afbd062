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
 * The most rows a list may read on the main thread for one request where no index serves it: to order matches no
 * index has in order (every rule by traffic at 210,000 rules took 0.3-0.45 s a page, and eight clients held every
 * other request for seconds), or to find matches no index finds (a tag read out of each rule's JSON took 0.22-0.32 s,
 * a state computed for each rule as long). Past it the list is refused with what to narrow it by.
 */
export const MAX_UNINDEXED_ROWS = 10_000;

/**
 * Holds a list's filters to MAX_UNINDEXED_ROWS. A filter that SQLite matches by reading every row of the list's table
 * (its plan, recorded per filter, says SCAN: a value computed for each row, a substring) reads, with the others in
 * use, every row those others select (or the whole table): where those are more than MAX_UNINDEXED_ROWS, counted
 * through their indexes and no further, the list is refused, naming the filters an index serves.
 */
export class FilterBound<F extends string> {
  /** Per filter: whether matching it alone reads every row of the table. */
  private readonly plans = new Map<F, boolean>();
  private readonly probe: FilteredQuery<F>;
  private readonly candidates: FilteredCount<F>;
  /** The list's table as a plan names it (its alias, where it has one). */
  private readonly table: string;

  constructor(
    db: Database,
    /** The list's table, and its alias where the conditions use one ("tokens t"). */
    table: string,
    /** What the list holds, for the refusal: "rules". */
    private readonly noun: string,
    /** Each filter's condition (see FilteredQuery). */
    readonly conditions: Record<F, string>,
  ) {
    this.table = table.split(' ').at(-1)!;
    this.probe = new FilteredQuery(db, `SELECT count(*) AS n FROM ${table} WHERE 1 {filters}`, conditions);
    this.candidates = new FilteredCount(
      db,
      `SELECT count(*) AS n FROM (SELECT 1 FROM ${table} WHERE 1 {filters} LIMIT ${MAX_UNINDEXED_ROWS + 1})`,
      conditions,
    );
  }

  /** Whether matching `filter` reads every row of the table: what SQLite's plan for it says. */
  scans(filter: F): boolean {
    let scans = this.plans.get(filter);
    if (scans === undefined) {
      const table = new RegExp(`^SCAN ${this.table}\\b`);
      scans = this.probe.plan([filter]).some((step) => table.test(step));
      this.plans.set(filter, scans);
    }
    return scans;
  }

  /** The filters `conditions` puts to use: those given a value. */
  used(conditions: Record<F, SQLInputValue>): F[] {
    return (Object.keys(this.conditions) as F[]).filter(
      (name) => conditions[name] !== null && conditions[name] !== undefined,
    );
  }

  /**
   * Throws `invalid_query` when the filters in use would read more than MAX_UNINDEXED_ROWS rows to find matches: what
   * a list's reads (its page, its count, a batch's selection) are held to first.
   */
  check(conditions: Record<F, SQLInputValue>): void {
    const unserved = this.used(conditions).filter((name) => this.scans(name));
    if (unserved.length === 0) return;
    const served = Object.fromEntries(
      (Object.keys(this.conditions) as F[]).map((name) => [name, unserved.includes(name) ? null : conditions[name]]),
    ) as Record<F, SQLInputValue>;
    if (this.few(served)) return;
    const indexed = (Object.keys(this.conditions) as F[]).filter((name) => !this.scans(name));
    throw new DomainError(
      'invalid_query',
      `${unserved.join(' and ')} ${unserved.length > 1 ? 'are' : 'is'} matched by reading each of the ${this.noun}, ` +
        `and more than ${MAX_UNINDEXED_ROWS} would be read: narrow the list with a filter an index serves ` +
        `(${indexed.join(', ')})`,
    );
  }

  /** Whether at most MAX_UNINDEXED_ROWS rows match `conditions` (read through the indexes that serve them). */
  few(conditions: Record<F, SQLInputValue>): boolean {
    return this.candidates.total(conditions) <= MAX_UNINDEXED_ROWS;
  }
}

/**
 * The KeysetQuery of each sort of a list, made when first asked for: `keys` maps a sort's name to its SQL key. A sort
 * that SQLite would carry out by sorting (its plan says so, for the filters in use) is refused past
 * MAX_UNINDEXED_ROWS matches, which are counted through the filters' indexes and no further: the filters, which are
 * `bound`'s, held to it by the caller first (FilterBound.check), so no more than that are read to count them.
 */
export class KeysetQueries<F extends string> {
  private readonly queries = new Map<string, KeysetQuery<F>>();
  /** Per sort and set of filters in use: whether SQLite sorts the matches (no index has them in order). */
  private readonly plans = new Map<string, boolean>();

  constructor(
    private readonly db: Database,
    private readonly shape: { select: string; from: string; id: string },
    private readonly keys: Record<string, string>,
    private readonly bound: FilterBound<F>,
  ) {}

  /** Whether SQLite orders `sort` with `filters` in use by sorting the matches (its plan, recorded per set). */
  sorts(sort: SortedPage['sort'], filters: readonly F[]): boolean {
    const id = `${sort.name}:${sort.descending}:${[...filters].sort().join()}`;
    let sorts = this.plans.get(id);
    if (sorts === undefined) {
      sorts = this.query(sort)
        .plan(filters)
        .some((step) => /TEMP B-TREE FOR (RIGHT PART OF )?ORDER BY/.test(step));
      this.plans.set(id, sorts);
    }
    return sorts;
  }

  private query({ name, descending }: SortedPage['sort']): KeysetQuery<F> {
    const id = `${name}:${descending}`;
    let query = this.queries.get(id);
    if (!query) {
      const key = this.keys[name];
      if (key === undefined) throw new Error(`no sort ${name} here`);
      query = new KeysetQuery(this.db, { ...this.shape, key, descending }, this.bound.conditions);
      this.queries.set(id, query);
    }
    return query;
  }

  /** Throws `invalid_query` when `page`'s sort would order more than MAX_UNINDEXED_ROWS matches by sorting them. */
  private checkBounded(page: SortedPage, conditions: Record<F, SQLInputValue>): void {
    if (!this.sorts(page.sort, this.bound.used(conditions)) || this.bound.few(conditions)) return;
    throw new DomainError(
      'invalid_query',
      `sort=${page.sort.descending ? '-' : ''}${page.sort.name} orders every match, and more than ` +
        `${MAX_UNINDEXED_ROWS} match: narrow the list with a filter an index serves (a node, a tag, a state...) or ` +
        'sort by a key read in order (id, name)',
    );
  }

  /** Up to `limit + 1` rows of `page`'s order, and the sort key of the page's last row when another follows. */
  rows<R extends { id: number }>(
    page: SortedPage,
    limit: number,
    conditions: Record<F, SQLInputValue>,
  ): { rows: R[]; lastKey: unknown } {
    const query = this.query(page.sort);
    this.checkBounded(page, conditions);
    const rows = query.rows(page.position, limit, conditions) as unknown as (R & { sort_key: unknown })[];
    return { rows, lastKey: rows.length > limit ? rows[limit - 1]!.sort_key : undefined };
  }

  /** `rows` for a list whose JSON is cached by id (Rendered): the ids of the page, one past it if another follows. */
  ids(page: SortedPage, limit: number, conditions: Record<F, SQLInputValue>): { ids: number[]; lastKey: unknown } {
    const { rows, lastKey } = this.rows(page, limit, conditions);
    return { ids: rows.map((row) => row.id), lastKey };
  }
}
