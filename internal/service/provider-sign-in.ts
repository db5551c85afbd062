// Sign-in by the organisation's OpenID provider: a browser sent there with a state, nonce and PKCE challenge, back
// with a code redeemed for an ID token; the user it names found (by the subject linked at their first sign-in, or by
// their username), or created as oidc_provisioning says; a session opened that needs no second factor (the factor is
// the provider's) and handed to the console by a one-time code. While it lasts, the provider is asked again every
// oidc_check_seconds with the session's refresh token: one it refuses (a user disabled there) ends at once.

import { JwsRefused } from '../auth/jws.ts';
import type { SecretBox } from '../crypto/box.ts';
import { USERNAME, USERNAME_MAX } from '../domain/users.ts';
import { DomainError } from '../errors/errors.ts';
import { ProviderUnreachable } from '../oidc/fetch.ts';
import type { Identity } from '../oidc/id-token.ts';
import { ProviderRefused, type OidcProvider } from '../oidc/provider.ts';
import type { ProviderSignIns } from '../oidc/sign-ins.ts';
import type { User } from '../store/users.ts';
import { theMaster } from './master.ts';
import { issueSession, type SessionDeps } from './sessions.ts';
import { provisionUser } from './users.ts';
import { actingAs, transact, type Requester } from './write.ts';

/** A provider that cannot be asked about a session for this long has it end. */
export const UNANSWERED_LIMIT_MS = 15 * 60_000;
/** Sessions asked about in one turn of the master's clock, at most. */
const CHECKS_PER_TURN = 20;
/** How long a session lasts when the provider gave no refresh token and did not say how long its access token does. */
const UNVOUCHED_MS = 3600_000;
export const CALLBACK_PATH = '/api/auth/oidc/callback';
/** Asking the provider again is the master's bookkeeping, not a change anyone makes. */
const BOOKKEEPING = theMaster();

/** A finished sign-in's session, held until the console takes it. */
export interface HandedOff {
  secret: string;
  expiresAt: string;
  user: User;
}

export interface ProviderDeps extends SessionDeps {
  box: SecretBox;
  providerSignIns: ProviderSignIns<HandedOff>;
}

/** Why sign-in by the provider cannot be used now, or null. */
export function providerOffReason(app: Pick<ProviderDeps, 'settings'>): string | null {
  if (app.settings.get('oidc_issuer') === '') return 'oidc_issuer is not set';
  if (app.settings.get('oidc_client_id') === '') return 'oidc_client_id is not set';
  if (app.settings.get('public_url') === '') return 'public_url is not set (the provider sends sign-ins back to it)';
  return null;
}

function configured(app: ProviderDeps): { provider: OidcProvider; redirectUri: string } {
  const off = providerOffReason(app);
  if (off) throw new DomainError('conflict', `sign-in by the provider is off: ${off}`);
  if (app.standby)
    throw new DomainError('read_only', `sign in by the provider at the primary: ${app.standby.primary}`, {
      data: { primary: app.standby.primary },
    });
  const secret = app.settings.get('oidc_client_secret');
  const provider = app.providerSignIns.providerFor({
    issuer: app.settings.get('oidc_issuer'),
    clientId: app.settings.get('oidc_client_id'),
    clientSecret: secret === '' ? null : secret,
    scopes: app.settings.get('oidc_scopes'),
  });
  return { provider, redirectUri: `${app.settings.get('public_url')}${CALLBACK_PATH}` };
}

/** Where to send a browser to sign in by the provider. Throws `conflict` while it is off, `unavailable` when down. */
export async function beginProviderSignIn(app: ProviderDeps): Promise<string> {
  const { provider, redirectUri } = configured(app);
  const signIn = app.providerSignIns.start(provider, redirectUri);
  try {
    return await provider.authorizationUrl({ ...signIn, redirectUri });
  } catch (error) {
    throw unreachable(error);
  }
}

function unreachable(error: unknown): Error {
  if (error instanceof ProviderUnreachable)
    return new DomainError('bad_gateway', `the identity provider could not be asked: ${error.message}`);
  return error as Error;
}

