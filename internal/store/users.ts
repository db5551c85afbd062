// SQL for users. Scopes are stored as a JSON array; usernames are unique ignoring case.

import type { Scope } from '../auth/scopes.ts';
import type { Database } from './database.ts';
import { FilteredCount, FilteredQuery, KeysetQueries, type SortedPage } from './filters.ts';
import type { Generation, JsonPage } from './store.ts';
import { renderedRows, type Rendered } from './rendered.ts';
import { unlessTaken } from './errors.ts';

/** Operators manage the fleet as their scopes allow; tenants only what they own, as their plan grants. */
export const roles = ['operator', 'tenant'] as const;
export type Role = (typeof roles)[number];

export interface User {
  id: number;
  username: string;
  role: Role;
  /** The plan a tenant is held to; null: none (a tenant without one is granted nothing). */
  plan_id: number | null;
  scopes: Scope[];
  disabled: boolean;
  version: number;
  created_at: string;
  updated_at: string;
}

export interface UserWithHash extends User {
  password_hash: string;
}

interface Row {
  id: number;
  username: string;
  role: Role;
  plan_id: number | null;
  password_hash: string;
  scopes: string;
  disabled: number;
  version: number;
  created_at: string;
  updated_at: string;
}

function toUser(row: Row): UserWithHash {
  return { ...row, scopes: JSON.parse(row.scopes) as Scope[], disabled: row.disabled === 1 };
}

function withoutHash({ password_hash: _, ...user }: UserWithHash): User {
  return user;
}

export interface UserListFilter {
  afterId: number;
  limit: number;
  q: string | null;
  disabled: boolean | null;
  /** Also count every match (JsonPage.total). */
  count?: boolean;
  /** Another order than by id (then afterId is not used). */
  sorted?: SortedPage;
}

/** What lists of users sort by, as SQL: each key then id. */
export const USER_SORTS = { id: 'id', username: 'username COLLATE NOCASE', created_at: 'created_at' };

const USER_FILTERS = {
  q: 'instr(lower(username), lower(:q)) > 0',
  disabled: 'disabled = :disabled',
};

export class UserStore {
  private readonly byId;
  private readonly byName;
  private readonly namesStmt;
  private readonly ownedStmt;
  private readonly onPlanStmt;
  // The JSON of users read lately (see rendered.ts), for pages.
  private readonly rendered: Rendered;
  private readonly countQuery;
  private readonly sortedQueries;
  private readonly pageQuery;
  private readonly insertStmt;
  private readonly updateStmt;
  private readonly deleteStmt;
  private readonly passwordStmt;
  private readonly countStmt;
  private readonly holdersStmt;

  constructor(
    db: Database,
    private readonly credentials: Generation,
  ) {
    this.byId = db.prepare('SELECT * FROM users WHERE id = ?');
    this.byName = db.prepare('SELECT * FROM users WHERE username = ?');
    this.namesStmt = db.prepare('SELECT id, username FROM users');
    this.ownedStmt = db.prepare(`SELECT (SELECT count(*) FROM rules WHERE owner_id = ?1) AS rules,
      (SELECT count(*) FROM tunnels WHERE owner_id = ?1) AS tunnels`);
    this.rendered = renderedRows<Row>(
      db,
      'users',
      'SELECT * FROM users WHERE id IN (SELECT value FROM json_each(?))',
      (row) => ({ version: row.version, json: JSON.stringify(withoutHash(toUser(row))) }),
    );
    this.pageQuery = new FilteredQuery(
      db,
      'SELECT id FROM users WHERE id > :after {filters} ORDER BY id LIMIT :limit + 1',
      USER_FILTERS,
    );
    this.countQuery = new FilteredCount(db, 'SELECT count(*) AS n FROM users WHERE 1 {filters}', USER_FILTERS);
    this.sortedQueries = new KeysetQueries(db, { select: 'id', from: 'users', id: 'id' }, USER_SORTS, USER_FILTERS);
    this.insertStmt = db.prepare(`INSERT INTO users (username, role, plan_id, password_hash, scopes, disabled,
        created_at, updated_at)
      VALUES (:username, :role, :plan_id, :password_hash, :scopes, :disabled, :at, :at) RETURNING *`);
    this.updateStmt = db.prepare(`UPDATE users SET username = :username, role = :role, plan_id = :plan_id,
        password_hash = coalesce(:password_hash, password_hash), scopes = :scopes, disabled = :disabled,
        version = version + 1, updated_at = :at
      WHERE id = :id RETURNING *`);
    this.onPlanStmt = db.prepare('SELECT count(*) AS n FROM users WHERE plan_id = ?');
    this.passwordStmt = db.prepare(
      'UPDATE users SET password_hash = ?, version = version + 1, updated_at = ? WHERE id = ?',
    );
    this.deleteStmt = db.prepare('DELETE FROM users WHERE id = ?');
    this.countStmt = db.prepare('SELECT count(*) AS n, coalesce(sum(disabled), 0) AS disabled FROM users');
    this.holdersStmt = db.prepare(`SELECT count(*) AS n FROM users
      WHERE disabled = 0 AND id != ? AND EXISTS (SELECT 1 FROM json_each(users.scopes) WHERE value = '*')`);
  }

