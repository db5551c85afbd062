// Tunnels on the wire, and their handlers (the operations are in service/tunnels.ts): an encrypted link from an entry
// node to an exit node. Rules on the entry node may relay through one; the exit node listens on listen_port.

import { reaches } from '../service/grants.ts';
import { TUNNEL_PORTS } from '../domain/link.ts';
import { pageJson } from '../http/cursor.ts';
import { etagOf } from '../service/etag.ts';
import { notFound, validationFailed } from '../errors/errors.ts';
import { intParam, listQuery, textParam, type QueryOf } from '../schema/query.ts';
import { formatTime } from '../schema/schema.ts';
import { insertTunnel, removeTunnel, updateTunnel } from '../service/tunnels.ts';
import { transact } from '../service/write.ts';
import { tunnelInput, type TunnelInput } from './tunnel-input.ts';
import {
  GIVE_TO_ANOTHER,
  nullableTimestamp,
  ownerFilter,
  pageSchema,
  paging,
  record,
  sortParam,
  timestamp,
} from './common.ts';
import { cascadeQuery } from './nodes.ts';
import { seriesQuery, seriesWindow } from './dashboard.ts';
import { created, type Ctx, idParam, noContent, ok, okJson, operation, operations } from './route.ts';
import { ID_RANGE } from '../schema/ids.ts';
import { exitStrategies, transports, tunnelStatuses } from '../domain/tunnels.ts';
import { tunnelSorts } from '../domain/sorts.ts';

/** What changing a tunnel needs besides tunnels:write. */
export const CHANGE_TUNNEL = [
  {
    scope: 'rules:write',
    when: 'its exits (exit_node_ids, their order), exit_strategy or probe_target change while rules run through it',
  },
  ...GIVE_TO_ANOTHER,
] as const;

/** What ?cascade=true on a tunnel deletes, and the scope it needs besides tunnels:write. */
export const CASCADE_FROM_TUNNEL = [
  { scope: 'rules:write', when: '?cascade=true deletes the rules through the tunnel' },
] as const;

const endSchema = (which: string) => ({
  type: 'object',
  required: ['status', 'last_error', 'reported_at'],
  properties: {
    status: {
      type: 'string',
      enum: [...tunnelStatuses],
      description: `How the ${which} sees the tunnel; pending until it reports after the tunnel's last change.`,
    },
    last_error: {
      type: ['string', 'null'],
      description: `The last thing that went wrong at the ${which}: a refused peer or stream, a failed connect.`,
    },
    reported_at: nullableTimestamp,
  },
});

export const tunnelSchema = record('Tunnel', {
  id: { type: 'integer' },
  name: { type: 'string' },
  owner_id: { type: 'integer' },
  entry_node_id: { type: 'integer' },
  exit_node_id: { type: 'integer' },
  listen_port: { type: 'integer' },
  transport: { type: 'string', enum: [...transports] },
  via: { type: ['string', 'null'], description: 'Transport ws: the WebSocket URL the entry dials; null: the exit.' },
  status: {
    type: 'string',
    enum: [...tunnelStatuses],
    description:
      'up when the entry and an exit report a session up, down when the entry or every exit reports it down, ' +
      'pending otherwise.',
  },
  rtt_ms: {
    type: ['number', 'null'],
    description:
      "The chosen exit's session's round trip as the entry measures it (HTTP/2 PING); null while it is not up.",
  },
  loss_percent: {
    type: ['number', 'null'],
    description:
      "The share of the entry's last 12 PINGs (one every 5 s) that got no answer; null while it is not up, or from " +
      'an agent older than it. History: GET /api/tunnels/{id}/paths.',
  },
  ends: {
    type: 'object',
    required: ['entry', 'exit'],
    properties: { entry: endSchema('entry node'), exit: endSchema('first exit node (exits: each one)') },
  },
  exit_node_ids: { type: 'array', items: { type: 'integer' }, description: 'Every exit node, in order.' },
  exit_ports: { type: 'array', items: { type: 'integer' }, description: "Each exit's port, in that order." },
  exit_vias: { type: 'array', items: { type: ['string', 'null'] }, description: "Each exit's via, in that order." },
  exit_strategy: { type: 'string', enum: [...exitStrategies] },
  probe_target: { type: ['string', 'null'], description: "What exits connect to when probed; null: a rule's." },
  exits: {
    type: 'array',
    description: 'Each exit in order: where it listens, how it stands, and what the entry last measured of it.',
    items: {
      type: 'object',
      required: [
        ...['node_id', 'listen_port', 'via', 'status', 'last_error', 'reported_at', 'rtt_ms', 'loss_percent'],
        ...['probe_ms', 'probe_failed', 'score_ms', 'chosen'],
      ],
      properties: {
        node_id: { type: 'integer' },
        listen_port: { type: 'integer' },
        via: { type: ['string', 'null'] },
        ...endSchema('exit node').properties,
        rtt_ms: { type: ['number', 'null'], description: "The entry's session to it: its round trip (PING)." },
        loss_percent: { type: ['number', 'null'], description: 'The share of its last 12 PINGs unanswered.' },
        probe_ms: {
          type: ['number', 'null'],
          description: "The exit's connect to the probe target at the last round; null: not probed.",
        },
        probe_failed: { type: 'boolean', description: 'The exit reached no probe target at the last round.' },
        score_ms: {
          type: ['number', 'null'],
          description:
            'What the choice goes by, lower is better: rtt_ms + probe_ms, plus for lost PINGs a share of a ' +
            'retransmission timeout (see "Paths"). Null: not usable (down, or reaching no probe target).',
        },
        chosen: { type: 'boolean', description: 'New connections go through this exit.' },
      },
      additionalProperties: false,
    },
  },
  chosen_exit_node_id: {
    type: ['integer', 'null'],
    description: 'The exit new connections go to, as the entry last said; null until it says, or while none is up.',
  },
  chosen_because: {
    type: ['string', 'null'],
    description: "Why the entry's choice last moved, with the scores then (also audited as tunnel.exit_switched).",
  },
  chosen_at: nullableTimestamp,
  version: { type: 'integer' },
  created_at: timestamp,
  updated_at: timestamp,
});

