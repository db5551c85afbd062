// The traffic chart: bytes in and out per step as two lines in an SVG, steps without traffic
// drawn as zero, with a text summary for those who do not see it.

import { get, withQuery, type Schema } from './api.ts';
import { bytes, field, h, svg } from './dom.ts';

export type TrafficSeries = Schema<'TrafficSeries'>;

const WIDTH = 640;
const HEIGHT = 200;
const PAD = { left: 64, right: 8, top: 8, bottom: 24 };

export function trafficChart(series: TrafficSeries): HTMLElement {
  const stepMs = series.step * 1000;
  const start = Math.floor(Date.parse(series.from) / stepMs) * stepMs;
  const count = Math.max(1, Math.ceil((Date.parse(series.to) - start) / stepMs));
  const byTime = new Map(series.points.map((p) => [Date.parse(p.at), p]));
  const slots = Array.from({ length: count }, (_, i) => {
    const p = byTime.get(start + i * stepMs);
    return { at: start + i * stepMs, in: p?.bytes_in ?? 0, out: p?.bytes_out ?? 0 };
  });
  const max = Math.max(1, ...slots.map((s) => Math.max(s.in, s.out)));
  const x = (i: number) => PAD.left + (i / Math.max(1, count - 1)) * (WIDTH - PAD.left - PAD.right);
  const y = (v: number) => PAD.top + (1 - v / max) * (HEIGHT - PAD.top - PAD.bottom);
  const line = (pick: (s: (typeof slots)[number]) => number, cls: string) =>
    svg('polyline', {
      class: cls,
      points: slots.map((s, i) => `${x(i).toFixed(1)},${y(pick(s)).toFixed(1)}`).join(' '),
    });
  const label = (text: string, lx: number, ly: number, anchor: string) =>
    svg('text', { x: lx, y: ly, 'text-anchor': anchor, class: 'axis' }, text);
  const hour = (t: number) =>
    new Date(t).toLocaleString(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });
  const totalIn = slots.reduce((sum, s) => sum + s.in, 0);
  const totalOut = slots.reduce((sum, s) => sum + s.out, 0);
  const span = `from ${new Date(series.from).toLocaleString()} to ${new Date(series.to).toLocaleString()}`;
  const summary =
    `Traffic ${span}: ${bytes(totalIn)} in, ${bytes(totalOut)} out; ` +
    `peak ${bytes(max)} per ${series.step / 60} minutes.`;
  const chart = svg(
    'svg',
    { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: 'img', 'aria-label': summary, class: 'chart' },
    svg('line', { class: 'grid', x1: PAD.left, x2: WIDTH - PAD.right, y1: y(max), y2: y(max) }),
    svg('line', { class: 'grid', x1: PAD.left, x2: WIDTH - PAD.right, y1: y(0), y2: y(0) }),
    label(bytes(max), PAD.left - 6, y(max) + 4, 'end'),
    label('0', PAD.left - 6, y(0) + 4, 'end'),
    label(hour(start), x(0), HEIGHT - 6, 'start'),
    label(hour(start + (count - 1) * stepMs), x(count - 1), HEIGHT - 6, 'end'),
    line((s) => s.in, 'in'),
    line((s) => s.out, 'out'),
  );
  return h(
    'figure',
    { class: 'traffic' },
    chart,
    h(
      'figcaption',
      {},
      h('span', { class: 'key in' }, `In ${bytes(totalIn)}`),
      ' ',
      h('span', { class: 'key out' }, `Out ${bytes(totalOut)}`),
      ` over the last ${hoursOf(Math.round((Date.parse(series.to) - Date.parse(series.from)) / 3_600_000))}`,
    ),
  );
}

function hoursOf(hours: number): string {
  return hours === 1 ? 'hour' : `${hours.toLocaleString()} hours`;
}

/** The windows a chart of traffic can show, and the step of each (a multiple of the buckets' minute). */
const WINDOWS = {
  'Last hour': [3600, 60],
  'Last day': [86_400, 1800],
  'Last week': [604_800, 10_800],
  'Last 30 days': [2_592_000, 43_200],
} as const;

/** Shows in `dialog` the traffic of what `filter` names (a rule or a node) over a window the person picks. */
export async function showTraffic(
  dialog: HTMLDialogElement,
  title: string,
  filter: { rule_id?: number; node_id?: number },
): Promise<void> {
  const pick = h(
    'select',
    { name: 'window', 'aria-label': 'Window' },
    Object.keys(WINDOWS).map((label) => h('option', { value: label }, label)),
  );
  const place = h('div', { class: 'chart-wrap' });
  const draw = async () => {
    const [span, step] = WINDOWS[pick.value as keyof typeof WINDOWS];
    const from = new Date(Date.now() - span * 1000).toISOString().replace(/\.\d+Z$/, 'Z');
    place.replaceChildren(
      trafficChart(await get<TrafficSeries>(withQuery('/api/dashboard/traffic', { ...filter, from, step }))),
    );
  };
  pick.addEventListener('change', () => void draw());
  // The dialog is named by its heading, whatever else it shows at other times.
  const heading = h('h2', { id: dialog.getAttribute('aria-labelledby') ?? 'traffic-title' }, title);
  dialog.setAttribute('aria-labelledby', heading.id);
  dialog.replaceChildren(
    heading,
    field('Window', pick),
    place,
    h('div', { class: 'buttons' }, h('button', { type: 'button', onclick: () => dialog.close() }, 'Close')),
  );
  if (!dialog.open) dialog.showModal();
  await draw();
  pick.focus();
}
