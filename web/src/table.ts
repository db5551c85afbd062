// Lists as tables refreshed by polling: a row is rebuilt only when its item changed, and the
// control that had focus keeps it, so a live page neither flickers nor pulls the keyboard away;
// pages are read by cursor, with previous and next buttons.

import { get, withQuery, type Page } from './api.ts';
import { h } from './dom.ts';

type Query = Record<string, string | number | null | undefined>;

class LiveTable<T extends { id: number }> {
  readonly el: HTMLTableElement;
  private readonly body = h('tbody');
  private rows = new Map<number, { text: string; tr: HTMLTableRowElement }>();

  readonly heads: HTMLTableCellElement[];

  constructor(
    caption: string,
    headings: (string | Node)[],
    private readonly row: (item: T) => HTMLTableRowElement,
    private readonly empty: string,
  ) {
    this.heads = headings.map((heading) => h('th', { scope: 'col' }, heading));
    this.el = h('table', { class: 'fold' }, h('caption', {}, caption), h('thead', {}, h('tr', {}, this.heads)));
    this.el.append(this.body);
  }

  /** `tr` with each cell labelled by its heading: on a phone a row is a card, and a cell says what it is. */
  private labelled(tr: HTMLTableRowElement): HTMLTableRowElement {
    [...tr.cells].forEach((cell, i) => (cell.dataset.label ??= this.heads[i]?.textContent ?? ''));
    return tr;
  }

  update(items: T[]): void {
    const next = new Map<number, { text: string; tr: HTMLTableRowElement }>();
    for (const item of items) {
      const text = JSON.stringify(item);
      const old = this.rows.get(item.id);
      next.set(item.id, old && old.text === text ? old : { text, tr: this.labelled(this.row(item)) });
    }
    const trs = [...next.values()].map((entry) => entry.tr);
    this.rows = next;
    const current = [...this.body.children];
    if (trs.length > 0 && trs.length === current.length && trs.every((tr, i) => tr === current[i])) return;
    const focused = document.activeElement as HTMLElement | null;
    const colspan = this.el.tHead!.rows[0]!.cells.length;
    this.body.replaceChildren(...(trs.length ? trs : [h('tr', {}, h('td', { colspan, class: 'empty' }, this.empty))]));
    if (focused && focused !== document.activeElement && this.body.contains(focused)) focused.focus();
  }
}

export interface PagedTableOptions<T> {
  caption: string;
  headings: (string | Node)[];
  row: (item: T) => HTMLTableRowElement;
  empty: string;
  /** The list's path, e.g. /api/rules. */
  path: string;
  limit?: number;
  /** Filters, read at each load. */
  query?: () => Query;
  /** What the page adds to each item of a load before it is shown (numbers of the moment, say). */
  decorate?: (items: T[]) => Promise<T[]>;
  /** Called after each load with the items on screen and how many match in all (the list counts them). */
  loaded?: (items: T[], total: number) => void;
  /** The sort key of each heading the list can sort by (by position; null: not sortable). */
  sortKeys?: (string | null)[];
  /** The sort to start with (`key` or `-key`), and what hears of a new one (to put it in the URL). */
  sort?: string | null;
  sorted?: (sort: string | null) => void;
}

/** One page of a list at a time, as a live table with previous and next buttons. */
export class PagedTable<T extends { id: number }> {
  readonly el: HTMLElement;
  /** The items on screen. */
  items: T[] = [];
  private readonly table: LiveTable<T>;
  private readonly previous: (string | null)[] = [];
  private cursor: string | null = null;
  private next: string | null = null;
  private readonly prevButton = h('button', { type: 'button', disabled: true }, 'Previous page');
  private readonly nextButton = h('button', { type: 'button', disabled: true }, 'Next page');

  constructor(private readonly options: PagedTableOptions<T>) {
    this.sort = options.sort ?? null;
    this.table = new LiveTable(options.caption, options.headings, options.row, options.empty);
    for (const [i, key] of (options.sortKeys ?? []).entries()) {
      const th = this.table.heads[i];
      if (!key || !th) continue;
      // The heading becomes a button that sorts by it, ascending then descending; aria-sort says which.
      const label = th.textContent ?? key;
      const toggle = h('button', { type: 'button', class: 'sort' }, label);
      toggle.addEventListener('click', () => {
        this.sort = this.sort === key ? `-${key}` : key;
        options.sorted?.(this.sort);
        this.showSort();
        void this.first();
      });
      th.replaceChildren(toggle);
      th.dataset.key = key;
    }
    this.showSort();
    this.prevButton.addEventListener('click', () => {
      this.cursor = this.previous.pop() ?? null;
      void this.load();
    });
    this.nextButton.addEventListener('click', () => {
      this.previous.push(this.cursor);
      this.cursor = this.next;
      void this.load();
    });
    this.el = h(
      'div',
      {},
      h('div', { class: 'scroll' }, this.table.el),
      h('nav', { class: 'pager', 'aria-label': 'Pages' }, this.prevButton, this.nextButton),
    );
  }

  /** The order of the list: a sort key, or -key descending; null: by id. */
  private sort: string | null;

  private showSort(): void {
    for (const th of this.table.heads) {
      const key = th.dataset.key;
      if (!key) continue;
      const state = this.sort === key ? 'ascending' : this.sort === `-${key}` ? 'descending' : null;
      if (state) th.setAttribute('aria-sort', state);
      else th.removeAttribute('aria-sort');
    }
  }

  async load(): Promise<void> {
    const { path, limit = 100, query } = this.options;
    const counted = this.options.loaded ? { count: 'true' } : {};
    const page = await get<Page<T> & { total?: number }>(
      withQuery(path, { limit, cursor: this.cursor, ...query?.(), ...counted, sort: this.sort }),
    );
    this.items = this.options.decorate ? await this.options.decorate(page.items) : page.items;
    this.table.update(this.items);
    this.options.loaded?.(this.items, page.total ?? page.items.length);
    this.next = page.next_cursor;
    this.prevButton.disabled = this.previous.length === 0;
    this.nextButton.disabled = this.next === null;
  }

  /** Back to the first page (the filters changed). */
  async first(): Promise<void> {
    this.previous.length = 0;
    this.cursor = null;
    await this.load();
  }
}
