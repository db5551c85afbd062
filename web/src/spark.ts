// A sparkline: one series as a small line, for a table cell, with its summary as the accessible name.

import { svg } from './dom.ts';

const WIDTH = 120;
const HEIGHT = 24;

/** `values` oldest first (null: no reading then), scaled to `max` (default: their largest). */
export function sparkline(values: readonly (number | null)[], label: string, max?: number): SVGElement {
  const known = values.filter((v): v is number => v !== null);
  const top = Math.max(max ?? 0, ...known, 1e-9);
  const x = (i: number) => (values.length <= 1 ? WIDTH : (i / (values.length - 1)) * WIDTH);
  const y = (v: number) => HEIGHT - 1 - (v / top) * (HEIGHT - 2);
  const points = values.flatMap((v, i) => (v === null ? [] : [`${x(i).toFixed(1)},${y(v).toFixed(1)}`]));
  // A single reading is a level, not a dot nobody sees.
  if (points.length === 1) points.unshift(`0,${y(known[0]!).toFixed(1)}`);
  return svg(
    'svg',
    { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: 'img', 'aria-label': label, class: 'spark' },
    svg('polyline', { points: points.join(' ') }),
  );
}
