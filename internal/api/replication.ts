// What a standby master reads of its primary (store/replication.ts, replication/feed.ts): a consistent copy of the
// database, then every change committed after it, in order. Scope `replication`: the whole database, secrets sealed.

import { DomainError } from '../errors/errors.ts';
import { grants } from '../auth/scopes.ts';
import { intParam, textParam, type QueryOf } from '../schema/query.ts';
import { describe } from '../schema/schema.ts';
import { type Ctx, ok, operation, operations, type Reply } from './route.ts';
import { transact } from '../service/write.ts';
import { record } from './common.ts';
import { CHANGES_TYPE, encodeChanges } from '../replication/wire.ts';

/** The header that says the primary's epoch: a standby of a later one does not follow it. */
export const EPOCH_HEADER = 'X-Master-Epoch';
/** The header that says the primary's replication_mode: a standby of a sync-mode primary asks again at once. */
export const MODE_HEADER = 'X-Replication-Mode';
const MODE_HEADER_DOC = {
  description:
    "The primary's replication_mode (async or sync): a standby of a sync-mode primary that fails to reach it " +
    'asks again every second',
  schema: { type: 'string' },
} as const;

/** The header that says where a snapshot stands in the primary's record: `generation/seq`. */
export const POSITION_HEADER = 'X-Replication-Position';

const changesQuery = {
  generation: textParam({ max: 64, description: "The generation of the follower's position." }),
  after: intParam({ min: 0, max: Number.MAX_SAFE_INTEGER, description: 'The last change the follower applied.' }),
  wait_seconds: intParam({ min: 0, max: 30, description: 'Wait this long for a change when there is none yet.' }),
  standby: textParam({
    max: 200,
    description:
      "The follower's own address (--advertise), in masters elected through etcd: a sync-mode leader waits for " +
      'the one standby it chose, by this name.',
  }),
};

const promotedSchema = record('Promoted', {
  role: { type: 'string', enum: ['primary'] },
  epoch: { type: 'integer', description: 'The epoch this master is the primary of: one more than any before.' },
});

const standbysSchema = record('Standbys', {
  mode: { type: 'string', enum: ['async', 'sync'], description: 'replication_mode.' },
  position: {
    type: ['object', 'null'],
    required: ['generation', 'seq'],
    properties: { generation: { type: 'string' }, seq: { type: 'integer' } },
    additionalProperties: false,
    description:
      "Where this master's record of changes stands (a new generation at each start); null before a standby asked.",
  },
  sync_lapsed_since: {
    type: ['string', 'null'],
    format: 'date-time',
    description: 'In sync mode, since when writes have been answered without a standby holding them; null: in step.',
  },
  items: {
    type: 'array',
    description: 'The standbys that asked since this master started, the last to ask first (at most 32).',
    items: {
      type: 'object',
      required: ['name', 'position', 'behind_changes', 'lag_seconds', 'last_asked_at'],
      properties: {
        name: {
          type: 'string',
          description: 'The address a standby gives (--advertise, masters elected through etcd); empty for none.',
        },
        position: {
          type: ['object', 'null'],
          required: ['generation', 'seq'],
          properties: { generation: { type: 'string' }, seq: { type: 'integer' } },
          additionalProperties: false,
          description: 'The last change it said it holds; null before it held one of this generation.',
        },
        behind_changes: { type: ['integer', 'null'], description: 'Changes it lacks; null: it is to seed anew.' },
        lag_seconds: {
          type: ['integer', 'null'],
          description: 'How long ago the first change it lacks was committed (0: in step); null when unknown.',
        },
        last_asked_at: { type: 'string', format: 'date-time' },
      },
      additionalProperties: false,
    },
  },
});

