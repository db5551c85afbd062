// A user's second factor: TOTP enrolled from their own session (a secret, then a code of it to confirm, which answers
// ten recovery codes once), asked at each login with the password, and turned off with the password (or by an
// operator, for a lost device). A code is taken once; on a standby, whose copy takes no write, once there too.

import {
  base32,
  matchingStep,
  newRecoveryCodes,
  newTotpSecret,
  otpauthUri,
  recoveryForm,
  TOTP_DIGITS,
} from '../auth/totp.ts';
import { hashSecret, verifyPassword } from '../auth/secrets.ts';
import { DomainError, notFound, validationFailed } from '../errors/errors.ts';
import type { TotpFactor } from '../store/totp.ts';
import { checkIfMatch } from './etag.ts';
import { theMaster } from './master.ts';
import { beginAttempt, type Own, type SessionDeps } from './sessions.ts';
import { transact, type Change, type Requester } from './write.ts';

/** What authenticator apps show the account under. */
const ISSUER = 'portplane';
/** A code or recovery code taken at a login is the master's bookkeeping, not a change anyone makes. */
const BOOKKEEPING = theMaster();

function secretOf(app: SessionDeps, factor: TotpFactor): Buffer {
  return Buffer.from(app.box.open(factor.secret), 'hex');
}

/**
 * Starts enrolling a TOTP secret for the caller (one being enrolled is replaced): its base32 and an otpauth:// URI
 * for an authenticator app, shown only here. Throws `conflict` while one is confirmed (turn it off first).
 */
export async function beginTotp(
  app: SessionDeps,
  requester: Requester,
  own: Own,
): Promise<{ secret: string; otpauth_uri: string }> {
  const secret = newTotpSecret();
  await transact(app, requester, (change) => {
    if (!app.store.totp.enrol(own.userId, app.box.seal(secret.toString('hex')), app.timestamp()))
      throw new DomainError('conflict', 'a second factor is on already: turn it off (DELETE /api/auth/totp) first');
    change.audit({ resource: 'user', resource_id: own.userId, changes: { after: { second_factor: 'enrolling' } } });
  });
  return { secret: base32(secret), otpauth_uri: otpauthUri(secret, ISSUER, own.username) };
}

/**
 * Confirms the secret being enrolled with a code of it: from now the caller's logins need a code. Answers the ten
 * recovery codes, shown only here (kept hashed). Throws `conflict` with none being enrolled, `validation_failed` for
 * a code that is not the current one (counted as the user's failed logins are).
 */
export async function confirmTotp(
  app: SessionDeps,
  requester: Requester,
  own: Own,
  ip: string,
  code: string,
): Promise<string[]> {
  const factor = app.store.totp.find(own.userId);
  if (!factor || factor.confirmed_at !== null)
    throw new DomainError('conflict', 'no second factor is being enrolled: POST /api/auth/totp first');
  const attempt = beginAttempt(app, own.username, ip, 'wrong codes');
  const step = matchingStep(secretOf(app, factor), code, app.now(), null);
  if (step === null)
    throw validationFailed([{ pointer: '#/code', detail: `is not the current ${TOTP_DIGITS}-digit code of it` }]);
  attempt.succeeded();
  const codes = newRecoveryCodes();
  const hashes = codes.map((recovery) => hashSecret(recoveryForm(recovery)).toString('hex'));
  await transact(app, requester, (change) => {
    if (!app.store.totp.confirm(own.userId, step, hashes, app.timestamp()))
      throw new DomainError('conflict', 'the second factor changed meanwhile: start again');
    change.audit({ resource: 'user', resource_id: own.userId, changes: { after: { second_factor: 'totp' } } });
  });
  return codes;
}

/**
 * Turns the caller's second factor off with their password: a stolen session alone cannot, nor guess it faster than
 * a login may (wrong ones count as the user's failed logins, and are throttled as they are).
 */
export async function removeOwnTotp(
  app: SessionDeps,
  requester: Requester,
  own: Own,
  ip: string,
  password: string,
): Promise<void> {
  const user = app.store.users.findWithHash(own.username);
  if (!user) throw new DomainError('unauthorized', 'the user of this token no longer exists');
  const attempt = beginAttempt(app, user.username, ip, 'wrong passwords');
  let matches: boolean;
  try {
    matches = await verifyPassword(password, user.password_hash);
  } catch (error) {
    attempt.abandoned();
    throw error;
  }
  if (!matches) {
    await transact(app, requester, (change) => change.failed({ resource: 'user', resource_id: user.id }));
    throw validationFailed([{ pointer: '#/password', detail: 'is not the password of this user' }]);
  }
  attempt.succeeded();
  await transact(app, requester, (change) => removeTotp(app, change, user.id));
}

/**
 * Inside a write: user `userId` signs in with their password alone again. Throws `precondition_failed` for an
 * If-Match that is not the user's version, `not_found` without a factor.
 */
export function removeTotp(app: Pick<SessionDeps, 'store'>, change: Change, userId: number, ifMatch?: string): void {
  const user = app.store.users.find(userId);
  if (!user) throw notFound('user', userId);
  checkIfMatch(ifMatch, user.version);
  if (!app.store.totp.remove(userId)) throw notFound('second factor of user', userId);
  change.audit({
    resource: 'user',
    resource_id: userId,
    changes: { before: { second_factor: 'totp' }, after: { second_factor: 'none' } },
  });
}

/**
 * Whether `given` (a code, or a recovery code) is a second factor of user `userId` not taken before, taking it: a
 * code's step, or the recovery code, is used up: which it was; false when it is none; 'none' when the user has no
 * confirmed factor. On a standby a code is
 * taken in its memory, and a recovery code not at all (it would need the primary's write).
 */
export async function takeSecondFactor(
  app: SessionDeps,
  userId: number,
  given: string | undefined,
): Promise<'none' | 'totp' | 'recovery_code' | false> {
  const factor = app.store.totp.find(userId);
  if (!factor || factor.confirmed_at === null) return 'none';
  if (given === undefined || given === '') return false;
  const step = matchingStep(secretOf(app, factor), given.trim(), app.now(), factor.last_step);
  if (step !== null) {
    const taken = app.standby
      ? app.standbySessions.takeStep(userId, step, factor.last_step)
      : await transact(app, BOOKKEEPING, () => app.store.totp.takeStep(userId, step));
    return taken && 'totp';
  }
  if (app.standby || !/^[a-z2-7]{4}(-?[a-z2-7]{4}){3}$/i.test(given.trim())) return false;
  const hash = hashSecret(recoveryForm(given)).toString('hex');
  return (await transact(app, BOOKKEEPING, () => app.store.totp.useRecovery(userId, hash))) && 'recovery_code';
}
