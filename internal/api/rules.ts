// Forwarding rules on the wire: what a rule is written as and read as, and the handlers that decode a request, call
// the operation (service/rules.ts) and shape its answer. A rule is a listening port on a node relayed to one or more
// targets, directly or through a tunnel.

import { pageJson } from '../http/cursor.ts';
import { etagOf } from '../http/etag.ts';
import { notFound } from '../errors/errors.ts';
import { cidr, target } from '../schema/net.ts';
import { boolParam, intParam, listQuery, textParam, type QueryOf } from '../schema/query.ts';
import {
  array,
  boolean,
  dateTime,
  integer,
  nullable,
  object,
  oneOf,
  optional,
  string,
  type Infer,
} from '../schema/schema.ts';
import {
  protocols,
  strategies,
  syncStates,
  forwardings,
  healthStates,
  paths,
  proxyProtocols,
  targetStates,
  ruleFieldsOf,
  ruleStates,
} from '../domain/rules.ts';
import { quotaDirections, quotaPeriods } from '../domain/quota.ts';
import { healthCheck, MAX_BANDWIDTH, MAX_RULE_CONNECTIONS, MAX_SOURCES, MIN_BANDWIDTH } from '../domain/link.ts';
import { insertRule, removeRule, syncRule, updateRule } from '../service/rules.ts';
import { transact } from '../service/write.ts';
import { RULE_SORTS, type RuleFilter } from '../store/rules.ts';
import { nullableTimestamp, pageSchema, paging, record, sortParam, tagList, timestamp } from './common.ts';
import { created, idParam, noContent, ok, okJson, operation, operations } from './route.ts';
import { ID_RANGE } from '../schema/ids.ts';

export const ruleInput = object(
  {
    name: string({ min: 1, max: 100 }),
    node_id: integer({ ...ID_RANGE, description: 'The node that listens.' }),
    protocol: oneOf(protocols, { description: 'tcp+udp listens on the port for both.' }),
    listen_port: integer({ min: 1, max: 65535, description: 'Unique per node and protocol.' }),
    targets: array(target(), { min: 1, max: 16, unique: true }),
    strategy: optional(
      oneOf(strategies, {
        description:
          'How connections spread over several targets; each strategy fails over to the next target when one refuses.',
      }),
      'round_robin',
    ),
    forwarding: optional(
      oneOf(forwardings, {
        description:
          'auto: the node forwards the rule in the kernel (nftables) where it can, else in user space (the relay); ' +
          'relay: always in user space. sync.applied_path says which the node used.',
      }),
      'auto',
    ),
    tunnel_id: optional(
      nullable(
        integer({
          ...ID_RANGE,
          description: 'Relay through this tunnel; node_id must be its entry node. The exit node dials the targets.',
        }),
      ),
      null,
    ),
    enabled: optional(boolean(), true),
    tags: optional(tagList, []),
    allow_sources: optional(
      array(cidr(), {
        max: MAX_SOURCES,
        unique: true,
        description:
          'Clients whose address is in one of these blocks may connect; empty: every client. The node closes a ' +
          'refused TCP connection at once and drops a refused datagram, and counts both in traffic.refused.',
      }),
      [],
    ),
    deny_sources: optional(
      array(cidr(), {
        max: MAX_SOURCES,
        unique: true,
        description: 'Clients whose address is in one of these blocks are refused, also when allow_sources has them.',
      }),
      [],
    ),
    max_connections: optional(
      nullable(
        integer({
          min: 1,
          max: MAX_RULE_CONNECTIONS,
          description:
            'Open TCP connections plus UDP sessions the rule carries at once; one more is refused (counted in ' +
            "traffic.refused). null: the node's own limit (10,000 a listener).",
        }),
      ),
      null,
    ),
    bandwidth_limit: optional(
      nullable(
        integer({
          min: MIN_BANDWIDTH,
          max: MAX_BANDWIDTH,
          description:
            "Bytes a second each way (client to target, and back), shared by all of the rule's connections and " +
            "sessions; null: unlimited. A token bucket: after a quiet spell up to an eighth of a second's worth " +
            '(at least 16 KiB) goes at once. TCP waits for it; UDP datagrams beyond it are dropped. Needs the relay.',
        }),
      ),
      null,
    ),
    expires_at: optional(
      nullable(
        dateTime({
          description:
            'When the rule stops forwarding, as if disabled, and shows state expired; null: never. The node ' +
            'stops it at that time itself, and the master within a second. A later time (or null) starts it again.',
        }),
      ),
      null,
    ),
    quota: optional(
      nullable(
        object(
          {
            bytes: integer({
              min: 1,
              max: Number.MAX_SAFE_INTEGER,
              description: 'Bytes the rule may carry per period, counted as direction says.',
            }),
            period: optional(
              oneOf(quotaPeriods, {
                description: 'When the count starts over: every day, every month, or never (none).',
              }),
              'month',
            ),
            direction: optional(
              oneOf(quotaDirections, {
                description: 'Which bytes count: in (client to target), out (back to the client), or both.',
              }),
              'both',
            ),
            reset_day: optional(
              integer({ min: 1, max: 28, description: 'The day of the month a monthly period starts (UTC).' }),
              1,
            ),
            reset_hour: optional(
              integer({ min: 0, max: 23, description: 'The hour (UTC) a daily or monthly period starts.' }),
              0,
            ),
          },
          {
            name: 'Quota',
            description:
              'When the period has used it up, the master disables the rule (state quota_exceeded, audited as ' +
              'rule.quota_exceeded); setting enabled true again is 409 until the period starts over (which enables ' +
              'it again) or bytes is raised past quota_usage.used_bytes. The node holds the rule to it by itself ' +
              'too, ending its connections when spent, so a master away does not let it run over.',
          },
        ),
      ),
      null,
    ),
    health_check: optional(nullable(healthCheck), null),
    proxy_protocol: optional(
      oneOf(proxyProtocols, {
        description:
          "v1 or v2: each TCP connection to a target starts with a PROXY protocol header carrying the client's " +
          'address and port and the address it connected to (the target must expect it). TCP only: UDP is ' +
          'forwarded without one. Needs the relay: a rule with it is never carried by the kernel.',
      }),
      'none',
    ),
  },
  {
    name: 'RuleInput',
    ignore: ['id', 'state', 'quota_usage', 'health', 'sync', 'traffic', 'version', 'created_at', 'updated_at'],
  },
);
export type RuleInput = Infer<typeof ruleInput>;

