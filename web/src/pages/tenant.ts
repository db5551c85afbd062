// What a tenant's console shows of their world (issue 49): the nodes granted them, their dashboard, and their plan
// with how much of it they use. The pages shared with operators (rules, tunnels, tokens, audit log) show a tenant
// their own by what the API answers them.

import { get, type Schema } from '../api.ts';
import { badge, bytes, h, when, count } from '../dom.ts';
import type { Me, PageCtx } from '../main.ts';
import { PagedTable } from '../table.ts';

type GrantedNode = Schema<'GrantedNode'>;

type TenantDashboard = Schema<'TenantDashboard'>;

/** A node's row heading in a list: its name, and its tags beside it. */
export function nodeHeading(node: { name: string; tags: readonly string[] }): HTMLElement {
  return h(
    'th',
    { scope: 'row' },
    node.name,
    node.tags.length ? h('span', { class: 'tags' }, node.tags.join(', ')) : null,
  );
}

export async function grantedNodesPage(ctx: PageCtx): Promise<void> {
  const list = new PagedTable<GrantedNode>({
    caption: 'Nodes granted to you',
    headings: ['Name', 'Host', 'Status'],
    path: '/api/nodes',
    empty: 'Your plan grants no node.',
    row: (node) => h('tr', {}, nodeHeading(node), h('td', {}, node.host), h('td', {}, badge(node.status))),
  });
  ctx.main.append(list.el);
  await ctx.live(() => list.load(), ['node'], 5000);
}

/** How much of an allowance is used, in words and as a bar. */
function used(text: string, value: number, max: number): HTMLElement {
  return h('span', { class: 'used' }, text, h('meter', { min: 0, max, value, 'aria-label': text }));
}

/** The tenant's plan and their use of it, as /api/auth/me says now. */
export function planSummary({ plan, usage, user }: Me): HTMLElement {
  const section = h('section', { class: 'plan', 'aria-label': 'Your plan' }, h('h2', {}, 'Your plan'));
  if (!plan || !usage) {
    section.append(h('p', {}, 'You are on no plan: nothing is granted to you. Ask an operator for one.'));
    return section;
  }
  const allowance = plan.traffic;
  const traffic = usage.traffic;
  const rows: [string, string | Node][] = [
    ['Plan', plan.name],
    [
      'Rules',
      plan.max_rules === null
        ? `${count(usage.rules)}, no limit`
        : used(`${count(usage.rules)} of ${count(plan.max_rules)}`, usage.rules, plan.max_rules),
    ],
    ['Ports', plan.port_ranges.join(', ') || 'none'],
    [
      'Traffic',
      allowance && traffic
        ? h(
            'span',
            {},
            used(
              `${bytes(traffic.used_bytes)} of ${bytes(allowance.bytes)} this ${allowance.period}, until ` +
                `${when(traffic.resets_at)}`,
              traffic.used_bytes,
              allowance.bytes,
            ),
            traffic.spent
              ? [
                  ' ',
                  badge(allowance.past === 'stop' ? 'stopped' : 'slowed'),
                  allowance.past === 'slow' ? ` to ${bytes(allowance.slow_to!)}/s` : '',
                ]
              : '',
          )
        : 'no allowance',
    ],
    ['Account', user.expires_at ? `ends ${when(user.expires_at)}` : 'does not expire'],
  ];
  section.append(
    h(
      'dl',
      { class: 'facts' },
      rows.flatMap(([term, value]) => [h('dt', {}, term), h('dd', {}, value)]),
    ),
  );
  return section;
}

export async function tenantDashboard(ctx: PageCtx): Promise<void> {
  const cards = h('div', { class: 'cards' });
  const plan = h('div');
  ctx.main.append(cards, plan);
  const card = (title: string, total: number | string, detail: string) =>
    h(
      'section',
      { class: 'card', 'aria-label': title },
      h('h2', {}, title),
      h('p', { class: 'total' }, typeof total === 'number' ? count(total) : total),
      h('p', {}, detail),
    );
  await ctx.live(
    async () => {
      const [d, me] = await Promise.all([get<TenantDashboard>('/api/dashboard'), get<Me>('/api/auth/me')]);
      // A card for what the tenant's scopes read: none for what they could not open.
      cards.replaceChildren(
        ctx.can('nodes:read') ? card('Nodes', d.nodes.total, `${count(d.nodes.by_status.online ?? 0)} online`) : '',
        ctx.can('rules:read') ? card('Rules', d.rules.total, `${count(d.rules.enabled)} enabled`) : '',
        ctx.can('tunnels:read') ? card('Tunnels', d.tunnels.total, `${count(d.tunnels.by_status.up ?? 0)} up`) : '',
        card(
          'Traffic',
          bytes(d.traffic.bytes_in + d.traffic.bytes_out),
          `${bytes(d.traffic.bytes_in)} in, ${bytes(d.traffic.bytes_out)} out`,
        ),
      );
      plan.replaceChildren(planSummary(me));
    },
    ['node', 'rule', 'tunnel', 'traffic'],
    10_000,
  );
}
