// Rollouts on the wire (operations and the rollout at work in service/rollouts.ts): a signed agent bundle taken to
// nodes in waves, each node's upgrade gated, halted on the first failure.

import { decodeCursor, encodeCursor } from '../http/cursor.ts';
import { etagOf } from '../service/etag.ts';
import { notFound } from '../errors/errors.ts';
import { BUNDLE_VERSION } from '../release/signature.ts';
import type { QueryOf } from '../schema/query.ts';
import { array, integer, object, optional, string, type Infer, type Schema } from '../schema/schema.ts';
import { createRollout, MAX_UPGRADING, MAX_WAVES, GATE_GRACE_SECONDS, steerRollout } from '../service/rollouts.ts';
import type { Steer } from '../service/rollouts.ts';
import { transact } from '../service/write.ts';
import { type Rollout, type WaveSize } from '../store/rollouts.ts';
import { nodeSelection, selected } from './batch.ts';
import { listQuery } from '../schema/query.ts';
import { pageSchema, record, nullableTimestamp, timestamp } from './common.ts';
import { created, type Ctx, idParam, ok, operation, operations } from './route.ts';
import { rolloutNodeStates, rolloutStates } from '../domain/rollouts.ts';

const SHARE = /^(100|[1-9][0-9]?)%$/;

/** A wave's size: a count of nodes, or a share of all of them ("25%"). */
const waveSize: Schema<WaveSize> = {
  json: {
    oneOf: [
      { type: 'integer', minimum: 1, maximum: 100_000 },
      { type: 'string', pattern: SHARE.source },
    ],
  },
  check(value, pointer, errors) {
    const fine =
      (Number.isInteger(value) && (value as number) >= 1 && (value as number) <= 100_000) ||
      (typeof value === 'string' && SHARE.test(value));
    if (!fine) errors.push({ pointer, detail: 'must be a count of nodes (1 or more) or a share such as "25%"' });
    return value as WaveSize;
  },
};

export const rolloutInput = object(
  {
    version: string({
      min: 5,
      max: 48,
      pattern: BUNDLE_VERSION,
      patternHint: 'must be major.minor.patch',
      description: 'The agent version to run: a bundle of it must be on the master (GET /api/agent-bundles).',
    }),
    ...nodeSelection,
    waves: array(waveSize, {
      min: 1,
      max: MAX_WAVES,
      description:
        'Each wave\'s size, in order: a count of nodes, or a share of all of them ("25%", rounded up); the first ' +
        'is the canary. The waves must take every node: end with "100%". Nodes go in id order.',
    }),
    gate_seconds: optional(
      integer({
        min: 10,
        max: 3600,
        description:
          'How long each node has to link again with the new version, apply its config and keep its checked ' +
          'targets as healthy as before; past it, its agent goes back to the bundle before by itself.',
      }),
      120,
    ),
    soak_seconds: optional(
      integer({
        min: 0,
        max: 3600,
        description:
          "How long, past its gate, each node's new agent must stay linked (the same link), applied and as " +
          'healthy before the node passes. Meanwhile the old agent is kept, accepting beside the new one: a new ' +
          'agent that exits or loses its link in the soak is rolled back by its supervisor with no connection ' +
          'refused, and the node fails, halting the rollout. 0: none.',
      }),
      60,
    ),
    pause_seconds: optional(
      integer({ min: 0, max: 86_400, description: 'How long after a wave passed the next one starts.' }),
      0,
    ),
  },
  { name: 'RolloutInput' },
);
type RolloutBody = Infer<typeof rolloutInput>;

const count = { type: 'integer' } as const;
const rolloutSchema = record('Rollout', {
  id: { type: 'integer' },
  version: { type: 'string' },
  state: { type: 'string', enum: [...rolloutStates] },
  reason: { type: ['string', 'null'], description: 'Why it halted (the node and its failure), or was aborted.' },
  waves: { type: 'array', items: { oneOf: [{ type: 'integer' }, { type: 'string' }] } },
  gate_seconds: { type: 'integer' },
  soak_seconds: { type: 'integer' },
  pause_seconds: { type: 'integer' },
  wave: { type: 'integer', description: 'The wave under way, from 0.' },
  wave_started_at: timestamp,
  wave_passed_at: { ...nullableTimestamp, description: 'When every node of the wave under way passed its gate.' },
  nodes: {
    type: 'object',
    description: 'How many of its nodes stand where.',
    properties: { waiting: count, upgrading: count, passed: count, failed: count },
    required: ['waiting', 'upgrading', 'passed', 'failed'],
    additionalProperties: false,
  },
  revision: { type: 'integer', description: "The rollout's ETag: it changes with its state." },
  created_at: timestamp,
  updated_at: timestamp,
});

const rolloutNodeSchema = record('RolloutNode', {
  rollout_id: { type: 'integer' },
  node_id: { type: 'integer' },
  wave: { type: 'integer' },
  state: { type: 'string', enum: [...rolloutNodeStates] },
  from_version: { type: ['string', 'null'], description: 'The agent version it ran when the rollout was made.' },
  detail: { type: ['string', 'null'], description: 'How its gate went.' },
  unhealthy_before: { type: ['integer', 'null'], description: 'Its rules with a target down when told to upgrade.' },
  started_at: nullableTimestamp,
  soaking_since: {
    ...nullableTimestamp,
    description: 'When its new agent first stood linked, applied and healthy: its soak began (null before).',
  },
  finished_at: nullableTimestamp,
});

