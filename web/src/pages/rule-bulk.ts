// The rules selected on the Rules page, and what is done to them at once: ticked by hand on the pages seen, or every
// rule the filters match however many pages; enabled, disabled, synced, tagged, moved or deleted as one batch, with
// its preview first (a dry run, item by item) and what became of each after.

import { api } from '../api.ts';
import { button, h, input, listOf, count } from '../dom.ts';
import type { PageCtx } from '../main.ts';

const rules = (n: number) => `${n} ${n === 1 ? 'rule' : 'rules'}`;

/** What a batch answers: each item's outcome, and why not where it did not. */
interface BatchAnswer {
  results: { id: number; outcome: string; error?: { detail: string } }[];
}

/** What of the list the selection reads: its rows' boxes, and the rules on the page. */
interface Listed {
  readonly el: HTMLElement;
  readonly items: readonly { id: number }[];
}

const update = (changes: Record<string, unknown>) => ({ changes });

export class RuleSelection {
  /** The rules the filters match, as the list last counted them. */
  matching = 0;
  /** The bulk actions, labelled and beside the count of what they act on, for the toolbar. */
  readonly group: HTMLElement;
  private readonly actions: HTMLElement;
  /** The header's box, ticking or unticking every rule on the page. */
  readonly pageBox = h('input', { type: 'checkbox', 'aria-label': 'Select all rules on this page' });
  private readonly selected = new Set<number>();
  private allMatching = false;
  private readonly count = h('span', { 'aria-live': 'polite' });
  private readonly selectMatching = button('Select all matching', () => {
    this.allMatching = true;
    for (const box of this.list.el.querySelectorAll<HTMLInputElement>('input[type=checkbox]')) box.checked = true;
    this.show();
  });
  private readonly buttons: HTMLButtonElement[];
  private list!: Listed;

  constructor(
    private readonly ctx: PageCtx,
    private readonly dialog: HTMLDialogElement,
    nodes: { id: number; name: string }[],
    /** The filters as a batch's `filter` takes them. */
    private readonly filter: () => Record<string, unknown>,
  ) {
    const tagsBox = input('bulk_tags', { placeholder: 'comma-separated' });
    const moveTo = h(
      'select',
      { name: 'bulk_node' },
      nodes.map((n) => h('option', { value: n.id }, n.name)),
    );
    const setTags = button('Set tags', () =>
      this.run('Set tags of selected', '/api/rules/batch-update', update({ tags: listOf(tagsBox.value) })),
    );
    const move = button('Move', () =>
      this.run('Move selected', '/api/rules/batch-update', update({ node_id: Number(moveTo.value) })),
    );
    const plain = [
      button('Enable', () => this.run('Enable selected', '/api/rules/batch-update', update({ enabled: true }))),
      button('Disable', () => this.run('Disable selected', '/api/rules/batch-update', update({ enabled: false }))),
      button('Sync selected', () => this.run('Sync selected', '/api/rules/batch-sync', {}, false)),
      button('Delete selected', () => this.run('Delete selected', '/api/rules/batch-delete'), { class: 'danger' }),
    ];
    this.buttons = [...plain, setTags, move];
    // Each value a bulk action takes stands labelled beside its button (a placeholder is no label).
    const labelled = (text: string, control: HTMLElement, action: HTMLElement) =>
      h('span', { class: 'with' }, h('label', {}, text, ' ', control), action);
    // What can be done with a selection shows once there is one: until then the rules stand in the first screen.
    this.actions = h(
      'span',
      { class: 'bulk-actions', hidden: true },
      plain,
      labelled('Tags to set', tagsBox, setTags),
      labelled('Node to move to', moveTo, move),
    );
    this.group = h(
      'div',
      { class: 'bulk', role: 'group', 'aria-label': 'Selected rules' },
      this.count,
      this.selectMatching,
      this.actions,
    );
    this.pageBox.addEventListener('change', () => {
      for (const rule of this.list.items)
        if (this.pageBox.checked) this.selected.add(rule.id);
        else this.selected.delete(rule.id);
      for (const box of this.list.el.querySelectorAll<HTMLInputElement>('tbody input[type=checkbox]'))
        box.checked = this.pageBox.checked;
      this.show();
    });
  }

  /** The list whose rows are selected. */
  of(list: Listed): void {
    this.list = list;
  }

