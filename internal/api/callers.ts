// How a bearer secret becomes a caller: tokens and sessions looked up by their hash, cached until anything that could
// revoke or narrow one changes, and a standby's own login sessions, looked up at each request.

import { intersect } from '../auth/scopes.ts';
import { hashSecret, secretKind } from '../auth/secrets.ts';
import type { StandbySessions } from '../auth/standby-sessions.ts';
import { DomainError } from '../errors/errors.ts';
import type { Clock } from '../runtime/clock.ts';
import { formatTime } from '../schema/schema.ts';
import type { Store } from '../store/store.ts';
import type { Principal } from '../auth/principal.ts';

interface VerifiedCredential {
  principal: Principal;
  expiresAtMs: number | null;
  /** When the user's account ends (a tenant's), and the credential with it. */
  accountEndsAt: string | null;
  lastUsedMs: number | null;
}

/** Whether an account that ends at `endsAt` (null: never) has ended at `nowMs`. */
function ended(endsAt: string | null, nowMs: number): boolean {
  return endsAt !== null && Date.parse(endsAt) <= nowMs;
}

const MAX_VERIFIED = 10_000;

const refused = () => new DomainError('unauthorized', 'the token is unknown or revoked', { invalidToken: true });

export interface CallersDeps {
  store: Store;
  sessions: StandbySessions;
  clock: Clock;
  /** Whether this master writes (a primary): a standby records no last use, and serves its own sessions. */
  writes: () => boolean;
}

export class Callers {
  private readonly verified = new Map<string, VerifiedCredential>();
  private verifiedGeneration = -1;

  constructor(private readonly deps: CallersDeps) {}

  /**
   * Turns an Authorization header into a caller. Throws `unauthorized`. Verified credentials
   * are cached by secret until anything that could revoke or narrow one changes (see
   * Store.credentials), so most requests skip the lookup and the hash.
   */
  authenticate(header: string | undefined): Principal {
    const match = header && /^Bearer +([^ ]+) *$/i.exec(header);
    if (!match) throw new DomainError('unauthorized', 'send Authorization: Bearer <token>');
    const secret = match[1]!;
    const generation = this.deps.store.credentials.value;
    if (this.verifiedGeneration !== generation) {
      this.verified.clear();
      this.verifiedGeneration = generation;
    }
    const entry = this.verified.get(secret) ?? this.lookup(secret);
    if (entry === null) return this.standbySession(secret);
    const now = this.deps.clock.now();
    if (entry.expiresAtMs !== null && entry.expiresAtMs <= now) {
      const detail = `the token expired at ${entry.principal.expiresAt}`;
      throw new DomainError('unauthorized', detail, { invalidToken: true });
    }
    if (ended(entry.accountEndsAt, now)) {
      const detail = `the account expired at ${entry.accountEndsAt}: ask an operator to extend it`;
      throw new DomainError('unauthorized', detail, { invalidToken: true });
    }
    // Last use is recorded at most once a minute so that reads do not all become writes; a standby writes nothing.
    if (this.deps.writes() && (entry.lastUsedMs === null || entry.lastUsedMs < now - 60_000)) {
      const at = this.deps.clock.timestamp();
      this.deps.store.db.whenWritable(() =>
        this.deps.store.write(() => this.deps.store.tokens.touch(entry.principal.tokenId, at)),
      );
      entry.lastUsedMs = now;
    }
    return entry.principal;
  }

  /**
   * The caller `principal` as it stands now, for what outlives the request that authenticated it (an event stream):
   * null once its token is revoked, expired or logged out, or its user disabled or deleted; else with the scopes it
   * holds now (its user's may have narrowed).
   */
  reauthorize(principal: Principal): Principal | null {
    if (principal.tokenId < 0) return this.standbyPrincipal(principal.tokenId);
    const credential = this.deps.store.tokens.findCredential(principal.tokenId, principal.kind);
    if (!credential || credential.user_disabled || credential.created_by.id !== principal.userId) return null;
    if (credential.expires_at !== null && Date.parse(credential.expires_at) <= this.deps.clock.now()) return null;
    if (ended(credential.user_expires_at, this.deps.clock.now())) return null;
    return {
      ...principal,
      role: credential.user_role,
      planId: credential.user_plan_id,
      scopes: intersect(credential.user_scopes, credential.scopes),
      expiresAt: credential.expires_at,
    };
  }

  /** The credential `secret` is, cached; null for a session a standby may hold (see standbySession). */
  private lookup(secret: string): VerifiedCredential | null {
    const kind = secretKind(secret);
    if (kind !== 'api' && kind !== 'session') throw refused();
    const credential = this.deps.store.tokens.findBySecretHash(hashSecret(secret));
    if (!credential && kind === 'session' && !this.deps.writes()) return null;
    if (!credential || credential.kind !== kind || credential.user_disabled) throw refused();
    const entry: VerifiedCredential = {
      principal: {
        tokenId: credential.id,
        kind: credential.kind,
        tokenName: credential.name,
        userId: credential.created_by.id,
        username: credential.created_by.username,
        role: credential.user_role,
        planId: credential.user_plan_id,
        scopes: intersect(credential.user_scopes, credential.scopes),
        expiresAt: credential.expires_at,
      },
      expiresAtMs: credential.expires_at === null ? null : Date.parse(credential.expires_at),
      accountEndsAt: credential.user_expires_at,
      lastUsedMs: credential.last_used_at === null ? null : Date.parse(credential.last_used_at),
    };
    if (this.verified.size >= MAX_VERIFIED) this.verified.clear();
    this.verified.set(secret, entry);
    return entry;
  }

  /**
   * The caller of a standby's own login session (see StandbySessions), looked up at each request rather than cached:
   * one logged out, or whose user the primary disabled or gave a new password, is refused at once. Throws
   * `unauthorized`.
   */
  private standbySession(secret: string): Principal {
    const session = this.deps.sessions.find(secret);
    const principal = session && this.standbyPrincipal(session.id);
    if (!principal) throw refused();
    return principal;
  }

  private standbyPrincipal(id: number): Principal | null {
    const session = this.deps.sessions.get(id);
    if (!session || session.expiresAtMs <= this.deps.clock.now()) return null;
    const user = this.deps.store.users.findByIdWithHash(session.userId);
    // A password changed at the primary ends the user's other sessions there, and every one here.
    if (!user || user.disabled || user.password_hash !== session.passwordHash) return null;
    if (ended(user.expires_at, this.deps.clock.now())) return null;
    return {
      tokenId: session.id,
      kind: 'session',
      tokenName: 'login',
      userId: user.id,
      username: user.username,
      role: user.role,
      planId: user.plan_id,
      scopes: user.scopes,
      expiresAt: formatTime(session.expiresAtMs),
    };
  }
}
