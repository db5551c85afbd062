// Batch endpoints on the wire: what selects the items (ids or a list's filter), what each answers, and the handlers
// that hand the work to the app's batcher (service/batch.ts runs it there). Each answers per item, in request order;
// `?dry_run=true` does the same work and rolls it back.

import { validationFailed } from '../errors/errors.ts';
import { boolParam, type QueryOf } from '../schema/query.ts';
import {
  array,
  boolean,
  describe,
  fieldErrorSchema,
  integer,
  nullable,
  object,
  oneOf,
  optional,
  string,
  type Infer,
  type Schema,
} from '../schema/schema.ts';
import { protocols, ruleFieldsOf, ruleStates, syncStates } from '../domain/rules.ts';
import { portBudgetProblem } from '../domain/ranges.ts';
import { syncEach, type BatchJob } from '../service/batch.ts';
import { committedElsewhere } from '../service/write.ts';
import { ownerFilter, requireToGive, writeJobOf } from './common.ts';
import { cascadeQuery } from './nodes.ts';
import { type Ctx, ok, operation, operations, type Reply } from './route.ts';
import { ruleInput } from './rule-schema.ts';
import { ruleFilterOf, ruleFilterQuery } from './rules.ts';
import { ID_RANGE } from '../schema/ids.ts';
import { nodeStatuses } from '../domain/nodes.ts';
import { tunnelStatuses } from '../domain/tunnels.ts';

export const MAX_BATCH = 1000;

/** At most this many items a filter selects for one batch. */
export const MAX_SELECTED = 10_000;

const ids = array(integer(ID_RANGE), { min: 1, max: MAX_BATCH, unique: true, description: `1 to ${MAX_BATCH} ids.` });

/** The items a batch acts on: its ids, or what a resource's list shows with `filter`'s filters. */
function selection<F>(filter: Schema<F>) {
  return {
    ids: optional(ids),
    filter: optional({
      ...filter,
      json: {
        ...filter.json,
        description: `Instead of ids: every item the list shows with these filters (at most ${MAX_SELECTED}).`,
      },
    }),
  };
}

const ruleSelectionInput = object(
  selection(
    object(
      {
        owner_id: optional(integer(ID_RANGE)),
        node_id: optional(integer(ID_RANGE)),
        tunnel_id: optional(integer(ID_RANGE)),
        enabled: optional(boolean()),
        protocol: optional(oneOf(protocols)),
        tag: optional(string({ max: 32 })),
        q: optional(string({ max: 100 })),
        sync_state: optional(oneOf(syncStates)),
        state: optional(oneOf(ruleStates)),
        port: optional(integer({ min: 1, max: 65535 })),
      },
      { name: 'RuleSelection' },
    ),
  ),
  { name: 'RuleBatchIds' },
);
/** Nodes by ids, or by the nodes list's filters: what a batch, or a rollout, acts on. */
export const nodeSelection = selection(
  object(
    { status: optional(oneOf(nodeStatuses)), tag: optional(string({ max: 32 })), q: optional(string({ max: 64 })) },
    { name: 'NodeSelection' },
  ),
);
const nodeSelectionInput = object(nodeSelection, { name: 'NodeBatchIds' });
const tunnelSelectionInput = object(
  selection(
    object(
      {
        owner_id: optional(integer(ID_RANGE)),
        node_id: optional(integer(ID_RANGE)),
        status: optional(oneOf(tunnelStatuses)),
        q: optional(string({ max: 64 })),
      },
      { name: 'TunnelSelection' },
    ),
  ),
  { name: 'TunnelBatchIds' },
);

/** A selection's filter, as the store takes it. */
type Filter = Record<string, string | number | boolean | undefined>;

/**
 * The ids a batch acts on: those given, or those `matching` finds for its filter. Throws `validation_failed` for both
 * or neither, or a filter that selects more than MAX_SELECTED.
 */
export function selected(
  ctx: Pick<Ctx<unknown, unknown>, 'app' | 'caller'>,
  resource: Resource,
  body: { ids?: number[]; filter?: Filter },
): number[] {
  if ((body.ids === undefined) === (body.filter === undefined))
    throw validationFailed([{ pointer: '#', detail: 'give either ids or filter' }]);
  if (body.ids) return body.ids;
  const found = matching[resource](ctx, body.filter!, MAX_SELECTED + 1);
  if (found.length > MAX_SELECTED)
    throw validationFailed([
      { pointer: '#/filter', detail: `selects more than ${MAX_SELECTED} ${resource}: narrow it, or act in parts` },
    ]);
  return found;
}

type Resource = 'nodes' | 'rules' | 'tunnels';

type Selecting = Pick<Ctx<unknown, unknown>, 'app' | 'caller'>;

