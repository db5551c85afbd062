// The fleet as a picture: nodes grouped by their first tag, tunnels as arrows from entry to each exit, coloured by
// status and path quality, each element a link to its page. Past DETAILED nodes a group is one circle (how many,
// how many offline) and the tunnels between two groups one arrow (how many, how many down); a group's circle opens
// that group alone (#/map?tag=eu), so a thousand nodes stay readable.

import { get, type Page, type Schema } from '../api.ts';
import { count, h, svg } from '../dom.ts';
import type { PageCtx } from '../main.ts';

type Node = Schema<'Node'>;
type Tunnel = Schema<'Tunnel'>;

/** How many nodes are drawn one by one; past it, groups are. */
const DETAILED = 200;
/** How many nodes are labelled by name beside their dot (more: names are in their titles). */
const LABELLED = 60;
/** Pages of 1,000 read at most, of nodes and of tunnels each. */
const PAGES = 20;
const WIDTH = 1000;
const SPACING = 22;
const UNTAGGED = '(no tag)';

interface Point {
  x: number;
  y: number;
}

interface Group {
  tag: string;
  nodes: Node[];
  centre: Point;
  radius: number;
}

/** Every item of a list, a page of 1,000 at a time, at most PAGES of them. */
async function all<T>(path: string, query: Record<string, string> = {}): Promise<T[]> {
  const items: T[] = [];
  let cursor: string | null = null;
  for (let page = 0; page < PAGES; page++) {
    const params = new URLSearchParams({ limit: '1000', ...query, ...(cursor ? { cursor } : {}) });
    const data: Page<T> = await get<Page<T>>(`${path}?${params.toString()}`);
    items.push(...data.items);
    cursor = data.next_cursor;
    if (!cursor) break;
  }
  return items;
}

/** How a path stands: down, not yet up, up but lossy or slow, or well. */
function quality(status: string, rtt: number | null, loss: number | null): string {
  if (status === 'down') return 'bad';
  if (status !== 'up') return 'idle';
  return (loss ?? 0) >= 5 || (rtt ?? 0) >= 250 ? 'poor' : 'good';
}

/** Whether an exit is the one the tunnel sends through (the first, until one is chosen). */
const inUse = (tunnel: Tunnel, index: number) =>
  tunnel.exits[index]!.chosen || (tunnel.chosen_exit_node_id === null && index === 0);

const WORST = ['good', 'idle', 'poor', 'bad'];
const worse = (a: string, b: string) => (WORST.indexOf(a) >= WORST.indexOf(b) ? a : b);

/** Groups by first tag, each a disc sized to hold its nodes, laid out in rows across WIDTH. */
function layout(nodes: Node[], detailed: boolean): { groups: Group[]; height: number } {
  const byTag = new Map<string, Node[]>();
  for (const node of nodes) {
    const tag = node.tags[0] ?? UNTAGGED;
    byTag.set(tag, [...(byTag.get(tag) ?? []), node]);
  }
  const groups: Group[] = [...byTag.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([tag, members]) => ({
      tag,
      nodes: members,
      centre: { x: 0, y: 0 },
      radius: detailed ? SPACING * (Math.sqrt(members.length) + 0.8) : 24 + 6 * Math.sqrt(members.length),
    }));
  let x = 0;
  let y = 0;
  let rowHeight = 0;
  const gap = detailed ? 30 : 50;
  for (const group of groups) {
    const size = group.radius * 2 + gap;
    if (x > 0 && x + size > WIDTH) {
      x = 0;
      y += rowHeight;
      rowHeight = 0;
    }
    group.centre = { x: x + size / 2, y: y + size / 2 };
    x += size;
    rowHeight = Math.max(rowHeight, size + (detailed ? 0 : 30));
  }
  return { groups, height: Math.max(y + rowHeight, 100) };
}

/** Where each node of a group sits: a sunflower's seeds, evenly spread over its disc. */
function seat(group: Group, index: number): Point {
  const r = SPACING * Math.sqrt(index + 0.5);
  const angle = index * 2.399963;
  return { x: group.centre.x + r * Math.cos(angle), y: group.centre.y + r * Math.sin(angle) };
}

