// The audit log: every write and denied attempt, newest first, filtered and paged by cursor.

import { get, withQuery, type Page } from '../api.ts';
import { badge, field, form, h, input, select, utcFromLocal, when } from '../dom.ts';
import type { PageCtx } from '../main.ts';
import { LiveTable, Pager } from '../table.ts';

interface Entry {
  id: number;
  at: string;
  actor_type: string;
  actor_name: string;
  ip: string | null;
  action: string;
  resource: string;
  resource_id: number | null;
  status: string;
  request_id: string | null;
  changes: unknown;
}

export async function auditPage(ctx: PageCtx): Promise<void> {
  const c = {
    action: input('action', { placeholder: 'rule.create' }),
    resource: input('resource', { placeholder: 'rule' }),
    actor: input('actor'),
    actor_type: select('actor_type', ['', 'user', 'token', 'agent', 'system', 'anonymous']),
    status: select('status', ['', 'success', 'denied', 'failed']),
    since: input('since', { type: 'datetime-local' }),
    until: input('until', { type: 'datetime-local' }),
  };
  const pager = new Pager(() => load());
  const table = new LiveTable<Entry>(
    'Audit entries, newest first',
    ['When', 'Who', 'Action', 'Resource', 'Result', 'Changes'],
    (e) =>
      h(
        'tr',
        {},
        h('td', {}, when(e.at)),
        h('td', {}, `${e.actor_name} (${e.actor_type})`, e.ip && h('span', { class: 'tags' }, e.ip)),
        h('th', { scope: 'row' }, e.action),
        h('td', {}, e.resource_id === null ? e.resource : `${e.resource} #${e.resource_id}`),
        h('td', {}, badge(e.status)),
        h(
          'td',
          {},
          e.changes !== null &&
            h('details', {}, h('summary', {}, 'Show'), h('pre', { class: 'log' }, JSON.stringify(e.changes, null, 2))),
        ),
      ),
    'No entries match.',
  );

  async function load(): Promise<void> {
    const page = await get<Page<Entry>>(
      withQuery('/api/audit-logs', {
        limit: 50,
        cursor: pager.cursor,
        action: c.action.value,
        resource: c.resource.value,
        actor: c.actor.value,
        actor_type: c.actor_type.value,
        status: c.status.value,
        since: utcFromLocal(c.since.value),
        until: utcFromLocal(c.until.value),
      }),
    );
    table.update(page.items);
    pager.set(page.next_cursor);
  }

  const filters = form(
    { role: 'search', class: 'filters', 'aria-label': 'Filter the audit log' },
    [
      field('Action', c.action),
      field('Resource', c.resource),
      field('Actor', c.actor),
      field('Actor type', c.actor_type),
      field('Status', c.status),
      field('Since', c.since),
      field('Until', c.until),
      h('button', { type: 'submit' }, 'Filter'),
    ],
    async () => {
      pager.reset();
      await load();
    },
  );
  ctx.main.append(filters, h('div', { class: 'scroll' }, table.el), pager.el);
  await load();
}