export const ruleSchema = record('Rule', {
  id: { type: 'integer' },
  name: { type: 'string' },
  node_id: { type: 'integer' },
  tunnel_id: { type: ['integer', 'null'] },
  protocol: { type: 'string', enum: [...protocols] },
  listen_port: { type: 'integer' },
  targets: { type: 'array', items: { type: 'string' } },
  strategy: { type: 'string', enum: [...strategies] },
  forwarding: { type: 'string', enum: [...forwardings] },
  enabled: { type: 'boolean' },
  tags: { type: 'array', items: { type: 'string' } },
  allow_sources: { type: 'array', items: { type: 'string' } },
  deny_sources: { type: 'array', items: { type: 'string' } },
  max_connections: { type: ['integer', 'null'] },
  bandwidth_limit: { type: ['integer', 'null'] },
  expires_at: nullableTimestamp,
  proxy_protocol: { type: 'string', enum: [...proxyProtocols] },
  quota: {
    type: ['object', 'null'],
    required: ['bytes', 'period', 'direction', 'reset_day', 'reset_hour'],
    properties: {
      bytes: { type: 'integer' },
      period: { type: 'string', enum: [...quotaPeriods] },
      direction: { type: 'string', enum: [...quotaDirections] },
      reset_day: { type: 'integer' },
      reset_hour: { type: 'integer' },
    },
    additionalProperties: false,
  },
  state: {
    type: 'string',
    enum: [...ruleStates],
    description:
      'active: forwarding; disabled: enabled is false; expired: past expires_at; quota_exceeded: the quota is ' +
      'spent for this period.',
  },
  health_check: {
    type: ['object', 'null'],
    required: ['interval_seconds', 'timeout_ms', 'fall', 'rise'],
    properties: {
      interval_seconds: { type: 'integer' },
      timeout_ms: { type: 'integer' },
      fall: { type: 'integer' },
      rise: { type: 'integer' },
    },
    additionalProperties: false,
  },
  health: {
    type: ['object', 'null'],
    description:
      "How the targets stand by the node's checks (null without a health_check): up, degraded (some down), down " +
      '(every target down: clients are refused at once) or unknown (not checked yet, or the node has not said).',
    required: ['status', 'targets'],
    properties: {
      status: { type: 'string', enum: [...healthStates] },
      targets: {
        type: 'array',
        items: {
          type: 'object',
          required: ['target', 'status', 'error', 'checked_at'],
          properties: {
            target: { type: 'string' },
            status: { type: 'string', enum: [...targetStates] },
            error: { type: ['string', 'null'] },
            checked_at: nullableTimestamp,
          },
          additionalProperties: false,
        },
      },
    },
    additionalProperties: false,
  },
  quota_usage: {
    type: ['object', 'null'],
    description: "What the quota's current period has counted; null without a quota.",
    required: ['used_bytes', 'period_started_at', 'resets_at'],
    properties: {
      used_bytes: { type: 'integer' },
      period_started_at: timestamp,
      resets_at: { ...nullableTimestamp, description: 'When the period starts over; null for period none.' },
    },
    additionalProperties: false,
  },
  sync: {
    type: 'object',
    required: ['state', 'error', 'applied_at', 'applied_path'],
    properties: {
      state: {
        type: 'string',
        enum: [...syncStates],
        description: 'applied: the node listens as configured; failed: the node said why in error.',
      },
      error: {
        type: ['object', 'null'],
        required: ['code', 'detail'],
        properties: { code: { type: 'string' }, detail: { type: 'string' } },
      },
      applied_at: nullableTimestamp,
      applied_path: {
        type: ['string', 'null'],
        enum: [...paths, null],
        description:
          'How the node carries the rule once applied: kernel (nftables DNAT, masqueraded: the target sees the ' +
          "node's address, never the client's, and traffic counts IP packets, headers included) or relay (user " +
          "space: the target sees the node's address, the client's only in a PROXY header, and traffic counts " +
          'payload bytes). null until applied, or from an older agent.',
      },
    },
    additionalProperties: false,
  },
  traffic: {
    type: 'object',
    required: ['bytes_in', 'bytes_out', 'refused'],
    properties: {
      bytes_in: { type: 'integer' },
      bytes_out: { type: 'integer' },
      refused: {
        type: 'integer',
        description: 'TCP connections and UDP datagrams turned away by allow_sources, deny_sources or max_connections.',
      },
    },
    additionalProperties: false,
  },
  version: { type: 'integer' },
  created_at: timestamp,
  updated_at: timestamp,
});

