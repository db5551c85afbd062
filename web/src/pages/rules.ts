// Rules: sync state and error, traffic, create and edit (a lost update is a 412, offered to
// reload), enable and disable, sync, delete, and the same for many selected at once.

import { api, ApiError, get, type Page } from '../api.ts';
import { showTraffic } from '../chart.ts';
import { badge, button, bytes, field, form, h, input, localFromUtc, select, utcFromLocal, when } from '../dom.ts';
import type { PageCtx } from '../main.ts';
import { urlFilters } from '../filters.ts';
import { PagedTable } from '../table.ts';
import type { NodeItem } from './nodes.ts';

interface Rule {
  id: number;
  name: string;
  node_id: number;
  tunnel_id: number | null;
  protocol: string;
  listen_port: number;
  listen_port_end: number | null;
  targets: string[];
  strategy: string;
  weights: number[] | null;
  preserve_source: boolean;
  forwarding: string;
  enabled: boolean;
  tags: string[];
  allow_sources: string[];
  deny_sources: string[];
  max_connections: number | null;
  bandwidth_limit: number | null;
  expires_at: string | null;
  proxy_protocol: string;
  quota: Quota | null;
  health_check: { interval_seconds: number; timeout_ms: number; fall: number; rise: number } | null;
  health: {
    status: string;
    targets: { target: string; status: string; error: string | null; checked_at: string | null }[];
  } | null;
  quota_usage: { used_bytes: number; period_started_at: string; resets_at: string | null } | null;
  state: string;
  sync: {
    state: string;
    error: { code: string; detail: string } | null;
    applied_at: string | null;
    applied_path: string | null;
    /** Why the relay carries it rather than the kernel, in the node's words; absent from older masters. */
    relayed_because?: string | null;
  };
  traffic: { bytes_in: number; bytes_out: number; refused: number };
  version: number;
}

const rules = (n: number) => `${n} ${n === 1 ? 'rule' : 'rules'}`;

/** What a batch answers: each item's outcome, and why not where it did not. */
interface BatchAnswer {
  results: { id: number; outcome: string; error?: { detail: string } }[];
}

interface Quota {
  bytes: number;
  period: string;
  direction: string;
  reset_day: number;
  reset_hour: number;
}

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

