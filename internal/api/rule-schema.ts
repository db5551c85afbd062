// A forwarding rule on the wire: what it is written as (RuleInput, every field validated, with the defaults a field
// left out takes) and what it is read as (Rule). Its JSON is rendered by the store (store/rule-view.ts); the
// contract tests hold every answer to this schema.

import { target } from '../schema/net.ts';
import { array, boolean, integer, nullable, object, oneOf, optional, string, type Infer } from '../schema/schema.ts';
import {
  protocols,
  strategies,
  syncStates,
  forwardings,
  healthStates,
  paths,
  proxyProtocols,
  targetStates,
  ruleStates,
  MAX_WEIGHT,
} from '../domain/rules.ts';
import { quotaDirections, quotaPeriods } from '../domain/quota.ts';
import { nullableTimestamp, OWNER_DESCRIPTION, record, timestamp } from './common.ts';
import { ruleControls } from './rule-controls.ts';
import { allowHours } from '../domain/link.ts';
import { ID_RANGE } from '../schema/ids.ts';

export const ruleInput = object(
  {
    name: string({ min: 1, max: 100 }),
    owner_id: optional(nullable(integer({ ...ID_RANGE, description: OWNER_DESCRIPTION })), null),
    node_id: integer({ ...ID_RANGE, description: 'The node that listens.' }),
    protocol: oneOf(protocols, { description: 'tcp+udp listens on the port for both.' }),
    listen_port: integer({
      min: 1,
      max: 65535,
      description: 'Unique per node and protocol; the first port of a range with listen_port_end.',
    }),
    listen_port_end: optional(
      nullable(
        integer({
          min: 1,
          max: 65535,
          description:
            'The last port of a range from listen_port, inclusive (at most 10,000 ports): each port is forwarded ' +
            "to the target's port, or with a target host:lo-hi to the port at the same place of that range. " +
            'null: listen_port alone.',
        }),
      ),
      null,
    ),
    targets: array(target({ ranges: true, srv: true }), { min: 1, max: 16, unique: true }),
    strategy: optional(
      oneOf(strategies, {
        description:
          'How connections spread over several targets: round_robin (in turn), random, failover (the first that is ' +
          "up), source_hash (by the client's address: a client keeps its target while that target is up), " +
          'least_conn (the fewest open connections; relay only) or lowest_latency (the fastest by the health ' +
          'checks, which it needs). Every strategy fails over to the next target when one refuses, on the relay.',
      }),
      'round_robin',
    ),
    weights: optional(
      nullable(
        array(integer({ min: 1, max: MAX_WEIGHT }), {
          min: 1,
          max: 16,
          description:
            "Each target's share of new connections (or of client addresses, with source_hash), parallel to " +
            'targets: [3, 1] sends three of every four to the first. For round_robin, random and source_hash; ' +
            'null: all alike.',
        }),
      ),
      null,
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
    ...ruleControls,
  },
  {
    name: 'RuleInput',
    ignore: [
      'id',
      'state',
      'quota_usage',
      'plan_limits',
      'health',
      'sync',
      'traffic',
      'version',
      'created_at',
      'updated_at',
    ],
  },
);
export type RuleInput = Infer<typeof ruleInput>;

export const ruleSchema = record('Rule', {
  id: { type: 'integer' },
  name: { type: 'string' },
  owner_id: { type: 'integer' },
  node_id: { type: 'integer' },
  tunnel_id: { type: ['integer', 'null'] },
  protocol: { type: 'string', enum: [...protocols] },
  listen_port: { type: 'integer' },
  listen_port_end: { type: ['integer', 'null'] },
  targets: { type: 'array', items: { type: 'string' } },
  strategy: { type: 'string', enum: [...strategies] },
  weights: { type: ['array', 'null'], items: { type: 'integer' } },
  forwarding: { type: 'string', enum: [...forwardings] },
  enabled: { type: 'boolean' },
  tags: { type: 'array', items: { type: 'string' } },
  allow_sources: { type: 'array', items: { type: 'string' } },
  deny_sources: { type: 'array', items: { type: 'string' } },
  max_connections: { type: ['integer', 'null'] },
  bandwidth_limit: { type: ['integer', 'null'] },
  max_new_connections_per_second: { type: ['integer', 'null'] },
  expires_at: nullableTimestamp,
  proxy_protocol: { type: 'string', enum: [...proxyProtocols] },
  preserve_source: { type: 'boolean' },
  source_address: { type: ['string', 'null'] },
  allow_hours: { anyOf: [allowHours.json, { type: 'null' }] },
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
      "spent for this period. A tenant's rule is also stopped by their account and plan: account_expired (the " +
      "owner's expires_at has come), not_granted (the plan no longer grants its node, its ports or its " +
      "tunnel's exit node), " +
      "allowance_exceeded (the plan's traffic allowance is spent and its past is stop). These go when the cause " +
      'does (the account extended, the grant back, a new period), without a write to the rule.',
  },
  plan_limits: {
    type: ['object', 'null'],
    description:
      "What the owner's plan holds a tenant's rule to beyond its own fields: the plan's caps (a cap lowered " +
      'after the rule was written reaches it here) and, once the allowance is spent with past slow, its slow_to as ' +
      "bandwidth_limit. Its node enforces the lower of these and the rule's own. null where the plan sets none.",
    required: ['max_connections', 'bandwidth_limit', 'max_new_connections_per_second'],
    properties: {
      max_connections: { type: ['integer', 'null'] },
      bandwidth_limit: { type: ['integer', 'null'] },
      max_new_connections_per_second: { type: ['integer', 'null'] },
    },
    additionalProperties: false,
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
    required: ['state', 'error', 'applied_at', 'applied_path', 'relayed_because'],
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
      applied_at: {
        ...nullableTimestamp,
        description:
          'When its node applied the rule as it stands: a later config that carries it unchanged does not move it.',
      },
      applied_path: {
        type: ['string', 'null'],
        enum: [...paths, null],
        description:
          'How the node carries the rule once applied: kernel (nftables DNAT, masqueraded: the target sees the ' +
          "node's address, never the client's, and traffic counts IP packets, headers included) or relay (user " +
          "space: the target sees the node's address, the client's only in a PROXY header, and traffic counts " +
          'payload bytes). null until applied, or from an older agent.',
      },
      relayed_because: {
        type: ['string', 'null'],
        description:
          'While the relay carries the rule: why not the kernel, as the node said (a control only the relay ' +
          "enforces, several targets, the rule's or the agent's forwarding, a tunnel, the node's kernel path " +
          'gone); null otherwise, or from an older agent.',
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
