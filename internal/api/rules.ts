// Forwarding rules on the wire: what a rule is written as and read as, and the handlers that decode a request, call
// the operation (service/rules.ts) and shape its answer. A rule is a listening port on a node relayed to one or more
// targets, directly or through a tunnel.

import { pageJson } from '../http/cursor.ts';
import { etagOf } from '../service/etag.ts';
import { notFound } from '../errors/errors.ts';
import { ID_RANGE } from '../schema/ids.ts';
import { boolParam, intParam, listQuery, textParam, type QueryOf } from '../schema/query.ts';
import { protocols, ruleFieldsOf, ruleStates, syncStates } from '../domain/rules.ts';
import { insertRule, removeRule, syncRule, updateRule } from '../service/rules.ts';
import { transact } from '../service/write.ts';
import type { RuleFilter } from '../store/rules.ts';
import { ownerFilter, pageSchema, paging, sortParam } from './common.ts';
import type { Principal } from '../auth/principal.ts';
import { reaches } from '../service/grants.ts';
import { created, idParam, noContent, ok, okJson, operation, operations } from './route.ts';
import { ruleInput, ruleSchema } from './rule-schema.ts';
import { ruleSorts } from '../domain/sorts.ts';

/** What lists of rules select by; a batch's `filter` takes the same. */
export const ruleFilterQuery = {
  owner_id: intParam({ ...ID_RANGE, description: 'Only rules this user owns.' }),
  node_id: intParam(ID_RANGE),
  tunnel_id: intParam(ID_RANGE),
  enabled: boolParam(),
  protocol: textParam({ max: 8, values: protocols }),
  tag: textParam({ max: 32, description: 'Only rules carrying this tag.' }),
  q: textParam({ max: 100, description: 'Substring of the name.' }),
  sync_state: textParam({ max: 16, values: syncStates, description: 'What its node last made of it.' }),
  state: textParam({ max: 16, values: ruleStates }),
  port: intParam({ min: 1, max: 65535, description: 'Only rules listening on this port (in their range).' }),
};

/** The store's filter of a list query's (or a batch filter's) values. */
export function ruleFilterOf(
  query: QueryOf<typeof ruleFilterQuery>,
  caller: Principal,
): Omit<RuleFilter, 'afterId' | 'limit'> {
  return {
    owner_id: ownerFilter(caller, query.owner_id),
    node_id: query.node_id ?? null,
    tunnel_id: query.tunnel_id ?? null,
    enabled: query.enabled ?? null,
    protocol: query.protocol ?? null,
    tag: query.tag ?? null,
    q: query.q ?? null,
    sync_state: query.sync_state ?? null,
    state: query.state ?? null,
    port: query.port ?? null,
  };
}

const listRulesQuery = { ...listQuery, ...ruleFilterQuery, sort: sortParam(ruleSorts) };

export const ruleOperations = operations({
  listRules: operation({
    tenants: true,
    summary: 'List forwarding rules',
    query: listRulesQuery,
    responses: { 200: { description: 'A page of rules', schema: pageSchema(ruleSchema) } },
    handler: (ctx) => {
      const { limit, after, count, sorted } = paging(ctx.query);
      const page = ctx.app.store.rules.page({
        afterId: after,
        limit,
        count,
        sorted,
        ...ruleFilterOf(ctx.query, ctx.caller),
      });
      return okJson(pageJson(page, sorted && ctx.query.sort));
    },
  }),
  createRule: operation({
    tenants: true,
    action: 'rule.create',
    summary: 'Create a forwarding rule',
    description:
      'The rule starts with sync.state pending and is pushed to its node. A port the node already uses for the ' +
      'same protocol is 409 naming the rule (or tunnel) that holds it.',
    body: ruleInput,
    responses: {
      201: { description: 'Created', schema: ruleSchema },
      403: {
        description:
          "Lacking rules:write, or outside a tenant's plan (not_granted: a node, a port, how many rules, a cap)",
      },
      409: { description: 'The port is taken on that node' },
    },
    handler: async (ctx) => {
      const rule = await transact(ctx.app, ctx, (change) => insertRule(ctx.app, change, ruleFieldsOf(ctx.body)));
      return created(rule, { Location: `/api/rules/${rule.id}`, ETag: etagOf(rule.version) });
    },
  }),
  getRule: operation({
    summary: 'Show a forwarding rule',
    tenants: true,
    responses: { 200: { description: 'The rule', schema: ruleSchema } },
    handler: (ctx) => {
      const rule = ctx.app.store.rules.json(idParam(ctx));
      if (!rule || !reaches(ctx.caller, rule.owner_id)) throw notFound('rule', ctx.params.id!);
      return okJson(rule.json, { ETag: etagOf(rule.version) });
    },
  }),
  replaceRule: operation({
    tenants: true,
    action: 'rule.update',
    summary: 'Replace a forwarding rule',
    description: 'Moving a rule to another node pushes both nodes. Sync state and traffic are read-only and ignored.',
    body: ruleInput,
    responses: {
      200: { description: 'Updated', schema: ruleSchema },
      403: {
        description:
          "Lacking rules:write, or outside a tenant's plan (not_granted: a node, a port, how many rules, a cap)",
      },
      409: { description: 'The port is taken on that node' },
    },
    handler: async (ctx) => {
      const rule = await transact(ctx.app, ctx, (change) =>
        updateRule(ctx.app, change, idParam(ctx), ruleFieldsOf(ctx.body), ctx.headers['if-match']),
      );
      return ok(rule, { ETag: etagOf(rule.version) });
    },
  }),
  deleteRule: operation({
    tenants: true,
    action: 'rule.delete',
    summary: 'Delete a forwarding rule; its node closes the port',
    responses: { 204: { description: 'Deleted' } },
    handler: async (ctx) => {
      await transact(ctx.app, ctx, (change) => removeRule(ctx.app, change, idParam(ctx), ctx.headers['if-match']));
      return noContent();
    },
  }),
  syncRule: operation({
    tenants: true,
    action: 'rule.sync',
    summary: "Push a rule's node its config and wait for the node to acknowledge",
    description:
      'Waits up to sync_wait_seconds. 200: the node applied the rule (it listens). 202: not acknowledged yet ' +
      '(e.g. the node is offline; it gets the config when it connects). 502: the node reported a failure ' +
      "(sync.error in the body's rule). A change the master makes by itself while the sync waits (a tunnel's picked " +
      'port moved after its exit found it taken) is waited for too, within the same time: the answer is how it ended.',
    responses: {
      200: { description: 'Applied', schema: ruleSchema },
      202: { description: 'Still pending', schema: ruleSchema },
      502: { description: 'The node could not apply it' },
    },
    handler: async (ctx) => {
      const rule = await syncRule(ctx.app, ctx, idParam(ctx));
      return { status: rule.sync.state === 'applied' ? 200 : 202, body: rule, headers: { ETag: etagOf(rule.version) } };
    },
  }),
});
