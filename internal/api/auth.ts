// Login sessions: log in with a password for a bearer token of limited life, ask who you
// are, change your own password, end your other sessions, log out.

import { planSchema } from './plans.ts';
import { roles } from '../auth/principal.ts';
import type { TotpFactor } from '../store/totp.ts';
import type { User } from '../store/users.ts';
import { usageSchema } from './users.ts';
import { MIN_PASSWORD } from '../auth/secrets.ts';
import { DomainError } from '../errors/errors.ts';
import { object, optional, secret, string, type Infer } from '../schema/schema.ts';
import { nullableTimestamp, record, scopeList, timestamp } from './common.ts';
import { type Ctx, noContent, ok, operation, operations } from './route.ts';
import { closeSession, endSessionsBut, openSession, replacePassword } from '../service/sessions.ts';

export const loginInput = object(
  {
    username: string({ min: 1, max: 64 }),
    password: string({ min: 1, max: 1024, secret: true }),
    totp: optional(
      string({
        min: 1,
        max: 64,
        secret: true,
        description:
          'For a user with a second factor (POST /api/auth/totp): the code their authenticator app shows now, or ' +
          'one of their recovery codes; each is taken once.',
      }),
    ),
  },
  { name: 'LoginInput' },
);

const userSummary = {
  type: 'object',
  required: ['id', 'username', 'role', 'plan_id', 'scopes', 'expires_at'],
  properties: {
    id: { type: 'integer' },
    username: { type: 'string' },
    role: { type: 'string', enum: [...roles] },
    plan_id: { type: ['integer', 'null'], description: "A tenant's plan." },
    scopes: scopeList.json,
    expires_at: { ...nullableTimestamp, description: "When a tenant's account ends; null: never." },
  },
  additionalProperties: false,
};

export const loginResult = record('LoginResult', {
  token: secret({ type: 'string', description: 'The session bearer token (prefix mss_); shown only here.' }),
  expires_at: timestamp,
  user: userSummary,
});

const whoAmI = record('WhoAmI', {
  user: userSummary,
  plan: { oneOf: [{ type: 'null' }, planSchema.json], description: "A tenant's plan: what they are granted." },
  usage: {
    ...usageSchema,
    type: ['object', 'null'],
    description:
      "A tenant's use of their plan: their rules, and the traffic allowance's period (null for an operator).",
  },
  second_factor: {
    type: 'object',
    required: ['totp', 'recovery_codes_left'],
    properties: {
      totp: {
        type: 'string',
        enum: ['off', 'enrolling', 'on'],
        description: 'on: a login needs a code (POST /api/auth/totp to enrol).',
      },
      recovery_codes_left: { type: ['integer', 'null'], description: 'While on: the recovery codes not used yet.' },
    },
    additionalProperties: false,
  },
  token: {
    type: 'object',
    required: ['id', 'kind', 'name', 'scopes', 'expires_at'],
    properties: {
      id: { type: 'integer' },
      kind: { type: 'string', enum: ['api', 'session'] },
      name: { type: 'string' },
      scopes: {
        ...scopeList.json,
        description: 'What this token may do: its scopes as far as its owner still holds them.',
      },
      expires_at: nullableTimestamp,
    },
    additionalProperties: false,
  },
});

async function login(ctx: Ctx<Infer<typeof loginInput>, {}>) {
  const agent = ctx.headers['user-agent'];
  const { secret, expiresAt, user } = await openSession(ctx.app, ctx, ctx.body, ctx.ip, agent ?? null);
  return ok({
    token: secret,
    expires_at: expiresAt,
    user: summaryOf(user),
  });
}

function secondFactorOf(factor: TotpFactor | undefined) {
  if (!factor) return { totp: 'off', recovery_codes_left: null };
  if (factor.confirmed_at === null) return { totp: 'enrolling', recovery_codes_left: null };
  return { totp: 'on', recovery_codes_left: factor.recovery_left };
}

export function summaryOf({ id, username, role, plan_id, scopes, expires_at }: User) {
  return { id, username, role, plan_id, scopes, expires_at };
}

function whoami(ctx: Ctx<undefined, {}>) {
  const { caller, app } = ctx;
  const user = app.store.users.find(caller.userId)!;
  const plan = user.plan_id === null ? null : (app.store.plans.find(user.plan_id) ?? null);
  return ok({
    user: summaryOf(user),
    plan,
    usage: user.role === 'tenant' ? user.usage : null,
    second_factor: secondFactorOf(app.store.totp.find(user.id)),
    token: {
      id: caller.tokenId,
      kind: caller.kind,
      name: caller.tokenName,
      scopes: caller.scopes,
      expires_at: caller.expiresAt,
    },
  });
}