export const replicationOperations = operations({
  listStandbys: operation({
    standby: 'refuses',
    summary: 'The standbys following this master',
    description:
      'Each standby that asked for changes since this master started: where it stands, how far behind, when it ' +
      'last asked (one that stopped asking is the one whose last_asked_at grows old). A standby has none: 503 ' +
      'naming its primary.',
    responses: { 200: { description: 'Its standbys', schema: standbysSchema } },
    handler: (ctx: Ctx<undefined, {}>) => {
      const { app } = ctx;
      const now = app.clock.now();
      const lapsed = app.replicas.lapsedSince;
      return ok({
        mode: app.settings.get('replication_mode'),
        position: app.replicas.position(),
        sync_lapsed_since: lapsed === null ? null : new Date(lapsed).toISOString(),
        items: app.replicas.standbys(now).map((standby) => ({
          ...standby,
          position: standby.position && { generation: standby.position.generation, seq: standby.position.seq },
          last_asked_at: new Date(standby.last_asked_at).toISOString(),
        })),
      });
    },
  }),
  promoteStandby: operation({
    action: 'replication.promote',
    summary: 'Make this standby the primary',
    description:
      'It stops following, gets back what its copy went without (the triggers and what they keep), raises the ' +
      'epoch and serves writes, agents and its clocks from now on. What its primary committed and it had not ' +
      'applied is not on it. Promote only once the primary is gone or fenced: nothing here asks the primary. ' +
      '409 on a primary, and on masters elected through etcd (--etcd), whose election promotes.',
    responses: { 200: { description: 'Promoted', schema: promotedSchema }, 409: { description: 'A primary already' } },
    unheld: true,
    standby: 'serves',
    handler: async (ctx: Ctx<undefined, {}>) => {
      if (ctx.app.leadership)
        throw new DomainError(
          'conflict',
          'this master is elected through etcd: the election promotes a standby when the leader is gone, and only ' +
            'one that holds every acknowledged write',
        );
      ctx.app.promote();
      const epoch = await transact(ctx.app, ctx, (change) => {
        const raised = ctx.app.store.epoch.raise(ctx.app.timestamp());
        change.audit({ resource: 'master', resource_id: null, changes: { after: { role: 'primary', epoch: raised } } });
        return raised;
      });
      ctx.app.log.warn('promoted: this master is the primary now', { epoch });
      return ok({ role: 'primary', epoch });
    },
  }),
  getSnapshot: operation({
    standby: 'refuses',
    summary: "A consistent copy of the primary's database, to seed a standby master",
    description:
      `Taken while the master writes (SQLite's online backup); ${POSITION_HEADER} says which change follows it ` +
      '(GET /api/replication/changes). As sensitive as the data dir, though what it holds sealed stays sealed. ' +
      'One is taken at a time: standbys asking while it is taken are given it too.',
    responses: {
      200: {
        description: 'The database file',
        mediaType: 'application/vnd.sqlite3',
        schema: describe({ type: 'string', format: 'binary' }),
        headers: {
          [POSITION_HEADER]: { description: 'generation/seq', schema: { type: 'string' } },
          [EPOCH_HEADER]: { description: "The primary's epoch", schema: { type: 'string' } },
          [MODE_HEADER]: MODE_HEADER_DOC,
        },
      },
    },
    handler: async (ctx: Ctx<undefined, {}>): Promise<Reply> => {
      const { bytes, position } = await ctx.app.replicas.snapshot();
      return {
        status: 200,
        raw: bytes,
        headers: {
          'Content-Type': 'application/vnd.sqlite3',
          [POSITION_HEADER]: `${position.generation}/${position.seq}`,
          [EPOCH_HEADER]: String(ctx.app.store.epoch.current()),
          [MODE_HEADER]: ctx.app.settings.get('replication_mode'),
        },
      };
    },
  }),
  listChanges: operation({
    standby: 'refuses',
    summary: 'The changes committed after a position, in order',
    description:
      'At most 500 changes (8 MiB) an answer; with none yet, waits up to wait_seconds for one. `reseed` when ' +
      'the master no longer keeps them all (it keeps the newest 10,000, 64 MiB) or the position is of another ' +
      'generation (the master restarted, or was written by an import): take a snapshot again.',
    query: changesQuery,
    responses: {
      200: {
        description:
          'The changes, or reseed: a line of JSON, `{"reseed": boolean, "changes": [{"generation": string, "seq": ' +
          'integer, "at": integer (ms since the epoch, when the primary committed it), "sha256": string, "bytes": ' +
          "integer}]}`, then each change's bytes (SQLite's changeset of what was committed) back to back, in order.",
        mediaType: CHANGES_TYPE,
        schema: describe({ type: 'string', format: 'binary' }),
        headers: {
          [EPOCH_HEADER]: { description: "The primary's epoch", schema: { type: 'string' } },
          [MODE_HEADER]: MODE_HEADER_DOC,
        },
      },
    },
    handler: async (ctx: Ctx<undefined, QueryOf<typeof changesQuery>>) => {
      const { generation, after, standby } = ctx.query;
      if (generation === undefined || after === undefined) {
        const detail = 'is required: generation and after say where the follower stands';
        throw new DomainError('invalid_query', `generation ${detail}`, {
          errors: [{ pointer: generation === undefined ? '?generation' : '?after', detail }],
        });
      }
      const feed = ctx.app.replicas.feed();
      let found = feed.after({ generation, seq: after }, standby, ctx.app.clock.now());
      if (Array.isArray(found) && found.length === 0 && (ctx.query.wait_seconds ?? 0) > 0) {
        await feed.next(ctx.query.wait_seconds! * 1000);
        // Authority holds for as long as it is used: a token revoked (or narrowed) while it waited gets nothing.
        const current = ctx.app.reauthorize(ctx.caller);
        if (!current || !grants(current.scopes, 'replication'))
          throw new DomainError(
            'unauthorized',
            'the token was revoked, or lost the replication scope, while it waited',
            {
              invalidToken: !current,
            },
          );
        found = feed.after({ generation, seq: after }, standby, ctx.app.clock.now());
      }
      const page = found === 'reseed' ? { reseed: true, changes: [] } : { reseed: false, changes: found };
      return {
        status: 200,
        raw: encodeChanges(page),
        headers: {
          'Content-Type': CHANGES_TYPE,
          [EPOCH_HEADER]: String(ctx.app.store.epoch.current()),
          [MODE_HEADER]: ctx.app.settings.get('replication_mode'),
        },
      };
    },
  }),
});
