// API tokens: named bearer secrets with chosen scopes and an optional expiry, owned by the
// user who made them. The secret is shown once; only its hash is kept.

import { scopes } from '../auth/scopes.ts';
import { etagOf } from '../service/etag.ts';
import { pageJson } from '../http/cursor.ts';
import { notFound } from '../errors/errors.ts';
import { intParam, listQuery, type QueryOf } from '../schema/query.ts';
import { array, dateTime, nullable, object, oneOf, optional, secret, string, type Infer } from '../schema/schema.ts';
import { issueToken, revokeToken, TOKEN_VERSION } from '../service/tokens.ts';
import {
  nullableTimestamp,
  ownerFilter,
  pageSchema,
  paging,
  record,
  scopeList,
  sortParam,
  timestamp,
} from './common.ts';
import { reaches } from '../service/grants.ts';
import { created, type Ctx, idParam, noContent, ok, okJson, operation, operations } from './route.ts';
import { ID_RANGE } from '../schema/ids.ts';
import { shownToken } from '../auth/principal.ts';
import { tokenSorts } from '../domain/sorts.ts';

export const tokenInput = object(
  {
    name: string({ min: 1, max: 100, description: 'What the token is for.' }),
    scopes: array(oneOf(scopes), {
      min: 1,
      max: scopes.length,
      unique: true,
      description: 'Only scopes the caller holds can be granted.',
    }),
    expires_at: optional(
      nullable(dateTime({ description: 'When the token stops working; null or absent: never.' })),
      null,
    ),
  },
  { name: 'TokenInput' },
);

const tokenProperties = {
  id: { type: 'integer' },
  name: { type: 'string' },
  scopes: scopeList.json,
  created_at: timestamp,
  expires_at: nullableTimestamp,
  last_used_at: { ...nullableTimestamp, description: 'Updated at most once a minute.' },
  created_by: {
    type: 'object',
    required: ['id', 'username'],
    properties: { id: { type: 'integer' }, username: { type: 'string' } },
    additionalProperties: false,
  },
};
export const tokenSchema = record('Token', tokenProperties);
const tokenCreatedSchema = record('TokenCreated', {
  ...tokenProperties,
  token: secret({ type: 'string', description: 'The secret (prefix mst_). Shown only in this response.' }),
});

const listTokensQuery = {
  ...listQuery,
  user_id: intParam({ ...ID_RANGE, description: 'Only tokens owned by this user.' }),
  sort: sortParam(tokenSorts),
};

async function postToken(ctx: Ctx<Infer<typeof tokenInput>, {}>) {
  const { token, secret } = await issueToken(ctx.app, ctx, ctx.caller.userId, ctx.body);
  return created(
    { ...shownToken(token), token: secret },
    { Location: `/api/tokens/${token.id}`, ETag: etagOf(TOKEN_VERSION) },
  );
}

async function deleteTokenById(ctx: Ctx<undefined, {}>) {
  await revokeToken(ctx.app, ctx, ctx.caller.tokenId, idParam(ctx), ctx.headers['if-match']);
  return noContent();
}

export const tokenOperations = operations({
  listTokens: operation({
    tenants: true,
    summary: 'List API tokens (never their secrets)',
    description: "Every user's, for an operator; a tenant's own, for a tenant.",
    query: listTokensQuery,
    responses: { 200: { description: 'A page of tokens', schema: pageSchema(tokenSchema) } },
    handler: (ctx: Ctx<undefined, QueryOf<typeof listTokensQuery>>) => {
      const { limit, after, count, sorted } = paging(ctx.query);
      const page = ctx.app.store.tokens.page({
        afterId: after,
        limit,
        count,
        sorted,
        userId: ownerFilter(ctx.caller, ctx.query.user_id),
      });
      return okJson(pageJson(page, sorted && ctx.query.sort));
    },
  }),
  createToken: operation({
    tenants: true,
    action: 'token.create',
    summary: 'Issue an API token; the secret is in this response only',
    description:
      'The token belongs to the calling user and can hold only scopes the caller holds (403 otherwise). Its ' +
      'effective scopes shrink if its owner loses scopes later.',
    body: tokenInput,
    responses: {
      201: { description: 'Issued', schema: tokenCreatedSchema },
      403: { description: 'A requested scope is not held by the caller' },
    },
    handler: postToken,
  }),
  getToken: operation({
    tenants: true,
    summary: 'Show one API token',
    responses: { 200: { description: 'The token', schema: tokenSchema } },
    handler: (ctx: Ctx<undefined, {}>) => {
      const token = ctx.app.store.tokens.find(idParam(ctx));
      if (!token || !reaches(ctx.caller, token.created_by.id)) throw notFound('token', ctx.params.id!);
      return ok(shownToken(token), { ETag: etagOf(TOKEN_VERSION) });
    },
  }),
  deleteToken: operation({
    tenants: true,
    action: 'token.delete',
    summary: 'Revoke an API token at once',
    description:
      "A token can always revoke itself; any other token only if the caller holds every scope of the token's " +
      "owner (403 otherwise), the rule the users API follows. A tenant reaches only their own (404 for others').",
    responses: {
      204: { description: 'Revoked' },
      403: { description: "The token's owner holds scopes the caller lacks" },
    },
    handler: deleteTokenById,
  }),
});
