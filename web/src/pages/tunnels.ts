// Tunnels: status, round trip and loss of each, their exits and which one carries, their path's last day as uptime
// bars and a round-trip line with each exit's scores, create (one exit or several, over TLS or inside a WebSocket
// through a proxy) and delete.

import { api, get, type Page, type Schema } from '../api.ts';
import { badge, button, field, form, h, input, select, svg } from '../dom.ts';
import { sparkline } from '../spark.ts';
import type { PageCtx } from '../main.ts';
import { urlFilters } from '../filters.ts';
import { PagedTable } from '../table.ts';
import type { NodeItem } from './nodes.ts';

type Tunnel = Schema<'Tunnel'>;
type PathSeries = Schema<'TunnelPathSeries'>;

/** The round trip, and the PINGs lost where any were. */
function quality(t: Tunnel): string {
  if (t.rtt_ms === null) return '—';
  return `${t.rtt_ms.toFixed(1)} ms${t.loss_percent ? `, ${t.loss_percent}% lost` : ''}`;
}

/** A day of a tunnel's path an hour a bar, greener the more of the hour it was up (grey: no sample). */
function uptimeBars(series: PathSeries, hours: number): SVGElement {
  const start = Date.parse(series.from);
  const byHour = new Map(series.points.map((p) => [Math.floor((Date.parse(p.at) - start) / 3_600_000), p]));
  const bars = Array.from({ length: hours }, (_, i) => {
    const point = byHour.get(i);
    const tone = point === undefined ? 'none' : point.up >= 0.999 ? 'up' : point.up > 0 ? 'partly' : 'down';
    const title = point === undefined ? 'no sample' : `${Math.round(point.up * 100)}% up`;
    return svg('rect', { x: i * 6, y: 0, width: 5, height: 24, class: `bar ${tone}` }, svg('title', {}, title));
  });
  const up = series.points.reduce((sum, p) => sum + p.up, 0) / Math.max(1, series.points.length);
  const label = `Up ${Math.round(up * 1000) / 10}% of the sampled hours of the last ${hours}`;
  return svg('svg', { viewBox: `0 0 ${hours * 6} 24`, role: 'img', 'aria-label': label, class: 'uptime' }, bars);
}

/** Each exit's measures as the entry last gave them, the chosen one marked, and why the choice last moved. */
function exitsTable(t: Tunnel, nodeName: (id: number) => string, paths: Map<number, PathSeries>): HTMLElement {
  const ms = (value: number | null) => (value === null ? '—' : `${value.toFixed(1)} ms`);
  return h(
    'div',
    { class: 'scroll' },
    h(
      'table',
      {},
      h('caption', {}, `Exits (${t.exit_strategy.replace('_', ' ')})`),
      h(
        'tr',
        {},
        ['Exit', 'Status', 'Round trip', 'Lost', 'Probe', 'Score', 'Last 24 hours'].map((heading) =>
          h('th', { scope: 'col' }, heading),
        ),
      ),
      t.exits.map((exit) =>
        h(
          'tr',
          {},
          h('th', { scope: 'row' }, nodeName(exit.node_id), exit.chosen ? ' (carrying)' : ''),
          h('td', {}, badge(exit.status)),
          h('td', {}, ms(exit.rtt_ms)),
          h('td', {}, exit.loss_percent === null ? '—' : `${exit.loss_percent}%`),
          h('td', {}, exit.probe_failed ? 'no target reached' : ms(exit.probe_ms)),
          h('td', {}, ms(exit.score_ms)),
          h('td', {}, paths.has(exit.node_id) ? uptimeBars(paths.get(exit.node_id)!, 24) : '—'),
        ),
      ),
    ),
    t.chosen_because ? h('p', { class: 'detail' }, `Last move: ${t.chosen_because}`) : '',
  );
}