const matching: Record<Resource, (ctx: Selecting, filter: Filter, limit: number) => number[]> = {
  rules: ({ app, caller }, filter, limit) =>
    app.store.rules.idsMatching({
      afterId: 0,
      limit,
      ...ruleFilterOf(filter as QueryOf<typeof ruleFilterQuery>, caller),
    }),
  nodes: ({ app }, filter, limit) =>
    app.store.nodes.idsMatching({
      limit,
      status: (filter.status as string) ?? null,
      tag: (filter.tag as string) ?? null,
      q: (filter.q as string) ?? null,
    }),
  tunnels: ({ app, caller }, filter, limit) =>
    app.store.tunnels.idsMatching({
      limit,
      owner_id: ownerFilter(caller, filter.owner_id as number | undefined),
      node_id: (filter.node_id as number) ?? null,
      status: (filter.status as string) ?? null,
      q: (filter.q as string) ?? null,
    }),
};

const selectionInputs = { rules: ruleSelectionInput, nodes: nodeSelectionInput, tunnels: tunnelSelectionInput };
const dryRunQuery = { dry_run: boolParam('Check and report every item, change nothing.') };

const resultsSchema = describe({
  type: 'object',
  required: ['dry_run', 'results'],
  properties: {
    dry_run: { type: 'boolean' },
    results: {
      type: 'array',
      description: 'One entry per item, in request order.',
      items: {
        type: 'object',
        required: ['outcome'],
        properties: {
          id: { type: ['integer', 'null'] },
          index: { type: 'integer' },
          outcome: {
            type: 'string',
            enum: [
              'deleted',
              'created',
              'updated',
              'applied',
              'pending',
              'failed',
              'not_found',
              'conflict',
              'invalid',
              'forbidden',
            ],
          },
          error: {
            type: 'object',
            required: ['code', 'detail'],
            properties: {
              code: { type: 'string' },
              detail: { type: 'string' },
              errors: { type: 'array', items: fieldErrorSchema },
            },
          },
        },
      },
    },
  },
});

function inBatcher(
  ctx: Ctx<unknown, { dry_run?: boolean; cascade?: boolean }>,
  fields: Pick<BatchJob, 'operation'> & Partial<Pick<BatchJob, 'ids' | 'changes' | 'rules'>>,
): Promise<Reply> {
  const job: BatchJob = {
    ids: [],
    cascade: ctx.query.cascade ?? false,
    changes: {},
    rules: [],
    ...fields,
    ...writeJobOf(ctx, ctx.query.dry_run ?? false),
  };
  return committedElsewhere(ctx.app, job, ctx.app.batcher);
}

const batchCreateInput = object(
  {
    rules: array(ruleInput, {
      min: 1,
      max: MAX_BATCH,
      description: `1 to ${MAX_BATCH} rules, as for POST /api/rules.`,
    }),
  },
  { name: 'RuleBatchCreate' },
);

function batchCreateRules(ctx: Ctx<Infer<typeof batchCreateInput>, QueryOf<typeof dryRunQuery>>): Promise<Reply> {
  const tooMany = portBudgetProblem(ctx.body.rules);
  if (tooMany) throw validationFailed([{ pointer: '#/rules', detail: `the rules ${tooMany}` }]);
  requireToGive(
    ctx.caller,
    ctx.body.rules.map((rule) => rule.owner_id),
  );
  return inBatcher(ctx, { operation: 'createRules', rules: ctx.body.rules.map(ruleFieldsOf) });
}

/** A rule's controls, as a rule is written: a batch update may set each on every rule. */
const controls = ruleInput.properties;

const batchUpdateInput = object(
  {
    ...ruleSelectionInput.properties,
    changes: object(
      {
        enabled: optional(boolean({ description: 'Enable or disable.' })),
        owner_id: optional(integer({ ...ID_RANGE, description: 'Give to this user (needs users:write besides).' })),
        node_id: optional(integer({ ...ID_RANGE, description: 'Move to this node (same port).' })),
        tunnel_id: optional(
          nullable(integer({ ...ID_RANGE, description: 'Relay through this tunnel, or null for direct.' })),
        ),
        tags: optional(controls.tags.schema),
        allow_sources: optional(controls.allow_sources.schema),
        deny_sources: optional(controls.deny_sources.schema),
        max_connections: optional(controls.max_connections.schema),
        bandwidth_limit: optional(controls.bandwidth_limit.schema),
        max_new_connections_per_second: optional(controls.max_new_connections_per_second.schema),
        source_address: optional(controls.source_address.schema),
        allow_hours: optional(controls.allow_hours.schema),
        expires_at: optional(controls.expires_at.schema),
        proxy_protocol: optional(controls.proxy_protocol.schema),
        quota: optional(controls.quota.schema),
        health_check: optional(controls.health_check.schema),
      },
      { name: 'RuleChanges' },
    ),
  },
  { name: 'RuleBatchUpdate' },
);

