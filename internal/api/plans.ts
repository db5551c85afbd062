// Plans on the wire (operations in service/plans.ts): named sets of grants that tenants are held to.

import { etagOf } from '../service/etag.ts';
import { notFound } from '../errors/errors.ts';
import { MAX_BANDWIDTH, MIN_BANDWIDTH } from '../domain/link.ts';
import { pastAllowance, type PlanFields } from '../domain/plans.ts';
import { decodeCursor } from '../http/cursor.ts';
import type { QueryOf } from '../schema/query.ts';
import { array, integer, nullable, object, oneOf, optional, string, type Schema } from '../schema/schema.ts';
import { ID_RANGE } from '../schema/ids.ts';
import { insertPlan, removePlan, updatePlan } from '../service/plans.ts';
import { transact } from '../service/write.ts';
import { idPage, pageSchema, pagingQuery, record, tagList, timestamp } from './common.ts';
import { created, type Ctx, idParam, noContent, ok, operation, operations } from './route.ts';
import { ruleInput } from './rule-schema.ts';

const allowance = object(
  {
    bytes: integer({
      min: 1,
      max: Number.MAX_SAFE_INTEGER,
      description: "Bytes all of the tenant's rules may carry per period, both ways counted.",
    }),
    period: optional(oneOf(['day', 'month'] as const, { description: 'When the count starts over.' }), 'month'),
    reset_day: optional(
      integer({ min: 1, max: 28, description: 'The day of the month a monthly period starts (UTC).' }),
      1,
    ),
    reset_hour: optional(
      integer({ min: 0, max: 23, description: 'The hour (UTC) a daily or monthly period starts.' }),
      0,
    ),
    past: optional(
      oneOf(pastAllowance, {
        description: "Past it: stop the tenant's rules until the period starts over, or slow each to slow_to.",
      }),
      'stop',
    ),
    slow_to: optional(
      nullable(
        integer({
          min: MIN_BANDWIDTH,
          max: MAX_BANDWIDTH,
          description: 'With past slow: the bytes a second each rule is held to, each way.',
        }),
      ),
      null,
    ),
  },
  { name: 'Allowance' },
);

const rule = ruleInput.properties;

/** `schema` with another description: a plan's cap on a rule's field is the field's type, for what it caps. */
function described<T>(schema: Schema<T>, description: string): Schema<T> {
  return { ...schema, json: { ...schema.json, description } };
}

const planInput = object(
  {
    name: string({ min: 1, max: 64, description: 'Unique, ignoring case.' }),
    node_ids: optional(
      array(integer(ID_RANGE), { max: 1000, unique: true, description: 'Nodes its tenants may use.' }),
      [],
    ),
    node_tags: optional(
      { ...tagList, json: { ...tagList.json, description: 'Nodes carrying one of these tags, too.' } },
      [],
    ),
    port_ranges: optional(
      array(string({ min: 1, max: 11 }), {
        max: 100,
        unique: true,
        description: 'The ports its tenants may listen on, on those nodes: `30000` or `30000-30099`; none: no port.',
      }),
      [],
    ),
    max_rules: optional(
      nullable(integer({ min: 0, max: 1_000_000, description: 'The most rules a tenant has; null: any number.' })),
      null,
    ),
    max_connections: optional(
      described(
        rule.max_connections.schema,
        "The most a rule's max_connections may be, and what one without is held to.",
      ),
      null,
    ),
    bandwidth_limit: optional(
      described(
        rule.bandwidth_limit.schema,
        "The most a rule's bandwidth_limit may be, and what one without is held to.",
      ),
      null,
    ),
    max_new_connections_per_second: optional(
      described(
        rule.max_new_connections_per_second.schema,
        "The most a rule's max_new_connections_per_second may be, and what one without is held to.",
      ),
      null,
    ),
    traffic: optional(nullable(allowance), null),
  },
  { name: 'PlanInput', ignore: ['id', 'version', 'created_at', 'updated_at'] },
);

export const planSchema = record('Plan', {
  id: { type: 'integer' },
  name: { type: 'string' },
  node_ids: { type: 'array', items: { type: 'integer' } },
  node_tags: { type: 'array', items: { type: 'string' } },
  port_ranges: { type: 'array', items: { type: 'string' } },
  max_rules: { type: ['integer', 'null'] },
  max_connections: { type: ['integer', 'null'] },
  bandwidth_limit: { type: ['integer', 'null'] },
  max_new_connections_per_second: { type: ['integer', 'null'] },
  traffic: {
    type: ['object', 'null'],
    required: ['bytes', 'period', 'reset_day', 'reset_hour', 'past', 'slow_to'],
    properties: {
      bytes: { type: 'integer' },
      period: { type: 'string', enum: ['day', 'month'] },
      reset_day: { type: 'integer' },
      reset_hour: { type: 'integer' },
      past: { type: 'string', enum: [...pastAllowance] },
      slow_to: { type: ['integer', 'null'] },
    },
    additionalProperties: false,
  },
  version: { type: 'integer' },
  created_at: timestamp,
  updated_at: timestamp,
});

export const planOperations = operations({
  listPlans: operation({
    summary: 'List plans',
    query: pagingQuery,
    responses: { 200: { description: 'A page of plans', schema: pageSchema(planSchema) } },
    handler: (ctx: Ctx<undefined, QueryOf<typeof pagingQuery>>) => {
      const limit = ctx.query.limit ?? 50;
      const after = ctx.query.cursor === undefined ? 0 : decodeCursor(ctx.query.cursor);
      const count = ctx.query.count === true && (() => ctx.app.store.plans.count());
      return ok(idPage(ctx.app.store.plans.page(after, limit), limit, count));
    },
  }),
  createPlan: operation({
    action: 'plan.create',
    summary: 'Create a plan',
    body: planInput,
    responses: {
      201: { description: 'Created', schema: planSchema },
      409: { description: 'The name is taken' },
    },
    handler: async (ctx: Ctx<PlanFields, {}>) => {
      const plan = await transact(ctx.app, ctx, (change) => insertPlan(ctx.app, change, ctx.body));
      return created(plan, { Location: `/api/plans/${plan.id}`, ETag: etagOf(plan.version) });
    },
  }),
  getPlan: operation({
    summary: 'Show a plan',
    responses: { 200: { description: 'The plan', schema: planSchema } },
    handler: (ctx: Ctx<undefined, {}>) => {
      const plan = ctx.app.store.plans.find(idParam(ctx));
      if (!plan) throw notFound('plan', ctx.params.id!);
      return ok(plan, { ETag: etagOf(plan.version) });
    },
  }),
  replacePlan: operation({
    action: 'plan.update',
    summary: 'Replace a plan',
    body: planInput,
    responses: {
      200: { description: 'Updated', schema: planSchema },
      409: { description: 'The name is taken' },
    },
    handler: async (ctx: Ctx<PlanFields, {}>) => {
      const plan = await transact(ctx.app, ctx, (change) =>
        updatePlan(ctx.app, change, idParam(ctx), ctx.body, ctx.headers['if-match']),
      );
      return ok(plan, { ETag: etagOf(plan.version) });
    },
  }),
  deletePlan: operation({
    action: 'plan.delete',
    summary: 'Delete a plan',
    responses: { 204: { description: 'Deleted' } },
    handler: async (ctx: Ctx<undefined, {}>) => {
      await transact(ctx.app, ctx, (change) => removePlan(ctx.app, change, idParam(ctx), ctx.headers['if-match']));
      return noContent();
    },
  }),
});
