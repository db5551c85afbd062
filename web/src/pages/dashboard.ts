// Dashboard: counts by state, license usage, and the last day's traffic.

import { get, type Schema } from '../api.ts';
import { trafficChart, type TrafficSeries } from '../chart.ts';
import { badge, bytes, h, liveText, count } from '../dom.ts';
import type { PageCtx } from '../main.ts';
import { tenantDashboard } from './tenant.ts';

type Dashboard = Schema<'Dashboard'>;

function card(title: string, total: number | string, states?: Record<string, number>, extra?: Node) {
  return h(
    'section',
    { class: 'card', 'aria-label': title },
    h('h2', {}, title),
    h('p', { class: 'total' }, typeof total === 'number' ? count(total) : total),
    states &&
      h(
        'ul',
        { class: 'states' },
        Object.entries(states).map(([state, n]) => h('li', {}, badge(state), ' ', h('strong', {}, String(n)))),
      ),
    extra,
  );
}

const ruleLink = (name: string) => h('a', { href: `#/rules?q=${encodeURIComponent(name)}` }, name);
const nodeLink = (name: string) => h('a', { href: `#/nodes?q=${encodeURIComponent(name)}` }, name);

/** A top-talkers list: a heading, and a line each, or nothing when nothing carried anything. */
function talkers(title: string, lines: (HTMLElement | string)[][]): HTMLElement[] {
  if (lines.length === 0) return [];
  return [h('h3', {}, title), h('ol', { class: 'busiest' }, ...lines.map((line) => h('li', {}, ...line)))];
}

/**
 * The fleet's top talkers: rules and nodes carrying the most right now (GET /api/live), and those that carried the
 * most bytes today (GET /api/dashboard/busiest), each a link to its list.
 */
async function topTalkers(): Promise<HTMLElement[]> {
  const [live, today] = await Promise.all([
    get<Schema<'Live'>>('/api/live?limit=5'),
    get<Schema<'BusiestToday'>>('/api/dashboard/busiest?limit=5'),
  ]);
  const rules = await Promise.all(live.rules.map((rule) => get<Schema<'Rule'>>(`/api/rules/${rule.id}`)));
  const nodeNames = new Map(today.nodes.map((node) => [node.id, node.name]));
  const carried = (item: { bytes_in: number; bytes_out: number }) =>
    h('span', { class: 'live' }, `${bytes(item.bytes_in)} in · ${bytes(item.bytes_out)} out`);
  const now = [
    ...talkers(
      'Rules',
      live.rules.map((rule, i) => [ruleLink(rules[i]!.name), ' ', h('span', { class: 'live' }, liveText(rule))]),
    ),
    ...talkers(
      'Nodes',
      live.nodes
        .filter((node) => nodeNames.has(node.id) && node.open + node.rate_in + node.rate_out > 0)
        .slice(0, 5)
        .map((node) => [nodeLink(nodeNames.get(node.id)!), ' ', h('span', { class: 'live' }, liveText(node))]),
    ),
  ];
  const day = [
    ...talkers(
      'Rules',
      today.rules.map((rule) => [ruleLink(rule.name), ' ', carried(rule)]),
    ),
    ...talkers(
      'Nodes',
      today.nodes.map((node) => [nodeLink(node.name), ' ', carried(node)]),
    ),
  ];
  return [
    ...(now.length > 0 ? [h('section', { 'aria-label': 'Busiest now' }, h('h2', {}, 'Busiest now'), ...now)] : []),
    ...(day.length > 0
      ? [h('section', { 'aria-label': 'Busiest today' }, h('h2', {}, `Busiest today (${today.day}, UTC)`), ...day)]
      : []),
  ];
}

export async function dashboardPage(ctx: PageCtx): Promise<void> {
  if (ctx.me.user.role === 'tenant') return tenantDashboard(ctx);
  const cards = h('div', { class: 'cards' });
  const chart = h('div', { class: 'chart-wrap' });
  const busiest = h('div', { class: 'talkers' });
  ctx.main.append(cards, busiest, h('h2', {}, 'Traffic, last 24 hours'), chart);
  let lastChart = '';
  const load = async () => {
    const [d, series] = await Promise.all([
      get<Dashboard>('/api/dashboard'),
      get<TrafficSeries>('/api/dashboard/traffic?step=3600'),
    ]);
    const { license } = d;
    const meter =
      license.max_nodes === null
        ? h('p', {}, `${license.nodes_used} nodes, no limit`)
        : h(
            'p',
            {},
            h('label', { for: 'license-use' }, `${license.nodes_used} of ${license.max_nodes} nodes`),
            h('meter', { id: 'license-use', min: 0, max: license.max_nodes, value: license.nodes_used }),
          );
    cards.replaceChildren(
      card('Nodes', d.nodes.total, d.nodes.by_status),
      card('Rules', d.rules.total, d.rules.by_sync_state, h('p', {}, `${count(d.rules.enabled)} enabled`)),
      card('Tunnels', d.tunnels.total, d.tunnels.by_status),
      card(
        'Traffic',
        bytes(d.traffic.bytes_in + d.traffic.bytes_out),
        undefined,
        h('p', {}, `${bytes(d.traffic.bytes_in)} in, ${bytes(d.traffic.bytes_out)} out`),
      ),
      card('License', license.edition, undefined, h('div', {}, badge(license.status), meter)),
      card(
        'Users',
        d.users.total,
        undefined,
        h('p', {}, `${count(d.users.disabled)} disabled · ${count(d.tokens.total)} tokens`),
      ),
    );
    if (ctx.can('rules:read')) busiest.replaceChildren(...(await topTalkers()));
    const text = JSON.stringify(series.points);
    if (text !== lastChart || !chart.firstChild) chart.replaceChildren(trafficChart(series));
    lastChart = text;
  };
  await ctx.live(load, ['node', 'rule', 'tunnel', 'user', 'token', 'license', 'traffic'], 10_000);
}