/** The exits in order, the one carrying new connections marked. */
function exitNames(t: Tunnel, nodeName: (id: number) => string): string {
  return t.exit_node_ids
    .map((id) => `${nodeName(id)}${t.exit_node_ids.length > 1 && id === t.chosen_exit_node_id ? ' (carrying)' : ''}`)
    .join(', ');
}

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
  const pathPanel = h('dialog', { class: 'edit', 'aria-label': 'Path history' });
  const showPath = async (t: Tunnel) => {
    const to = new Date(Math.ceil(Date.now() / 3_600_000) * 3_600_000);
    const from = new Date(to.getTime() - 24 * 3_600_000);
    const window = `from=${from.toISOString()}&to=${to.toISOString()}&step=3600`;
    const series = await get<PathSeries>(`/api/tunnels/${t.id}/paths?${window}`);
    // Each exit's own path: the entry's session to it, and its probe.
    const paths = new Map(
      await Promise.all(
        t.exit_node_ids.map(
          async (id) => [id, await get<PathSeries>(`/api/tunnels/${t.id}/paths?${window}&exit_node_id=${id}`)] as const,
        ),
      ),
    );
    pathPanel.replaceChildren(
      h('h2', {}, `${t.name}: the last 24 hours`),
      exitsTable(t, nodeName, paths),
      h('p', {}, uptimeBars(series, 24)),
      h(
        'p',
        {},
        'Round trip: ',
        sparkline(
          series.points.map((p) => p.rtt_ms),
          'Round trip per hour, ms',
        ),
      ),
      button('Close', () => pathPanel.close()),
    );
    pathPanel.showModal();
  };
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
        h('td', {}, exitNames(t, nodeName)),
        h('td', {}, String(t.listen_port)),
        h('td', {}, badge(t.status), t.status !== 'up' && reasons(t)),
        h('td', {}, quality(t)),
        h(
          'td',
          { class: 'actions' },
          button('Path', () => void showPath(t).catch((error: Error) => ctx.say(error.message, 'error'))),
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
    more: h(
      'select',
      { name: 'more_exits', multiple: true, size: Math.min(4, Math.max(2, nodes.items.length)) },
      nodes.items.map((n) => h('option', { value: n.id }, n.name)),
    ),
    strategy: select('exit_strategy', ['failover', 'lowest_latency']),
    probe: input('probe_target', { autocomplete: 'off', placeholder: 'host:port' }),
    port: input('listen_port', { type: 'number', min: 1, max: 65535 }),
    transport: select('transport', ['tls', 'ws']),
    via: input('via', { autocomplete: 'off', placeholder: 'wss://proxy.example/portplane' }),
  };
  const create = form(
    { 'aria-label': 'Add a tunnel' },
    [
      field('Name', c.name),
      field('Entry node', c.entry, 'Where traffic enters the tunnel'),
      field('Exit node', c.exit, 'The node that dials the targets'),
      field('More exits', c.more, 'Optional, in list order after the first: the entry picks among them'),
      field('Exit strategy', c.strategy, 'With several exits: the first up, or the one measured best'),
      field('Probe target', c.probe, "What exits connect to when measured; empty: the first TCP rule's target"),
      field('Listen port', c.port, 'Where the exit node listens for the entry; empty: one from 40000-49999'),
      field('Transport', c.transport, 'ws: inside a WebSocket, which an HTTP reverse proxy or CDN can carry'),
      field('Via', c.via, 'ws only: the proxy the entry dials instead of the exit; empty: the exit itself'),
      h('button', { type: 'submit' }, 'Add tunnel'),
    ],
    async (el) => {
      await api('POST', '/api/tunnels', {
        body: {
          name: c.name.value,
          entry_node_id: Number(c.entry.value),
          exit_node_ids: [
            Number(c.exit.value),
            ...[...(c.more as HTMLSelectElement).selectedOptions]
              .map((option) => Number(option.value))
              .filter((id) => id !== Number(c.exit.value)),
          ],
          exit_strategy: c.strategy.value,
          probe_target: c.probe.value.trim() === '' ? null : c.probe.value.trim(),
          listen_port: c.port.value === '' ? null : Number(c.port.value),
          transport: c.transport.value,
          via: c.via.value.trim() === '' ? null : c.via.value.trim(),
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
    pathPanel,
  );
  await ctx.live(() => list.load(), ['tunnel'], 5000);
}