/** A line from `a` to `b`, stopping short of both ends by `gap` (the dots, discs), with an arrowhead at `b`. */
function arrow(a: Point, b: Point, gap: number, attrs: Record<string, string>, label: string, gapB = gap): SVGElement {
  const length = Math.hypot(b.x - a.x, b.y - a.y) || 1;
  const ux = (b.x - a.x) / length;
  const uy = (b.y - a.y) / length;
  const line = svg('line', {
    x1: (a.x + ux * gap).toFixed(1),
    y1: (a.y + uy * gap).toFixed(1),
    x2: (b.x - ux * gapB).toFixed(1),
    y2: (b.y - uy * gapB).toFixed(1),
    'marker-end': 'url(#head)',
    ...attrs,
  });
  line.append(svg('title', {}, label));
  return line;
}

const link = (href: string, ...children: SVGElement[]) => svg('a', { href }, ...children);

function detailedMap(groups: Group[], tunnels: Tunnel[], labelled: boolean): SVGElement[] {
  const at = new Map<number, Point>();
  const drawn: SVGElement[] = [];
  for (const group of groups) {
    drawn.push(
      svg('circle', { class: 'group', cx: group.centre.x, cy: group.centre.y, r: group.radius - 4 }),
      svg('text', { class: 'tag', x: group.centre.x, y: group.centre.y - group.radius + 12 }, group.tag),
    );
    group.nodes.forEach((node, i) => at.set(node.id, seat(group, i + 2)));
  }
  for (const tunnel of tunnels) {
    const from = at.get(tunnel.entry_node_id);
    tunnel.exits.forEach((exit, index) => {
      const to = at.get(exit.node_id);
      if (!from || !to) return;
      const chosen = inUse(tunnel, index);
      const state = quality(exit.status, exit.rtt_ms, exit.loss_percent);
      const said = [
        exit.status,
        exit.rtt_ms === null ? '' : `${exit.rtt_ms} ms`,
        exit.loss_percent ? `${exit.loss_percent}% loss` : '',
      ];
      const label = `${tunnel.name}: ${said.filter(Boolean).join(', ')}${chosen ? '' : ' (standing by)'}`;
      const line = arrow(from, to, 8, { class: `path ${state}${chosen ? '' : ' spare'}` }, label);
      drawn.push(link(`#/tunnels?q=${encodeURIComponent(tunnel.name)}`, line));
    });
  }
  for (const group of groups)
    for (const node of group.nodes) {
      const { x, y } = at.get(node.id)!;
      const dot = svg('circle', { class: `node ${node.status}`, cx: x.toFixed(1), cy: y.toFixed(1), r: 6 });
      dot.append(svg('title', {}, `${node.name}: ${node.status}`));
      const parts = [dot];
      if (labelled) parts.push(svg('text', { class: 'name', x: x.toFixed(1), y: (y + 17).toFixed(1) }, node.name));
      drawn.push(link(`#/nodes?q=${encodeURIComponent(node.name)}`, ...parts));
    }
  return drawn;
}

function clusteredMap(groups: Group[], tunnels: Tunnel[]): SVGElement[] {
  const groupOf = new Map<number, Group>();
  for (const group of groups) for (const node of group.nodes) groupOf.set(node.id, group);
  const between = new Map<string, { from: Group; to: Group; count: number; down: number; state: string }>();
  const inside = new Map<Group, number>();
  for (const tunnel of tunnels) {
    const from = groupOf.get(tunnel.entry_node_id);
    tunnel.exits.forEach((exit, index) => {
      const to = groupOf.get(exit.node_id);
      if (!from || !to || !inUse(tunnel, index)) return;
      if (from === to) return void inside.set(from, (inside.get(from) ?? 0) + 1);
      const key = `${from.tag}\n${to.tag}`;
      const pair = between.get(key) ?? { from, to, count: 0, down: 0, state: 'good' };
      pair.count++;
      if (exit.status === 'down') pair.down++;
      pair.state = worse(pair.state, quality(exit.status, exit.rtt_ms, exit.loss_percent));
      between.set(key, pair);
    });
  }
  const drawn: SVGElement[] = [];
  for (const { from, to, count: n, down, state } of between.values()) {
    const label =
      `${count(n)} tunnel${n === 1 ? '' : 's'} from ${from.tag} to ${to.tag}` + (down ? `, ${count(down)} down` : '');
    const attrs = { class: `path ${state}`, 'stroke-width': (1.5 + Math.log2(n)).toFixed(1) };
    const line = arrow(from.centre, to.centre, from.radius, attrs, label, to.radius + 2);
    drawn.push(link(`#/map?tag=${encodeURIComponent(from.tag)}`, line));
  }
  for (const group of groups) {
    const byStatus = new Map<string, number>();
    for (const node of group.nodes) byStatus.set(node.status, (byStatus.get(node.status) ?? 0) + 1);
    const online = byStatus.get('online') ?? 0;
    const failing = (byStatus.get('offline') ?? 0) + (byStatus.get('install_failed') ?? 0);
    const n = group.nodes.length;
    const state = online === n ? 'online' : failing === n ? 'offline' : failing > 0 ? 'some' : 'new';
    const tunnelsInside = inside.get(group) ?? 0;
    const said =
      `${group.tag}: ${count(n)} nodes (${[...byStatus].map(([status, k]) => `${count(k)} ${status}`).join(', ')})` +
      (tunnelsInside ? `, ${count(tunnelsInside)} tunnels inside` : '');
    const disc = svg('circle', { class: `cluster ${state}`, cx: group.centre.x, cy: group.centre.y, r: group.radius });
    disc.append(svg('title', {}, said));
    drawn.push(
      link(
        `#/map?tag=${encodeURIComponent(group.tag)}`,
        disc,
        svg('text', { class: 'count', x: group.centre.x, y: group.centre.y + 6 }, count(n)),
        svg('text', { class: 'name', x: group.centre.x, y: group.centre.y + group.radius + 16 }, group.tag),
      ),
    );
  }
  return drawn;
}

