// SQL for sign-in by an OpenID provider: the provider subject each user is, and the sessions the provider opened with
// the refresh token (sealed by the caller) they are checked again with. A session's row goes with its token.

import type { Database } from './database.ts';

/** A session the provider opened, due to be asked about again. */
export interface ProviderSession {
  token_id: number;
  user_id: number;
  /** Sealed. */
  refresh_token: Uint8Array;
  unanswered_since: string | null;
}

export class IdentityStore {
  private readonly userStmt;
  private readonly linkStmt;
  private readonly subjectStmt;
  private readonly openStmt;
  private readonly dueStmt;
  private readonly checkedStmt;
  private readonly unansweredStmt;

  constructor(db: Database) {
    this.userStmt = db.prepare('SELECT user_id FROM user_identities WHERE issuer = ? AND subject = ?');
    this.subjectStmt = db.prepare('SELECT issuer, subject FROM user_identities WHERE user_id = ?');
    this.linkStmt = db.prepare(`INSERT INTO user_identities (user_id, issuer, subject, created_at)
      VALUES (:user_id, :issuer, :subject, :at)`);
    this.openStmt = db.prepare(`INSERT INTO provider_sessions (token_id, refresh_token, checked_at, next_check_ms)
      VALUES (:token_id, :refresh_token, :at, :next)`);
    this.dueStmt = db.prepare(`SELECT p.token_id, t.user_id, p.refresh_token, p.unanswered_since
      FROM provider_sessions p JOIN tokens t ON t.id = p.token_id
      WHERE p.next_check_ms <= :now AND (t.expires_at IS NULL OR t.expires_at > :at)
      ORDER BY p.next_check_ms LIMIT :limit`);
    this.checkedStmt = db.prepare(`UPDATE provider_sessions
      SET refresh_token = coalesce(:refresh_token, refresh_token), checked_at = :at, next_check_ms = :next,
        unanswered_since = NULL
      WHERE token_id = :token_id`);
    this.unansweredStmt = db.prepare(`UPDATE provider_sessions
      SET next_check_ms = :next, unanswered_since = coalesce(unanswered_since, :at) WHERE token_id = :token_id`);
  }

  /** The user the provider's `subject` is, if linked. */
  userOf(issuer: string, subject: string): number | undefined {
    return (this.userStmt.get(issuer, subject) as { user_id: number } | undefined)?.user_id;
  }

  /** Who user `userId` is at a provider, if linked. */
  subjectOf(userId: number): { issuer: string; subject: string } | undefined {
    return this.subjectStmt.get(userId) as { issuer: string; subject: string } | undefined;
  }

  /** Inside a write: user `userId` is `subject` at `issuer` from now on. */
  link(userId: number, issuer: string, subject: string, at: string): void {
    this.linkStmt.run({ user_id: userId, issuer, subject, at });
  }

  /** Inside a write: session `tokenId` was opened by the provider, to be asked about again at `nextMs`. */
  opened(tokenId: number, sealedRefreshToken: Uint8Array, at: string, nextMs: number): void {
    this.openStmt.run({ token_id: tokenId, refresh_token: sealedRefreshToken, at, next: nextMs });
  }

  /** Sessions due to be asked about at `nowMs` (not expired at `at`), the longest waiting first, at most `limit`. */
  due(nowMs: number, at: string, limit: number): ProviderSession[] {
    return this.dueStmt.all({ now: nowMs, at, limit }) as unknown as ProviderSession[];
  }

  /** Inside a write: the provider said session `tokenId` goes on (with a new refresh token, if it rotated it). */
  checked(tokenId: number, sealedRefreshToken: Uint8Array | null, at: string, nextMs: number): void {
    this.checkedStmt.run({ token_id: tokenId, refresh_token: sealedRefreshToken, at, next: nextMs });
  }

  /** Inside a write: the provider could not be asked about session `tokenId`; asked again at `nextMs`. */
  unanswered(tokenId: number, at: string, nextMs: number): void {
    this.unansweredStmt.run({ token_id: tokenId, at, next: nextMs });
  }
}
