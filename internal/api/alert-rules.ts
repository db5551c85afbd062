// Alert rules on the wire (operations in service/alert-rules.ts, the evaluation in service/alerting.ts), and the
// alerts they find now.

import { decodeCursor } from '../http/cursor.ts';
import { etagOf } from '../service/etag.ts';
import { notFound } from '../errors/errors.ts';
import type { QueryOf } from '../schema/query.ts';
import { array, boolean, integer, nullable, object, oneOf, optional, string, type Infer } from '../schema/schema.ts';
import { insertAlertRule, removeAlertRule, THRESHOLDS, updateAlertRule } from '../service/alert-rules.ts';
import { transact } from '../service/write.ts';
import { alertConditions } from '../domain/alerts.ts';
import { type AlertRule, type AlertRuleFields } from '../store/alerts.ts';
import { ID_RANGE } from '../schema/ids.ts';
import {
  ALERTING_NAME,
  idPage,
  nullableTimestamp,
  pageSchema,
  pagingQuery,
  record,
  tagList,
  timestamp,
} from './common.ts';
import { created, type Ctx, idParam, noContent, ok, operation, operations } from './route.ts';
import { MAX_FINDINGS, alertStates } from '../domain/alerts.ts';

const thresholdHelp = Object.entries(THRESHOLDS)
  .map(([condition, t]) => `${condition}: ${t.what} (${t.min}-${t.max})`)
  .join('; ');

export const alertRuleInput = object(
  {
    name: string(ALERTING_NAME),
    condition: oneOf(alertConditions, {
      description:
        'node_offline: a node whose agent is not linked; agent_outdated: a node whose agent is older than the ' +
        'master; kernel_drift: a node whose kernel table something else changed within threshold minutes; ' +
        'rule_sync_failed: a rule its node failed to apply; rule_degraded: a rule whose health checks find a target ' +
        'down; tunnel_down: a tunnel either end reports down; quota_percent: a rule that used threshold % of its ' +
        'quota; quota_spent: a rule whose quota is spent; rule_expiring: a rule that expires within threshold ' +
        "days; license_expiring, certificate_expiring: the license, the master's TLS certificate, within " +
        'threshold days (or past); writes_refused: the master refusing writes (a full disk).',
    }),
    threshold: optional(
      nullable(integer({ min: 1, max: 1440, description: `For the conditions that take one: ${thresholdHelp}.` })),
      null,
    ),
    node_ids: optional(
      array(integer(ID_RANGE), {
        max: 100,
        unique: true,
        description: 'Only resources on these nodes (a tunnel: at either end); empty: on any.',
      }),
      [],
    ),
    resource_ids: optional(
      array(integer(ID_RANGE), {
        max: 100,
        unique: true,
        description: "Only these of the condition's resources (node, rule or tunnel ids); empty: any.",
      }),
      [],
    ),
    tags: optional(
      {
        ...tagList,
        json: {
          ...tagList.json,
          description: 'Only resources carrying one of these tags (nodes and rules have tags).',
        },
      },
      [],
    ),
    for_seconds: optional(
      integer({ min: 0, max: 86_400, description: 'How long the condition must hold before the alert fires.' }),
      60,
    ),
    repeat_seconds: optional(
      nullable(
        integer({
          min: 60,
          max: 7 * 86_400,
          description: 'Notify a firing alert again this often while it holds; null: once.',
        }),
      ),
      null,
    ),
    damping_seconds: optional(
      integer({
        min: 0,
        max: 86_400,
        description:
          'How long a fired alert must stay clear before it resolves: one that returns within it is not notified ' +
          'again (flapping); 0: resolved at once.',
      }),
      0,
    ),
    channel_ids: array(integer(ID_RANGE), { min: 1, max: 20, unique: true, description: 'The channels notified.' }),
    enabled: optional(boolean(), true),
  },
  { name: 'AlertRuleInput', ignore: ['id', 'version', 'created_at', 'updated_at'] },
);
type AlertRuleBody = Infer<typeof alertRuleInput>;

const alertRuleSchema = record('AlertRule', {
  id: { type: 'integer' },
  name: { type: 'string' },
  condition: { type: 'string', enum: [...alertConditions] },
  threshold: { type: ['integer', 'null'] },
  node_ids: { type: 'array', items: { type: 'integer' } },
  resource_ids: { type: 'array', items: { type: 'integer' } },
  tags: { type: 'array', items: { type: 'string' } },
  for_seconds: { type: 'integer' },
  repeat_seconds: { type: ['integer', 'null'] },
  damping_seconds: { type: 'integer' },
  channel_ids: { type: 'array', items: { type: 'integer' } },
  enabled: { type: 'boolean' },
  version: { type: 'integer' },
  created_at: timestamp,
  updated_at: timestamp,
});

function fieldsOf(body: AlertRuleBody): AlertRuleFields {
  return {
    name: body.name,
    condition: body.condition,
    threshold: body.threshold,
    selector: { node_ids: body.node_ids, resource_ids: body.resource_ids, tags: body.tags },
    for_seconds: body.for_seconds,
    repeat_seconds: body.repeat_seconds,
    damping_seconds: body.damping_seconds,
    channel_ids: body.channel_ids,
    enabled: body.enabled,
  };
}

