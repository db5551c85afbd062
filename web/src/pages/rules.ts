// Rules: the list, filtered and sorted, with each rule's sync state and error, health, controls and traffic; enable,
// disable, sync and delete one (its create and edit form is rule-edit.ts), or many selected at once (rule-bulk.ts).

import { api, get, type Page, type Schema } from '../api.ts';
import { showTraffic } from '../chart.ts';
import { badge, button, bytes, h, liveText, when, count } from '../dom.ts';
import type { PageCtx } from '../main.ts';
import { urlFilters } from '../filters.ts';
import { PagedTable } from '../table.ts';
import type { NodeItem } from './nodes.ts';
import { RuleSelection } from './rule-bulk.ts';
import { editRule } from './rule-edit.ts';

type Rule = Schema<'Rule'>;
/** A rule with what it carries now (GET /api/live); null: nothing. */
type LiveRule = Rule & { live?: Schema<'Live'>['rules'][number] | null };

const WRITABLE = [
  'name',
  'node_id',
  'tunnel_id',
  'protocol',
  'listen_port',
  'listen_port_end',
  'targets',
  'strategy',
  'weights',
  'forwarding',
  'enabled',
  'tags',
  'allow_sources',
  'deny_sources',
  'max_connections',
  'bandwidth_limit',
  'expires_at',
  'proxy_protocol',
  'quota',
  'health_check',
  'preserve_source',
] as const;