/** The username the provider's claims give, as oidc_username_claim says. Throws `unauthorized`. */
function usernameOf(app: ProviderDeps, identity: Identity): string {
  const byEmail = app.settings.get('oidc_username_claim') === 'email';
  if (byEmail && identity.claims.email_verified !== true)
    throw new DomainError('unauthorized', 'the provider has not verified your email, which names you here');
  const name = byEmail ? identity.claims.email : identity.subject;
  if (typeof name !== 'string' || name.length > USERNAME_MAX || !USERNAME.test(name))
    throw new DomainError('unauthorized', "the provider's name for you is not one a username here can be");
  return name;
}

function groupsOf(app: ProviderDeps, identity: Identity): string[] {
  const groups = identity.claims[app.settings.get('oidc_groups_claim')];
  if (typeof groups === 'string') return [groups];
  return Array.isArray(groups) ? groups.filter((group): group is string => typeof group === 'string') : [];
}

/**
 * The user the provider signed in: linked by subject, or found by username (and linked now), or created as
 * oidc_provisioning says. Throws `unauthorized`.
 */
async function userFor(app: ProviderDeps, requester: Requester, issuer: string, identity: Identity): Promise<User> {
  const linked = app.store.identities.userOf(issuer, identity.subject);
  if (linked !== undefined) return app.store.users.find(linked)!;
  const username = usernameOf(app, identity);
  const groups = groupsOf(app, identity);
  return transact(app, requester, (change) => {
    let user: User | undefined = app.store.users.findWithHash(username);
    if (user && app.store.identities.subjectOf(user.id))
      throw new DomainError('unauthorized', `the user ${username} here is another of the provider's users`);
    if (!user) {
      const entry = app.settings
        .get('oidc_provisioning')
        .find((candidate) => candidate.group === '*' || groups.includes(candidate.group));
      if (!entry)
        throw new DomainError(
          'unauthorized',
          `there is no user ${username} here, and none of your groups is one oidc_provisioning creates users for`,
        );
      user = provisionUser(app, change, {
        username,
        role: entry.role,
        plan_id: entry.plan_id,
        scopes: entry.scopes,
        disabled: false,
        expires_at: null,
      });
    }
    app.store.identities.link(user.id, issuer, identity.subject, app.timestamp());
    change.audit({ resource: 'user', resource_id: user.id, changes: { after: { identity: issuer } } });
    return user;
  });
}

/**
 * Finishes a sign-in the provider sent back (`state` and `code`, or its `error`): the session opened, and the one-time
 * code the console takes it with. Throws `unauthorized` saying why not (audited as a failed sign-in), `bad_gateway`
 * when the provider cannot be asked.
 */
export async function finishProviderSignIn(
  app: ProviderDeps,
  requester: Requester,
  back: { state?: string; code?: string; error?: string },
  ip: string,
  userAgent: string | null,
): Promise<string> {
  const started = back.state === undefined ? undefined : app.providerSignIns.take(back.state);
  if (!started) throw new DomainError('unauthorized', 'this sign-in is unknown, used, or too old: start again');
  let tried: string | null = null;
  try {
    if (back.error !== undefined) throw new DomainError('unauthorized', `the provider said ${back.error.slice(0, 64)}`);
    if (back.code === undefined) throw new DomainError('unauthorized', 'the provider sent no code back');
    const { provider, redirectUri } = configured(app);
    if (provider !== started.provider || redirectUri !== started.redirectUri)
      throw new DomainError('unauthorized', "the provider's settings changed during this sign-in: start again");
    let grant;
    try {
      grant = await provider.redeem(back.code, started.verifier, redirectUri, started.nonce);
    } catch (error) {
      if (error instanceof ProviderRefused || error instanceof JwsRefused)
        throw new DomainError('unauthorized', `the provider's answer was refused: ${error.message}`);
      throw unreachable(error);
    }
    tried = grant.identity.subject;
    const user = await userFor(app, requester, provider.config.issuer, grant.identity);
    tried = user.username;
    if (user.disabled) throw new DomainError('unauthorized', `the user ${user.username} is disabled here`);
    if (user.expires_at !== null && Date.parse(user.expires_at) <= app.now())
      throw new DomainError('unauthorized', `your account expired at ${user.expires_at}: ask an operator to extend it`);
    const lifeMs = app.settings.get('session_ttl_seconds') * 1000;
    const vouchedMs = grant.refreshToken ? lifeMs : (grant.accessExpiresAt ?? app.now() + UNVOUCHED_MS) - app.now();
    const expiresAt = app.timestamp(Math.max(0, Math.min(lifeMs, vouchedMs)));
    const { secret } = await issueSession(
      app,
      requester,
      user,
      { scopes: user.scopes, expiresAt, ip, userAgent, signedInWith: 'oidc' },
      (tokenId) => {
        if (grant.refreshToken === null) return;
        const next = app.now() + app.settings.get('oidc_check_seconds') * 1000;
        app.store.identities.opened(tokenId, app.box.seal(grant.refreshToken), app.timestamp(), next);
      },
    );
    return app.providerSignIns.handOff({ secret, expiresAt, user });
  } catch (error) {
    // A standby writes nothing: its refusals are not audited (as a password's are not there).
    if (error instanceof DomainError && error.code === 'unauthorized' && !app.standby) {
      app.metrics.loginFailures.inc();
      const actor = { ...requester.actor, actor_name: (tried ?? 'oidc').replace(/[^\x20-\x7e]/g, '?').slice(0, 64) };
      await transact(app, actingAs(requester, actor), (change) =>
        change.failed({ resource: 'session', resource_id: null }),
      );
    }
    throw error;
  }
}