const pathsQuery = {
  ...seriesQuery({ step: 60, span: 'an hour' }),
  exit_node_id: intParam({
    ...ID_RANGE,
    description:
      "One exit's path (the entry's session to it, and its connect to the probe target); absent: the tunnel's, " +
      'through whichever exit it chose.',
  }),
};

const pathSeriesSchema = record('TunnelPathSeries', {
  tunnel_id: { type: 'integer' },
  exit_node_id: { type: ['integer', 'null'], description: "The exit whose path this is; null: the tunnel's." },
  from: timestamp,
  to: timestamp,
  step: { type: 'integer' },
  points: {
    type: 'array',
    description: 'One point per step that has samples, oldest first: averages of the minutes in it.',
    items: {
      type: 'object',
      required: ['at', 'up', 'rtt_ms', 'loss_percent', 'probe_ms', 'probe_ok'],
      properties: {
        at: timestamp,
        up: { type: 'number', description: 'The share of the minutes the path was up, from 0 to 1.' },
        rtt_ms: { type: ['number', 'null'], description: 'The round trip (HTTP/2 PING); null: none measured.' },
        loss_percent: { type: ['number', 'null'], description: 'The share of the PINGs that got no answer.' },
        probe_ms: {
          type: ['number', 'null'],
          description: "An exit's path: its connect to the probe target; null: not probed, or the tunnel's path.",
        },
        probe_ok: {
          type: ['number', 'null'],
          description: "An exit's path: the share of the probed minutes its probe reached the target, from 0 to 1.",
        },
      },
      additionalProperties: false,
    },
  },
});

const listTunnelsQuery = {
  ...listQuery,
  owner_id: intParam({ ...ID_RANGE, description: 'Only tunnels this user owns.' }),
  node_id: intParam({ ...ID_RANGE, description: 'Tunnels entering or leaving at this node.' }),
  status: textParam({ max: 16, values: tunnelStatuses }),
  q: textParam({ max: 64, description: 'Substring of the name.' }),
  sort: sortParam(tunnelSorts),
};

async function putTunnel(ctx: Ctx<TunnelInput, {}>) {
  const tunnel = await transact(ctx.app, ctx, (change) =>
    updateTunnel(ctx.app, change, idParam(ctx), ctx.body, ctx.headers['if-match']),
  );
  return ok(tunnel, { ETag: etagOf(tunnel.version) });
}

