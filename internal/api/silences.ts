// Silences on the wire (operations in service/silences.ts): windows in which matching alerts are not notified.

import { decodeCursor } from '../http/cursor.ts';
import { etagOf } from '../service/etag.ts';
import { notFound } from '../errors/errors.ts';
import type { QueryOf } from '../schema/query.ts';
import { array, dateTime, integer, object, optional, string, type Infer } from '../schema/schema.ts';
import { insertSilence, MAX_SILENCE_DAYS, removeSilence, updateSilence } from '../service/silences.ts';
import { transact } from '../service/write.ts';
import type { SilenceFields } from '../store/alerts.ts';
import { ID_RANGE } from '../schema/ids.ts';
import { idPage, pageSchema, pagingQuery, record, tagList, timestamp } from './common.ts';
import { created, type Ctx, idParam, noContent, ok, operation, operations } from './route.ts';

export const silenceInput = object(
  {
    comment: string({ min: 1, max: 500, description: 'Why: the maintenance, who to ask.' }),
    alert_rule_ids: optional(
      array(integer(ID_RANGE), { max: 100, unique: true, description: 'Only these alert rules; empty: any.' }),
      [],
    ),
    node_ids: optional(
      array(integer(ID_RANGE), {
        max: 100,
        unique: true,
        description: "Only alerts of these nodes, or of their rules and tunnels (a tunnel's either end); empty: any.",
      }),
      [],
    ),
    tags: optional(
      { ...tagList, json: { ...tagList.json, description: 'Only alerts of resources carrying one of these tags.' } },
      [],
    ),
    starts_at: optional(dateTime({ description: 'When it begins; absent: now.' })),
    ends_at: dateTime({ description: `When it ends: after starts_at, at most ${MAX_SILENCE_DAYS} days after.` }),
  },
  { name: 'SilenceInput', ignore: ['id', 'version', 'created_at', 'updated_at'] },
);
type SilenceBody = Infer<typeof silenceInput>;

const silenceSchema = record('Silence', {
  id: { type: 'integer' },
  comment: { type: 'string' },
  alert_rule_ids: { type: 'array', items: { type: 'integer' } },
  node_ids: { type: 'array', items: { type: 'integer' } },
  tags: { type: 'array', items: { type: 'string' } },
  starts_at: timestamp,
  ends_at: timestamp,
  version: { type: 'integer' },
  created_at: timestamp,
  updated_at: timestamp,
});

function fieldsOf(ctx: Ctx<SilenceBody, {}>): SilenceFields {
  const { starts_at, ...rest } = ctx.body;
  return { ...rest, starts_at: starts_at ?? ctx.app.timestamp() };
}

async function putSilence(ctx: Ctx<SilenceBody, {}>) {
  const silence = await transact(ctx.app, ctx, (change) =>
    updateSilence(ctx.app, change, idParam(ctx), fieldsOf(ctx), ctx.headers['if-match']),
  );
  return ok(silence, { ETag: etagOf(silence.version) });
}

export const silenceOperations = operations({
  listSilences: operation({
    summary: 'List silences (those ended go with the audit log)',
    query: pagingQuery,
    responses: { 200: { description: 'A page of silences', schema: pageSchema(silenceSchema) } },
    handler: (ctx: Ctx<undefined, QueryOf<typeof pagingQuery>>) => {
      const limit = ctx.query.limit ?? 50;
      const after = ctx.query.cursor === undefined ? 0 : decodeCursor(ctx.query.cursor);
      const count = ctx.query.count === true && (() => ctx.app.store.silences.count());
      return ok(idPage(ctx.app.store.silences.page(after, limit), limit, count));
    },
  }),
  createSilence: operation({
    action: 'silence.create',
    summary: 'Silence alerts for a window',
    description:
      "Matching alerts' notifications are not sent while it is in force: alerts are still found and shown (muted), " +
      'and one still firing when it ends is notified then. Every matcher given must match (empty: any).',
    body: silenceInput,
    responses: { 201: { description: 'Created', schema: silenceSchema } },
    handler: async (ctx: Ctx<SilenceBody, {}>) => {
      const silence = await transact(ctx.app, ctx, (change) => insertSilence(ctx.app, change, fieldsOf(ctx)));
      return created(silence, { Location: `/api/silences/${silence.id}`, ETag: etagOf(silence.version) });
    },
  }),
  getSilence: operation({
    summary: 'Show a silence',
    responses: { 200: { description: 'The silence', schema: silenceSchema } },
    handler: (ctx: Ctx<undefined, {}>) => {
      const silence = ctx.app.store.silences.find(idParam(ctx));
      if (!silence) throw notFound('silence', ctx.params.id!);
      return ok(silence, { ETag: etagOf(silence.version) });
    },
  }),
  replaceSilence: operation({
    action: 'silence.update',
    summary: 'Replace a silence (to extend or narrow it)',
    body: silenceInput,
    responses: { 200: { description: 'Updated', schema: silenceSchema } },
    handler: putSilence,
  }),
  deleteSilence: operation({
    action: 'silence.delete',
    summary: 'End a silence now',
    responses: { 204: { description: 'Deleted' } },
    handler: async (ctx: Ctx<undefined, {}>) => {
      await transact(ctx.app, ctx, (change) => removeSilence(ctx.app, change, idParam(ctx), ctx.headers['if-match']));
      return noContent();
    },
  }),
});