/** The nodes of `tag`, and the nodes their tunnels lead to or come from (drawn in their own groups). */
function withPartners(nodes: Node[], tunnels: Tunnel[], tag: string): Node[] {
  const tagged = (node: Node) => (node.tags[0] ?? UNTAGGED) === tag;
  const members = new Set(nodes.filter(tagged).map((node) => node.id));
  const wanted = new Set(members);
  for (const tunnel of tunnels) {
    const ends = [tunnel.entry_node_id, ...tunnel.exits.map((exit) => exit.node_id)];
    if (ends.some((id) => members.has(id))) for (const id of ends) wanted.add(id);
  }
  return nodes.filter((node) => wanted.has(node.id));
}

export async function mapPage(ctx: PageCtx): Promise<void> {
  const tag = ctx.params.get('tag');
  const figure = h('figure', { class: 'map' });
  await ctx.live(
    async () => {
      const [nodes, tunnels] = await Promise.all([
        all<Node>('/api/nodes'),
        ctx.can('tunnels:read') ? all<Tunnel>('/api/tunnels') : Promise.resolve([]),
      ]);
      const shown = tag === null ? nodes : withPartners(nodes, tunnels, tag);
      const detailed = shown.length <= DETAILED;
      const { groups, height } = layout(shown, detailed);
      const drawn = detailed ? detailedMap(groups, tunnels, shown.length <= LABELLED) : clusteredMap(groups, tunnels);
      const head = svg(
        'marker',
        { id: 'head', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 6, markerHeight: 6, orient: 'auto' },
        svg('path', { d: 'M0,0L10,5L0,10z' }),
      );
      const picture = svg(
        'svg',
        { viewBox: `0 0 ${WIDTH} ${Math.ceil(height)}`, role: 'group', 'aria-label': 'Fleet map' },
        svg('defs', {}, head),
        ...drawn,
      );
      const nodesSaid = `${count(shown.length)} nodes${tag ? ` (group ${tag}, and the nodes its tunnels reach)` : ''}`;
      const caption = detailed
        ? `${nodesSaid}, ${count(tunnels.length)} tunnels. A dot is a node, an arrow a tunnel from its entry to ` +
          'an exit (dashed: standing by).'
        : `${nodesSaid} in ${count(groups.length)} groups by first tag, ${count(tunnels.length)} tunnels. Open a ` +
          'group to see its nodes.';
      figure.replaceChildren(
        ...(tag ? [h('p', {}, h('a', { href: '#/map' }, 'The whole fleet'))] : []),
        picture,
        h('figcaption', {}, caption),
        h(
          'ul',
          { class: 'legend' },
          ...[
            ['good', 'up'],
            ['poor', 'up, lossy (5%+) or slow (250 ms+)'],
            ['bad', 'down'],
            ['idle', 'pending'],
          ].map(([state, said]) => h('li', { class: state }, said)),
        ),
      );
    },
    ['node', 'tunnel'],
    10_000,
  );
  ctx.main.replaceChildren(figure);
}
