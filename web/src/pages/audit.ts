// The audit log: every write and denied attempt, newest first, filtered and paged by cursor.

import { badge, field, form, h, input, select, utcFromLocal, when } from '../dom.ts';
import type { PageCtx } from '../main.ts';
import { PagedTable } from '../table.ts';

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
  const list = new PagedTable<Entry>({
    caption: 'Audit entries, newest first',
    headings: ['When', 'Who', 'Action', 'Resource', 'Result', 'Changes'],
    path: '/api/audit-logs',
    limit: 50,
    query: () => ({
      action: c.action.value,
      resource: c.resource.value,
      actor: c.actor.value,
      actor_type: c.actor_type.value,
      status: c.status.value,
      since: utcFromLocal(c.since.value),
      until: utcFromLocal(c.until.value),
    }),
    empty: 'No entries match.',
    row: (e) =>
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
  });

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
    () => list.first(),
  );
  ctx.main.append(filters, list.el);
  await ctx.live(() => list.load(), ['*']);
}