export const tunnelOperations = operations({
  listTunnels: operation({
    tenants: true,
    summary: 'List tunnels',
    query: listTunnelsQuery,
    responses: { 200: { description: 'A page of tunnels', schema: pageSchema(tunnelSchema) } },
    handler: (ctx: Ctx<undefined, QueryOf<typeof listTunnelsQuery>>) => {
      const { limit, after, count, sorted } = paging(ctx.query);
      const page = ctx.app.store.tunnels.page({
        afterId: after,
        limit,
        count,
        sorted,
        owner_id: ownerFilter(ctx.caller, ctx.query.owner_id),
        node_id: ctx.query.node_id ?? null,
        status: ctx.query.status ?? null,
        q: ctx.query.q ?? null,
      });
      return okJson(pageJson(page, sorted && ctx.query.sort));
    },
  }),
  createTunnel: operation({
    tenants: true,
    action: 'tunnel.create',
    summary: 'Create a tunnel between two nodes',
    description:
      `Without listen_port the master picks a free port on the exit node from ` +
      `${TUNNEL_PORTS.min}-${TUNNEL_PORTS.max}; if the exit then finds it held by another program, the master ` +
      'moves the tunnel to the next free one by itself (audited as tunnel.port_moved, both ends sent the change). ' +
      'A port given stays (the tunnel shows why it is down). A port the exit node already uses for a rule or ' +
      'tunnel is 409 naming the holder.',
    body: tunnelInput,
    responses: { 201: { description: 'Created', schema: tunnelSchema }, 409: { description: 'Name or port taken' } },
    handler: async (ctx: Ctx<TunnelInput, {}>) => {
      const tunnel = await transact(ctx.app, ctx, (change) => insertTunnel(ctx.app, change, ctx.body));
      return created(tunnel, { Location: `/api/tunnels/${tunnel.id}`, ETag: etagOf(tunnel.version) });
    },
  }),
  getTunnel: operation({
    tenants: true,
    summary: 'Show a tunnel',
    responses: { 200: { description: 'The tunnel', schema: tunnelSchema } },
    handler: (ctx: Ctx<undefined, {}>) => {
      const tunnel = ctx.app.store.tunnels.find(idParam(ctx));
      if (!tunnel || !reaches(ctx.caller, tunnel.owner_id)) throw notFound('tunnel', ctx.params.id!);
      return ok(tunnel, { ETag: etagOf(tunnel.version) });
    },
  }),
  getTunnelPaths: operation({
    tenants: true,
    summary: "A tunnel's path quality over time",
    description:
      'How the path from its entry to its exit stood, a point a minute sampled by the master from what the entry ' +
      'last reported (then an hour, then a day, kept as traffic is: see "Paths"), averaged per step: the share of ' +
      "the time it was up, its round trip and the share of the PINGs lost. With exit_node_id, that exit's path, " +
      'with its connect to the probe target (from entries of agents that report their exits).',
    query: pathsQuery,
    responses: { 200: { description: 'The series', schema: pathSeriesSchema } },
    handler: (ctx: Ctx<undefined, QueryOf<typeof pathsQuery>>) => {
      const { app } = ctx;
      const tunnel = app.store.tunnels.find(idParam(ctx));
      if (!tunnel || !reaches(ctx.caller, tunnel.owner_id)) throw notFound('tunnel', ctx.params.id!);
      const { from, to, step } = seriesWindow(ctx.query, app.timestamp(), { step: 60, spanSeconds: 3600 });
      const exitNodeId = ctx.query.exit_node_id ?? null;
      if (exitNodeId !== null && !tunnel.exit_node_ids.includes(exitNodeId))
        throw validationFailed([
          { pointer: '?exit_node_id', detail: `node ${exitNodeId} is no exit of tunnel ${tunnel.id}` },
        ]);
      const points =
        exitNodeId === null
          ? app.store.tunnelPaths
              .series(tunnel.id, from, to, step)
              .map((p) => ({ ...p, probe_us: null, probe_ok: null }))
          : app.store.tunnelPaths.exitSeries(tunnel.id, exitNodeId, from, to, step);
      const ms = (us: number | null) => (us === null ? null : Math.round(us / 10) / 100);
      const share = (value: number | null) => (value === null ? null : Math.round(value * 1000) / 1000);
      return ok({
        tunnel_id: tunnel.id,
        exit_node_id: exitNodeId,
        from: formatTime(from * 1000),
        to: formatTime(to * 1000),
        step,
        points: points.map(({ at, up, rtt_us, loss_percent, probe_us, probe_ok }) => ({
          at: formatTime(at * 1000),
          up: share(up),
          rtt_ms: ms(rtt_us),
          loss_percent: loss_percent === null ? null : Math.round(loss_percent * 10) / 10,
          probe_ms: ms(probe_us),
          probe_ok: share(probe_ok),
        })),
      });
    },
  }),
  replaceTunnel: operation({
    tenants: true,
    action: 'tunnel.update',
    summary: 'Replace a tunnel',
    description:
      'The entry node cannot change while rules use the tunnel (409). An absent listen_port keeps the current ' +
      'one unless the exit node changes.',
    body: tunnelInput,
    responses: {
      200: { description: 'Updated', schema: tunnelSchema },
      409: { description: 'Name or port taken, or rules pin the entry node' },
    },
    handler: putTunnel,
  }),
  deleteTunnel: operation({
    tenants: true,
    action: 'tunnel.delete',
    summary: 'Delete a tunnel',
    description:
      'A tunnel that rules still use is 409 (listing them) unless ?cascade=true, which deletes those rules too.',
    query: cascadeQuery,
    responses: {
      204: { description: 'Deleted' },
      403: { description: 'Lacking tunnels:write, or rules:write for the cascade' },
      409: { description: 'Still used by rules' },
    },
    handler: async (ctx: Ctx<undefined, QueryOf<typeof cascadeQuery>>) => {
      await transact(ctx.app, ctx, (change) =>
        removeTunnel(ctx.app, change, idParam(ctx), ctx.query.cascade ?? false, ctx.headers['if-match']),
      );
      return noContent();
    },
  }),
});
