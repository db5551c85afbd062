// The dashboard: what exists and in which state, license usage, and traffic over time read
// from the per-minute buckets the agents' reports fill.

import { DomainError, notFound } from '../errors/errors.ts';
import { reaches } from '../service/grants.ts';
import { intParam, timeParam, type QueryOf } from '../schema/query.ts';
import { describe, formatTime } from '../schema/schema.ts';
import { syncStates } from '../domain/rules.ts';
import { record, timestamp } from './common.ts';
import { type Ctx, ok, operation, operations } from './route.ts';
import { grantedTo } from './granted-nodes.ts';
import { ID_RANGE } from '../schema/ids.ts';
import { nodeStatuses } from '../domain/nodes.ts';
import { tunnelStatuses } from '../domain/tunnels.ts';

const MAX_POINTS = 10_000;
const BUCKET_SECONDS = 60;

function countsOf(values: readonly string[]) {
  return {
    type: 'object',
    required: [...values],
    properties: Object.fromEntries(values.map((v) => [v, { type: 'integer' }])),
    additionalProperties: false,
  };
}

const bytes = {
  type: 'object',
  required: ['bytes_in', 'bytes_out'],
  properties: { bytes_in: { type: 'integer' }, bytes_out: { type: 'integer' } },
  additionalProperties: false,
};

const nodeCounts = {
  type: 'object',
  required: ['total', 'by_status'],
  properties: { total: { type: 'integer' }, by_status: countsOf(nodeStatuses) },
  additionalProperties: false,
};
const ruleCounts = {
  type: 'object',
  required: ['total', 'enabled', 'by_sync_state'],
  properties: { total: { type: 'integer' }, enabled: { type: 'integer' }, by_sync_state: countsOf(syncStates) },
  additionalProperties: false,
};
const tunnelCounts = {
  type: 'object',
  required: ['total', 'by_status'],
  properties: { total: { type: 'integer' }, by_status: countsOf(tunnelStatuses) },
  additionalProperties: false,
};

const dashboardSchema = record('Dashboard', {
  nodes: nodeCounts,
  rules: ruleCounts,
  tunnels: tunnelCounts,
  users: {
    type: 'object',
    required: ['total', 'disabled'],
    properties: { total: { type: 'integer' }, disabled: { type: 'integer' } },
    additionalProperties: false,
  },
  tokens: {
    type: 'object',
    required: ['total'],
    properties: { total: { type: 'integer', description: 'API tokens (not login sessions).' } },
    additionalProperties: false,
  },
  traffic: { ...bytes, description: 'Bytes counted on the current rules since they were created.' },
  license: {
    type: 'object',
    required: ['edition', 'status', 'max_nodes', 'nodes_used'],
    properties: {
      edition: { type: 'string' },
      status: { type: 'string' },
      max_nodes: { type: ['integer', 'null'] },
      nodes_used: { type: 'integer' },
    },
    additionalProperties: false,
  },
});

const trafficSchema = record('TrafficSeries', {
  from: { type: 'string', format: 'date-time' },
  to: { type: 'string', format: 'date-time' },
  step: { type: 'integer' },
  node_id: { type: ['integer', 'null'] },
  rule_id: { type: ['integer', 'null'] },
  points: {
    type: 'array',
    description: 'One point per step that saw traffic, oldest first; empty when there was none.',
    items: {
      type: 'object',
      required: ['at', 'bytes_in', 'bytes_out'],
      properties: {
        at: { type: 'string', format: 'date-time', description: 'Start of the step.' },
        bytes_in: { type: 'integer' },
        bytes_out: { type: 'integer' },
      },
      additionalProperties: false,
    },
  },
});

function fill(values: readonly string[], counts: Record<string, number>): Record<string, number> {
  return Object.fromEntries(values.map((v) => [v, counts[v] ?? 0]));
}

function sum(counts: Record<string, number>): number {
  return Object.values(counts).reduce((a, b) => a + b, 0);
}

/** A tenant's dashboard: the nodes their plan grants, their rules and tunnels, and the bytes their rules carried. */
const tenantDashboardSchema = record(
  'TenantDashboard',
  {
    nodes: nodeCounts,
    rules: ruleCounts,
    tunnels: tunnelCounts,
    traffic: { ...bytes, description: 'Bytes counted on their current rules since they were created.' },
  },
  "A tenant's dashboard: the nodes granted them, their own rules and tunnels.",
);

function tenantDashboard(ctx: Ctx<undefined, {}>) {
  const { store } = ctx.app;
  const nodesByStatus = fill(nodeStatuses, store.nodes.countByStatus(grantedTo(ctx)));
  const tunnelsByStatus = fill(tunnelStatuses, store.tunnels.countByStatus(ctx.caller.userId));
  const { traffic, ...rules } = store.rules.ownedCounts(ctx.caller.userId);
  return ok({
    nodes: { total: sum(nodesByStatus), by_status: nodesByStatus },
    rules,
    tunnels: { total: sum(tunnelsByStatus), by_status: tunnelsByStatus },
    traffic,
  });
}

function dashboard(ctx: Ctx<undefined, {}>) {
  if (ctx.caller.role === 'tenant') return tenantDashboard(ctx);
  const { store } = ctx.app;
  const nodesByStatus = fill(nodeStatuses, store.nodes.countByStatus());
  const tunnelsByStatus = fill(tunnelStatuses, store.tunnels.countByStatus());
  const license = ctx.app.licenseView();
  const nodesUsed = sum(nodesByStatus);
  return ok({
    nodes: { total: nodesUsed, by_status: nodesByStatus },
    rules: store.rules.counts(),
    tunnels: { total: sum(tunnelsByStatus), by_status: tunnelsByStatus },
    users: store.users.counts(),
    tokens: { total: store.tokens.countApi() },
    traffic: store.traffic.totals(),
    license: {
      edition: license.edition,
      status: license.status,
      max_nodes: license.limits.max_nodes,
      nodes_used: nodesUsed,
    },
  });
}

