// Nodes: status and why, last seen, install progress and its log, create (with the agent
// command, shown once), install over SSH, reinstall, delete.

import { api, get, type Schema } from '../api.ts';
import { badge, button, bytes, copyButton, field, form, h, input, liveText, when, count } from '../dom.ts';
import type { PageCtx } from '../main.ts';
import { grantedNodesPage, nodeHeading } from './tenant.ts';
import { showTraffic } from '../chart.ts';
import { sparkline } from '../spark.ts';
import { urlFilters } from '../filters.ts';
import { PagedTable } from '../table.ts';

export type NodeItem = Schema<'Node'>;
/** A node with what its rules carry now, summed (GET /api/live); null: nothing. */
type LiveNode = NodeItem & { live?: Schema<'Live'>['nodes'][number] | null };

interface Vitals {
  cpu_percent: number | null;
  load: number[];
  memory: { total_bytes: number; available_bytes: number };
  network: { rx_bytes_per_second: number | null; tx_bytes_per_second: number | null };
}

type VitalsSeries = Schema<'NodeVitalsSeries'>;

/** How long a node's CPU chart is kept before it is read again: its points come a minute apart. */
const CHART_MS = 60_000;

/**
 * Each node's CPU over the last hour, as a sparkline read once a minute at most: rows are rebuilt whenever a node
 * reports, and a page of nodes must not read fifty histories each time.
 */
class CpuCharts {
  private readonly charts = new Map<number, { readAt: number; chart: SVGElement | null }>();

  cell(nodeId: number): HTMLElement {
    const cell = h('span', { class: 'spark-cell' });
    const known = this.charts.get(nodeId);
    if (known?.chart) cell.append(known.chart.cloneNode(true));
    if (!known || Date.now() - known.readAt > CHART_MS) void this.read(nodeId, cell);
    return cell;
  }

  private async read(nodeId: number, cell: HTMLElement): Promise<void> {
    const entry = { readAt: Date.now(), chart: this.charts.get(nodeId)?.chart ?? null };
    this.charts.set(nodeId, entry);
    try {
      const series = await get<VitalsSeries>(`/api/nodes/${nodeId}/vitals`);
      const values = series.points.map((p) => p.cpu_percent);
      if (values.length === 0) return;
      const last = values.at(-1);
      entry.chart = sparkline(values, `CPU over the last hour, now ${last === null ? 'unknown' : `${last}%`}`, 100);
      cell.replaceChildren(entry.chart.cloneNode(true));
    } catch {
      // No chart: the numbers beside it still say how the node is doing.
    }
  }
}

/** A node's vitals, a line each: CPU and load, memory, network. */
function vitalsLines(vitals: Vitals): HTMLElement[] {
  const { cpu_percent: cpu, load, memory, network } = vitals;
  const rate = (n: number | null) => (n === null ? '—' : `${bytes(n)}/s`);
  return [
    `CPU ${cpu === null ? '—' : `${cpu}%`} · load ${load.map((l) => l.toFixed(2)).join(' ')}`,
    `${bytes(memory.available_bytes)} of ${bytes(memory.total_bytes)} free`,
    `in ${rate(network.rx_bytes_per_second)}, out ${rate(network.tx_bytes_per_second)}`,
  ].map((line) => h('span', {}, line));
}

type NodeCreated = Schema<'NodeCreated'>;

/** The agent command (or token) of a node just created: shown once, with a copy button. */
function shownOnce(created: NodeCreated): HTMLElement {
  const text = created.agent_command ?? created.agent_token;
  const box = h('textarea', { readonly: true, rows: 3, id: 'agent-command', class: 'secret' }, text);
  const title = `Node ${created.name} added`;
  return h(
    'section',
    { class: 'once', 'aria-label': title },
    h('h2', {}, title),
    h('label', { for: box.id }, created.agent_command ? 'Command that starts its agent' : 'Agent token'),
    box,
    h('p', { class: 'hint' }, 'Shown only now: the master keeps no copy of the agent token.'),
    copyButton('Copy', () => text),
  );
}

