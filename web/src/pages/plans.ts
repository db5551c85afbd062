// Plans: the grants tenants are held to (nodes by id or tag, ports, rule count, caps, a traffic allowance); listed,
// created, edited and deleted by operators holding users:write.

import { api, get } from '../api.ts';
import { button, bytes, count, field, form, h, input, select } from '../dom.ts';
import type { PageCtx, Plan } from '../main.ts';
import { PagedTable } from '../table.ts';

const list = (text: string) =>
  text
    .split(',')
    .map((part) => part.trim())
    .filter(Boolean);
const numberOf = (text: string) => (text.trim() === '' ? null : Number(text));

/** A plan's fields as a form: `plan` to edit, or none for a new one; `save` gets what the API takes. */
function planForm(plan: Plan | null, save: (body: Record<string, unknown>) => Promise<void>): HTMLFormElement {
  const name = input('name', { required: true, value: plan?.name ?? '' });
  const nodeIds = input('node_ids', { value: plan?.node_ids.join(', ') ?? '' });
  const nodeTags = input('node_tags', { value: plan?.node_tags.join(', ') ?? '' });
  const ports = input('port_ranges', { value: plan?.port_ranges.join(', ') ?? '' });
  const numeric = (key: 'max_rules' | 'max_connections' | 'bandwidth_limit' | 'max_new_connections_per_second') =>
    input(key, { type: 'number', min: 1, value: plan?.[key] ?? '' });
  const [maxRules, maxConnections, bandwidth, newRate] = [
    numeric('max_rules'),
    numeric('max_connections'),
    numeric('bandwidth_limit'),
    numeric('max_new_connections_per_second'),
  ];
  const allowance = input('traffic', { type: 'number', min: 1, value: plan?.traffic?.bytes ?? '' });
  const period = select('period', ['month', 'day'], plan?.traffic?.period);
  const past = select('past', ['stop', 'slow'], plan?.traffic?.past);
  const slowTo = input('slow_to', { type: 'number', min: 1, value: plan?.traffic?.slow_to ?? '' });
  return form(
    { 'aria-label': plan ? `Edit plan ${plan.name}` : 'Add a plan' },
    [
      field('Name', name),
      field('Node ids', nodeIds, 'Comma separated'),
      field('Node tags', nodeTags, 'Any node with one of these tags'),
      field('Port ranges', ports, 'e.g. 30000-30099, 31000'),
      field('Most rules', maxRules, 'Empty: no limit'),
      field('Most connections a rule', maxConnections),
      field('Most bytes a second a rule', bandwidth),
      field('Most new connections a second a rule', newRate),
      field('Traffic allowance (bytes)', allowance, 'All their rules together, both ways; empty: none'),
      field('Period', period),
      field('Past it', past),
      field('Slow to (bytes a second)', slowTo, 'With past: slow'),
      h('button', { type: 'submit' }, plan ? 'Save' : 'Add plan'),
    ],
    async () => {
      const traffic =
        allowance.value === ''
          ? null
          : {
              bytes: Number(allowance.value),
              period: period.value,
              past: past.value,
              slow_to: past.value === 'slow' ? numberOf(slowTo.value) : null,
              reset_day: plan?.traffic?.reset_day ?? 1,
              reset_hour: plan?.traffic?.reset_hour ?? 0,
            };
      await save({
        name: name.value,
        node_ids: list(nodeIds.value).map(Number),
        node_tags: list(nodeTags.value),
        port_ranges: list(ports.value),
        max_rules: numberOf(maxRules.value),
        max_connections: numberOf(maxConnections.value),
        bandwidth_limit: numberOf(bandwidth.value),
        max_new_connections_per_second: numberOf(newRate.value),
        traffic,
      });
    },
  );
}

function trafficText(traffic: Plan['traffic']): string {
  if (!traffic) return '—';
  const past = traffic.past === 'stop' ? 'then stop' : `then ${bytes(traffic.slow_to!)}/s`;
  return `${bytes(traffic.bytes)} a ${traffic.period}, ${past}`;
}

/** A cell saying how many tenants `plan` holds, filled once the users list has counted them. */
function tenantsOf(plan: Plan): HTMLTableCellElement {
  const cell = h('td', {}, '…');
  get<{ total: number }>(`/api/users?plan_id=${plan.id}&limit=1&count=true`)
    .then(({ total }) => (cell.textContent = count(total)))
    .catch(() => (cell.textContent = '—'));
  return cell;
}

export async function plansPage(ctx: PageCtx): Promise<void> {
  const canWrite = ctx.can('users:write');
  const dialog = h('dialog', { class: 'edit', 'aria-label': 'Edit plan' });
  const edit = (plan: Plan) => {
    const editor = planForm(plan, async (body) => {
      await api('PUT', `/api/plans/${plan.id}`, { body, ifMatch: `"${plan.version}"` });
      dialog.close();
      ctx.say(`Saved ${plan.name}`);
      await ctx.reload();
    });
    dialog.replaceChildren(
      editor,
      button('Cancel', () => dialog.close()),
    );
    dialog.showModal();
  };
  const table = new PagedTable<Plan>({
    caption: 'Plans',
    headings: ['Name', 'Tenants', 'Nodes', 'Ports', 'Rules', 'Caps a rule', 'Traffic', canWrite ? 'Actions' : ''],
    path: '/api/plans',
    empty: 'No plans yet: tenants are put on one.',
    row: (plan) =>
      h(
        'tr',
        {},
        h('th', { scope: 'row' }, plan.name),
        tenantsOf(plan),
        h('td', {}, [...plan.node_ids.map((id) => `#${id}`), ...plan.node_tags].join(', ') || 'none'),
        h('td', {}, plan.port_ranges.join(', ') || 'none'),
        h('td', {}, plan.max_rules === null ? 'any' : String(plan.max_rules)),
        h(
          'td',
          {},
          `${plan.max_connections ?? 'any'} connections, ` +
            `${plan.bandwidth_limit === null ? 'any rate' : `${bytes(plan.bandwidth_limit)}/s`}` +
            (plan.max_new_connections_per_second === null
              ? ''
              : `, ${plan.max_new_connections_per_second} new a second`),
        ),
        h('td', {}, trafficText(plan.traffic)),
        h(
          'td',
          { class: 'actions' },
          canWrite && [
            button('Edit', () => edit(plan)),
            button(
              'Delete',
              () =>
                ctx.act(`Deleted ${plan.name}`, () => api('DELETE', `/api/plans/${plan.id}`), `Delete ${plan.name}?`),
              { class: 'danger' },
            ),
          ],
        ),
      ),
  });
  const create = planForm(null, async (body) => {
    await api('POST', '/api/plans', { body });
    ctx.say(`Added ${String(body.name)}`);
    await ctx.reload();
  });
  ctx.main.append(
    canWrite ? h('details', { class: 'create' }, h('summary', {}, 'Add a plan'), create) : '',
    table.el,
    dialog,
  );
  await ctx.live(() => table.load(), [], 10_000);
}
