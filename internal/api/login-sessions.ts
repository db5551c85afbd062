// Login sessions a user can see and end (operations in service/sessions.ts): one's own from one's own session, any
// user's by an operator.

import { nullableTimestamp, record, timestamp } from './common.ts';
import { type Ctx, idParam, noContent, ok, operation, operations } from './route.ts';
import { endOwnSession, endUserSessions, MAX_LISTED_SESSIONS, ownSessions, userSessions } from '../service/sessions.ts';

const sessionProperties = {
  id: { type: 'integer' },
  created_at: timestamp,
  last_used_at: { ...nullableTimestamp, description: 'When it was last used (written at most once a minute).' },
  expires_at: nullableTimestamp,
  ip: { type: ['string', 'null'], description: 'The address it signed in from.' },
  user_agent: { type: ['string', 'null'], description: 'What signed in (its User-Agent, printable, 200 at most).' },
  signed_in_with: {
    type: ['string', 'null'],
    description:
      'password, password+totp, password+recovery_code, oidc (by the identity provider) or passkey; null for one ' +
      'opened before this was kept.',
  },
};

/** A list of sessions as `name`, each with `more` beside what every session shows. */
function sessionList(name: string, more: Record<string, object> = {}) {
  const properties = { ...sessionProperties, ...more };
  return record(name, {
    items: {
      type: 'array',
      description: `Newest first, at most ${MAX_LISTED_SESSIONS}.`,
      items: { type: 'object', required: Object.keys(properties), properties, additionalProperties: false },
    },
  });
}

const loginSessions = sessionList('LoginSessions', {
  current: { type: 'boolean', description: 'The session calling.' },
});
const userLoginSessions = sessionList('UserLoginSessions');

const sessionsEnded = record('UserSessionsEnded', {
  sessions_ended: { type: 'integer', description: 'How many of their login sessions ended.' },
});

export const loginSessionOperations = operations({
  listOwnSessions: operation({
    tenants: true,
    summary: "The caller's login sessions",
    description:
      'Where and how each signed in, and when it was last used. A login session only (403 for an API token).',
    responses: { 200: { description: 'Their sessions', schema: loginSessions } },
    handler: (ctx: Ctx<undefined, {}>) => ok({ items: ownSessions(ctx.app, ctx.caller) }),
  }),
  endOwnSession: operation({
    tenants: true,
    action: 'auth.session_end',
    summary: "End one of the caller's login sessions",
    description: "The calling one too (as a logout). Another user's, or one gone, is 404.",
    responses: { 204: { description: 'Ended' } },
    handler: async (ctx: Ctx<undefined, {}>) => {
      await endOwnSession(ctx.app, ctx, ctx.caller, idParam(ctx), ctx.headers['if-match']);
      return noContent();
    },
  }),
  listUserSessions: operation({
    summary: "A user's login sessions",
    description: 'Where and how each signed in; for an operator who looks into an account.',
    responses: { 200: { description: 'Their sessions', schema: userLoginSessions } },
    handler: (ctx: Ctx<undefined, {}>) => ok({ items: userSessions(ctx.app, idParam(ctx)) }),
  }),
  endUserSessions: operation({
    action: 'user.sessions_end',
    summary: 'End every login session of a user',
    description: 'They sign in again (their API tokens stay: DELETE /api/tokens/{id} for those).',
    responses: { 200: { description: 'Ended', schema: sessionsEnded } },
    handler: async (ctx: Ctx<undefined, {}>) =>
      ok({ sessions_ended: await endUserSessions(ctx.app, ctx, idParam(ctx), ctx.headers['if-match']) }),
  }),
});
