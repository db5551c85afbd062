// Passkeys: a user registers WebAuthn credentials from their own session (a challenge, then the browser's answer),
// names and removes them, and signs in with one instead of a password: no second factor asked (user verification
// is one). The relying party is public_url: its origin, and its host as the RP id, which must be a name.

import { isIP } from 'node:net';
import { Challenges } from '../auth/challenges.ts';
import {
  COSE_ALGORITHMS,
  PasskeyRefused,
  verifyAssertion,
  verifyRegistration,
  type RelyingParty,
} from '../auth/webauthn.ts';
import { DomainError, notFound, validationFailed } from '../errors/errors.ts';
import type { Passkey } from '../store/passkeys.ts';
import { checkIfMatch } from './etag.ts';
import { theMaster } from './master.ts';
import { beginAttempt, issueSession, type Own, type SessionDeps } from './sessions.ts';
import { actingAs, transact, type Requester } from './write.ts';

/** The most passkeys one user keeps. */
export const MAX_PASSKEYS = 20;
/** How long a browser is told it has to answer. */
const TIMEOUT_MS = 120_000;
/** A sign-in's counter kept is the master's bookkeeping, not a change anyone makes. */
const BOOKKEEPING = theMaster();

export interface PasskeyDeps extends SessionDeps {
  challenges: Challenges;
}

/** Why passkeys cannot be used now, or null. */
export function passkeysOffReason(app: Pick<SessionDeps, 'settings'>): string | null {
  const url = app.settings.get('public_url');
  if (url === '') return 'public_url is not set (passkeys are bound to the address people open the console at)';
  if (isIP(new URL(url).hostname.replace(/^\[|\]$/g, '')) !== 0)
    return 'public_url is an IP address, and WebAuthn binds passkeys to a name only';
  return null;
}

function relyingParty(app: PasskeyDeps): RelyingParty {
  const off = passkeysOffReason(app);
  if (off) throw new DomainError('conflict', `passkeys are off: ${off}`);
  const url = new URL(app.settings.get('public_url'));
  return { id: url.hostname, origin: url.origin };
}

function decoded(text: string, pointer: string): Buffer {
  if (!/^[A-Za-z0-9_-]*$/.test(text)) throw validationFailed([{ pointer, detail: 'must be base64url' }]);
  return Buffer.from(text, 'base64url');
}

/** What navigator.credentials.create is given (PublicKeyCredentialCreationOptions, binary parts in base64url). */
export function registrationOptions(app: PasskeyDeps, own: Own) {
  const rp = relyingParty(app);
  return {
    challenge: app.challenges.issue(`register:${own.userId}`),
    rp: { id: rp.id, name: 'portplane' },
    user: {
      id: Buffer.from(String(own.userId)).toString('base64url'),
      name: own.username,
      displayName: own.username,
    },
    pubKeyCredParams: Object.values(COSE_ALGORITHMS).map((alg) => ({ type: 'public-key', alg })),
    timeout: TIMEOUT_MS,
    attestation: 'none',
    authenticatorSelection: { residentKey: 'required', userVerification: 'required' },
    excludeCredentials: app.store.passkeys
      .credentialsOf(own.userId)
      .map((id) => ({ type: 'public-key', id: Buffer.from(id).toString('base64url') })),
  };
}

/**
 * Keeps the passkey a browser registered in answer to one of the caller's challenges. Throws `validation_failed`
 * (why it was refused), `conflict` (passkeys off, or MAX_PASSKEYS kept already, or the credential kept already).
 */