/** The session a finished sign-in handed off with `code`, taken (once). Throws `unauthorized`. */
export function takeHandedOff(app: ProviderDeps, code: string): HandedOff {
  const session = app.providerSignIns.takeHandOff(code);
  if (!session) throw new DomainError('unauthorized', 'this sign-in code is unknown, used, or too old: sign in again');
  return session;
}

/** Ends a session the provider refused, or could not be asked about for too long, saying why in the audit log. */
function endRefused(app: ProviderDeps, tokenId: number, why: string): Promise<void> {
  return transact(app, theMaster('session.revoke'), (change) => {
    app.store.tokens.delete(tokenId);
    change.audit({ resource: 'session', resource_id: tokenId, changes: { after: { ended: why } } });
  });
}

/**
 * One turn of asking the provider about its sessions that are due (a few at a time, one after another, each with
 * its refresh token): one it refuses ends; one it cannot answer is asked again, and ends once it has not been
 * answered for UNANSWERED_LIMIT_MS. Runs once at a time.
 */
export async function checkProviderSessions(app: ProviderDeps): Promise<void> {
  if (!app.providerSignIns.beginChecks()) return;
  try {
    const due = app.store.identities.due(app.now(), app.timestamp(), CHECKS_PER_TURN);
    for (const session of due) {
      const next = app.now() + app.settings.get('oidc_check_seconds') * 1000;
      let rotated: Buffer | null;
      try {
        const { provider } = configured(app);
        const subject = app.store.identities.subjectOf(session.user_id);
        const grant = await provider.refresh(app.box.open(session.refresh_token));
        if (!subject || subject.issuer !== provider.config.issuer)
          throw new ProviderRefused('the user is no longer linked to this provider');
        if (grant.identity && grant.identity.subject !== subject.subject)
          throw new ProviderRefused('the provider names another user now');
        rotated = grant.refreshToken === null ? null : app.box.seal(grant.refreshToken);
      } catch (error) {
        if (error instanceof ProviderRefused || error instanceof JwsRefused) {
          await endRefused(app, session.token_id, `the identity provider refused it: ${error.message}`);
          continue;
        }
        const since = session.unanswered_since === null ? app.now() : Date.parse(session.unanswered_since);
        if (app.now() - since >= UNANSWERED_LIMIT_MS)
          await endRefused(app, session.token_id, 'the identity provider did not answer for it for 15 minutes');
        else
          await transact(app, BOOKKEEPING, () =>
            app.store.identities.unanswered(session.token_id, app.timestamp(), next),
          );
        continue;
      }
      // Outside the try: our own write failing (writes busy past write_wait_seconds) is no silence of the provider's.
      await transact(app, BOOKKEEPING, () =>
        app.store.identities.checked(session.token_id, rotated, app.timestamp(), next),
      );
    }
  } finally {
    app.providerSignIns.endChecks();
  }
}