function shownAlertRule({ selector, ...rule }: AlertRule) {
  return {
    id: rule.id,
    name: rule.name,
    condition: rule.condition,
    threshold: rule.threshold,
    ...selector,
    for_seconds: rule.for_seconds,
    repeat_seconds: rule.repeat_seconds,
    damping_seconds: rule.damping_seconds,
    channel_ids: rule.channel_ids,
    enabled: rule.enabled,
    version: rule.version,
    created_at: rule.created_at,
    updated_at: rule.updated_at,
  };
}

const alertSchema = record('Alert', {
  id: { type: 'integer' },
  alert_rule_id: { type: 'integer' },
  resource: { type: 'string', enum: ['node', 'rule', 'tunnel', 'license', 'certificate'] },
  resource_id: { type: 'integer', description: 'The node, rule or tunnel; 0 for the license and the certificate.' },
  node_id: { type: ['integer', 'null'], description: "The node it is on (a tunnel's entry); null for the master's." },
  other_node_id: { type: ['integer', 'null'], description: "A tunnel's exit node." },
  tags: { type: 'array', items: { type: 'string' } },
  state: {
    type: 'string',
    enum: [...alertStates],
    description:
      'pending: holding for less than for_seconds; firing: notified; clearing: gone for less than damping_seconds.',
  },
  muted: { type: 'boolean', description: 'A turn of it fell in a silence and was not notified.' },
  summary: { type: 'string' },
  since: timestamp,
  fired_at: nullableTimestamp,
  notified_at: nullableTimestamp,
  cleared_at: nullableTimestamp,
});

async function putAlertRule(ctx: Ctx<AlertRuleBody, {}>) {
  const rule = await transact(ctx.app, ctx, (change) =>
    updateAlertRule(ctx.app, change, idParam(ctx), fieldsOf(ctx.body), ctx.headers['if-match']),
  );
  return ok(shownAlertRule(rule), { ETag: etagOf(rule.version) });
}

export const alertRuleOperations = operations({
  listAlertRules: operation({
    summary: 'List alert rules',
    query: pagingQuery,
    responses: { 200: { description: 'A page of alert rules', schema: pageSchema(alertRuleSchema) } },
    handler: (ctx: Ctx<undefined, QueryOf<typeof pagingQuery>>) => {
      const limit = ctx.query.limit ?? 50;
      const after = ctx.query.cursor === undefined ? 0 : decodeCursor(ctx.query.cursor);
      const page = idPage(
        ctx.app.store.alertRules.page(after, limit),
        limit,
        ctx.query.count === true && (() => ctx.app.store.alertRules.count()),
      );
      return ok({ ...page, items: page.items.map(shownAlertRule) });
    },
  }),
  createAlertRule: operation({
    action: 'alert_rule.create',
    summary: 'Create an alert rule',
    description:
      `Evaluated every second. A rule follows at most ${MAX_FINDINGS} resources at once (the first by id). What ` +
      'fires or resolves for one channel in one evaluation goes as one notification.',
    body: alertRuleInput,
    responses: { 201: { description: 'Created', schema: alertRuleSchema }, 409: { description: 'Name taken' } },
    handler: async (ctx: Ctx<AlertRuleBody, {}>) => {
      const rule = await transact(ctx.app, ctx, (change) => insertAlertRule(ctx.app, change, fieldsOf(ctx.body)));
      return created(shownAlertRule(rule), { Location: `/api/alert-rules/${rule.id}`, ETag: etagOf(rule.version) });
    },
  }),
  getAlertRule: operation({
    summary: 'Show an alert rule',
    responses: { 200: { description: 'The alert rule', schema: alertRuleSchema } },
    handler: (ctx: Ctx<undefined, {}>) => {
      const rule = ctx.app.store.alertRules.find(idParam(ctx));
      if (!rule) throw notFound('alert rule', ctx.params.id!);
      return ok(shownAlertRule(rule), { ETag: etagOf(rule.version) });
    },
  }),
  replaceAlertRule: operation({
    action: 'alert_rule.update',
    summary: 'Replace an alert rule',
    description:
      'A change to what it watches (condition, threshold, selector, enabled) forgets its alerts without notifying ' +
      'them: they are found again, as new, if they still hold.',
    body: alertRuleInput,
    responses: { 200: { description: 'Updated', schema: alertRuleSchema }, 409: { description: 'Name taken' } },
    handler: putAlertRule,
  }),
  deleteAlertRule: operation({
    action: 'alert_rule.delete',
    summary: 'Delete an alert rule',
    description: 'Its alerts go with it, without a resolved notification.',
    responses: { 204: { description: 'Deleted' } },
    handler: async (ctx: Ctx<undefined, {}>) => {
      await transact(ctx.app, ctx, (change) => removeAlertRule(ctx.app, change, idParam(ctx), ctx.headers['if-match']));
      return noContent();
    },
  }),
  listAlerts: operation({
    summary: 'List what alert rules find now: pending, firing and clearing alerts',
    query: pagingQuery,
    responses: { 200: { description: 'A page of alerts', schema: pageSchema(alertSchema) } },
    handler: (ctx: Ctx<undefined, QueryOf<typeof pagingQuery>>) => {
      const limit = ctx.query.limit ?? 50;
      const after = ctx.query.cursor === undefined ? 0 : decodeCursor(ctx.query.cursor);
      return ok(
        idPage(
          ctx.app.store.alerts.page(after, limit),
          limit,
          ctx.query.count === true && (() => ctx.app.store.alerts.count()),
        ),
      );
    },
  }),
});
