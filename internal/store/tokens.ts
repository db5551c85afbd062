// SQL for bearer credentials: API tokens and login sessions share one table, told apart
// by `kind`. Only the SHA-256 of a secret is stored.

import type { SortSql, tokenSorts } from '../domain/sorts.ts';
import type { Scope } from '../auth/scopes.ts';
import type { Role, TokenKind } from '../auth/principal.ts';
import type { Database } from './database.ts';
import { FilterBound, FilteredCount, FilteredQuery, KeysetQueries, type SortedPage } from './filters.ts';

/** Each list filter's condition on `tokens` (see FilteredQuery). */
export const TOKEN_FILTERS = { user_id: 't.user_id = :user_id' };

/** What lists of API tokens sort by, as SQL: each key then id. */
export const TOKEN_SORTS: SortSql<typeof tokenSorts> = {
  id: 't.id',
  name: 't.name COLLATE NOCASE',
  created_at: 't.created_at',
};
import { renderedRows, type Rendered } from './rendered.ts';
import type { Generation, JsonPage } from './page.ts';
import { shownToken } from '../auth/principal.ts';

export interface Token {
  id: number;
  kind: TokenKind;
  name: string;
  scopes: Scope[];
  created_at: string;
  expires_at: string | null;
  last_used_at: string | null;
  created_by: { id: number; username: string };
}

/** How a login session was opened: from where, by what, and with which factors. */
export interface SessionOrigin {
  ip: string | null;
  user_agent: string | null;
  /** password, password+totp or password+recovery_code. */
  signed_in_with: string;
}

/** A login session as its user sees it. */
export interface LoginSession extends SessionOrigin {
  id: number;
  created_at: string;
  last_used_at: string | null;
  expires_at: string | null;
}

/** The most login sessions a list shows, newest first (a user's each login makes one, until it expires). */
export const MAX_LISTED_SESSIONS = 200;

/** A token found by its secret, with what is needed to decide whether it still works. */
export interface Credential extends Token {
  user_scopes: Scope[];
  user_disabled: boolean;
  user_role: Role;
  user_plan_id: number | null;
  /** When the user's account ends (a tenant's); the credential stops working then. */
  user_expires_at: string | null;
}

interface Row {
  id: number;
  kind: TokenKind;
  name: string;
  user_id: number;
  username: string;
  scopes: string;
  user_scopes: string;
  user_disabled: number;
  user_role: Role;
  user_plan_id: number | null;
  user_expires_at: string | null;
  created_at: string;
  expires_at: string | null;
  last_used_at: string | null;
}

function toCredential(row: Row): Credential {
  return {
    id: row.id,
    kind: row.kind,
    name: row.name,
    scopes: JSON.parse(row.scopes) as Scope[],
    created_at: row.created_at,
    expires_at: row.expires_at,
    last_used_at: row.last_used_at,
    created_by: { id: row.user_id, username: row.username },
    user_scopes: JSON.parse(row.user_scopes) as Scope[],
    user_disabled: row.user_disabled === 1,
    user_role: row.user_role,
    user_plan_id: row.user_plan_id,
    user_expires_at: row.user_expires_at,
  };
}

function toToken(row: Row): Token {
  const {
    user_scopes: _s,
    user_disabled: _d,
    user_role: _r,
    user_plan_id: _p,
    user_expires_at: _e,
    ...token
  } = toCredential(row);
  return token;
}

const SELECT = `SELECT t.id, t.kind, t.name, t.user_id, u.username, t.scopes, u.scopes AS user_scopes,
    u.disabled AS user_disabled, u.role AS user_role, u.plan_id AS user_plan_id, u.expires_at AS user_expires_at,
    t.created_at, t.expires_at,
    t.last_used_at
  FROM tokens t JOIN users u ON u.id = t.user_id`;

