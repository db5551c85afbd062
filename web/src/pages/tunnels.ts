// Tunnels: status and round-trip time of each, create and delete.

import { api, get, type Page, type Schema } from '../api.ts';
import { badge, button, field, form, h, input } from '../dom.ts';
import type { PageCtx } from '../main.ts';
import { urlFilters } from '../filters.ts';
import { PagedTable } from '../table.ts';
import type { NodeItem } from './nodes.ts';

type Tunnel = Schema<'Tunnel'>;

/** Why a tunnel is not up, as each end says (the API keeps the last error of each). */
function reasons(t: Tunnel): HTMLElement[] {
  return (['entry', 'exit'] as const)
    .filter((end) => t.ends[end].status !== 'up' || t.ends[end].last_error)
    .map((end) =>
      h(
        'p',
        { class: 'detail' },
        `${end}: ${t.ends[end].status}${t.ends[end].last_error ? `: ${t.ends[end].last_error}` : ''}`,
      ),
    );
}

export async function tunnelsPage(ctx: PageCtx): Promise<void> {
  const canWrite = ctx.can('tunnels:write');
  const nodes = ctx.can('nodes:read') ? await get<Page<NodeItem>>('/api/nodes?limit=1000') : { items: [] };
  const nodeName = (id: number) => nodes.items.find((n) => n.id === id)?.name ?? `#${id}`;
  const url = urlFilters(
    ctx,
    'tunnels',
    [
      { name: 'node_id', label: 'Node', choices: nodes.items.map((n) => [String(n.id), n.name] as const) },
      { name: 'status', label: 'Status', choices: ['pending', 'up', 'down'] },
      { name: 'q', label: 'Name contains' },
    ],
    () => list.first(),
  );
  const list = new PagedTable<Tunnel>({
    caption: 'Tunnels',
    headings: ['Name', 'Entry', 'Exit', 'Port', 'Status', 'Round trip', canWrite ? 'Actions' : ''],
    path: '/api/tunnels',
    query: url.values,
    sortKeys: ['name', null, null, 'listen_port', 'status', null, null],
    sort: url.sort,
    sorted: url.sorted,
    empty: 'No tunnels yet.',
    row: (t) =>
      h(
        'tr',
        {},
        h('th', { scope: 'row' }, t.name),
        h('td', {}, nodeName(t.entry_node_id)),
        h('td', {}, nodeName(t.exit_node_id)),
        h('td', {}, String(t.listen_port)),
        h('td', {}, badge(t.status), t.status !== 'up' && reasons(t)),
        h('td', {}, t.rtt_ms === null ? '—' : `${t.rtt_ms.toFixed(1)} ms`),
        h(
          'td',
          { class: 'actions' },
          canWrite &&
            button(
              'Delete',
              () =>
                ctx.act(`Deleted ${t.name}`, () => api('DELETE', `/api/tunnels/${t.id}`), `Delete tunnel ${t.name}?`),
              { class: 'danger' },
            ),
        ),
      ),
  });

  const nodeSelect = (name: string) =>
    h(
      'select',
      { name },
      nodes.items.map((n) => h('option', { value: n.id }, n.name)),
    );
  const c = {
    name: input('name', { required: true }),
    entry: nodeSelect('entry_node_id'),
    exit: nodeSelect('exit_node_id'),
    port: input('listen_port', { type: 'number', min: 1, max: 65535 }),
  };
  const create = form(
    { 'aria-label': 'Add a tunnel' },
    [
      field('Name', c.name),
      field('Entry node', c.entry, 'Where traffic enters the tunnel'),
      field('Exit node', c.exit, 'The node that dials the targets'),
      field('Listen port', c.port, 'Where the exit node listens for the entry; empty: one from 40000-49999'),
      h('button', { type: 'submit' }, 'Add tunnel'),
    ],
    async (el) => {
      await api('POST', '/api/tunnels', {
        body: {
          name: c.name.value,
          entry_node_id: Number(c.entry.value),
          exit_node_id: Number(c.exit.value),
          listen_port: c.port.value === '' ? null : Number(c.port.value),
        },
      });
      ctx.say(`Added ${c.name.value}`);
      el.reset();
      await ctx.reload();
    },
  );
  ctx.main.append(
    canWrite ? h('details', { class: 'create' }, h('summary', {}, 'Add a tunnel'), create) : '',
    url.form,
    list.el,
  );
  await ctx.live(() => list.load(), ['tunnel'], 5000);
}