const shown = (rollout: Rollout) => ok(rollout, { ETag: etagOf(rollout.revision) });

function find(ctx: Ctx<undefined, {}>): Rollout {
  const rollout = ctx.app.store.rollouts.find(idParam(ctx));
  if (!rollout) throw notFound('rollout', ctx.params.id!);
  return rollout;
}

const STEERS: Record<Steer, string> = {
  pause: 'No node is told to upgrade until it is resumed; nodes upgrading finish (or go back) on their own.',
  resume: 'Goes on from where it stood; a halted rollout tries its failed nodes again.',
  abort:
    'It ends: no node is told to upgrade; nodes upgrading finish (or go back) on their own. Nodes that upgraded ' +
    'stay upgraded: agents refuse an older bundle, and a reinstall puts back the agent the master carries.',
};

function steering(steer: Steer) {
  return operation({
    action: `rollout.${steer}`,
    summary: `${steer[0]!.toUpperCase()}${steer.slice(1)} a rollout`,
    description: `${STEERS[steer]} 409 when its state does not allow it.`,
    responses: { 200: { description: 'The rollout now', schema: rolloutSchema }, 409: { description: 'Not now' } },
    handler: async (ctx: Ctx<undefined, {}>) =>
      ok(await transact(ctx.app, ctx, (change) => steerRollout(ctx.app, change, idParam(ctx), steer))),
  });
}

const pageQuery = { limit: listQuery.limit, cursor: listQuery.cursor };

export const rolloutOperations = operations({
  listRollouts: operation({
    summary: 'List rollouts, newest first',
    query: pageQuery,
    responses: { 200: { description: 'A page of rollouts', schema: pageSchema(rolloutSchema) } },
    handler: (ctx: Ctx<undefined, QueryOf<typeof pageQuery>>) => {
      const limit = ctx.query.limit ?? 50;
      const before = ctx.query.cursor === undefined ? Number.MAX_SAFE_INTEGER : decodeCursor(ctx.query.cursor);
      const rows = ctx.app.store.rollouts.page(before, limit);
      const last = rows.length > limit ? rows[limit - 1] : undefined;
      return ok({ items: rows.slice(0, limit), next_cursor: last ? encodeCursor(last.id) : null });
    },
  }),
  createRollout: operation({
    action: 'rollout.create',
    summary: 'Take an agent version to nodes, in waves',
    description:
      "The nodes are given by ids, or by the nodes list's filters. Each wave's nodes are told to upgrade (at most " +
      `${MAX_UPGRADING} at once, fewer for a large bundle), each sent the signed bundle over its link; its agent ` +
      'runs it only if a release key it trusts signed it. A node passes its gate once it linked again with the ' +
      'new version, applied its config and has no more rules with a target down than before, and then kept that ' +
      'link, version, config and health through soak_seconds. A node failing its gate or its soak (refused, rolled ' +
      'back by its own watchdog, not heard of within gate_seconds + ' +
      `${GATE_GRACE_SECONDS} s, offline for gate_seconds after its wave began, its link lost or a target down in ` +
      'the soak) halts the rollout with the reason. One rollout at a time.',
    body: rolloutInput,
    responses: {
      201: { description: 'Made; it starts within a second', schema: rolloutSchema },
      409: { description: 'Another rollout is under way' },
    },
    handler: async (ctx: Ctx<RolloutBody, {}>) => {
      const { version, waves, gate_seconds, soak_seconds, pause_seconds } = ctx.body;
      const node_ids = selected(ctx, 'nodes', ctx.body);
      const rollout = await transact(ctx.app, ctx, (change) =>
        createRollout(ctx.app, change, { version, node_ids, waves, gate_seconds, soak_seconds, pause_seconds }),
      );
      return created(rollout, { Location: `/api/rollouts/${rollout.id}`, ETag: etagOf(rollout.revision) });
    },
  }),
  getRollout: operation({
    summary: 'Show a rollout and how many of its nodes stand where',
    responses: { 200: { description: 'The rollout', schema: rolloutSchema } },
    handler: (ctx: Ctx<undefined, {}>) => shown(find(ctx)),
  }),
  listRolloutNodes: operation({
    summary: "A rollout's nodes and how each stands, by node id",
    query: pageQuery,
    responses: { 200: { description: 'A page of its nodes', schema: pageSchema(rolloutNodeSchema) } },
    handler: (ctx: Ctx<undefined, QueryOf<typeof pageQuery>>) => {
      const rollout = find(ctx as Ctx<undefined, {}>);
      const limit = ctx.query.limit ?? 50;
      const after = ctx.query.cursor === undefined ? 0 : decodeCursor(ctx.query.cursor);
      const rows = ctx.app.store.rollouts.nodePage(rollout.id, after, limit);
      const last = rows.length > limit ? rows[limit - 1] : undefined;
      // Which link a soak began on is the master's own business.
      const items = rows.slice(0, limit).map(({ soak_link: _, ...shownNode }) => shownNode);
      return ok({ items, next_cursor: last ? encodeCursor(last.node_id) : null });
    },
  }),
  pauseRollout: steering('pause'),
  resumeRollout: steering('resume'),
  abortRollout: steering('abort'),
});
