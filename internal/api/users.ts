// Users: who may log in, with which scopes. A caller can only hand out scopes it holds and
// can only change users whose scopes it holds, so users:write never escalates to `*`; the
// last enabled holder of `*` cannot be removed, disabled or stripped of it.

import { MIN_PASSWORD } from '../auth/secrets.ts';
import { pageJson } from '../http/cursor.ts';
import { etagOf } from '../service/etag.ts';
import { notFound } from '../errors/errors.ts';
import { boolParam, intParam, listQuery, textParam, type QueryOf } from '../schema/query.ts';
import { boolean, dateTime, integer, nullable, object, oneOf, optional, string, type Infer } from '../schema/schema.ts';
import { ID_RANGE } from '../schema/ids.ts';
import { roles } from '../auth/principal.ts';
import { nullableTimestamp, pageSchema, paging, record, scopeList, sortParam, timestamp } from './common.ts';
import { created, type Ctx, idParam, noContent, ok, okJson, operation, operations } from './route.ts';
import { createUser, removeUser, updateUser } from '../service/users.ts';
import { userSorts } from '../domain/sorts.ts';
import { USERNAME, USERNAME_HINT, USERNAME_MAX } from '../domain/users.ts';

const username = string({ min: 1, max: USERNAME_MAX, pattern: USERNAME, patternHint: USERNAME_HINT });
const password = string({ min: MIN_PASSWORD, max: 1024, secret: true, description: 'Write-only; never returned.' });

const role = optional(
  oneOf(roles, {
    description: 'operator: the fleet, as the scopes allow; tenant: only what they own, as their plan grants.',
  }),
  'operator',
);
const planId = optional(
  nullable(integer({ ...ID_RANGE, description: "A tenant's plan; null: none, which grants nothing." })),
  null,
);

const expiresAt = optional(
  nullable(
    dateTime({
      description:
        "When a tenant's account ends: their rules stop (state account_expired) and their sessions and tokens no " +
        'longer work, until it is moved later or cleared; null: never. Tenants only.',
    }),
  ),
  null,
);

export const userCreateInput = object(
  {
    username,
    password,
    role,
    plan_id: planId,
    scopes: optional(scopeList, []),
    disabled: optional(boolean(), false),
    expires_at: expiresAt,
  },
  { name: 'UserCreate' },
);

export const userUpdateInput = object(
  {
    username,
    password: optional(
      string({
        min: MIN_PASSWORD,
        max: 1024,
        secret: true,
        description: 'Write-only; absent keeps the current password.',
      }),
    ),
    role,
    plan_id: planId,
    scopes: optional(scopeList, []),
    disabled: optional(boolean(), false),
    expires_at: expiresAt,
  },
  { name: 'UserUpdate', ignore: ['id', 'expired', 'usage', 'version', 'created_at', 'updated_at'] },
);

/** What a user has of what their plan bounds: shown to operators on each user, and to a tenant on /api/auth/me. */
export const usageSchema = {
  type: 'object',
  required: ['rules', 'traffic'],
  properties: {
    rules: { type: 'integer', description: 'How many rules the user owns.' },
    traffic: {
      type: ['object', 'null'],
      description:
        "The plan's traffic allowance this period, all the user's rules together, both ways, as their nodes " +
        'reported it; null without one.',
      required: ['used_bytes', 'period_started_at', 'resets_at', 'spent'],
      properties: {
        used_bytes: { type: 'integer' },
        period_started_at: timestamp,
        resets_at: timestamp,
        spent: {
          type: 'boolean',
          description: "Whether the allowance is spent: past it, the plan stops the user's rules or slows them.",
        },
      },
      additionalProperties: false,
    },
  },
  additionalProperties: false,
} as const;

export const userSchema = record('User', {
  id: { type: 'integer' },
  username: { type: 'string' },
  role: { type: 'string', enum: [...roles] },
  plan_id: { type: ['integer', 'null'] },
  scopes: scopeList.json,
  disabled: { type: 'boolean' },
  expires_at: nullableTimestamp,
  expired: { type: 'boolean', description: 'Whether expires_at has come.' },
  usage: usageSchema,
  version: { type: 'integer', description: 'Changes on every write; the ETag.' },
  created_at: timestamp,
  updated_at: timestamp,
});

const listUsersQuery = {
  ...listQuery,
  q: textParam({ max: 64, description: 'Substring of the username.' }),
  disabled: boolParam('Only disabled (true) or enabled (false) users.'),
  plan_id: intParam({ ...ID_RANGE, description: 'Only the users this plan holds (its tenants).' }),
  sort: sortParam(userSorts),
};

async function postUser(ctx: Ctx<Infer<typeof userCreateInput>, {}>) {
  const user = await createUser(ctx.app, ctx, ctx.body);
  return created(user, { Location: `/api/users/${user.id}`, ETag: etagOf(user.version) });
}

async function putUser(ctx: Ctx<Infer<typeof userUpdateInput>, {}>) {
  const user = await updateUser(ctx.app, ctx, idParam(ctx), ctx.body, ctx.headers['if-match']);
  return ok(user, { ETag: etagOf(user.version) });
}

async function deleteUserById(ctx: Ctx<undefined, {}>) {
  await removeUser(ctx.app, ctx, idParam(ctx), ctx.headers['if-match']);
  return noContent();
}

export const userOperations = operations({
  listUsers: operation({
    summary: 'List users',
    query: listUsersQuery,
    responses: { 200: { description: 'A page of users', schema: pageSchema(userSchema) } },
    handler: (ctx: Ctx<undefined, QueryOf<typeof listUsersQuery>>) => {
      const { limit, after, count, sorted } = paging(ctx.query);
      const page = ctx.app.store.users.page({
        afterId: after,
        limit,
        count,
        sorted,
        q: ctx.query.q ?? null,
        disabled: ctx.query.disabled ?? null,
        plan_id: ctx.query.plan_id ?? null,
      });
      return okJson(pageJson(page, sorted && ctx.query.sort));
    },
  }),
  createUser: operation({
    action: 'user.create',
    summary: 'Create a user',
    description: `Passwords need at least ${MIN_PASSWORD} characters. The caller can only give scopes it holds (403).`,
    body: userCreateInput,
    responses: { 201: { description: 'Created', schema: userSchema }, 409: { description: 'The username is taken' } },
    handler: postUser,
  }),
  getUser: operation({
    summary: 'Show a user',
    responses: { 200: { description: 'The user', schema: userSchema } },
    handler: (ctx: Ctx<undefined, {}>) => {
      const user = ctx.app.store.users.find(idParam(ctx));
      if (!user) throw notFound('user', ctx.params.id!);
      return ok(user, { ETag: etagOf(user.version) });
    },
  }),
  replaceUser: operation({
    action: 'user.update',
    summary: 'Replace a user',
    description:
      "An absent password keeps the current one; a new password ends the user's login sessions. Disabling ends " +
      "the user's sessions and revokes its API tokens. Only users whose scopes the caller holds can be changed " +
      '(403). The last enabled holder of * cannot lose it or be disabled (409).',
    body: userUpdateInput,
    responses: {
      200: { description: 'Updated', schema: userSchema },
      409: { description: 'Username taken, or last holder of *' },
    },
    handler: putUser,
  }),
  deleteUser: operation({
    action: 'user.delete',
    summary: 'Delete a user, its sessions and its API tokens',
    responses: {
      204: { description: 'Deleted' },
      409: { description: 'The last enabled holder of *, or a user who owns rules or tunnels' },
    },
    handler: deleteUserById,
  }),
});
