// GET /api/events: the event journal (store/events.ts) as server-sent events, from a resume point on. Each event's
// resource is rendered by the route that GETs it, for the stream's caller, when the event is sent: a stream shows what
// its caller's GETs would, and only the resources those routes let it read. Traffic ticks and node vitals are live
// only: they carry no id and are not replayed. The streams themselves are in streams.ts.

import { boolParam, intParam, listParam, type QueryOf } from '../schema/query.ts';
import { describe, type JsonSchema } from '../schema/schema.ts';
import { record, timestamp } from './common.ts';
import { type Ctx, operation, operations } from './route.ts';
import { ID_RANGE } from '../schema/ids.ts';

/** Each journal event's type, by the resource it tells of (see eventDerivations in store/events.ts). */
export const JOURNAL_TYPES = {
  rule: ['rule.created', 'rule.updated', 'rule.deleted', 'rule.sync', 'rule.health'],
  node: ['node.created', 'node.updated', 'node.deleted', 'node.status', 'node.install', 'node.agent'],
  tunnel: ['tunnel.created', 'tunnel.updated', 'tunnel.deleted', 'tunnel.status'],
  user: ['user.created', 'user.updated', 'user.deleted'],
  token: ['token.created', 'token.deleted'],
  settings: ['settings.updated'],
  license: ['license.changed'],
  alert_rule: ['alert.firing', 'alert.resolved'],
  rollout: ['rollout.created', 'rollout.updated', 'rollout.deleted', 'rollout.node'],
  master: ['master.promoted'],
} as const;

/** Live events, by the resource whose read they need: sent to streams that are caught up, never stored. */
export const LIVE_TYPES = { traffic: 'traffic', 'node.vitals': 'node' } as const;

export type Resource = keyof typeof JOURNAL_TYPES | 'traffic';

/** The route whose scope lets a caller see a resource's events, and whose answer (for an id) is an event's data. */
export const READERS: Record<Resource, string> = {
  rule: '/api/rules/{id}',
  node: '/api/nodes/{id}',
  tunnel: '/api/tunnels/{id}',
  user: '/api/users/{id}',
  token: '/api/tokens/{id}',
  settings: '/api/settings',
  license: '/api/license',
  alert_rule: '/api/alert-rules/{id}',
  rollout: '/api/rollouts/{id}',
  master: '/api/health',
  traffic: '/api/dashboard/traffic',
};

/** The path that GETs one resource, by the resource's name in the audit log and the journal; null for another. */
export function resourcePath(resource: string, id: number): string | null {
  const template = (READERS as Record<string, string | undefined>)[resource];
  return template?.includes('{id}') ? template.replace('{id}', String(id)) : null;
}

const EVENT_TYPES: readonly string[] = [...Object.values(JOURNAL_TYPES).flat(), ...Object.keys(LIVE_TYPES)];
export const RESOURCES = Object.keys(READERS) as Resource[];
/** What the stream itself says: where it starts, that it starts over, and why it ends. */
const CONTROL_TYPES = ['ready', 'reset', 'dropped', 'shutdown', 'revoked'];

/** What a stream writes at most ahead of its client before it pauses reading the journal. */
export const BUFFER_BYTES = 256 * 1024;
export const PAGE = 200;
export const MAX_STREAMS_PER_USER = 16;
export const MAX_STREAMS = 512;
/** Of MAX_STREAMS, the places only callers holding `*` may take: others filling the master keep no admin out. */
export const KEPT_FOR_ADMINS = 32;
/** At most this many rules in a traffic tick (the busiest); `rules_left` says how many more moved bytes. */
export const TICK_RULES = 1000;

const eventsQuery = {
  types: listParam({
    values: [...new Set([...RESOURCES, ...EVENT_TYPES])],
    description: 'Only these event types, or all of a resource (rule, node.status).',
  }),
  node_id: intParam({
    ...ID_RANGE,
    description: 'Only events concerning this node: itself, its rules, its tunnels (either end), its traffic.',
  }),
  resource_id: intParam({ ...ID_RANGE, description: 'Only events of this resource id.' }),
  after: intParam({
    min: 0,
    max: Number.MAX_SAFE_INTEGER,
    description: 'Resume after this event id (as Last-Event-ID does; this wins if both are given). Default: now.',
  }),
  data: boolParam('Whether events carry their resource (default true); false for clients that re-read what they show.'),
  limit: intParam({ min: 1, max: 100_000, description: 'End the stream after this many events.' }),
  timeout_seconds: intParam({ min: 1, max: 86_400, description: 'End the stream after this long.' }),
};

