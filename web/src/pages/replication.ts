// Replication: this master's role (primary, standby or fenced), its epoch and mode; a standby's primary and how far
// behind it is; a primary's standbys, each where it stands and when it last asked.

import { get, type Schema } from '../api.ts';
import { h, when } from '../dom.ts';
import type { PageCtx } from '../main.ts';

type Health = Schema<'Health'>;
type Standbys = Schema<'Standbys'>;

function facts(rows: [string, string][]): HTMLElement {
  return h('dl', { class: 'facts' }, ...rows.flatMap(([term, value]) => [h('dt', {}, term), h('dd', {}, value)]));
}

function standing(health: Health): [string, string][] {
  const rows: [string, string][] = [
    ['Role', health.role],
    ['Epoch', health.epoch.toLocaleString()],
    ['Mode', health.replication_mode],
  ];
  if (health.sync_lapsed_since) rows.push(['Sync lapsed since', when(health.sync_lapsed_since)]);
  if (health.fenced_by)
    rows.push([
      'Fenced by',
      `epoch ${health.fenced_by.epoch}${health.fenced_by.primary ? ` at ${health.fenced_by.primary}` : ''}`,
    ]);
  const following = health.replication;
  if (following) {
    const lag = following.lag_seconds;
    rows.push(
      ['Primary', following.primary],
      ['Behind', lag === null ? 'not seeded yet' : lag === 0 ? 'in step' : `up to ${lag.toLocaleString()} s`],
      ['Last heard', when(following.last_heard_at)],
      ['Seeded', `${following.seeds.toLocaleString()} time${following.seeds === 1 ? '' : 's'}`],
    );
    if (following.halted) rows.push(['Halted', following.halted]);
    if (following.error) rows.push(['Failing since', `${when(following.failing_since)}: ${following.error}`]);
  }
  return rows;
}

function standbysTable(standbys: Standbys): HTMLElement {
  if (standbys.items.length === 0) return h('p', {}, 'No standby has asked for changes since this master started.');
  return h(
    'div',
    { class: 'scroll' },
    h(
      'table',
      { class: 'fold' },
      h(
        'thead',
        {},
        h('tr', {}, ...['Standby', 'Holds', 'Behind', 'Lag', 'Last asked'].map((name) => h('th', {}, name))),
      ),
      h(
        'tbody',
        {},
        ...standbys.items.map((standby) =>
          h(
            'tr',
            {},
            h('td', { 'data-label': 'Standby' }, standby.name || '(unnamed)'),
            h('td', { 'data-label': 'Holds' }, standby.position ? `#${standby.position.seq.toLocaleString()}` : '—'),
            h(
              'td',
              { 'data-label': 'Behind' },
              standby.behind_changes === null ? 'seeding anew' : `${standby.behind_changes.toLocaleString()} changes`,
            ),
            h(
              'td',
              { 'data-label': 'Lag' },
              standby.lag_seconds === null ? '—' : `${standby.lag_seconds.toLocaleString()} s`,
            ),
            h('td', { 'data-label': 'Last asked' }, when(standby.last_asked_at)),
          ),
        ),
      ),
    ),
  );
}

export async function replicationPage(ctx: PageCtx): Promise<void> {
  await ctx.live(
    async () => {
      const health = await get<Health>('/api/health');
      const standbys = health.role === 'primary' ? await get<Standbys>('/api/replication/standbys') : null;
      ctx.main.replaceChildren(
        facts(standing(health)),
        standbys ? h('section', { 'aria-label': 'Standbys' }, h('h2', {}, 'Standbys'), standbysTable(standbys)) : '',
      );
    },
    [],
    5000,
  );
}
