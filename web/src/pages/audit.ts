// The audit log: every write and denied attempt, newest first, filtered and paged by cursor.

import { badge, h, when } from '../dom.ts';
import { urlFilters } from '../filters.ts';
import type { PageCtx } from '../main.ts';
import { PagedTable } from '../table.ts';
import type { Schema } from '../api.ts';

type Entry = Schema<'AuditEntry'>;

export async function auditPage(ctx: PageCtx): Promise<void> {
  const url = urlFilters(
    ctx,
    'the audit log',
    [
      { name: 'action', label: 'Action', placeholder: 'rule.create' },
      { name: 'resource', label: 'Resource', placeholder: 'rule' },
      { name: 'actor', label: 'Actor' },
      { name: 'actor_type', label: 'Actor type', choices: ['user', 'token', 'agent', 'system', 'anonymous'] },
      { name: 'status', label: 'Status', choices: ['success', 'denied', 'failed'] },
      { name: 'since', label: 'Since', time: true },
      { name: 'until', label: 'Until', time: true },
    ],
    () => list.first(),
  );
  const list = new PagedTable<Entry>({
    caption: 'Audit entries, newest first',
    headings: ['When', 'Who', 'Action', 'Resource', 'Result', 'Changes'],
    path: '/api/audit-logs',
    limit: 50,
    query: url.values,
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

  ctx.main.append(url.form, list.el);
  await ctx.live(() => list.load(), ['*']);
}