/** The query of a time series over per-minute points: its window and step, by default the last `span` seconds. */
export function seriesQuery(defaults: { step: number; span: string }) {
  return {
    from: timeParam(`Start (inclusive); default ${defaults.span} before \`to\`.`),
    to: timeParam('End (exclusive); default now.'),
    step: intParam({
      min: BUCKET_SECONDS,
      max: 31 * 86_400,
      multipleOf: BUCKET_SECONDS,
      description: `Seconds per point, a multiple of ${BUCKET_SECONDS}; default ${defaults.step}.`,
    }),
  };
}

/** A series' window in Unix seconds. Throws `invalid_query` for one that ends before it starts, or too many points. */
export function seriesWindow(
  query: { from?: string; to?: string; step?: number },
  now: string,
  defaults: { step: number; spanSeconds: number },
): { from: number; to: number; step: number } {
  const step = query.step ?? defaults.step;
  const to = Math.floor(Date.parse(query.to ?? now) / 1000);
  const from = query.from === undefined ? to - defaults.spanSeconds : Math.floor(Date.parse(query.from) / 1000);
  if (from >= to) throw badQuery('from', 'must be before to');
  if ((to - from) / step > MAX_POINTS)
    throw badQuery('step', `gives more than ${MAX_POINTS} points for this range; use a larger step`);
  return { from, to, step };
}

const trafficQuery = {
  ...seriesQuery({ step: 3600, span: '24 hours' }),
  node_id: intParam({ ...ID_RANGE, description: "Only this node's rules." }),
  rule_id: intParam({ ...ID_RANGE, description: 'Only this rule.' }),
};

function badQuery(parameter: string, detail: string): DomainError {
  return new DomainError('invalid_query', `${parameter} ${detail}`, { errors: [{ pointer: `?${parameter}`, detail }] });
}

/**
 * A tenant's series is one rule's of theirs: a node's, or the whole fleet's, carries what others' rules carried.
 * Throws `invalid_query` (no rule, or a node), `not_found` (another's rule).
 */
function tenantSeries(ctx: Ctx<undefined, QueryOf<typeof trafficQuery>>): void {
  const { query, app, caller } = ctx;
  if (caller.role !== 'tenant') return;
  if (query.rule_id === undefined || query.node_id !== undefined)
    throw badQuery('rule_id', "is how a tenant asks for a series: one of their rules' (node_id is for operators)");
  const rule = app.store.rules.find(query.rule_id);
  if (!rule || !reaches(caller, rule.owner_id)) throw notFound('rule', query.rule_id);
}

function traffic(ctx: Ctx<undefined, QueryOf<typeof trafficQuery>>) {
  const { query, app } = ctx;
  tenantSeries(ctx);
  const { from, to, step } = seriesWindow(query, app.timestamp(), { step: 3600, spanSeconds: 86_400 });
  const points = app.store.traffic.series({
    from,
    to,
    step,
    node_id: query.node_id ?? null,
    rule_id: query.rule_id ?? null,
  });
  return ok({
    from: formatTime(from * 1000),
    to: formatTime(to * 1000),
    step,
    node_id: query.node_id ?? null,
    rule_id: query.rule_id ?? null,
    points: points.map((p) => ({ at: formatTime(p.at * 1000), bytes_in: p.bytes_in, bytes_out: p.bytes_out })),
  });
}

export const dashboardOperations = operations({
  getDashboard: operation({
    summary: 'Counts by state, traffic totals and license usage',
    description: "A tenant's is a TenantDashboard: the nodes granted them, their own rules and tunnels.",
    tenants: true,
    responses: {
      200: {
        description: 'The dashboard',
        schema: describe({ oneOf: [dashboardSchema.json, tenantDashboardSchema.json] }),
      },
    },
    handler: dashboard,
  }),
  getTraffic: operation({
    summary: 'Bytes in and out over time',
    tenants: true,
    description:
      `Summed from the history of what the agents reported (a row a minute, then an hour, then a day: see ` +
      `"Traffic and vitals history"), per step (aligned to multiples of step since the Unix epoch); a row counts at ` +
      `its start. At most ${MAX_POINTS} points. A tenant asks for one rule's of theirs (rule_id; 404 for another's).`,
    query: trafficQuery,
    responses: { 200: { description: 'The series', schema: trafficSchema } },
    handler: traffic,
  }),
});

/** A node's vitals over time (GET /api/nodes/{id}/vitals). */
export const vitalsQuery = seriesQuery({ step: 60, span: 'an hour' });

export const vitalsSeriesSchema = record('NodeVitalsSeries', {
  node_id: { type: 'integer' },
  from: timestamp,
  to: timestamp,
  step: { type: 'integer' },
  points: {
    type: 'array',
    description: 'One point per step that had reports, oldest first: averages of the minutes in it.',
    items: {
      type: 'object',
      required: ['at', 'cpu_percent', 'load1', 'memory_used_bytes', 'rx_bytes_per_second', 'tx_bytes_per_second'],
      properties: {
        at: timestamp,
        cpu_percent: { type: ['number', 'null'] },
        load1: { type: 'number', description: 'The 1 minute load average.' },
        memory_used_bytes: { type: 'integer', description: 'Total less available memory.' },
        rx_bytes_per_second: { type: ['number', 'null'], description: 'Over every interface but lo.' },
        tx_bytes_per_second: { type: ['number', 'null'] },
      },
      additionalProperties: false,
    },
  },
});
