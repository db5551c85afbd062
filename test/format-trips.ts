// A node's rules exported in another tool's format and imported again, as the import tests (realm) and the tools'
// end-to-end tests (nftables, HAProxy) each do it: the same rules come back, as far as the format carries them.

import assert from 'node:assert/strict';
import type { TestContext } from 'node:test';
import { call, node, rule, startMaster } from './helpers.ts';

/** What a test compares of a rule: where it listens, where it sends and how. */
export const KEPT = [
  'name',
  'protocol',
  'listen_port',
  'listen_port_end',
  'targets',
  'strategy',
  'weights',
  'proxy_protocol',
  'source_address',
  'allow_sources',
  'deny_sources',
  'preserve_source',
  'max_connections',
  'max_new_connections_per_second',
  'bandwidth_limit',
  'health_check',
  'node',
  'tunnel',
] as const;
export type Kept = Partial<Record<(typeof KEPT)[number], unknown>>;

export const kept = (rule: Record<string, unknown>, fields: readonly string[] = KEPT): Kept =>
  Object.fromEntries(fields.filter((field) => field in rule).map((field) => [field, rule[field]]));

/** A round trip: the rules written, what the format cannot carry of a rule, and the way back. */
export interface Trip {
  format: string;
  /** Fields of a rule this format does not carry (the trip's rules leave them default). */
  notCarried: string[];
  roundTrip: Record<string, unknown>[] | null;
  /** What the exported text becomes before it is imported (a script the tool runs, read back). */
  through?: (exported: string) => string;
  /** What the export's own lines, imported again, may list as unmapped (each construct must match); none: nothing. */
  roundTripUnmapped?: RegExp;
}

/** The trip's rules made on a node, exported, imported into another, and compared. */
export async function roundTrip(t: TestContext, c: Trip): Promise<void> {
  const m = await startMaster(t);
  const [from, to] = [await node(m, 'from'), await node(m, 'to')];
  for (const written of c.roundTrip!) {
    const made = await rule(m, { ...written, node_id: from.id });
    assert.equal(made.status, 201, JSON.stringify(made.body));
  }
  const exported = await fetch(`${m.url}/api/nodes/${from.id}/export?format=${c.format}`, {
    headers: { Authorization: `Bearer ${m.admin}` },
  });
  assert.equal(exported.status, 200);
  const text = await exported.text();
  const source = c.through ? c.through(text) : text;
  const imported = await call(m.url, 'POST', '/api/import', {
    token: m.admin,
    body: { format: c.format, node: 'to', source },
  });
  assert.equal(imported.status, 200, `${JSON.stringify(imported.body)}\n${source}`);
  for (const { construct } of imported.body.unmapped)
    assert.match(construct, c.roundTripUnmapped ?? /^$/, `unmapped on the way back: ${construct}\n${text}`);
  const rulesOf = async (id: number) =>
    (await call(m.url, 'GET', `/api/rules?node_id=${id}&sort=listen_port`, { token: m.admin })).body.items.map(
      (r: Record<string, unknown>) =>
        kept(
          r,
          KEPT.filter((field) => field !== 'name'),
        ),
    );
  assert.deepEqual(await rulesOf(to.id), await rulesOf(from.id), text);
}
