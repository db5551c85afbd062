// Login sessions' operations: open one with a password, change one's own password, end one's other sessions, close
// one. Failed passwords are throttled per user and per address, and audited as failed.

import { decoyHash, hashPassword, hashSecret, newSecret, NO_PASSWORD, verifyPassword } from '../auth/secrets.ts';
import type { StandbySessions } from '../auth/standby-sessions.ts';
import type { LoginThrottle } from '../auth/throttle.ts';
import { DomainError, notFound, validationFailed } from '../errors/errors.ts';
import type { Actor } from '../store/audit.ts';
import type { LoginSession } from '../store/tokens.ts';

export { MAX_LISTED_SESSIONS } from '../store/tokens.ts';
import type { User } from '../store/users.ts';
import { checkIfMatch } from './etag.ts';
import { takeSecondFactor } from './second-factor.ts';
import { TOKEN_VERSION } from './tokens.ts';
import { actingAs, transact, type Committer, type Requester } from './write.ts';

/** What sessions need besides the write path: the record of failed logins. */
export interface SessionDeps extends Committer {
  throttle: LoginThrottle;
  /** The clock, `offsetMs` ahead: when a session opened now expires. */
  timestamp(offsetMs?: number): string;
  now(): number;
  /** What a standby's sessions are held in, its copy taking no write; null on a primary. */
  standby: { primary: string } | null;
  standbySessions: StandbySessions;
}

/** The caller whose own account is changed: its user and the session it calls with. */
export interface Own {
  userId: number;
  username: string;
  tokenId: number;
}

/** A client's User-Agent as kept for its user to read: printable ASCII, at most 200 characters. */
function sanitizeAgent(agent: string): string {
  return agent.replace(/[^\x20-\x7e]/g, '?').slice(0, 200);
}

function sanitizeName(name: string): string {
  return name.replace(/[^\x20-\x7e]/g, '?').slice(0, 64);
}

/** Throws `rate_limited` (`what` says for what) while `username` or `ip` has failed too often lately. */
export function beginAttempt(app: SessionDeps, username: string, ip: string, what: string) {
  const attempt = app.throttle.begin(username, ip, {
    maxPerUser: app.settings.get('login_max_failures'),
    maxPerAddress: app.settings.get('login_max_failures_per_address'),
    windowMs: app.settings.get('login_window_seconds') * 1000,
  });
  if (typeof attempt === 'number')
    throw new DomainError('rate_limited', `too many ${what}; wait before trying again`, {
      retryAfterSeconds: attempt / 1000,
    });
  return attempt;
}

/**
 * Opens a login session for `username` with `password`, from `ip`: its secret (which nothing keeps), when it expires
 * and its user. A failure is audited as the name tried (but on a standby, which writes nothing), and throws
 * `unauthorized`; too many, `rate_limited`. A standby holds the session itself (see StandbySessions).
 */
