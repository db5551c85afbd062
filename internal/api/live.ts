// Live numbers: what rules carry at this moment (open connections and flows, rates over their node's last report),
// as agents said in their last round, from memory; with each node's sums. The busiest first: the fleet's top talkers.

import { grants } from '../auth/scopes.ts';
import { validationFailed } from '../errors/errors.ts';
import { ID_RANGE } from '../schema/ids.ts';
import { intParam, textParam, type QueryOf } from '../schema/query.ts';
import type { RuleLive } from '../sync/live.ts';
import { ownerFilter, record } from './common.ts';
import { type Ctx, ok, operation, operations } from './route.ts';

const MAX_LISTED = 1000;

const liveQuery = {
  node_id: intParam({ ...ID_RANGE, description: "Only this node's rules." }),
  ids: textParam({ max: 12_000, description: `Only these rules: ids, comma-separated, at most ${MAX_LISTED}.` }),
  sort: textParam({
    max: 8,
    values: ['rate', 'open'],
    description: 'rate (in and out together, the default) or open.',
  }),
  limit: intParam({ min: 1, max: MAX_LISTED, description: 'Rules listed, the busiest first (default 50).' }),
};

const numbers = {
  open: { type: 'integer', description: 'Connections (TCP) and flows (UDP) open now.' },
  rate_in: { type: 'integer', description: 'Bytes a second in (client to target), over the last report.' },
  rate_out: { type: 'integer', description: 'Bytes a second out (back to the client).' },
};

const liveSchema = record('Live', {
  fresh_seconds: { type: 'integer', description: 'What agents said longer ago than this is not counted.' },
  nodes: {
    type: 'array',
    description: 'Each node with a rule listed or not, summed over its rules (a tenant: over their own alone).',
    items: {
      type: 'object',
      required: ['id', 'open', 'rate_in', 'rate_out'],
      properties: { id: { type: 'integer' }, ...numbers },
      additionalProperties: false,
    },
  },
  rules: {
    type: 'array',
    description: 'Rules carrying something now, the busiest first; a rule not listed carries nothing.',
    items: {
      type: 'object',
      required: ['id', 'node_id', 'open', 'rate_in', 'rate_out'],
      properties: { id: { type: 'integer' }, node_id: { type: 'integer' }, ...numbers },
      additionalProperties: false,
    },
  },
  rules_left: { type: 'integer', description: 'Rules carrying something beyond those listed.' },
});

function idsOf(text: string | undefined): Set<number> | null {
  if (text === undefined) return null;
  const ids = text.split(',').map((part) => Number(part.trim()));
  if (ids.length > MAX_LISTED || ids.some((id) => !Number.isSafeInteger(id) || id < 1))
    throw validationFailed([{ pointer: '?ids', detail: `must be at most ${MAX_LISTED} ids, comma-separated` }]);
  return new Set(ids);
}

function listLive(ctx: Ctx<undefined, QueryOf<typeof liveQuery>>) {
  const { app, caller, query } = ctx;
  const freshSeconds = Math.max(15, 3 * app.settings.get('agent_report_interval_seconds'));
  const owner = ownerFilter(caller, undefined);
  const ids = idsOf(query.ids);
  const rules = app.sync.live
    .rules(app.clock.now(), freshSeconds * 1000, query.node_id)
    .filter((rule) => owner === null || rule.owner_id === owner);
  const nodes = new Map<number, { id: number; open: number; rate_in: number; rate_out: number }>();
  for (const rule of rules) {
    const node = nodes.get(rule.node_id) ?? { id: rule.node_id, open: 0, rate_in: 0, rate_out: 0 };
    node.open += rule.open;
    node.rate_in += rule.rate_in;
    node.rate_out += rule.rate_out;
    nodes.set(rule.node_id, node);
  }
  const weight = (rule: RuleLive) => (query.sort === 'open' ? rule.open : rule.rate_in + rule.rate_out);
  const listed = rules
    .filter((rule) => ids === null || ids.has(rule.id))
    .sort((a, b) => weight(b) - weight(a) || a.id - b.id);
  const limit = query.limit ?? 50;
  return ok({
    fresh_seconds: freshSeconds,
    nodes: [...nodes.values()].sort((a, b) => b.rate_in + b.rate_out - (a.rate_in + a.rate_out) || a.id - b.id),
    rules: listed
      .slice(0, limit)
      .map(({ id, node_id, open, rate_in, rate_out }) => ({ id, node_id, open, rate_in, rate_out })),
    rules_left: Math.max(0, listed.length - limit),
  });
}