function batchUpdateRules(ctx: Ctx<Infer<typeof batchUpdateInput>, QueryOf<typeof dryRunQuery>>): Promise<Reply> {
  const changes = Object.fromEntries(Object.entries(ctx.body.changes).filter(([, v]) => v !== undefined));
  if (Object.keys(changes).length === 0)
    throw validationFailed([
      {
        pointer: '#/changes',
        detail: `must name at least one of ${Object.keys(batchUpdateInput.properties.changes.properties).join(', ')}`,
      },
    ]);
  requireToGive(ctx.caller, [ctx.body.changes.owner_id ?? null], true);
  return inBatcher(ctx, { operation: 'updateRules', ids: selected(ctx, 'rules', ctx.body), changes });
}

async function batchSyncRules(ctx: Ctx<Infer<typeof ruleSelectionInput>, {}>): Promise<Reply> {
  return ok({ dry_run: false, results: await syncEach(ctx.app, ctx, selected(ctx, 'rules', ctx.body)) });
}

const cascadeDryRunQuery = { ...dryRunQuery, ...cascadeQuery };

function batchDelete(resource: Resource, action: string, description: string, deletes: BatchJob['operation']) {
  return operation({
    action,
    // Rules and tunnels follow ownership through the service's writes; nodes are for operators.
    tenants: resource !== 'nodes',
    summary: `Delete several ${resource === 'rules' ? 'forwarding rules' : resource}`,
    description,
    query: resource === 'rules' ? dryRunQuery : cascadeDryRunQuery,
    body: selectionInputs[resource],
    responses: { 200: { description: 'One result per id', schema: resultsSchema } },
    handler: (ctx: Ctx<{ ids?: number[]; filter?: Filter }, { dry_run?: boolean; cascade?: boolean }>) =>
      inBatcher(ctx, { operation: deletes, ids: selected(ctx, resource, ctx.body) }),
  });
}

export const batchOperations = operations({
  deleteNodes: batchDelete(
    'nodes',
    'node.delete',
    'Per item: deleted, not_found, conflict (still has rules or tunnels, unless ?cascade=true), or forbidden ' +
      '(the cascade needs a scope the caller lacks; audited as denied).',
    'deleteNodes',
  ),
  deleteRules: batchDelete(
    'rules',
    'rule.delete',
    'Per item: deleted or not_found (also for a tenant naming a rule that is not theirs).',
    'deleteRules',
  ),
  deleteTunnels: batchDelete(
    'tunnels',
    'tunnel.delete',
    'Per item: deleted, not_found, conflict (still used by rules, unless ?cascade=true), or forbidden (the ' +
      'cascade needs rules:write).',
    'deleteTunnels',
  ),
  createRules: operation({
    tenants: true,
    action: 'rule.create',
    summary: `Create up to ${MAX_BATCH} forwarding rules, all or nothing`,
    description:
      'If any rule is invalid or its port is taken (also by an earlier rule of the same batch), nothing is ' +
      'created: 422 with every problem in errors (pointers like #/rules/137/listen_port) and a per-item results ' +
      'list.',
    query: dryRunQuery,
    body: batchCreateInput,
    responses: {
      200: { description: 'Dry run: what would be created', schema: resultsSchema },
      201: { description: 'All created; results carry the new ids in order', schema: resultsSchema },
      403: { description: 'Lacking rules:write, or a rule given to another user without users:write' },
    },
    handler: batchCreateRules,
  }),
  updateRules: operation({
    tenants: true,
    action: 'rule.update',
    summary: 'Enable, disable, move or set the controls of several forwarding rules',
    description:
      "Applies the same changes to every rule (a list given replaces the rule's list: tags, allow_sources, " +
      'deny_sources). Per item: updated, not_found, conflict (port taken on the new ' +
      'node) or invalid (e.g. the tunnel does not enter at that node).',
    query: dryRunQuery,
    body: batchUpdateInput,
    responses: { 200: { description: 'One result per id', schema: resultsSchema } },
    handler: batchUpdateRules,
  }),
  syncRules: operation({
    tenants: true,
    action: 'rule.sync',
    summary: "Push several rules' nodes their config and wait for them to acknowledge",
    description:
      "Waits up to sync_wait_seconds in all. Per item: applied, pending, failed (with the node's error) or not_found.",
    body: ruleSelectionInput,
    responses: { 200: { description: 'One result per id', schema: resultsSchema } },
    handler: batchSyncRules,
  }),
});