export async function openSession(
  app: SessionDeps,
  requester: Requester,
  credentials: { username: string; password: string; totp?: string },
  ip: string,
  userAgent: string | null = null,
): Promise<{ secret: string; expiresAt: string; user: User }> {
  const allowed = app.settings.get('password_login');
  if (allowed === 'nobody')
    throw new DomainError('unauthorized', 'signing in with a password is off (password_login): sign in another way');
  const attempt = beginAttempt(app, credentials.username, ip, 'failed logins');
  const user = app.store.users.findWithHash(credentials.username);
  const hash = user && user.password_hash !== NO_PASSWORD ? user.password_hash : await decoyHash();
  let matches: boolean;
  try {
    // A user without a password (who signs in by the provider) pays for a hash too: timing tells nothing.
    matches = (await verifyPassword(credentials.password, hash)) && user?.password_hash !== NO_PASSWORD;
  } catch (error) {
    attempt.abandoned();
    throw error;
  }
  const failed = async (why: string) => {
    app.metrics.loginFailures.inc();
    // Recorded as the name that was tried: there may be no user to name.
    const tried = { ...requester.actor, actor_name: sanitizeName(credentials.username) };
    if (!app.standby)
      await transact(app, actingAs(requester, tried), (change) =>
        change.failed({ resource: 'session', resource_id: null }),
      );
    throw new DomainError('unauthorized', why);
  };
  if (!user || !matches || user.disabled) return failed('wrong username or password, or the user is disabled');
  if (allowed === 'operators' && !user.scopes.includes('*')) {
    attempt.succeeded();
    throw new DomainError(
      'unauthorized',
      'signing in with a password is for holders of * only (password_login): sign in by the provider or a passkey',
    );
  }
  if (user.expires_at !== null && Date.parse(user.expires_at) <= app.now()) {
    attempt.succeeded();
    // The password was right: saying why cannot help a guesser, and tells the tenant whom to ask.
    throw new DomainError('unauthorized', `your account expired at ${user.expires_at}: ask an operator to extend it`);
  }
  // The password was right; a user with a second factor needs its code in the same request (each code once).
  const second = await takeSecondFactor(app, user.id, credentials.totp);
  if (second === false && !credentials.totp) {
    attempt.abandoned();
    throw new DomainError(
      'unauthorized',
      'this user signs in with a second factor too: give totp, a code of their authenticator app or a recovery code',
      { data: { second_factor: 'totp' } },
    );
  }
  if (second === false)
    return failed('wrong second factor: not the current code, one used already, nor a recovery code');
  // One the operators require and the user has not enrolled: a session good only for enrolling it (no scope).
  const policy = app.settings.get('totp_required');
  const enrolOnly = second === 'none' && (policy === 2 || (policy === 1 && user.scopes.includes('*')));
  if (enrolOnly && app.standby) {
    attempt.abandoned();
    throw new DomainError('unauthorized', 'a second factor is required of this user: enrol one on the primary first');
  }
  attempt.succeeded();
  const { password_hash: _, ...shown } = user;
  const lifeMs = app.settings.get('session_ttl_seconds') * 1000;
  const expiresAt = app.timestamp(lifeMs);
  if (app.standby) {
    const { secret } = app.standbySessions.open(user.id, user.password_hash, app.now() + lifeMs);
    return { secret, expiresAt, user: shown };
  }
  const { secret } = await issueSession(app, requester, user, {
    scopes: enrolOnly ? [] : user.scopes,
    expiresAt,
    ip,
    userAgent,
    signedInWith: second === 'none' ? 'password' : `password+${second}`,
  });
  return { secret, expiresAt, user: shown };
}

/**
 * Writes a login session of `user` (the one signing in, as the audit says) and its description: its secret, which
 * nothing keeps, and its id. `also` runs inside the same write (what else the session's sign-in keeps).
 */
export async function issueSession(
  app: SessionDeps,
  requester: Requester,
  user: User,
  session: {
    scopes: User['scopes'];
    expiresAt: string;
    ip: string;
    userAgent: string | null;
    signedInWith: string;
  },
  also?: (tokenId: number) => void,
): Promise<{ secret: string; tokenId: number }> {
  const secret = newSecret('session');
  // From here the caller is known: the user who logged in.
  const actor: Actor = { ...requester.actor, actor_type: 'user', actor_id: user.id, actor_name: user.username };
  const tokenId = await transact(app, actingAs(requester, actor), (change) => {
    const token = app.store.tokens.insert(
      {
        kind: 'session',
        name: 'login',
        user_id: user.id,
        scopes: session.scopes,
        secret_hash: hashSecret(secret),
        expires_at: session.expiresAt,
      },
      app.timestamp(),
    );
    app.store.tokens.describeSession(token.id, {
      ip: session.ip || null,
      user_agent: session.userAgent === null ? null : sanitizeAgent(session.userAgent),
      signed_in_with: session.signedInWith,
    });
    also?.(token.id);
    change.audit({
      resource: 'session',
      resource_id: token.id,
      changes: { after: { signed_in_with: session.signedInWith } },
    });
    return token.id;
  });
  return { secret, tokenId };
}

/**
 * The caller's own password, changed with the current one: a stolen session alone cannot lock its user out. Wrong
 * guesses count as failed logins of the user (throttled as they are), and throw `validation_failed`. The user's other
 * login sessions end; returns how many.
 */