export type EventsQuery = QueryOf<typeof eventsQuery>;

const envelopeProperties: Record<string, JsonSchema> = {
  id: {
    type: 'integer',
    description: "The event's place in the journal; live events (traffic, node.vitals) have none.",
  },
  type: { type: 'string', enum: [...EVENT_TYPES] },
  at: {
    ...timestamp,
    description:
      "When the change was made, by the master's clock (as its audit entry says); for an import, the import's time.",
  },
  resource: { type: 'string', enum: Object.keys(JOURNAL_TYPES) },
  resource_id: { type: ['integer', 'null'] },
  node_ids: { type: 'array', items: { type: 'integer' }, description: 'The nodes it concerns.' },
  detail: { description: "Facts beyond the resource: a license's status before and after." },
  data: {
    description:
      'The resource as its GET answers this caller when the event is sent (null once deleted, or with data=false).',
  },
};

const eventSchema = record('Event', envelopeProperties);

const liveEventSchema = record('LiveEvent', {
  type: { type: 'string', enum: Object.keys(LIVE_TYPES) },
  at: timestamp,
  node_ids: { type: 'array', items: { type: 'integer' } },
  data: {
    type: 'object',
    description:
      `traffic: {nodes: [{id, bytes_in, bytes_out}], rules: [{id, node_id, bytes_in, bytes_out, refused}], ` +
      `rules_left}, counted since the last tick, the busiest ${TICK_RULES} rules first. node.vitals: the node's ` +
      'vitals as its GET shows them.',
  },
});

const controlEventSchema = describe({
  title: 'StreamControl',
  type: 'object',
  required: ['type', 'resume_after'],
  properties: {
    type: { type: 'string', enum: CONTROL_TYPES },
    resume_after: { type: 'integer', description: 'The event id to resume after (Last-Event-ID or ?after=).' },
    detail: { type: 'string', description: 'reset and revoked: why, and what to do.' },
  },
  additionalProperties: false,
});

export const eventOperations = operations({
  watchEvents: operation({
    summary: 'Follow changes as server-sent events',
    description:
      'A text/event-stream of every change: resources created, updated and deleted, rule sync results and target ' +
      'health, node status and install progress, tunnel status, license changes; live traffic ticks (every 2 s) and ' +
      'node vitals. Each journal event has an id; reconnecting with Last-Event-ID (or ?after=) resumes exactly after ' +
      'it for audit_retention_days, else a `reset` event says to list again. A caller sees only the events of ' +
      'resources its scopes can GET, rendered as those GETs answer. `ready` opens the stream; a comment line every ' +
      `15 s keeps proxies from closing it; a client that leaves ${BUFFER_BYTES / 1024} KiB unread for 30 s gets ` +
      '`dropped` with the id to resume after. A stream lasts only as long as what opened it: once its token is ' +
      'revoked, expires or is logged out, its user disabled or deleted, or its scopes changed, it is sent nothing ' +
      'more but `revoked` (with why and the id to resume after), checked before each frame it would be sent ' +
      '(an event written right after the revocation does not reach it), at the write that ended it even when ' +
      'quiet, and within a second of a token expiring. At most ' +
      `${MAX_STREAMS_PER_USER} streams per user and ${MAX_STREAMS} in all, of which the last ${KEPT_FOR_ADMINS} ` +
      'only for callers holding `*` (429 beyond). A tenant follows their own world: the events of their rules, ' +
      "tunnels and tokens, of the nodes granted them (never a node's vitals, nor a node gone: the deletion of their " +
      "rules on it tells them), and traffic ticks of their own rules, a node's bytes being what their rules moved " +
      'there.',
    tenants: true,
    query: eventsQuery,
    responses: {
      200: {
        description: 'The stream: `id:`, `event:` (the type) and `data:` (the JSON event) per event',
        mediaType: 'text/event-stream',
        headers: {
          'X-Accel-Buffering': {
            description: 'no: a proxy that buffers answers (nginx) passes each event on at once.',
            schema: { type: 'string', enum: ['no'] },
          },
        },
        schema: describe({ oneOf: [eventSchema.json, liveEventSchema.json, controlEventSchema.json] }),
      },
      429: { description: 'Too many streams open' },
    },
    handler: (ctx: Ctx<undefined, EventsQuery>) => ctx.app.events.open(ctx),
  }),
});