/** Lines (or commas) of a text box as a list, blanks left out. */
function listOf(text: string): string[] {
  return text
    .split(/[\n,]/)
    .map((item) => item.trim())
    .filter(Boolean);
}

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
  const selected = new Set<number>();
  const dialog = h('dialog', { class: 'edit', 'aria-labelledby': 'rule-dialog-title' });

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
      clearSelection();
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

  // What is selected: rules ticked on the pages seen, or every rule the filters match (however many pages).
  let allMatching = false;
  let matching = 0;
  const summary = h('p', { class: 'summary', 'aria-live': 'polite' });
  const bulkCount = h('span', { 'aria-live': 'polite' });
  const selectMatching = button('Select all matching', () => {
    allMatching = true;
    for (const box of list.el.querySelectorAll<HTMLInputElement>('input[type=checkbox]')) box.checked = true;
    bulkState();
  });
  const selection = () => (allMatching ? { filter: batchFilter() } : { ids: [...selected] });
  const selectionSize = () => (allMatching ? matching : selected.size);
  const bulkState = () => {
    bulkCount.textContent = allMatching ? `All ${matching} matching selected` : `${selected.size} selected`;
    const none = selectionSize() === 0;
    for (const b of bulkButtons) b.disabled = none;
    selectMatching.hidden = allMatching || matching === 0;
    selectMatching.textContent = `Select all ${matching} matching`;
  };
  const clearSelection = () => {
    allMatching = false;
    selected.clear();
    for (const box of list.el.querySelectorAll<HTMLInputElement>('input[type=checkbox]')) box.checked = false;
    bulkState();
  };

  /**
   * A batch over the selection: first its preview (a dry run, item by item, where the API has one), then, once
   * confirmed, the run, and what became of each.
   */
  const bulk = async (title: string, path: string, extra: Record<string, unknown> = {}, preview = true) => {
    const body = { ...selection(), ...extra };
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
          : `${rules(selectionSize())} will be pushed to their nodes.`,
      ),
      problems(first, 'Items that would not change'),
      h('div', { class: 'buttons' }, run, h('button', { type: 'button', onclick: () => dialog.close() }, 'Cancel')),
    );
    run.addEventListener('click', async () => {
      dialog.close();
      try {
        const done = (await api<BatchAnswer>('POST', path, { body })).data;
        ctx.say(`${title}: ${outcomes(done.results)}`);
        if (path.endsWith('delete')) clearSelection();
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
  };
  const update = (changes: Record<string, unknown>) => ({ changes });
  const tagsBox = input('bulk_tags', { placeholder: 'comma-separated' });
  const moveTo = h(
    'select',
    { name: 'bulk_node' },
    nodes.items.map((n) => h('option', { value: n.id }, n.name)),
  );
  const setTags = button('Set tags', () =>
    bulk('Set tags of selected', '/api/rules/batch-update', update({ tags: listOf(tagsBox.value) })),
  );
  const move = button('Move', () =>
    bulk('Move selected', '/api/rules/batch-update', update({ node_id: Number(moveTo.value) })),
  );
  const bulkButtons = [
    button('Enable', () => bulk('Enable selected', '/api/rules/batch-update', update({ enabled: true }))),
    button('Disable', () => bulk('Disable selected', '/api/rules/batch-update', update({ enabled: false }))),
    button('Sync selected', () => bulk('Sync selected', '/api/rules/batch-sync', {}, false)),
    setTags,
    move,
    button('Delete selected', () => bulk('Delete selected', '/api/rules/batch-delete'), { class: 'danger' }),
  ];
  // Each value a bulk action takes stands labelled beside its button (a placeholder is no label).
  const labelled = (text: string, control: HTMLElement, action: HTMLElement) =>
    h('span', { class: 'with' }, h('label', {}, text, ' ', control), action);

  /** A rule's traffic over a window the person picks. */
  const chartOf = (rule: Rule) => showTraffic(dialog, `Traffic of ${rule.name}`, { rule_id: rule.id });

  const selectAll = h('input', { type: 'checkbox', 'aria-label': 'Select all rules on this page' });
  selectAll.addEventListener('change', () => {
    for (const rule of list.items)
      if (selectAll.checked) selected.add(rule.id);
      else selected.delete(rule.id);
    for (const box of list.el.querySelectorAll<HTMLInputElement>('tbody input[type=checkbox]'))
      box.checked = selectAll.checked;
    bulkState();
  });

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

  const list = new PagedTable<Rule>({
    caption: 'Rules',
    headings: [canWrite ? selectAll : '', 'Name', 'Node', 'Listens', 'Targets', 'Sync', 'Traffic', 'Actions'],
    path: '/api/rules',
    query: filters,
    sortKeys: [null, 'name', 'node_id', 'listen_port', null, 'sync_state', 'traffic', null],
    sort: url.sort,
    sorted: url.sorted,
    loaded: (items, total) => {
      matching = total;
      const into = items.reduce((sum, r) => sum + r.traffic.bytes_in, 0);
      const back = items.reduce((sum, r) => sum + r.traffic.bytes_out, 0);
      summary.textContent =
        `${total} ${total === 1 ? 'rule matches' : 'rules match'}; the ${items.length} shown moved ` +
        `${bytes(into)} in, ${bytes(back)} out.`;
      bulkState();
    },
    empty: 'No rules here.',
    row: (rule) => {
      const box = h('input', { type: 'checkbox', 'aria-label': `Select ${rule.name}`, checked: selected.has(rule.id) });
      box.checked ||= allMatching;
      box.addEventListener('change', () => {
        // Unticking one of all matching leaves the rest of this page ticked: back to picking by hand.
        if (allMatching) {
          allMatching = false;
          for (const item of list.items) selected.add(item.id);
        }
        if (box.checked) selected.add(rule.id);
        else selected.delete(rule.id);
        bulkState();
      });
      return h(
        'tr',
        {},
        h('td', {}, canWrite && box),
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
          rule.traffic.refused > 0 && h('span', { class: 'tags' }, `${rule.traffic.refused} refused`),
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
  bulkState();

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
      listen_port_end: input('listen_port_end', {
        type: 'number',
        min: 1,
        max: 65535,
        value: rule?.listen_port_end ?? '',
      }),
      targets: h('textarea', { name: 'targets', rows: 3 }, (rule?.targets ?? []).join('\n')),
      strategy: select(
        'strategy',
        ['round_robin', 'random', 'failover', 'source_hash', 'least_conn', 'lowest_latency'],
        rule?.strategy,
      ),
      weights: input('weights', { autocomplete: 'off', value: (rule?.weights ?? []).join(', ') }),
      preserve_source: input('preserve_source', { type: 'checkbox', checked: rule?.preserve_source ?? false }),
      forwarding: select('forwarding', ['auto', 'relay'], rule?.forwarding),
      tunnel_id: h(
        'select',
        { name: 'tunnel_id' },
        h('option', { value: '' }, 'Direct (no tunnel)'),
        tunnels.items.map((t) => h('option', { value: t.id, selected: t.id === rule?.tunnel_id }, t.name)),
      ),
      enabled: input('enabled', { type: 'checkbox', checked: rule?.enabled ?? true }),
      tags: input('tags', { autocomplete: 'off', value: (rule?.tags ?? []).join(', ') }),
      allow_sources: h('textarea', { name: 'allow_sources', rows: 2 }, (rule?.allow_sources ?? []).join('\n')),
      deny_sources: h('textarea', { name: 'deny_sources', rows: 2 }, (rule?.deny_sources ?? []).join('\n')),
      max_connections: input('max_connections', { type: 'number', min: 1, value: rule?.max_connections ?? '' }),
      expires_at: input('expires_at', { type: 'datetime-local', value: localFromUtc(rule?.expires_at ?? null) }),
      proxy_protocol: select('proxy_protocol', ['none', 'v1', 'v2'], rule?.proxy_protocol),
      bandwidth_limit: input('bandwidth_limit', { type: 'number', min: 1024, value: rule?.bandwidth_limit ?? '' }),
      quota_bytes: input('quota_bytes', { type: 'number', min: 1, value: rule?.quota?.bytes ?? '' }),
      quota_period: select('quota_period', ['month', 'day', 'none'], rule?.quota?.period),
      quota_direction: select('quota_direction', ['both', 'in', 'out'], rule?.quota?.direction),
      quota_reset_day: input('quota_reset_day', {
        type: 'number',
        min: 1,
        max: 28,
        value: rule?.quota?.reset_day ?? 1,
      }),
      health_interval: input('health_interval', {
        type: 'number',
        min: 1,
        max: 3600,
        value: rule?.health_check?.interval_seconds ?? '',
      }),
      quota_reset_hour: input('quota_reset_hour', {
        type: 'number',
        min: 0,
        max: 23,
        value: rule?.quota?.reset_hour ?? 0,
      }),
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
        field('Last port of a range', c.listen_port_end, 'Up to 10,000 ports; empty: the listen port alone'),
        field('Targets', c.targets, 'host:port, one per line; for a range also host:first-last, as many ports'),
        field('Strategy', c.strategy, 'lowest_latency needs a health check'),
        field('Weights', c.weights, 'One per target, comma-separated (3, 1); empty: all alike'),
        field('Forwarding', c.forwarding, 'auto: in the kernel where the node can; relay: always in user space'),
        field('Tunnel', c.tunnel_id),
        field('Enabled', c.enabled),
        field('Tags', c.tags, 'Comma-separated'),
        field('Allowed sources', c.allow_sources, 'Address blocks (192.0.2.0/24), one per line; empty: everyone'),
        field('Denied sources', c.deny_sources, 'Refused even when allowed'),
        field('Most connections at once', c.max_connections, "Empty: the node's own limit"),
        field('Expires', c.expires_at, 'Your local time; empty: never'),
        field('PROXY protocol', c.proxy_protocol, "Sends targets the client's address (TCP)"),
        field('Keep the client address', c.preserve_source, 'Kernel only: targets must route replies via the node'),
        field('Bandwidth (bytes/s)', c.bandwidth_limit, 'Each way, shared by all connections; empty: unlimited'),
        field('Health check every (s)', c.health_interval, 'A TCP connect; targets down are skipped. Empty: none'),
        field('Quota (bytes)', c.quota_bytes, 'Per period; empty: none. Spent, the rule stops until the period ends'),
        field('Quota period', c.quota_period),
        field('Quota counts', c.quota_direction, 'in: client to target; out: back; both'),
        field('Quota resets on day', c.quota_reset_day, 'Of the month (UTC)'),
        field('Quota resets at hour', c.quota_reset_hour, 'UTC'),
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
          listen_port_end: c.listen_port_end.value === '' ? null : Number(c.listen_port_end.value),
          targets: c.targets.value
            .split('\n')
            .map((t) => t.trim())
            .filter(Boolean),
          strategy: c.strategy.value,
          weights: c.weights.value.trim() === '' ? null : listOf(c.weights.value).map(Number),
          forwarding: c.forwarding.value,
          tunnel_id: c.tunnel_id.value === '' ? null : Number(c.tunnel_id.value),
          enabled: c.enabled.checked,
          tags: listOf(c.tags.value),
          allow_sources: listOf(c.allow_sources.value),
          deny_sources: listOf(c.deny_sources.value),
          max_connections: c.max_connections.value === '' ? null : Number(c.max_connections.value),
          expires_at: utcFromLocal(c.expires_at.value),
          proxy_protocol: c.proxy_protocol.value,
          preserve_source: c.preserve_source.checked,
          bandwidth_limit: c.bandwidth_limit.value === '' ? null : Number(c.bandwidth_limit.value),
          // The check's other settings are kept as they are (or their defaults).
          health_check:
            c.health_interval.value === ''
              ? null
              : { ...rule?.health_check, interval_seconds: Number(c.health_interval.value) },
          quota:
            c.quota_bytes.value === ''
              ? null
              : {
                  bytes: Number(c.quota_bytes.value),
                  period: c.quota_period.value,
                  direction: c.quota_direction.value,
                  reset_day: Number(c.quota_reset_day.value),
                  reset_hour: Number(c.quota_reset_hour.value),
                },
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
        await ctx.reload();
      },
    );
    dialog.replaceChildren(h('h2', { id: 'rule-dialog-title' }, title), editor);
    if (!dialog.open) dialog.showModal();
    c.name.focus();
  }

  ctx.main.append(
    h(
      'div',
      { class: 'toolbar' },
      canWrite && button('New rule', () => edit(null)),
      canWrite &&
        h(
          'div',
          { class: 'bulk', role: 'group', 'aria-label': 'Selected rules' },
          bulkCount,
          selectMatching,
          bulkButtons.filter((b) => b !== setTags && b !== move),
          labelled('Tags to set', tagsBox, setTags),
          labelled('Node to move to', moveTo, move),
        ),
    ),
    url.form,
    summary,
    list.el,
    dialog,
  );
  await ctx.live(() => list.load(), ['rule', 'traffic'], 3000);
}
