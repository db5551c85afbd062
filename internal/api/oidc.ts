// Sign-in by the organisation's OpenID provider on the wire (operations in service/provider-sign-in.ts): the
// console's button goes to /login, the provider sends the browser back to /callback, which sends it on to the console
// with a one-time code, which the console exchanges for its session. And what ways of signing in there are.

import { object, string, type Infer } from '../schema/schema.ts';
import { textParam } from '../schema/query.ts';
import { DomainError } from '../errors/errors.ts';
import {
  beginProviderSignIn,
  finishProviderSignIn,
  providerOffReason,
  takeHandedOff,
} from '../service/provider-sign-in.ts';
import { passkeysOffReason } from '../service/passkeys.ts';
import { loginResult, summaryOf } from './auth.ts';
import { record } from './common.ts';
import { type Ctx, ok, operation, operations, type Reply } from './route.ts';

const redirectHeaders = {
  Location: { description: 'Where the browser goes.', schema: { type: 'string' } },
  'Cache-Control': { description: 'no-store: a sign-in is sent on once.', schema: { type: 'string' } },
};

function redirect(location: string): Reply {
  return { status: 302, headers: { Location: location, 'Cache-Control': 'no-store' } };
}

const signInMethods = record('SignInMethods', {
  password: {
    type: 'string',
    enum: ['everyone', 'operators', 'nobody'],
    description: 'Who may sign in with a password (setting password_login).',
  },
  provider: {
    type: ['object', 'null'],
    required: ['name', 'login_url'],
    properties: {
      name: { type: 'string', description: 'What to call it: "Sign in with <name>" (setting oidc_name).' },
      login_url: { type: 'string', description: 'Where a browser starts signing in by it.' },
    },
    additionalProperties: false,
    description: "The organisation's OpenID provider; null while sign-in by one is off.",
  },
  passkeys: { type: 'boolean', description: 'Whether passkeys may be used (public_url is set, and a name).' },
});

const callbackQuery = {
  state: textParam({ max: 200, description: 'The sign-in this answers.' }),
  code: textParam({ max: 4096, description: 'The code to redeem.' }),
  error: textParam({ max: 200, description: "The provider's refusal." }),
  error_description: textParam({ max: 2000, description: 'Its words, which the master does not repeat.' }),
  iss: textParam({ max: 300, description: 'The issuer answering (RFC 9207): when given, it must be oidc_issuer.' }),
};

const exchangeInput = object(
  {
    code: string({
      min: 1,
      max: 100,
      description: 'The one-time code the callback sent the console (in its address fragment, never to a server).',
    }),
  },
  { name: 'ProviderSessionExchange' },
);

/** Where a finished (or failed) sign-in sends the browser: the console, told in its fragment. */
function backToConsole(ctx: Ctx<unknown, unknown>, fragment: Record<string, string>): Reply {
  return redirect(`${ctx.app.settings.get('public_url')}/#${new URLSearchParams(fragment).toString()}`);
}

export const providerSignInOperations = operations({
  listSignInMethods: operation({
    summary: 'How one may sign in here',
    description: 'For a sign-in page: whether passwords are taken, and the identity provider, if any.',
    responses: { 200: { description: 'The ways', schema: signInMethods } },
    handler: (ctx: Ctx<undefined, {}>) =>
      ok({
        password: ctx.app.settings.get('password_login'),
        provider:
          providerOffReason(ctx.app) === null
            ? { name: ctx.app.settings.get('oidc_name'), login_url: '/api/auth/oidc/login' }
            : null,
        passkeys: passkeysOffReason(ctx.app) === null,
      }),
  }),
  beginProviderSignIn: operation({
    summary: "Sign in by the organisation's OpenID provider",
    description:
      'Sends the browser to the provider (authorization code flow with PKCE, S256; a state and nonce kept here for ' +
      'ten minutes), which sends it back to /api/auth/oidc/callback. 409 while it is off (oidc_issuer, ' +
      'oidc_client_id or public_url unset); 502 when the provider cannot be asked; on a standby, 503 naming the ' +
      'primary.',
    responses: {
      302: { description: 'To the provider', headers: redirectHeaders },
      409: { description: 'Sign-in by a provider is off' },
      502: { description: 'The provider could not be asked' },
    },
    handler: async (ctx: Ctx<undefined, {}>) => redirect(await beginProviderSignIn(ctx.app)),
  }),
  finishProviderSignIn: operation({
    action: 'auth.login',
    summary: 'Where the provider sends a sign-in back',
    description:
      "Redeems the code at the provider's token endpoint, checks its ID token (its signature by one of the " +
      "provider's keys, fetched again when it names one not seen yet; issuer, audience, expiry, nonce), finds the " +
      'user (linked by the subject at their first sign-in, or by the username oidc_username_claim gives; a user ' +
      'linked to another subject is refused), or creates them as oidc_provisioning says, and opens a session (no ' +
      "second factor asked: the factor is the provider's). Sends the browser to the console (public_url) with " +
      '#oidc=<one-time code>, which POST /api/auth/oidc/session exchanges for the session within a minute, or ' +
      '#oidc_error=<why>: a sign-in refused is audited as a failed login.',
    query: callbackQuery,
    othersIgnored: true,
    responses: {
      302: { description: 'To the console', headers: redirectHeaders },
      409: { description: 'Sign-in by a provider is off' },
    },
    handler: async (ctx: Ctx<undefined, Partial<Record<keyof typeof callbackQuery, string>>>) => {
      const off = providerOffReason(ctx.app);
      if (off) throw new DomainError('conflict', `sign-in by the provider is off: ${off}`);
      try {
        if (ctx.query.iss !== undefined && ctx.query.iss !== ctx.app.settings.get('oidc_issuer'))
          throw new DomainError('unauthorized', 'the answer names another issuer (iss)');
        const agent = ctx.headers['user-agent'] ?? null;
        const code = await finishProviderSignIn(ctx.app, ctx, ctx.query, ctx.ip, agent);
        return backToConsole(ctx, { oidc: code });
      } catch (error) {
        if (!(error instanceof DomainError)) throw error;
        return backToConsole(ctx, { oidc_error: error.message });
      }
    },
  }),
  takeProviderSession: operation({
    // Takes what the callback holds in memory: the session's write, and its audit entry, were the callback's.
    action: 'auth.oidc_session',
    summary: 'Take the session a sign-in by the provider opened',
    description:
      'With the one-time code the callback sent the console: the session token, as POST /api/auth/login answers ' +
      'it. Each code once, within a minute (401 otherwise).',
    body: exchangeInput,
    responses: { 200: { description: 'Signed in', schema: loginResult }, 401: { description: 'Unknown code' } },
    handler: (ctx: Ctx<Infer<typeof exchangeInput>, {}>) => {
      const { secret, expiresAt, user } = takeHandedOff(ctx.app, ctx.body.code);
      return ok({ token: secret, expires_at: expiresAt, user: summaryOf(user) });
    },
  }),
});