export async function replacePassword(
  app: SessionDeps,
  requester: Requester,
  own: Own,
  ip: string,
  passwords: { current: string; next: string },
): Promise<number> {
  const user = app.store.users.findWithHash(own.username);
  if (!user) throw new DomainError('unauthorized', 'the user of this token no longer exists');
  const attempt = beginAttempt(app, user.username, ip, 'wrong passwords');
  let matches: boolean;
  try {
    matches = await verifyPassword(passwords.current, user.password_hash);
  } catch (error) {
    attempt.abandoned();
    throw error;
  }
  if (!matches) {
    await transact(app, requester, (change) => change.failed({ resource: 'user', resource_id: user.id }));
    throw validationFailed([{ pointer: '#/current_password', detail: 'is not the password of this user' }]);
  }
  attempt.succeeded();
  const passwordHash = await hashPassword(passwords.next);
  return transact(app, requester, (change) => {
    app.store.users.setPassword(user.id, passwordHash, app.timestamp());
    const sessions = app.store.tokens.endSessionsExcept(user.id, own.tokenId);
    change.audit({ resource: 'user', resource_id: user.id, changes: { after: { password: passwords.next } } });
    return sessions.length;
  });
}

/** Ends the caller's user's login sessions but the calling one (a lost laptop, a shared screen); returns how many. */
export function endSessionsBut(app: Committer, requester: Requester, own: Own): Promise<number> {
  return transact(app, requester, (change) => {
    const sessions = app.store.tokens.endSessionsExcept(own.userId, own.tokenId);
    change.audit({ resource: 'user', resource_id: own.userId, changes: { after: { sessions_ended: sessions } } });
    return sessions.length;
  });
}

/** Ends the calling login session: a standby's own, or one the primary keeps (refused on a standby: `read_only`). */
export async function closeSession(app: SessionDeps, requester: Requester, own: Own): Promise<void> {
  if (own.tokenId < 0) return app.standbySessions.close(own.tokenId);
  if (app.standby)
    throw new DomainError('read_only', `a session opened on the primary ends there: ${app.standby.primary}`, {
      data: { primary: app.standby.primary },
    });
  await transact(app, requester, (change) => {
    app.store.tokens.delete(own.tokenId);
    change.audit({ resource: 'session', resource_id: own.tokenId });
  });
}

/** The caller's user's login sessions, newest first, the calling one marked. */
export function ownSessions(app: Pick<SessionDeps, 'store'>, own: Own): (LoginSession & { current: boolean })[] {
  return app.store.tokens
    .sessionsOf(own.userId)
    .map((session) => ({ ...session, current: session.id === own.tokenId }));
}

/**
 * Ends login session `id` of the caller's user. Throws `not_found` for one that is not theirs (or is gone),
 * `precondition_failed` for an If-Match that is not a session's ETag (a token's: it never changes).
 */
export function endOwnSession(
  app: Committer,
  requester: Requester,
  own: Own,
  id: number,
  ifMatch?: string,
): Promise<void> {
  return transact(app, requester, (change) => {
    checkIfMatch(ifMatch, TOKEN_VERSION);
    if (!app.store.tokens.endSession(own.userId, id)) throw notFound('session', id);
    change.audit({ resource: 'session', resource_id: id });
  });
}

/** A user's login sessions, for an operator. Throws `not_found` for no such user. */
export function userSessions(app: Pick<SessionDeps, 'store'>, userId: number): LoginSession[] {
  if (!app.store.users.find(userId)) throw notFound('user', userId);
  return app.store.tokens.sessionsOf(userId);
}

/**
 * Ends every login session of user `userId` (an operator's act); returns how many. Throws `not_found`,
 * `precondition_failed` for an If-Match that is not the user's ETag.
 */
export function endUserSessions(
  app: Committer,
  requester: Requester,
  userId: number,
  ifMatch?: string,
): Promise<number> {
  return transact(app, requester, (change) => {
    const user = app.store.users.find(userId);
    if (!user) throw notFound('user', userId);
    checkIfMatch(ifMatch, user.version);
    const ended = app.store.tokens.endSessionsExcept(userId, null);
    change.audit({ resource: 'user', resource_id: userId, changes: { after: { sessions_ended: ended } } });
    return ended.length;
  });
}