/** What limits a rule, in a few words for its row. */
function controlsOf(rule: Rule): string[] {
  return [
    rule.allow_sources.length > 0 && `allows ${rule.allow_sources.join(', ')}`,
    rule.deny_sources.length > 0 && `denies ${rule.deny_sources.join(', ')}`,
    rule.max_connections !== null && `at most ${rule.max_connections} at once`,
    rule.expires_at !== null && `${rule.state === 'expired' ? 'expired' : 'expires'} ${when(rule.expires_at)}`,
    rule.proxy_protocol !== 'none' && `PROXY ${rule.proxy_protocol}`,
    rule.preserve_source && "keeps the client's address",
    rule.weights !== null && `weights ${rule.weights.join(':')}`,
    rule.bandwidth_limit !== null && `${bytes(rule.bandwidth_limit)}/s each way`,
    rule.quota !== null &&
      rule.quota_usage !== null &&
      `quota ${bytes(rule.quota_usage.used_bytes)} of ${bytes(rule.quota.bytes)} (${rule.quota.direction})` +
        (rule.quota_usage.resets_at ? `, resets ${when(rule.quota_usage.resets_at)}` : ''),
  ].filter((text): text is string => typeof text === 'string');
}

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
  const dialog = h('dialog', { class: 'edit', 'aria-labelledby': 'rule-dialog-title' });
  const choices = { nodes: nodes.items, tunnels: tunnels.items };
  const edit = (id: number | null) => editRule(ctx, dialog, choices, id);

  // The filters, from the URL and back into it: a view of the fleet is a link to share, and survives a reload.
  const url = urlFilters(
    ctx,
    'rules',
    [
      { name: 'node_id', label: 'Node', choices: nodes.items.map((n) => [String(n.id), n.name] as const) },
      {
        name: 'state',
        label: 'State',
        choices: [
          'active',
          'disabled',
          'expired',
          'quota_exceeded',
          'account_expired',
          'not_granted',
          'allowance_exceeded',
        ],
      },
      { name: 'sync_state', label: 'Sync', choices: ['pending', 'applied', 'failed'] },
      { name: 'protocol', label: 'Protocol', choices: ['tcp', 'udp', 'tcp+udp'] },
      { name: 'tag', label: 'Tag' },
      { name: 'port', label: 'Port' },
      { name: 'q', label: 'Name contains' },
    ],
    async () => {
      selection.clear();
      await list.first();
    },
  );
  const filters = url.values;
  /** The filters as a batch's `filter` takes them (numbers as numbers). */
  const batchFilter = () => {
    const chosen = Object.entries(filters()).filter(([, value]) => value !== null);
    const numeric = (name: string) => name === 'node_id' || name === 'port';
    return Object.fromEntries(chosen.map(([name, value]) => [name, numeric(name) ? Number(value) : value]));
  };
  const selection = new RuleSelection(ctx, dialog, nodes.items, batchFilter);
  const summary = h('p', { class: 'summary', 'aria-live': 'polite' });

  /** A rule's traffic over a window the person picks. */
  const chartOf = (rule: Rule) => showTraffic(dialog, `Traffic of ${rule.name}`, { rule_id: rule.id });

  const actions = (rule: Rule) => [
    button('Edit', () => edit(rule.id)),
    button(rule.enabled ? 'Disable' : 'Enable', () =>
      ctx.act(`${rule.enabled ? 'Disabled' : 'Enabled'} ${rule.name}`, () =>
        api('PUT', `/api/rules/${rule.id}`, {
          body: { ...writable(rule), enabled: !rule.enabled },
          ifMatch: `"${rule.version}"`,
        }),
      ),
    ),
    button('Sync', () => ctx.act(`Synced ${rule.name}`, () => api('POST', `/api/rules/${rule.id}/sync`))),
    button(
      'Delete',
      () => ctx.act(`Deleted ${rule.name}`, () => api('DELETE', `/api/rules/${rule.id}`), `Delete rule ${rule.name}?`),
      { class: 'danger' },
    ),
  ];

  const list = new PagedTable<LiveRule>({
    caption: 'Rules',
    // What each rule carries now, read with each load (the page loads again with each traffic tick).
    decorate: async (items) => {
      if (items.length === 0) return items;
      const live = await get<Schema<'Live'>>(`/api/live?limit=1000&ids=${items.map((r) => r.id).join(',')}`);
      const now = new Map(live.rules.map((r) => [r.id, r]));
      return items.map((rule) => ({ ...rule, live: now.get(rule.id) ?? null }));
    },
    headings: [canWrite ? selection.pageBox : '', 'Name', 'Node', 'Listens', 'Targets', 'Sync', 'Traffic', 'Actions'],
    path: '/api/rules',
    query: filters,
    sortKeys: [null, 'name', 'node_id', 'listen_port', null, 'sync_state', 'traffic', null],
    sort: url.sort,
    sorted: url.sorted,
    loaded: (items, total) => {
      selection.matching = total;
      const into = items.reduce((sum, r) => sum + r.traffic.bytes_in, 0);
      const back = items.reduce((sum, r) => sum + r.traffic.bytes_out, 0);
      summary.textContent =
        `${count(total)} ${total === 1 ? 'rule matches' : 'rules match'}; the ${count(items.length)} shown moved ` +
        `${bytes(into)} in, ${bytes(back)} out.`;
      selection.show();
    },
    empty: 'No rules here.',
    row: (rule) => {
      return h(
        'tr',
        {},
        h('td', {}, canWrite && selection.box(rule)),
        h(
          'th',
          { scope: 'row' },
          rule.name,
          rule.state !== 'active' && badge(rule.state),
          rule.tags.length > 0 && h('span', { class: 'tags' }, rule.tags.join(', ')),
        ),
        h('td', {}, nodeName.get(rule.node_id) ?? `#${rule.node_id}`),
        h(
          'td',
          {},
          `${rule.protocol} ${rule.listen_port}${rule.listen_port_end === null ? '' : `-${rule.listen_port_end}`}`,
        ),
        h(
          'td',
          {},
          rule.targets.join(', '),
          rule.tunnel_id !== null && h('span', { class: 'tags' }, `via tunnel #${rule.tunnel_id}`),
          controlsOf(rule).map((text) => h('span', { class: 'tags' }, text)),
        ),
        h(
          'td',
          {},
          rule.health && h('span', { class: 'tags' }, 'targets ', badge(rule.health.status)),
          rule.health?.targets
            .filter((target) => target.status === 'down')
            .map((target) =>
              h('p', { class: 'detail' }, `${target.target} down${target.error ? ` (${target.error})` : ''}`),
            ),
          badge(rule.sync.state),
          rule.sync.state === 'applied' &&
            rule.sync.applied_path &&
            h(
              'span',
              // Why not the kernel, on hover: the rule's control, its targets, the node's mode.
              { class: 'tags', ...(rule.sync.relayed_because ? { title: rule.sync.relayed_because } : {}) },
              rule.sync.applied_path === 'kernel' ? 'in the kernel' : 'relayed',
            ),
          rule.sync.error && h('p', { class: 'detail' }, `${rule.sync.error.detail} (${rule.sync.error.code})`),
        ),
        h(
          'td',
          {},
          `${bytes(rule.traffic.bytes_in)} in, ${bytes(rule.traffic.bytes_out)} out`,
          rule.traffic.refused > 0 && h('span', { class: 'tags' }, `${count(rule.traffic.refused)} refused`),
          rule.live && h('span', { class: 'live' }, liveText(rule.live)),
        ),
        h(
          'td',
          { class: 'actions' },
          button('Traffic', () => chartOf(rule)),
          canWrite && actions(rule),
        ),
      );
    },
  });
  selection.of(list);
  selection.show();

  ctx.main.append(
    h('div', { class: 'toolbar' }, canWrite && button('New rule', () => edit(null)), canWrite && selection.group),
    url.form,
    summary,
    list.el,
    dialog,
  );
  await ctx.live(() => list.load(), ['rule', 'traffic'], 3000);
}
