// API tokens: named bearer secrets with chosen scopes and an optional expiry, owned by the
// user who made them. The secret is shown once; only its hash is kept.

import { grants, scopes, type Scope } from '../auth/scopes.ts';
import { hashSecret, newSecret } from '../auth/secrets.ts';
import { etagOf, checkIfMatch } from '../http/etag.ts';
import { pageJson } from '../http/cursor.ts';
import { DomainError, validationFailed, notFound } from '../errors/errors.ts';
import { intParam, listQuery, type QueryOf } from '../schema/query.ts';
import { array, dateTime, nullable, object, oneOf, optional, secret, string, type Infer } from '../schema/schema.ts';
import { shownToken, TOKEN_SORTS } from '../store/tokens.ts';
import {
  nullableTimestamp,
  pageSchema,
  paging,
  record,
  requireHolds,
  scopeList,
  sortParam,
  timestamp,
} from './common.ts';
import { created, type Ctx, idParam, noContent, ok, okJson, operation, operations } from './route.ts';
import { transact } from '../service/write.ts';

// Tokens never change, so their version is always 1.
const TOKEN_VERSION = 1;

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
  user_id: intParam({ min: 1, max: Number.MAX_SAFE_INTEGER, description: 'Only tokens owned by this user.' }),
  sort: sortParam(Object.keys(TOKEN_SORTS)),
};

function listTokens(ctx: Ctx<undefined, QueryOf<typeof listTokensQuery>>) {
  const { limit, after, count, sorted } = paging(ctx.query);
  const page = ctx.app.store.tokens.page({ afterId: after, limit, count, sorted, userId: ctx.query.user_id ?? null });
  return okJson(pageJson(page, sorted && ctx.query.sort));
}

function getToken(ctx: Ctx<undefined, {}>) {
  const token = ctx.app.store.tokens.find(idParam(ctx));
  if (!token) throw notFound('token', ctx.params.id!);
  return ok(shownToken(token), { ETag: etagOf(TOKEN_VERSION) });
}

async function createToken(ctx: Ctx<Infer<typeof tokenInput>, {}>) {
  const { app, body, caller } = ctx;
  const ungrantable = body.scopes.filter((scope: Scope) => !grants(caller.scopes, scope));
  if (ungrantable.length > 0) {
    throw new DomainError('insufficient_scope', `you cannot grant scopes you do not hold: ${ungrantable.join(', ')}`);
  }
  if (body.expires_at !== null && body.expires_at <= app.timestamp()) {
    throw validationFailed([{ pointer: '#/expires_at', detail: 'must be in the future' }]);
  }
  const secret = newSecret('api');
  const token = await transact(app, ctx, (change) => {
    const inserted = app.store.tokens.insert(
      {
        kind: 'api',
        name: body.name,
        user_id: caller.userId,
        scopes: body.scopes,
        secret_hash: hashSecret(secret),
        expires_at: body.expires_at,
      },
      app.timestamp(),
    );
    change.audit({ resource: 'token', resource_id: inserted.id, changes: { after: shownToken(inserted) } });
    return inserted;
  });
  return created(
    { ...shownToken(token), token: secret },
    { Location: `/api/tokens/${token.id}`, ETag: etagOf(TOKEN_VERSION) },
  );
}

async function deleteToken(ctx: Ctx<undefined, {}>) {
  const { app } = ctx;
  const id = idParam(ctx);
  await transact(app, ctx, (change) => {
    const token = app.store.tokens.find(id);
    if (!token) throw notFound('token', id);
    checkIfMatch(ctx.headers['if-match'], TOKEN_VERSION);
    // A token may always revoke itself; any other only if the caller holds every scope of its owner.
    if (id !== ctx.caller.tokenId)
      requireHolds(
        ctx.caller,
        app.store.users.find(token.created_by.id)?.scopes ?? [],
        `cannot revoke a token of ${token.created_by.username}`,
      );
    app.store.tokens.delete(id);
    change.audit({ resource: 'token', resource_id: id, changes: { before: shownToken(token) } });
  });
  return noContent();
}

export const tokenOperations = operations({
  listTokens: operation({
    summary: 'List API tokens (never their secrets)',
    query: listTokensQuery,
    responses: { 200: { description: 'A page of tokens', schema: pageSchema(tokenSchema) } },
    handler: listTokens,
  }),
  createToken: operation({
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
    handler: createToken,
  }),
  getToken: operation({
    summary: 'Show one API token',
    responses: { 200: { description: 'The token', schema: tokenSchema } },
    handler: getToken,
  }),
  deleteToken: operation({
    action: 'token.delete',
    summary: 'Revoke an API token at once',
    description:
      "A token can always revoke itself; any other token only if the caller holds every scope of the token's " +
      'owner (403 otherwise), the rule the users API follows.',
    responses: {
      204: { description: 'Revoked' },
      403: { description: "The token's owner holds scopes the caller lacks" },
    },
    handler: deleteToken,
  }),
});
