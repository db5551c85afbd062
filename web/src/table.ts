// Tables refreshed by polling: a row is rebuilt only when its item changed, and the control that
// had focus keeps it, so a live page neither flickers nor pulls the keyboard away.

import { h } from './dom.ts';

export class LiveTable<T extends { id: number }> {
  readonly el: HTMLTableElement;
  private readonly body = h('tbody');
  private rows = new Map<number, { text: string; tr: HTMLTableRowElement }>();

  constructor(
    caption: string,
    headings: (string | Node)[],
    private readonly row: (item: T) => HTMLTableRowElement,
    private readonly empty: string,
  ) {
    const heads = headings.map((heading) => h('th', { scope: 'col' }, heading));
    this.el = h('table', {}, h('caption', {}, caption), h('thead', {}, h('tr', {}, heads)), this.body);
  }

  update(items: T[]): void {
    const next = new Map<number, { text: string; tr: HTMLTableRowElement }>();
    for (const item of items) {
      const text = JSON.stringify(item);
      const old = this.rows.get(item.id);
      next.set(item.id, old && old.text === text ? old : { text, tr: this.row(item) });
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

/** Previous and next buttons over a cursor-paged list. */
export class Pager {
  readonly el = h('nav', { class: 'pager', 'aria-label': 'Pages' });
  private readonly stack: (string | null)[] = [];
  cursor: string | null = null;
  private next: string | null = null;
  private readonly prevButton = h('button', { type: 'button' }, 'Previous page');
  private readonly nextButton = h('button', { type: 'button' }, 'Next page');

  constructor(private readonly load: () => Promise<void>) {
    this.prevButton.addEventListener('click', () => {
      this.cursor = this.stack.pop() ?? null;
      void this.load();
    });
    this.nextButton.addEventListener('click', () => {
      this.stack.push(this.cursor);
      this.cursor = this.next;
      void this.load();
    });
    this.el.append(this.prevButton, this.nextButton);
    this.set(null);
  }

  /** Back to the first page (a new filter). */
  reset(): void {
    this.stack.length = 0;
    this.cursor = null;
  }

  set(nextCursor: string | null): void {
    this.next = nextCursor;
    this.prevButton.disabled = this.stack.length === 0;
    this.nextButton.disabled = nextCursor === null;
  }
}
