// The JSON of rows read lately, as committed, for answering reads without SQLite: a row is read far more often than it
// changes, and each read of SQLite costs a read transaction (two fcntl locks) besides the rendering. Every change to
// a row drops its entry (Database.onRowChange, whichever statement made it), a write through another connection drops
// them all, and entries are added only while nothing is uncommitted, so none outlives a rollback or shows a long
// write's work before its commit. Pages are made from the same entries: the page's ids from SQLite, their JSON from
// here, and what is missing rendered in one statement.

import type { Database } from './database.ts';
import type { JsonPage } from './page.ts';

export interface View {
  version: number;
  json: string;
}

export interface RenderedOptions {
  db: Database;
  /** The table whose row changes drop entries. */
  table: string;
  /** Renders the rows of `ids` (a JSON array of ids): their id, version and JSON. */
  renderMany: (ids: string) => (View & { id: number })[];
  /** The most characters of JSON kept; the entries read longest ago go first. */
  limitChars: number;
}

export class Rendered {
  private readonly views = new Map<number, View>();
  private chars = 0;

  constructor(private readonly options: RenderedOptions) {
    options.db.onRowChange(options.table, (id) => this.forget(id));
    options.db.onWrittenElsewhere(() => this.clear());
  }

  /** One row's view, or undefined when there is no such row. */
  get(id: number): View | undefined {
    return this.views.get(id) ?? this.render([id]).get(id);
  }

  /** A page of the rows of `ids`, which holds one id past `limit` when another page follows. */
  pageOf(ids: number[], limit: number): JsonPage {
    const more = ids.length > limit;
    if (more) ids.pop();
    return { items: this.page(ids), lastId: more ? ids[ids.length - 1]! : null };
  }

  /** The JSON array of the rows of `ids`, in that order (ids of rows gone since are left out). */
  page(ids: readonly number[]): string {
    const missing = ids.filter((id) => !this.views.has(id));
    const fresh = missing.length > 0 ? this.render(missing) : undefined;
    let json = '[';
    for (const id of ids) {
      const view = this.views.get(id) ?? fresh?.get(id);
      if (!view) continue;
      if (json.length > 1) json += ',';
      json += view.json;
    }
    return `${json}]`;
  }

  forget(id: number): void {
    const view = this.views.get(id);
    if (!view) return;
    this.views.delete(id);
    this.chars -= view.json.length;
  }

  clear(): void {
    this.views.clear();
    this.chars = 0;
  }

  private render(ids: readonly number[]): Map<number, View> {
    const rows = this.options.renderMany(JSON.stringify(ids));
    const found = new Map<number, View>();
    const keep = this.options.db.settled;
    for (const { id, version, json } of rows) {
      const view = { version, json };
      found.set(id, view);
      if (keep && json.length <= this.options.limitChars) this.keep(id, view);
    }
    return found;
  }

  private keep(id: number, view: View): void {
    if (this.chars + view.json.length > this.options.limitChars) {
      // Oldest first (a Map iterates in insertion order), down to three quarters of the limit: a Map keeps the slots
      // of deleted entries until it is rebuilt, and walking them again for every entry added made a page of cache
      // misses six times slower than rendering it.
      const target = this.options.limitChars * 0.75 - view.json.length;
      for (const oldest of this.views.keys()) {
        if (this.chars <= target) break;
        this.forget(oldest);
      }
    }
    this.views.set(id, view);
    this.chars += view.json.length;
  }
}

/** How much JSON a cache of small rows keeps by default, in characters (a tunnel's, user's or token's: 200-400). */
const SMALL_ROWS_CHARS = 4 * 1024 * 1024;

/**
 * A cache of `table`'s rows rendered by JavaScript: `sql` reads the rows whose ids its one parameter (a JSON array)
 * names, and `render` makes each one's version and JSON.
 */
export function renderedRows<R extends { id: number }>(
  db: Database,
  table: string,
  sql: string,
  render: (row: R) => View,
  limitChars = SMALL_ROWS_CHARS,
): Rendered {
  const statement = db.prepare(sql);
  return new Rendered({
    db,
    table,
    renderMany: (ids) => (statement.all(ids) as unknown as R[]).map((row) => ({ id: row.id, ...render(row) })),
    limitChars,
  });
}