export class TokenStore {
  // The JSON of API tokens read lately (see rendered.ts), for pages. A token shows its owner's username, so a change
  // to any user drops them all.
  private readonly rendered: Rendered;
  private readonly countQuery;
  /** What the filters in use may read (see FilterBound). */
  readonly bound;
  private readonly sortedQueries;
  private readonly pageQuery;
  private readonly insertStmt;
  private readonly bySecret;
  private readonly byId;
  private readonly deleteStmt;
  private readonly deleteForUserStmt;
  private readonly deleteOtherSessionsStmt;
  private readonly touchStmt;
  private readonly describeStmt;
  private readonly sessionsStmt;
  private readonly endSessionStmt;
  private readonly pruneStmt;
  private readonly countStmt;

  constructor(
    db: Database,
    private readonly credentials: Generation,
  ) {
    this.insertStmt = db.prepare(`INSERT INTO tokens (kind, name, user_id, scopes, secret_hash, created_at, expires_at)
      VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id`);
    this.bySecret = db.prepare(`${SELECT} WHERE t.secret_hash = ?`);
    this.byId = db.prepare(`${SELECT} WHERE t.id = ? AND t.kind = ?`);
    this.rendered = renderedRows<Row>(
      db,
      'tokens',
      `${SELECT} WHERE t.id IN (SELECT value FROM json_each(?))`,
      // Tokens have no version: they are made and deleted, never changed (their ETag is a constant).
      (row) => ({ version: 1, json: JSON.stringify(shownToken(toToken(row))) }),
    );
    db.onRowChange('users', () => this.rendered.clear());
    // `+t.kind`: not through the index on kind, which held every API token in expiry order and sorted them all for
    // each page; in id order, a page reads its own rows (and a session's, skipped).
    this.pageQuery = new FilteredQuery(
      db,
      "SELECT t.id FROM tokens t WHERE +t.kind = 'api' AND t.id > :after {filters} ORDER BY t.id LIMIT :limit + 1",
      TOKEN_FILTERS,
    );
    this.bound = new FilterBound(db, 'tokens t', 'tokens', TOKEN_FILTERS);
    this.sortedQueries = new KeysetQueries(
      db,
      { select: 't.id', from: "(SELECT * FROM tokens WHERE kind = 'api') t", id: 't.id' },
      TOKEN_SORTS,
      this.bound,
    );
    this.countQuery = new FilteredCount(
      db,
      "SELECT count(*) AS n FROM tokens t WHERE +t.kind = 'api' {filters}",
      TOKEN_FILTERS,
    );
    this.deleteStmt = db.prepare('DELETE FROM tokens WHERE id = ?');
    this.deleteForUserStmt = db.prepare(
      'DELETE FROM tokens WHERE user_id = ? AND kind IN (SELECT value FROM json_each(?)) RETURNING id',
    );
    this.deleteOtherSessionsStmt = db.prepare(
      "DELETE FROM tokens WHERE user_id = ? AND kind = 'session' AND id IS NOT ? RETURNING id",
    );
    this.touchStmt = db.prepare('UPDATE tokens SET last_used_at = ? WHERE id = ?');
    this.describeStmt = db.prepare(`UPDATE tokens SET ip = :ip, user_agent = :user_agent,
        signed_in_with = :signed_in_with
      WHERE id = :id AND kind = 'session'`);
    this.sessionsStmt = db.prepare(`SELECT id, created_at, last_used_at, expires_at, ip, user_agent, signed_in_with
      FROM tokens WHERE user_id = ? AND kind = 'session' ORDER BY id DESC LIMIT ${MAX_LISTED_SESSIONS}`);
    this.endSessionStmt = db.prepare(
      "DELETE FROM tokens WHERE id = ? AND user_id = ? AND kind = 'session' RETURNING id",
    );
    this.countStmt = db.prepare("SELECT count(*) AS n FROM tokens WHERE kind = 'api'");
    this.pruneStmt = db.prepare('DELETE FROM tokens WHERE expires_at IS NOT NULL AND expires_at <= ? RETURNING id');
  }

