// Rollouts: the signed agent bundles the master carries, and rollouts that take one to nodes in waves: where each
// stands, why one halted, and pause, resume or abort it.

import { api, get, type Page, type Schema } from '../api.ts';
import { badge, button, bytes, field, form, h, input, select, when } from '../dom.ts';
import type { PageCtx } from '../main.ts';
import { PagedTable } from '../table.ts';

type Bundle = Schema<'AgentBundle'>;

type Rollout = Schema<'Rollout'>;

/** A rollout's waves as typed: counts and shares, comma-separated ("1, 25%, 100%"). */
function wavesOf(text: string): (number | string)[] {
  return text
    .split(',')
    .map((part) => part.trim())
    .filter((part) => part !== '')
    .map((part) => (/^\d+$/.test(part) ? Number(part) : part));
}

export async function rolloutsPage(ctx: PageCtx): Promise<void> {
  const canWrite = ctx.can('nodes:write');
  const done = { pause: 'paused', resume: 'resumed', abort: 'aborted' };
  const steer = (r: Rollout, verb: 'pause' | 'resume' | 'abort') =>
    button(`${verb[0]!.toUpperCase()}${verb.slice(1)}`, () =>
      ctx.act(
        `Rollout ${r.id} ${done[verb]}`,
        () => api('POST', `/api/rollouts/${r.id}/${verb}`),
        verb === 'abort' ? `Abort rollout ${r.id}?` : undefined,
      ),
    );
  const actions = (r: Rollout) => [
    r.state === 'running' && steer(r, 'pause'),
    (r.state === 'paused' || r.state === 'halted') && steer(r, 'resume'),
    ['running', 'paused', 'halted'].includes(r.state) && steer(r, 'abort'),
  ];
  const rollouts = new PagedTable<Rollout>({
    caption: 'Rollouts',
    headings: ['Rollout', 'Version', 'State', 'Wave', 'Nodes', 'Why', canWrite ? 'Actions' : ''],
    path: '/api/rollouts',
    empty: 'No rollouts yet.',
    row: (r) =>
      h(
        'tr',
        {},
        h('th', { scope: 'row' }, `#${r.id}, ${when(r.created_at)}`),
        h('td', {}, r.version),
        h('td', {}, badge(r.state)),
        h('td', {}, `${Math.min(r.wave + 1, r.waves.length)} of ${r.waves.length} (${r.waves.join(', ')})`),
        h(
          'td',
          {},
          `${r.nodes.passed} passed, ${r.nodes.upgrading} upgrading, ${r.nodes.waiting} waiting, ` +
            `${r.nodes.failed} failed`,
        ),
        h('td', {}, r.reason ?? ''),
        h('td', { class: 'actions' }, canWrite ? actions(r) : ''),
      ),
  });

  const bundleRows = h('tbody');
  const bundleTable = h(
    'table',
    {},
    h('caption', {}, 'Agent bundles'),
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        ['Version', 'Size', 'Signed by', 'Given'].map((heading) => h('th', { scope: 'col' }, heading)),
      ),
    ),
    bundleRows,
  );
  const version = select('version', []);
  const loadBundles = async () => {
    const { items } = await get<Page<Bundle>>('/api/agent-bundles');
    bundleRows.replaceChildren(
      ...(items.length
        ? items.map((b) =>
            h(
              'tr',
              {},
              h('th', { scope: 'row' }, b.version),
              h('td', {}, bytes(b.size)),
              h('td', {}, b.key_id),
              h('td', {}, when(b.created_at)),
            ),
          )
        : [
            h('tr', {}, h('td', { colspan: 4, class: 'empty' }, 'No signed bundles: give one with the API (needs *).')),
          ]),
    );
    const chosen = version.value;
    version.replaceChildren(...items.map((b) => h('option', { value: b.version }, b.version)));
    if (items.some((b) => b.version === chosen)) version.value = chosen;
  };

  const plan = {
    waves: input('waves', { value: '1, 100%', required: true }),
    gate: input('gate_seconds', { type: 'number', min: 10, max: 3600, value: '120' }),
    tag: input('tag'),
  };
  const start = form(
    { 'aria-label': 'Start a rollout' },
    [
      field('Version', version),
      field('Waves', plan.waves, 'Counts of nodes or shares, comma-separated; the first is the canary'),
      field('Gate seconds', plan.gate, 'How long each node has to come back on the new version, linked and applied'),
      field('Only nodes tagged', plan.tag, 'Empty: every node'),
      h('button', { type: 'submit' }, 'Start rollout'),
    ],
    async (el) => {
      const { data } = await api<Rollout>('POST', '/api/rollouts', {
        body: {
          version: version.value,
          filter: plan.tag.value ? { tag: plan.tag.value } : {},
          waves: wavesOf(plan.waves.value),
          gate_seconds: Number(plan.gate.value),
        },
      });
      ctx.say(`Rollout ${data.id} of ${data.version} started`);
      el.reset();
      await ctx.reload();
    },
  );

  ctx.main.append(
    canWrite ? h('details', { class: 'create' }, h('summary', {}, 'Start a rollout'), start) : '',
    rollouts.el,
    h('div', { class: 'scroll' }, bundleTable),
  );
  await ctx.live(
    async () => {
      await Promise.all([rollouts.load(), loadBundles()]);
    },
    // What the journal tells of rollouts (rollout.created, .updated, .node) and nodes (a new agent linking).
    ['rollout', 'node'],
    5000,
  );
}