const busiestQuery = {
  limit: intParam({ min: 1, max: 100, description: 'Rules and nodes listed each, the busiest first (default 10).' }),
};

const carried = {
  bytes_in: { type: 'integer', description: 'Bytes in (client to target) since 00:00 UTC.' },
  bytes_out: { type: 'integer', description: 'Bytes out (back to the client) since 00:00 UTC.' },
};

const busiestSchema = record('BusiestToday', {
  day: { type: 'string', description: 'The UTC day counted (YYYY-MM-DD).' },
  rules: {
    type: 'array',
    items: {
      type: 'object',
      required: ['id', 'name', 'node_id', 'bytes_in', 'bytes_out'],
      properties: { id: { type: 'integer' }, name: { type: 'string' }, node_id: { type: 'integer' }, ...carried },
      additionalProperties: false,
    },
  },
  nodes: {
    type: 'array',
    description: "What each node's rules carried, for a caller holding nodes:read; a tenant's list is empty.",
    items: {
      type: 'object',
      required: ['id', 'name', 'bytes_in', 'bytes_out'],
      properties: { id: { type: 'integer' }, name: { type: 'string' }, ...carried },
      additionalProperties: false,
    },
  },
});

function busiestToday(ctx: Ctx<undefined, QueryOf<typeof busiestQuery>>) {
  const { app, caller } = ctx;
  const seconds = Math.floor(app.clock.now() / 1000);
  const limit = ctx.query.limit ?? 10;
  const owner = ownerFilter(caller, undefined);
  // A node's bytes are every owner's rules': a tenant is shown their own rules alone.
  const nodesShown = owner === null && grants(caller.scopes, 'nodes:read');
  return ok({
    day: new Date(seconds * 1000).toISOString().slice(0, 10),
    rules: app.store.traffic.busiestToday('rule', seconds, limit, owner),
    nodes: nodesShown ? app.store.traffic.busiestToday('node', seconds, limit) : [],
  });
}

export const liveOperations = operations({
  busiestToday: operation({
    tenants: true,
    summary: 'What carried the most bytes today: rules and nodes, the busiest first',
    description:
      'Bytes in and out since 00:00 UTC, as agents reported them (a rule through a tunnel counts on its entry ' +
      'node). Kept as reports are counted, a row a rule and a node, and read through an index busiest first: as ' +
      'cheap with a million rules as with ten. A tenant sees their own rules and no node (a node carries every ' +
      "owner's rules).",
    query: busiestQuery,
    responses: { 200: { description: 'The top talkers of the day', schema: busiestSchema } },
    handler: busiestToday,
  }),
  listLive: operation({
    tenants: true,
    summary: 'What rules carry at this moment: open connections and rates, the busiest first',
    description:
      "From each node's last report (agent_report_interval_seconds): open TCP connections and UDP flows (the " +
      "relay's, and the kernel's from its connection tracking table), and bytes a second over the report's " +
      'interval. Held in memory, never stored: a node whose agent is away, or silent for fresh_seconds, carries ' +
      "nothing here. A tenant sees their own rules, and as each node's sums only theirs. Agents older than this " +
      'report nothing live.',
    query: liveQuery,
    responses: { 200: { description: 'The numbers', schema: liveSchema } },
    handler: listLive,
  }),
});