  insert(
    input: {
      kind: TokenKind;
      name: string;
      user_id: number;
      scopes: Scope[];
      secret_hash: Buffer;
      expires_at: string | null;
    },
    at: string,
  ): Token {
    const { id } = this.insertStmt.get(
      input.kind,
      input.name,
      input.user_id,
      JSON.stringify(input.scopes),
      input.secret_hash,
      at,
      input.expires_at,
    ) as { id: number };
    return this.find(id, input.kind)!;
  }

  findBySecretHash(hash: Buffer): Credential | undefined {
    const row = this.bySecret.get(hash) as Row | undefined;
    return row && toCredential(row);
  }

  /** A credential by id, with its owner's scopes and state: for re-checking one already verified. */
  findCredential(id: number, kind: TokenKind): Credential | undefined {
    const row = this.byId.get(id, kind) as Row | undefined;
    return row && toCredential(row);
  }

  find(id: number, kind: TokenKind = 'api'): Token | undefined {
    const row = this.byId.get(id, kind) as Row | undefined;
    return row && toToken(row);
  }

  /** A page of API tokens as JSON text: ids from SQLite, their JSON from the cache. */
  page(filter: {
    afterId: number;
    limit: number;
    userId: number | null;
    count?: boolean;
    sorted?: SortedPage;
  }): JsonPage {
    this.bound.check({ user_id: filter.userId });
    const total = filter.count ? this.countQuery.total({ user_id: filter.userId }) : undefined;
    if (filter.sorted) {
      const { ids, lastKey } = this.sortedQueries.ids(filter.sorted, filter.limit, { user_id: filter.userId });
      return { ...this.rendered.pageOf(ids, filter.limit), lastKey, total };
    }
    const ids = (
      this.pageQuery.all({ after: filter.afterId, limit: filter.limit, user_id: filter.userId }) as { id: number }[]
    ).map((row) => row.id);
    return { ...this.rendered.pageOf(ids, filter.limit), total };
  }

  delete(id: number): void {
    this.deleteStmt.run(id);
    this.credentials.bump();
  }

  /** Deletes a user's credentials of the given kinds; returns their ids. */
  deleteForUser(userId: number, kinds: TokenKind[]): number[] {
    this.credentials.bump();
    return (this.deleteForUserStmt.all(userId, JSON.stringify(kinds)) as { id: number }[]).map((row) => row.id);
  }

  /** Ends a user's login sessions but `keepId` (the caller's own, if it is one); returns their ids. */
  endSessionsExcept(userId: number, keepId: number | null): number[] {
    this.credentials.bump();
    return (this.deleteOtherSessionsStmt.all(userId, keepId) as { id: number }[]).map((row) => row.id);
  }

  /** Records where login session `id` was opened from and how it signed in. Call inside the write that made it. */
  describeSession(id: number, opened: SessionOrigin): void {
    this.describeStmt.run({ id, ...opened });
  }

  /** A user's login sessions, newest first (at most MAX_LISTED_SESSIONS). */
  sessionsOf(userId: number): LoginSession[] {
    return this.sessionsStmt.all(userId) as unknown as LoginSession[];
  }

  /** Ends login session `id` if it is user `userId`'s; false otherwise. */
  endSession(userId: number, id: number): boolean {
    const ended = this.endSessionStmt.get(id, userId) !== undefined;
    if (ended) this.credentials.bump();
    return ended;
  }

  touch(id: number, at: string): void {
    this.touchStmt.run(at, id);
  }

  /** How many API tokens exist (sessions are not counted). */
  countApi(): number {
    return (this.countStmt.get() as { n: number }).n;
  }

  /** Deletes expired credentials; returns their ids. */
  pruneExpired(now: string): number[] {
    this.credentials.bump();
    return (this.pruneStmt.all(now) as { id: number }[]).map((row) => row.id);
  }
}