export async function registerPasskey(
  app: PasskeyDeps,
  requester: Requester,
  own: Own,
  input: { name: string; clientDataJSON: string; attestationObject: string },
): Promise<Passkey> {
  const rp = relyingParty(app);
  const clientDataJSON = decoded(input.clientDataJSON, '#/credential/response/clientDataJSON');
  const attestationObject = decoded(input.attestationObject, '#/credential/response/attestationObject');
  let challenge: string | undefined;
  try {
    challenge = JSON.parse(clientDataJSON.toString('utf8')).challenge;
  } catch {
    // verifyRegistration says why.
  }
  if (typeof challenge !== 'string' || !app.challenges.take(challenge, `register:${own.userId}`))
    throw validationFailed([
      { pointer: '#/credential', detail: 'answers no challenge of yours (asked within 5 minutes)' },
    ]);
  let credential;
  try {
    credential = verifyRegistration({ clientDataJSON, attestationObject }, challenge, rp);
  } catch (error) {
    if (!(error instanceof PasskeyRefused)) throw error;
    throw validationFailed([{ pointer: '#/credential', detail: `is refused: ${error.message}` }]);
  }
  return transact(app, requester, (change) => {
    if (app.store.passkeys.countOf(own.userId) >= MAX_PASSKEYS)
      throw new DomainError('conflict', `a user keeps at most ${MAX_PASSKEYS} passkeys: remove one first`);
    const passkey = app.store.passkeys.insert(own.userId, credential, input.name, app.timestamp());
    if (!passkey) throw new DomainError('conflict', 'this passkey is registered already');
    change.audit({ resource: 'passkey', resource_id: passkey.id, changes: { after: { name: passkey.name } } });
    return passkey;
  });
}

export function ownPasskeys(app: PasskeyDeps, own: Own): Passkey[] {
  return app.store.passkeys.listOf(own.userId);
}

/** Renames one of the caller's passkeys. Throws `not_found`, `precondition_failed`. */
export function renamePasskey(
  app: PasskeyDeps,
  requester: Requester,
  own: Own,
  id: number,
  name: string,
  ifMatch?: string,
): Promise<Passkey> {
  return transact(app, requester, (change) => {
    const current = app.store.passkeys.find(id, own.userId);
    if (!current) throw notFound('passkey', id);
    checkIfMatch(ifMatch, current.version);
    const renamed = app.store.passkeys.rename(id, own.userId, name)!;
    change.audit({
      resource: 'passkey',
      resource_id: id,
      changes: { before: { name: current.name }, after: { name } },
    });
    return renamed;
  });
}

/** Removes one of the caller's passkeys. Throws `not_found`, `precondition_failed`. */
export function removePasskey(app: PasskeyDeps, requester: Requester, own: Own, id: number, ifMatch?: string) {
  return transact(app, requester, (change) => {
    const current = app.store.passkeys.find(id, own.userId);
    if (!current) throw notFound('passkey', id);
    checkIfMatch(ifMatch, current.version);
    app.store.passkeys.remove(id, own.userId);
    change.audit({ resource: 'passkey', resource_id: id, changes: { before: { name: current.name } } });
  });
}

/** A user's passkeys, for an operator. Throws `not_found` for no such user. */
export function userPasskeys(app: PasskeyDeps, userId: number): Passkey[] {
  if (!app.store.users.find(userId)) throw notFound('user', userId);
  return app.store.passkeys.listOf(userId);
}

/**
 * Removes every passkey of user `userId` (an operator's act: a lost or stolen device); how many. Throws `not_found`,
 * `precondition_failed` for an If-Match that is not the user's ETag.
 */
export function removeUserPasskeys(app: PasskeyDeps, requester: Requester, userId: number, ifMatch?: string) {
  return transact(app, requester, (change) => {
    const user = app.store.users.find(userId);
    if (!user) throw notFound('user', userId);
    checkIfMatch(ifMatch, user.version);
    const removed = app.store.passkeys.removeAllOf(userId);
    change.audit({ resource: 'user', resource_id: userId, changes: { after: { passkeys_removed: removed } } });
    return removed.length;
  });
}