const passwordChangeInput = object(
  {
    current_password: string({ min: 1, max: 1024, secret: true, description: 'The password in use now.' }),
    new_password: string({ min: MIN_PASSWORD, max: 1024, secret: true, description: 'Write-only; never returned.' }),
  },
  { name: 'PasswordChange' },
);

async function putPassword(ctx: Ctx<Infer<typeof passwordChangeInput>, {}>) {
  const passwords = { current: ctx.body.current_password, next: ctx.body.new_password };
  return ok({ sessions_ended: await replacePassword(ctx.app, ctx, ctx.caller, ctx.ip, passwords) });
}

async function endOthers(ctx: Ctx<undefined, {}>) {
  return ok({ sessions_ended: await endSessionsBut(ctx.app, ctx, ctx.caller) });
}

const sessionsEnded = record('SessionsEnded', {
  sessions_ended: { type: 'integer', description: "How many of the user's other login sessions ended." },
});

async function logout(ctx: Ctx<undefined, {}>) {
  if (ctx.caller.kind !== 'session')
    throw new DomainError('conflict', 'logout ends login sessions; revoke an API token with DELETE /api/tokens/{id}');
  await closeSession(ctx.app, ctx, ctx.caller);
  return noContent();
}

export const authOperations = operations({
  logIn: operation({
    // A standby's own session (see StandbySessions): its copy takes no write.
    standby: 'serves',
    action: 'auth.login',
    summary: 'Log in with a username and password',
    description:
      "Returns a session bearer token that carries the user's scopes until expires_at (setting " +
      'session_ttl_seconds). Each attempt counts as a failure from before its password is checked until it ' +
      'succeeds. Past login_max_failures within login_window_seconds, each further attempt for that username ' +
      'waits twice as long as the one before (1 s, 2 s, 4 s, ... at most 60 s): a delay, never a lockout. Past ' +
      'login_max_failures_per_address, that address waits until its oldest failure ages out. Both answer 429 ' +
      'with Retry-After; so does a login while too many passwords are being checked at once. A user with a second ' +
      'factor gives totp in the same request: without it, 401 with second_factor "totp" (not counted as a failure); ' +
      'a wrong or used one, 401 counted as one.',
    body: loginInput,
    responses: {
      200: { description: 'Logged in', schema: loginResult },
      401: { description: 'Wrong credentials' },
      429: { description: 'Too many failed attempts' },
    },
    handler: login,
  }),
  getMe: operation({
    tenants: true,
    summary: 'Who am I: the calling user, and the token used with its effective scopes and expiry',
    responses: { 200: { description: 'The caller', schema: whoAmI } },
    handler: whoami,
  }),
  changePassword: operation({
    tenants: true,
    action: 'auth.password',
    summary: "Change the caller's own password",
    description:
      `Needs the current password (422 naming current_password when wrong; wrong guesses count as failed logins ` +
      `and are throttled as they are, 429). The new one needs at least ${MIN_PASSWORD} characters. Ends the ` +
      "user's other login sessions (the calling one stays); API tokens stay. A login session only: an API token " +
      "cannot change, nor by guessing wrong lock, its owner's password (403).",
    body: passwordChangeInput,
    responses: { 200: { description: 'Changed', schema: sessionsEnded }, 429: { description: 'Too many wrong' } },
    handler: putPassword,
  }),
  endOtherSessions: operation({
    tenants: true,
    action: 'auth.logout_others',
    summary: "End the caller's other login sessions",
    description:
      'Every login session of the calling user but the one calling. A login session only: an API token (a ' +
      "script's, perhaps leaked) cannot sign its owner out (403).",
    responses: { 200: { description: 'Ended', schema: sessionsEnded } },
    handler: endOthers,
  }),
  logOut: operation({
    standby: 'serves',
    tenants: true,
    action: 'auth.logout',
    summary: 'End the calling login session',
    description: 'Only for session tokens; API tokens are revoked with DELETE /api/tokens/{id} (409 here).',
    responses: { 204: { description: 'Logged out' }, 409: { description: 'The caller is an API token' } },
    handler: logout,
  }),
});