  find(id: number): User | undefined {
    const row = this.byId.get(id) as Row | undefined;
    return row && withoutHash(toUser(row));
  }

  /** The user `id` with its password hash: for what must notice the password changed. */
  findByIdWithHash(id: number): UserWithHash | undefined {
    const row = this.byId.get(id) as Row | undefined;
    return row && toUser(row);
  }

  /** The id of the user called `username` (as the table compares names: ASCII case folded). */
  idOf(username: string): number | undefined {
    return (this.byName.get(username) as Row | undefined)?.id;
  }

  /** How many rules and tunnels user `id` owns. */
  owned(id: number): { rules: number; tunnels: number } {
    return this.ownedStmt.get(id) as { rules: number; tunnels: number };
  }

  /** Every user's name by id: what an export names owners by. */
  usernames(): Map<number, string> {
    const rows = this.namesStmt.all() as { id: number; username: string }[];
    return new Map(rows.map((row) => [row.id, row.username]));
  }

  findWithHash(username: string): UserWithHash | undefined {
    const row = this.byName.get(username) as Row | undefined;
    return row && toUser(row);
  }

  /** A page of users as JSON text: ids from SQLite, their JSON from the cache. */
  page(filter: UserListFilter): JsonPage {
    const conditions = { q: filter.q, disabled: filter.disabled === null ? null : Number(filter.disabled) };
    if (filter.sorted) {
      const { ids, lastKey } = this.sortedQueries.ids(filter.sorted, filter.limit, conditions);
      const total = filter.count ? this.countQuery.total(conditions) : undefined;
      return { ...this.rendered.pageOf(ids, filter.limit), lastKey, total };
    }
    const ids = (
      this.pageQuery.all({ after: filter.afterId, limit: filter.limit, ...conditions }) as { id: number }[]
    ).map((row) => row.id);
    const total = filter.count ? this.countQuery.total(conditions) : undefined;
    return { ...this.rendered.pageOf(ids, filter.limit), total };
  }

  /** How many users plan `id` holds. */
  onPlan(id: number): number {
    return Number((this.onPlanStmt.get(id) as { n: number }).n);
  }

  /** Throws `conflict` when the username is taken. An operator unless `role` says otherwise. */
  insert(
    input: {
      username: string;
      password_hash: string;
      scopes: Scope[];
      disabled: boolean;
      role?: Role;
      plan_id?: number | null;
    },
    at: string,
  ): User {
    return unlessTaken(
      `the username '${input.username}'`,
      () => this.findWithHash(input.username)?.id,
      () => {
        const row = this.insertStmt.get({
          username: input.username,
          role: input.role ?? 'operator',
          plan_id: input.plan_id ?? null,
          password_hash: input.password_hash,
          scopes: JSON.stringify(input.scopes),
          disabled: Number(input.disabled),
          at,
        }) as unknown as Row;
        return withoutHash(toUser(row));
      },
    );
  }

  /** A null `password_hash` keeps the current password. Throws `conflict` when the username is taken. */
  update(
    id: number,
    input: {
      username: string;
      role: Role;
      plan_id: number | null;
      password_hash: string | null;
      scopes: Scope[];
      disabled: boolean;
    },
    at: string,
  ): User {
    return unlessTaken(
      `the username '${input.username}'`,
      () => this.findWithHash(input.username)?.id,
      () => {
        const row = this.updateStmt.get({
          id,
          username: input.username,
          role: input.role,
          plan_id: input.plan_id,
          password_hash: input.password_hash,
          scopes: JSON.stringify(input.scopes),
          disabled: Number(input.disabled),
          at,
        }) as unknown as Row;
        this.credentials.bump();
        return withoutHash(toUser(row));
      },
    );
  }

  /** Sets a user's password (its hash). Call inside a write; end the user's sessions with it. */
  setPassword(id: number, passwordHash: string, at: string): void {
    this.passwordStmt.run(passwordHash, at, id);
    this.credentials.bump();
  }

  delete(id: number): void {
    this.deleteStmt.run(id);
    this.credentials.bump();
  }

  count(): number {
    return this.counts().total;
  }

  counts(): { total: number; disabled: number } {
    const row = this.countStmt.get() as { n: number; disabled: number };
    return { total: row.n, disabled: row.disabled };
  }

  /** Enabled users other than `exceptId` that hold `*`: the ones who could still administer. */
  otherSuperusers(exceptId: number): number {
    return (this.holdersStmt.get(exceptId) as { n: number }).n;
  }
}
