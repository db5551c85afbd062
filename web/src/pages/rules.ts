// Rules: sync state and error, traffic, create and edit (a lost update is a 412, offered to
// reload), enable and disable, sync, delete, and the same for many selected at once.

import { api, ApiError, get, withQuery, type Page } from '../api.ts';
import { badge, bytes, field, form, h, input, select } from '../dom.ts';
import type { PageCtx } from '../main.ts';
import { LiveTable, Pager } from '../table.ts';
import type { NodeItem } from './nodes.ts';

interface Rule {
  id: number;
  name: string;
  node_id: number;
  tunnel_id: number | null;
  protocol: string;
  listen_port: number;
  targets: string[];
  strategy: string;
  enabled: boolean;
  sync: { state: string; error: string | null; applied_at: string | null };
  traffic: { bytes_in: number; bytes_out: number };
  version: number;
}

const WRITABLE = ['name', 'node_id', 'tunnel_id', 'protocol', 'listen_port', 'targets', 'strategy', 'enabled'] as const;

function writable(rule: Rule): Record<string, unknown> {
  return Object.fromEntries(WRITABLE.map((key) => [key, rule[key]]));
}

export async function rulesPage(ctx: PageCtx): Promise<void> {
  const canWrite = ctx.can('rules:write');
  const [nodes, tunnels] = await Promise.all([
    get<Page<NodeItem>>('/api/nodes?limit=1000'),
    ctx.can('tunnels:read') ? get<Page<{ id: number; name: string }>>('/api/tunnels?limit=1000') : { items: [] },
  ]);
  const nodeName = new Map(nodes.items.map((n) => [n.id, n.name]));
  const selected = new Set<number>();
  const q = input('q', { type: 'search' });
  const pager = new Pager(() => load());
  const dialog = h('dialog', { class: 'edit', 'aria-labelledby': 'rule-dialog-title' });
  let shownIds: number[] = [];

  const act = async (label: string, run: () => Promise<unknown>) => {
    try {
      await run();
      ctx.say(label);
    } catch (error) {
      ctx.say(error instanceof ApiError ? error.problem.detail : String(error), 'error');
    }
    await load();
  };

  const selectAll = h('input', { type: 'checkbox', 'aria-label': 'Select all rules on this page' });
  selectAll.addEventListener('change', () => {
    for (const id of shownIds)
      if (selectAll.checked) selected.add(id);
      else selected.delete(id);
    for (const box of table.el.querySelectorAll<HTMLInputElement>('tbody input[type=checkbox]'))
      box.checked = selectAll.checked;
    bulkState();
  });

  const table = new LiveTable<Rule>(
    'Rules',
    [canWrite ? selectAll : '', 'Name', 'Node', 'Listens', 'Targets', 'Sync', 'Traffic', canWrite ? 'Actions' : ''],
    (rule) => {
      const box = h('input', { type: 'checkbox', 'aria-label': `Select ${rule.name}`, checked: selected.has(rule.id) });
      box.addEventListener('change', () => {
        if (box.checked) selected.add(rule.id);
        else selected.delete(rule.id);
        bulkState();
      });
      return h(
        'tr',
        { 'data-rule': rule.id },
        h('td', {}, canWrite && box),
        h('th', { scope: 'row' }, rule.name, !rule.enabled && h('span', { class: 'tags' }, 'disabled')),
        h('td', {}, nodeName.get(rule.node_id) ?? `#${rule.node_id}`),
        h('td', {}, `${rule.protocol} ${rule.listen_port}`),
        h(
          'td',
          {},
          rule.targets.join(', '),
          rule.tunnel_id !== null && h('span', { class: 'tags' }, `via tunnel #${rule.tunnel_id}`),
        ),
        h('td', {}, badge(rule.sync.state), rule.sync.error && h('p', { class: 'detail' }, rule.sync.error)),
        h('td', {}, `${bytes(rule.traffic.bytes_in)} in, ${bytes(rule.traffic.bytes_out)} out`),
        h(
          'td',
          { class: 'actions' },
          canWrite && [
            h('button', { type: 'button', onclick: () => edit(rule.id) }, 'Edit'),
            h(
              'button',
              {
                type: 'button',
                onclick: () =>
                  act(`${rule.enabled ? 'Disabled' : 'Enabled'} ${rule.name}`, () =>
                    api('PUT', `/api/rules/${rule.id}`, {
                      body: { ...writable(rule), enabled: !rule.enabled },
                      ifMatch: `"${rule.version}"`,
                    }),
                  ),
              },
              rule.enabled ? 'Disable' : 'Enable',
            ),
            h(
              'button',
              {
                type: 'button',
                onclick: () => act(`Synced ${rule.name}`, () => api('POST', `/api/rules/${rule.id}/sync`)),
              },
              'Sync',
            ),
            h(
              'button',
              {
                type: 'button',
                class: 'danger',
                onclick: () =>
                  confirm(`Delete rule ${rule.name}?`) &&
                  act(`Deleted ${rule.name}`, () => api('DELETE', `/api/rules/${rule.id}`)),
              },
              'Delete',
            ),
          ],
        ),
      );
    },
    'No rules here.',
  );

  const bulkCount = h('span', { 'aria-live': 'polite' });
  const bulkDelete = h('button', { type: 'button', class: 'danger' }, 'Delete selected');
  const bulkSync = h('button', { type: 'button' }, 'Sync selected');
  const bulkState = () => {
    bulkCount.textContent = `${selected.size} selected`;
    bulkDelete.disabled = bulkSync.disabled = selected.size === 0;
  };
  const bulk = async (path: string, verb: string) => {
    const ids = [...selected];
    await act(`${verb} ${ids.length} rules`, async () => {
      await api('POST', path, { body: { ids } });
      if (path.endsWith('delete')) selected.clear();
    });
    bulkState();
  };
  bulkDelete.addEventListener(
    'click',
    () => confirm(`Delete ${selected.size} rules?`) && bulk('/api/rules/batch-delete', 'Deleted'),
  );
  bulkSync.addEventListener('click', () => bulk('/api/rules/batch-sync', 'Synced'));
  bulkState();

  async function load(): Promise<void> {
    const page = await get<Page<Rule>>(withQuery('/api/rules', { limit: 100, cursor: pager.cursor, q: q.value }));
    shownIds = page.items.map((r) => r.id);
    table.update(page.items);
    pager.set(page.next_cursor);
  }

  /** The create or edit form in a dialog; editing sends If-Match, so a change made meanwhile is a 412. */
  async function edit(id: number | null): Promise<void> {
    let rule: Rule | null = null;
    let etag: string | null = null;
    if (id !== null) {
      const answer = await api<Rule>('GET', `/api/rules/${id}`);
      rule = answer.data;
      etag = answer.etag;
    }
    const c = {
      name: input('name', { value: rule?.name ?? '', required: true }),
      node_id: h(
        'select',
        { name: 'node_id' },
        nodes.items.map((n) => h('option', { value: n.id, selected: n.id === rule?.node_id }, n.name)),
      ),
      protocol: select('protocol', ['tcp', 'udp', 'tcp+udp'], rule?.protocol),
      listen_port: input('listen_port', { type: 'number', min: 1, max: 65535, value: rule?.listen_port ?? '' }),
      targets: h('textarea', { name: 'targets', rows: 3 }, (rule?.targets ?? []).join('\n')),
      strategy: select('strategy', ['round_robin', 'random', 'failover'], rule?.strategy),
      tunnel_id: h(
        'select',
        { name: 'tunnel_id' },
        h('option', { value: '' }, 'Direct (no tunnel)'),
        tunnels.items.map((t) => h('option', { value: t.id, selected: t.id === rule?.tunnel_id }, t.name)),
      ),
      enabled: input('enabled', { type: 'checkbox', checked: rule?.enabled ?? true }),
    };
    const title = rule ? `Edit rule ${rule.name}` : 'New rule';
    const reload = h('button', { type: 'button', hidden: true }, 'Load the current version');
    reload.addEventListener('click', () => void edit(id));
    const editor = form(
      { method: 'dialog' },
      [
        reload,
        field('Name', c.name),
        field('Node', c.node_id),
        field('Protocol', c.protocol),
        field('Listen port', c.listen_port),
        field('Targets', c.targets, 'host:port, one per line'),
        field('Strategy', c.strategy),
        field('Tunnel', c.tunnel_id),
        field('Enabled', c.enabled),
        h(
          'div',
          { class: 'buttons' },
          h('button', { type: 'submit' }, rule ? 'Save' : 'Create'),
          h('button', { type: 'button', onclick: () => dialog.close() }, 'Cancel'),
        ),
      ],
      async () => {
        const body = {
          name: c.name.value,
          node_id: Number(c.node_id.value),
          protocol: c.protocol.value,
          listen_port: c.listen_port.value === '' ? null : Number(c.listen_port.value),
          targets: c.targets.value
            .split('\n')
            .map((t) => t.trim())
            .filter(Boolean),
          strategy: c.strategy.value,
          tunnel_id: c.tunnel_id.value === '' ? null : Number(c.tunnel_id.value),
          enabled: c.enabled.checked,
        };
        try {
          if (rule) await api('PUT', `/api/rules/${rule.id}`, { body, ifMatch: etag });
          else await api('POST', '/api/rules', { body });
        } catch (error) {
          if (error instanceof ApiError && error.status === 412) {
            reload.hidden = false;
            throw new ApiError({
              ...error.problem,
              detail:
                'Someone changed this rule after you opened it, so nothing was saved. ' +
                'Load the current version and make your change again.',
            });
          }
          throw error;
        }
        dialog.close();
        ctx.say(rule ? `Saved ${body.name}` : `Created ${body.name}`);
        await load();
      },
    );
    dialog.replaceChildren(h('h2', { id: 'rule-dialog-title' }, title), editor);
    if (!dialog.open) dialog.showModal();
    c.name.focus();
  }

  const filter = h(
    'form',
    { role: 'search', class: 'filters', onsubmit: (e: Event) => (e.preventDefault(), pager.reset(), load()) },
    field('Name contains', q),
    h('button', { type: 'submit' }, 'Filter'),
  );
  ctx.main.append(
    h(
      'div',
      { class: 'toolbar' },
      canWrite && h('button', { type: 'button', onclick: () => edit(null) }, 'New rule'),
      canWrite &&
        h('div', { class: 'bulk', role: 'group', 'aria-label': 'Selected rules' }, bulkCount, bulkSync, bulkDelete),
    ),
    filter,
    h('div', { class: 'scroll' }, table.el),
    pager.el,
    dialog,
  );
  await load();
  ctx.every(3000, load);
}
