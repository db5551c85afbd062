// Import: another tool's config (pasted or uploaded) read for a node, previewed (the rules as read, and each construct
// that does not map with its line), then applied, through POST /api/import as curl would.

import { api, get, type Page, type Schema } from '../api.ts';
import { badge, field, form, h, input, select } from '../dom.ts';
import type { PageCtx } from '../main.ts';

type Node = Schema<'Node'>;

interface Answer {
  rules: { name: string; outcome: string; line?: number }[];
  tunnels: { name: string; outcome: string }[];
  unmapped?: { line: number; construct: string; why: string }[];
  document?: { rules: { name: string; protocol: string; listen_port: number; targets: string[] }[] };
}

const FORMATS = ['realm', 'gost', 'nodepass', 'iptables', 'nftables', 'haproxy'];

const table = (caption: string, head: string[], rows: (string | HTMLElement)[][]) =>
  h(
    'table',
    { class: 'fold' },
    h('caption', {}, caption),
    h('thead', {}, h('tr', {}, ...head.map((name) => h('th', {}, name)))),
    h(
      'tbody',
      {},
      ...rows.map((row) => h('tr', {}, ...row.map((cell, i) => h('td', { 'data-label': head[i]! }, cell)))),
    ),
  );

/** What an import read and would do (or did): its rules with their lines and outcomes, and what did not map. */
function outcome(answer: Answer): HTMLElement {
  const read = answer.document?.rules ?? [];
  return h(
    'section',
    { 'aria-label': answer.unmapped ? 'Preview' : 'Imported' },
    table(
      `${read.length} rules`,
      ['Line', 'Rule', 'Listens', 'Sends to', 'Outcome'],
      answer.rules.map((result, i) => [
        String(result.line ?? ''),
        result.name,
        `${read[i]?.protocol ?? ''} ${read[i]?.listen_port ?? ''}`,
        (read[i]?.targets ?? []).join(', '),
        badge(result.outcome),
      ]),
    ),
    ...(answer.tunnels.length > 0 ? [h('p', {}, `Tunnels: ${answer.tunnels.map((t) => t.name).join(', ')}`)] : []),
    table(
      `${answer.unmapped?.length ?? 0} not carried over`,
      ['Line', 'What', 'Why'],
      (answer.unmapped ?? []).map((item) => [String(item.line), item.construct, item.why]),
    ),
  );
}

export async function importPage(ctx: PageCtx): Promise<void> {
  const nodes = (await get<Page<Node>>('/api/nodes?limit=1000')).items.map((node) => node.name);
  const controls = {
    format: select('format', FORMATS),
    node: select('node', nodes),
    peer: select('peer_node', ['', ...nodes]),
    file: input('file', { type: 'file' }),
    source: h('textarea', { name: 'source', rows: 12, spellcheck: 'false', required: true }),
  };
  controls.file.addEventListener('change', async () => {
    controls.source.value = (await controls.file.files?.[0]?.text()) ?? '';
  });
  const shown = h('div');
  const send = async (dryRun: boolean) => {
    const body = {
      format: controls.format.value,
      node: controls.node.value,
      source: controls.source.value,
      ...(controls.peer.value ? { peer_node: controls.peer.value } : {}),
    };
    const { data } = await api<Answer>('POST', `/api/import${dryRun ? '?dry_run=true' : ''}`, { body });
    shown.replaceChildren(outcome(data));
    if (!dryRun) ctx.say(`Imported ${data.rules.length} rules into ${body.node}`);
  };
  let dryRun = true;
  const apply = h('button', { type: 'submit', onclick: () => (dryRun = false) }, 'Import');
  ctx.main.append(
    form(
      { 'aria-label': 'Import a config' },
      [
        field('Format', controls.format),
        field('Node', controls.node, 'The node the config is read for: its rules listen there'),
        field('Peer node', controls.peer, 'The other end, where a pair of ends makes a tunnel (NodePass, gost)'),
        field('File', controls.file),
        field('Config', controls.source, 'Pasted, or the file chosen above'),
        h('button', { type: 'submit', onclick: () => (dryRun = true) }, 'Preview'),
        ...(ctx.can('*') ? [apply] : []),
      ],
      () => send(dryRun),
    ),
    shown,
  );
}
