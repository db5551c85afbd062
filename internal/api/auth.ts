// Login sessions: log in with a password for a bearer token of limited life, ask who you
// are, change your own password, end your other sessions, log out.

import { decoyHash, hashPassword, hashSecret, MIN_PASSWORD, newSecret, verifyPassword } from '../auth/secrets.ts';
import { DomainError, validationFailed } from '../errors/errors.ts';
import { object, secret, string, type Infer } from '../schema/schema.ts';
import { nullableTimestamp, record, scopeList, timestamp } from './common.ts';
import { type Ctx, noContent, ok, operation, operations } from './route.ts';
import { actingAs, transact } from '../service/write.ts';

export const loginInput = object(
  {
    username: string({ min: 1, max: 64 }),
    password: string({ min: 1, max: 1024, secret: true }),
  },
  { name: 'LoginInput' },
);

const userSummary = {
  type: 'object',
  required: ['id', 'username', 'scopes'],
  properties: { id: { type: 'integer' }, username: { type: 'string' }, scopes: scopeList.json },
  additionalProperties: false,
};

const loginResult = record('LoginResult', {
  token: secret({ type: 'string', description: 'The session bearer token (prefix mss_); shown only here.' }),
  expires_at: timestamp,
  user: userSummary,
});

const whoAmI = record('WhoAmI', {
  user: userSummary,
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

function sanitizeName(name: string): string {
  return name.replace(/[^\x20-\x7e]/g, '?').slice(0, 64);
}

async function login(ctx: Ctx<Infer<typeof loginInput>, {}>) {
  const { app, body, ip } = ctx;
  const limits = {
    maxPerUser: app.settings.get('login_max_failures'),
    maxPerAddress: app.settings.get('login_max_failures_per_address'),
    windowMs: app.settings.get('login_window_seconds') * 1000,
  };
  const attempt = app.throttle.begin(body.username, ip, limits);
  if (typeof attempt === 'number') {
    throw new DomainError('rate_limited', 'too many failed logins; wait before trying again', {
      retryAfterSeconds: attempt / 1000,
    });
  }
  const user = app.store.users.findWithHash(body.username);
  let matches: boolean;
  try {
    matches = await verifyPassword(body.password, user?.password_hash ?? (await decoyHash()));
  } catch (error) {
    attempt.abandoned();
    throw error;
  }
  if (!user || !matches || user.disabled) {
    app.metrics.loginFailures.inc();
    // Recorded as the name that was tried: there is no user to name.
    await transact(app, actingAs(ctx, { ...ctx.actor, actor_name: sanitizeName(body.username) }), (change) =>
      change.failed({ resource: 'session', resource_id: null }),
    );
    throw new DomainError('unauthorized', 'wrong username or password, or the user is disabled');
  }
  attempt.succeeded();
  const secret = newSecret('session');
  const expiresAt = app.timestamp(app.settings.get('session_ttl_seconds') * 1000);
  // From here the caller is known: the user who logged in.
  const actor = {
    actor_type: 'user' as const,
    actor_id: user.id,
    actor_name: user.username,
    ip,
    request_id: ctx.requestId,
  };
  const session = await transact(app, actingAs(ctx, actor), (change) => {
    const token = app.store.tokens.insert(
      {
        kind: 'session',
        name: 'login',
        user_id: user.id,
        scopes: user.scopes,
        secret_hash: hashSecret(secret),
        expires_at: expiresAt,
      },
      app.timestamp(),
    );
    change.audit({ resource: 'session', resource_id: token.id });
    return token;
  });
  return ok({
    token: secret,
    expires_at: session.expires_at,
    user: { id: user.id, username: user.username, scopes: user.scopes },
  });
}

function whoami(ctx: Ctx<undefined, {}>) {
  const { caller, app } = ctx;
  const user = app.store.users.find(caller.userId)!;
  return ok({
    user: { id: user.id, username: user.username, scopes: user.scopes },
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

/**
 * The caller's own password, changed with the current one: a stolen session alone cannot lock its user out. Wrong
 * guesses count as failed logins of the user (and are throttled as they are). The user's other login sessions end.
 */
async function changePassword(ctx: Ctx<Infer<typeof passwordChangeInput>, {}>) {
  const { app, body, caller, ip } = ctx;
  const user = app.store.users.findWithHash(caller.username);
  if (!user) throw new DomainError('unauthorized', 'the user of this token no longer exists');
  const attempt = app.throttle.begin(user.username, ip, {
    maxPerUser: app.settings.get('login_max_failures'),
    maxPerAddress: app.settings.get('login_max_failures_per_address'),
    windowMs: app.settings.get('login_window_seconds') * 1000,
  });
  if (typeof attempt === 'number')
    throw new DomainError('rate_limited', 'too many wrong passwords; wait before trying again', {
      retryAfterSeconds: attempt / 1000,
    });
  let matches: boolean;
  try {
    matches = await verifyPassword(body.current_password, user.password_hash);
  } catch (error) {
    attempt.abandoned();
    throw error;
  }
  if (!matches) {
    await transact(app, ctx, (change) => change.failed({ resource: 'user', resource_id: user.id }));
    throw validationFailed([{ pointer: '#/current_password', detail: 'is not the password of this user' }]);
  }
  attempt.succeeded();
  const passwordHash = await hashPassword(body.new_password);
  const ended = await transact(app, ctx, (change) => {
    app.store.users.setPassword(user.id, passwordHash, app.timestamp());
    const sessions = app.store.tokens.endSessionsExcept(user.id, caller.tokenId);
    change.audit({ resource: 'user', resource_id: user.id, changes: { after: { password: body.new_password } } });
    return sessions.length;
  });
  return ok({ sessions_ended: ended });
}

/** Ends the caller's user's login sessions but the calling one: a lost laptop, a shared screen. */
async function endOtherSessions(ctx: Ctx<undefined, {}>) {
  const { app, caller } = ctx;
  const ended = await transact(app, ctx, (change) => {
    const sessions = app.store.tokens.endSessionsExcept(caller.userId, caller.tokenId);
    change.audit({ resource: 'user', resource_id: caller.userId, changes: { after: { sessions_ended: sessions } } });
    return sessions.length;
  });
  return ok({ sessions_ended: ended });
}

const sessionsEnded = record('SessionsEnded', {
  sessions_ended: { type: 'integer', description: "How many of the user's other login sessions ended." },
});

async function logout(ctx: Ctx<undefined, {}>) {
  const { caller, app } = ctx;
  if (caller.kind !== 'session') {
    throw new DomainError('conflict', 'logout ends login sessions; revoke an API token with DELETE /api/tokens/{id}');
  }
  await transact(app, ctx, (change) => {
    app.store.tokens.delete(caller.tokenId);
    change.audit({ resource: 'session', resource_id: caller.tokenId });
  });
  return noContent();
}

export const authOperations = operations({
  logIn: operation({
    action: 'auth.login',
    summary: 'Log in with a username and password',
    description:
      "Returns a session bearer token that carries the user's scopes until expires_at (setting " +
      'session_ttl_seconds). Each attempt counts as a failure from before its password is checked until it ' +
      'succeeds. Past login_max_failures within login_window_seconds, each further attempt for that username ' +
      'waits twice as long as the one before (1 s, 2 s, 4 s, ... at most 60 s): a delay, never a lockout. Past ' +
      'login_max_failures_per_address, that address waits until its oldest failure ages out. Both answer 429 ' +
      'with Retry-After; so does a login while too many passwords are being checked at once.',
    body: loginInput,
    responses: {
      200: { description: 'Logged in', schema: loginResult },
      401: { description: 'Wrong credentials' },
      429: { description: 'Too many failed attempts' },
    },
    handler: login,
  }),
  getMe: operation({
    summary: 'Who am I: the calling user, and the token used with its effective scopes and expiry',
    responses: { 200: { description: 'The caller', schema: whoAmI } },
    handler: whoami,
  }),
  changePassword: operation({
    action: 'auth.password',
    summary: "Change the caller's own password",
    description:
      `Needs the current password (422 naming current_password when wrong; wrong guesses count as failed logins ` +
      `and are throttled as they are, 429). The new one needs at least ${MIN_PASSWORD} characters. Ends the ` +
      "user's other login sessions (the calling one stays); API tokens stay. A login session only: an API token " +
      "cannot change, nor by guessing wrong lock, its owner's password (403).",
    body: passwordChangeInput,
    responses: { 200: { description: 'Changed', schema: sessionsEnded }, 429: { description: 'Too many wrong' } },
    handler: changePassword,
  }),
  endOtherSessions: operation({
    action: 'auth.logout_others',
    summary: "End the caller's other login sessions",
    description:
      'Every login session of the calling user but the one calling. A login session only: an API token (a ' +
      "script's, perhaps leaked) cannot sign its owner out (403).",
    responses: { 200: { description: 'Ended', schema: sessionsEnded } },
    handler: endOtherSessions,
  }),
  logOut: operation({
    action: 'auth.logout',
    summary: 'End the calling login session',
    description: 'Only for session tokens; API tokens are revoked with DELETE /api/tokens/{id} (409 here).',
    responses: { 204: { description: 'Logged out' }, 409: { description: 'The caller is an API token' } },
    handler: logout,
  }),
});