export async function nodesPage(ctx: PageCtx): Promise<void> {
  if (ctx.me.user.role === 'tenant') return grantedNodesPage(ctx);
  const writable = ctx.can('nodes:write');
  const url = urlFilters(
    ctx,
    'nodes',
    [
      { name: 'status', label: 'Status', choices: ['new', 'installing', 'online', 'offline', 'install_failed'] },
      { name: 'tag', label: 'Tag' },
      { name: 'q', label: 'Name or host contains' },
    ],
    () => list.first(),
  );
  const summary = h('p', { class: 'summary', 'aria-live': 'polite' });
  const once = h('div');
  const charts = new CpuCharts();
  // An install's log in a panel of its own: opened in the table it pushed the row (and the table) out of shape.
  const logPanel = h('dialog', { class: 'edit log-panel', 'aria-labelledby': 'log-title' });
  const showLog = (node: NodeItem) => {
    const close = h('button', { type: 'button', onclick: () => logPanel.close() }, 'Close');
    logPanel.replaceChildren(
      h('h2', { id: 'log-title' }, `Install log of ${node.name}`),
      h('p', {}, node.status_detail ?? node.status),
      h('pre', { class: 'log', tabindex: 0 }, node.install.log_tail ?? ''),
      h('div', { class: 'buttons' }, close),
    );
    logPanel.showModal();
    close.focus();
  };
  const actions = (node: NodeItem) => [
    button(
      'Install over SSH',
      () => ctx.act(`Installing on ${node.name}`, () => api('POST', `/api/nodes/${node.id}/install-ssh`)),
      {
        disabled: node.ssh_auth === 'none',
        title: node.ssh_auth === 'none' ? 'Give the node an SSH key or password first' : null,
      },
    ),
    button('Reinstall', () =>
      ctx.act(`Reinstalling ${node.name}`, () => api('POST', `/api/nodes/${node.id}/reinstall`)),
    ),
    button(
      'Delete',
      () => ctx.act(`Deleted ${node.name}`, () => api('DELETE', `/api/nodes/${node.id}`), `Delete node ${node.name}?`),
      { class: 'danger' },
    ),
  ];
  const list = new PagedTable<LiveNode>({
    caption: 'Nodes',
    // What each node's rules carry now, summed (GET /api/live), read with each load.
    decorate: async (items) => {
      if (items.length === 0 || !ctx.can('rules:read')) return items;
      const live = await get<Schema<'Live'>>('/api/live?limit=1');
      const now = new Map(live.nodes.map((n) => [n.id, n]));
      return items.map((node) => ({ ...node, live: now.get(node.id) ?? null }));
    },
    headings: ['Name', 'Host', 'Status', 'Agent', 'Vitals', 'Last seen', 'Traffic', 'Actions'],
    path: '/api/nodes',
    query: url.values,
    sortKeys: ['name', null, 'status', null, null, null, 'traffic', null],
    sort: url.sort,
    sorted: url.sorted,
    loaded: (items, total) => {
      summary.textContent = `${count(total)} ${total === 1 ? 'node matches' : 'nodes match'}.`;
    },
    empty: 'No nodes yet.',
    row: (node) =>
      h(
        'tr',
        {},
        nodeHeading(node),
        h('td', {}, `${node.ssh_user}@${node.host}:${node.ssh_port}`),
        h(
          'td',
          {},
          badge(node.status),
          node.status_detail && h('p', { class: 'detail' }, node.status_detail),
          node.install.started_at &&
            button(node.install.finished_at ? 'Install log' : 'Install log (running)', () => showLog(node), {
              class: 'link',
            }),
        ),
        h(
          'td',
          {},
          node.agent_version ?? '—',
          node.upgrade_available ? ` (${node.upgrade_available} available)` : '',
          node.kernel_path &&
            h(
              'span',
              { class: 'tags', title: node.kernel_path.reason ?? '' },
              node.kernel_path.available ? 'kernel path' : 'relay only',
            ),
        ),
        h('td', { class: 'vitals' }, node.vitals ? [...vitalsLines(node.vitals), charts.cell(node.id)] : '—'),
        h('td', {}, when(node.last_seen_at)),
        h(
          'td',
          {},
          `${bytes(node.traffic.bytes_in)} in, ${bytes(node.traffic.bytes_out)} out`,
          node.live && h('span', { class: 'live' }, liveText(node.live)),
        ),
        h(
          'td',
          { class: 'actions' },
          button('Traffic', () => showTraffic(logPanel, `Traffic of ${node.name}`, { node_id: node.id })),
          writable && actions(node),
        ),
      ),
  });

  ctx.main.append(writable ? createNode(ctx, once) : '', once, url.form, summary, list.el, logPanel);
  await ctx.live(() => list.load(), ['node', 'vitals', 'traffic'], 3000);
}

function createNode(ctx: PageCtx, once: HTMLElement): HTMLElement {
  const controls = {
    name: input('name', { required: true, autocomplete: 'off' }),
    host: input('host', { required: true, autocomplete: 'off' }),
    ssh_port: input('ssh_port', { type: 'number', min: 1, max: 65535, value: 22 }),
    ssh_user: input('ssh_user', { value: 'root', autocomplete: 'off' }),
    ssh_private_key: h('textarea', { name: 'ssh_private_key', rows: 3, spellcheck: 'false' }),
    ssh_password: input('ssh_password', { type: 'password', autocomplete: 'new-password' }),
    tags: input('tags', { autocomplete: 'off' }),
  };
  const add = form(
    { 'aria-label': 'Add a node' },
    [
      field('Name', controls.name),
      field('Host', controls.host, 'Where the master reaches the node over SSH'),
      field('SSH port', controls.ssh_port),
      field('SSH user', controls.ssh_user),
      field('SSH private key', controls.ssh_private_key, 'Optional: PEM or OpenSSH, stored sealed'),
      field('SSH password', controls.ssh_password, 'Optional, instead of a key'),
      field('Tags', controls.tags, 'Comma-separated'),
      h('button', { type: 'submit' }, 'Add node'),
    ],
    async (el) => {
      const body: Record<string, unknown> = {
        name: controls.name.value,
        host: controls.host.value,
        ssh_port: Number(controls.ssh_port.value),
        ssh_user: controls.ssh_user.value,
        tags: controls.tags.value
          .split(',')
          .map((t) => t.trim())
          .filter(Boolean),
      };
      if (controls.ssh_private_key.value) body.ssh_private_key = controls.ssh_private_key.value;
      if (controls.ssh_password.value) body.ssh_password = controls.ssh_password.value;
      const { data } = await api<NodeCreated>('POST', '/api/nodes', { body });
      el.reset();
      once.replaceChildren(shownOnce(data));
      ctx.say(`Added ${data.name}`);
      await ctx.reload();
    },
  );
  return h('details', { class: 'create' }, h('summary', {}, 'Add a node'), add);
}