  /** A row's box, ticked as the selection holds its rule. */
  box(rule: { id: number; name: string }): HTMLInputElement {
    const box = h('input', {
      type: 'checkbox',
      'aria-label': `Select ${rule.name}`,
      checked: this.selected.has(rule.id),
    });
    box.checked ||= this.allMatching;
    box.addEventListener('change', () => {
      // Unticking one of all matching leaves the rest of this page ticked: back to picking by hand.
      if (this.allMatching) {
        this.allMatching = false;
        for (const item of this.list.items) this.selected.add(item.id);
      }
      if (box.checked) this.selected.add(rule.id);
      else this.selected.delete(rule.id);
      this.show();
    });
    return box;
  }

  /** Shows how many are selected, and offers only what can be done with that. */
  show(): void {
    this.count.textContent = this.allMatching
      ? `All ${count(this.matching)} matching selected`
      : `${count(this.selected.size)} selected`;
    for (const b of this.buttons) b.disabled = this.size() === 0;
    this.actions.hidden = this.size() === 0;
    this.selectMatching.hidden = this.allMatching || this.matching === 0;
    this.selectMatching.textContent = `Select all ${count(this.matching)} matching`;
  }

  clear(): void {
    this.allMatching = false;
    this.selected.clear();
    for (const box of this.list.el.querySelectorAll<HTMLInputElement>('input[type=checkbox]')) box.checked = false;
    this.show();
  }

  private size(): number {
    return this.allMatching ? this.matching : this.selected.size;
  }

  /**
   * A batch over the selection: first its preview (a dry run, item by item, where the API has one), then, once
   * confirmed, the run, and what became of each.
   */
  private async run(title: string, path: string, extra: Record<string, unknown> = {}, preview = true): Promise<void> {
    const { ctx, dialog } = this;
    const body = { ...(this.allMatching ? { filter: this.filter() } : { ids: [...this.selected] }), ...extra };
    const outcomes = (results: BatchAnswer['results']) => {
      const counts = new Map<string, number>();
      for (const r of results) counts.set(r.outcome, (counts.get(r.outcome) ?? 0) + 1);
      return [...counts].map(([outcome, n]) => `${n} ${outcome.replace('_', ' ')}`).join(', ') || 'nothing';
    };
    let first: BatchAnswer | null = null;
    try {
      if (preview) first = (await api<BatchAnswer>('POST', `${path}?dry_run=true`, { body })).data;
    } catch (error) {
      return ctx.say(error instanceof Error ? error.message : String(error), 'error');
    }
    /** The items that did not go as asked, each with why (the first 50). */
    const problems = (answer: BatchAnswer | null, label: string) => {
      const failed = (answer?.results ?? []).filter((r) => r.error).slice(0, 50);
      return failed.length === 0
        ? ''
        : h(
            'ul',
            { class: 'outcomes', 'aria-label': label },
            failed.map((r) => h('li', {}, `Rule ${r.id}: ${r.outcome} (${r.error!.detail})`)),
          );
    };
    const run = h('button', { type: 'button' }, 'Run');
    dialog.replaceChildren(
      h('h2', { id: 'rule-dialog-title' }, title),
      h(
        'p',
        { role: 'status' },
        first
          ? `Preview of ${rules(first.results.length)}: ${outcomes(first.results)}.`
          : `${rules(this.size())} will be pushed to their nodes.`,
      ),
      problems(first, 'Items that would not change'),
      h('div', { class: 'buttons' }, run, h('button', { type: 'button', onclick: () => dialog.close() }, 'Cancel')),
    );
    run.addEventListener('click', async () => {
      dialog.close();
      try {
        const done = (await api<BatchAnswer>('POST', path, { body })).data;
        ctx.say(`${title}: ${outcomes(done.results)}`);
        if (path.endsWith('delete')) this.clear();
        // What did not go as asked stays on screen, item by item, until read.
        const failed = problems(done, 'Items that did not change');
        if (failed) {
          const close = h('button', { type: 'button', onclick: () => dialog.close() }, 'Close');
          dialog.replaceChildren(
            h('h2', { id: 'rule-dialog-title' }, `${title}: ${outcomes(done.results)}`),
            failed,
            h('div', { class: 'buttons' }, close),
          );
          dialog.showModal();
          close.focus();
        }
      } catch (error) {
        ctx.say(error instanceof Error ? error.message : String(error), 'error');
      }
      await ctx.reload();
    });
    if (!dialog.open) dialog.showModal();
    run.focus();
  }
}