/** What navigator.credentials.get is given to sign in (any passkey of this site: the authenticator offers them). */
export function signInOptions(app: PasskeyDeps) {
  const rp = relyingParty(app);
  return { challenge: app.challenges.issue('sign-in'), rpId: rp.id, timeout: TIMEOUT_MS, userVerification: 'required' };
}

/**
 * Opens a session with a passkey's assertion. Throws `unauthorized` (audited as a failed login, throttled as
 * those of its user are), `conflict` while passkeys are off.
 */
export async function signInWithPasskey(
  app: PasskeyDeps,
  requester: Requester,
  input: { id: string; clientDataJSON: string; authenticatorData: string; signature: string; userHandle?: string },
  ip: string,
  userAgent: string | null,
) {
  const rp = relyingParty(app);
  const passkey = app.store.passkeys.byCredential(decoded(input.id, '#/credential/id'));
  const user = passkey && app.store.users.find(passkey.user_id);
  const attempt = beginAttempt(app, user?.username ?? '(unknown passkey)', ip, 'failed sign-ins');
  const refuse = async (why: string) => {
    app.metrics.loginFailures.inc();
    const tried = { ...requester.actor, actor_name: user?.username ?? '(unknown passkey)' };
    if (!app.standby)
      await transact(app, actingAs(requester, tried), (change) =>
        change.failed({ resource: 'session', resource_id: null }),
      );
    return new DomainError('unauthorized', why);
  };
  const clientDataJSON = decoded(input.clientDataJSON, '#/credential/response/clientDataJSON');
  let challenge: unknown;
  try {
    challenge = JSON.parse(clientDataJSON.toString('utf8')).challenge;
  } catch {
    challenge = undefined;
  }
  if (typeof challenge !== 'string' || !app.challenges.take(challenge, 'sign-in'))
    throw await refuse('this sign-in answers no challenge of ours (asked within 5 minutes): start again');
  if (!passkey || !user) throw await refuse('this passkey is not registered here (removed, or for another master)');
  if (input.userHandle !== undefined && input.userHandle !== Buffer.from(String(user.id)).toString('base64url'))
    throw await refuse('this passkey names another user');
  const seen = app.standby
    ? Math.max(passkey.sign_count, app.challenges.standbyCount(passkey.id) ?? 0)
    : passkey.sign_count;
  let count: number;
  try {
    count = verifyAssertion(
      {
        clientDataJSON,
        authenticatorData: decoded(input.authenticatorData, '#/credential/response/authenticatorData'),
        signature: decoded(input.signature, '#/credential/response/signature'),
      },
      challenge,
      rp,
      { publicKey: passkey.public_key, algorithm: passkey.algorithm, signCount: seen },
    );
  } catch (error) {
    if (!(error instanceof PasskeyRefused)) throw error;
    throw await refuse(`this passkey's answer is refused: ${error.message}`);
  }
  if (user.disabled) throw await refuse('the user is disabled');
  if (user.expires_at !== null && Date.parse(user.expires_at) <= app.now())
    throw await refuse(`your account expired at ${user.expires_at}: ask an operator to extend it`);
  if (app.standby) app.challenges.setStandbyCount(passkey.id, count);
  else if (!(await transact(app, BOOKKEEPING, () => app.store.passkeys.used(passkey.id, count, app.timestamp()))))
    throw await refuse('another sign-in with this passkey showed this counter already: a cloned authenticator?');
  attempt.succeeded();
  const lifeMs = app.settings.get('session_ttl_seconds') * 1000;
  const expiresAt = app.timestamp(lifeMs);
  if (app.standby) {
    const hash = app.store.users.findWithHash(user.username)!.password_hash;
    const { secret } = app.standbySessions.open(user.id, hash, app.now() + lifeMs);
    return { secret, expiresAt, user };
  }
  const { secret } = await issueSession(app, requester, user, {
    scopes: user.scopes,
    expiresAt,
    ip,
    userAgent,
    signedInWith: 'passkey',
  });
  return { secret, expiresAt, user };
}