/** What lists of rules select by; a batch's `filter` takes the same. */
export const ruleFilterQuery = {
  node_id: intParam(ID_RANGE),
  tunnel_id: intParam(ID_RANGE),
  enabled: boolParam(),
  protocol: textParam({ max: 8, values: protocols }),
  tag: textParam({ max: 32, description: 'Only rules carrying this tag.' }),
  q: textParam({ max: 100, description: 'Substring of the name.' }),
  sync_state: textParam({ max: 16, values: syncStates, description: 'What its node last made of it.' }),
  state: textParam({ max: 16, values: ruleStates }),
};

/** The store's filter of a list query's (or a batch filter's) values. */
export function ruleFilterOf(query: QueryOf<typeof ruleFilterQuery>): Omit<RuleFilter, 'afterId' | 'limit'> {
  return {
    node_id: query.node_id ?? null,
    tunnel_id: query.tunnel_id ?? null,
    enabled: query.enabled ?? null,
    protocol: query.protocol ?? null,
    tag: query.tag ?? null,
    q: query.q ?? null,
    sync_state: query.sync_state ?? null,
    state: query.state ?? null,
  };
}

const listRulesQuery = { ...listQuery, ...ruleFilterQuery, sort: sortParam(Object.keys(RULE_SORTS)) };

export const ruleOperations = operations({
  listRules: operation({
    summary: 'List forwarding rules',
    query: listRulesQuery,
    responses: { 200: { description: 'A page of rules', schema: pageSchema(ruleSchema) } },
    handler: (ctx) => {
      const { limit, after, count, sorted } = paging(ctx.query);
      const page = ctx.app.store.rules.page({ afterId: after, limit, count, sorted, ...ruleFilterOf(ctx.query) });
      return okJson(pageJson(page, sorted && ctx.query.sort));
    },
  }),
  createRule: operation({
    action: 'rule.create',
    summary: 'Create a forwarding rule',
    description:
      'The rule starts with sync.state pending and is pushed to its node. A port the node already uses for the ' +
      'same protocol is 409 naming the rule (or tunnel) that holds it.',
    body: ruleInput,
    responses: {
      201: { description: 'Created', schema: ruleSchema },
      409: { description: 'The port is taken on that node' },
    },
    handler: async (ctx) => {
      const rule = await transact(ctx.app, ctx, (change) => insertRule(ctx.app, change, ruleFieldsOf(ctx.body)));
      return created(rule, { Location: `/api/rules/${rule.id}`, ETag: etagOf(rule.version) });
    },
  }),
  getRule: operation({
    summary: 'Show a forwarding rule',
    responses: { 200: { description: 'The rule', schema: ruleSchema } },
    handler: (ctx) => {
      const rule = ctx.app.store.rules.json(idParam(ctx));
      if (!rule) throw notFound('rule', ctx.params.id!);
      return okJson(rule.json, { ETag: etagOf(rule.version) });
    },
  }),
  replaceRule: operation({
    action: 'rule.update',
    summary: 'Replace a forwarding rule',
    description: 'Moving a rule to another node pushes both nodes. Sync state and traffic are read-only and ignored.',
    body: ruleInput,
    responses: {
      200: { description: 'Updated', schema: ruleSchema },
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
    action: 'rule.delete',
    summary: 'Delete a forwarding rule; its node closes the port',
    responses: { 204: { description: 'Deleted' } },
    handler: async (ctx) => {
      await transact(ctx.app, ctx, (change) => removeRule(ctx.app, change, idParam(ctx), ctx.headers['if-match']));
      return noContent();
    },
  }),
  syncRule: operation({
    action: 'rule.sync',
    summary: "Push a rule's node its config and wait for the node to acknowledge",
    description:
      'Waits up to sync_wait_seconds. 200: the node applied the rule (it listens). 202: not acknowledged yet ' +
      '(e.g. the node is offline; it gets the config when it connects). 502: the node reported a failure ' +
      "(sync.error in the body's rule).",
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
