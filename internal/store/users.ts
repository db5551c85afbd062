// SQL for users. Scopes are stored as a JSON array; usernames are unique ignoring case.

import type { SortSql, userSorts } from '../domain/sorts.ts';
import type { Role } from '../auth/principal.ts';
import type { Scope } from '../auth/scopes.ts';
import type { Database } from './database.ts';
import { FilterBound, FilteredCount, FilteredQuery, KeysetQueries, type SortedPage } from './filters.ts';
import type { Generation, JsonPage } from './page.ts';
import { renderedRows, type Rendered } from './rendered.ts';
import { unlessTaken } from './errors.ts';
import { safeCount } from './counts.ts';

export interface User {
  id: number;
  username: string;
  role: Role;
  /** The plan a tenant is held to; null: none (a tenant without one is granted nothing). */
  plan_id: number | null;
  scopes: Scope[];
  disabled: boolean;
  /** When a tenant's account ends (their rules stop, their sessions and tokens no longer work); null: never. */
  expires_at: string | null;
  expired: boolean;
  usage: UserUsage;
  version: number;
  created_at: string;
  updated_at: string;
}

/** What a user has of what their plan bounds. */
export interface UserUsage {
  rules: number;
  /** The traffic allowance's current period; null for a user whose plan sets none. */
  traffic: TrafficUsage | null;
}

export interface TrafficUsage {
  /** Bytes both ways through the user's rules this period, as their nodes reported them. */
  used_bytes: number;
  period_started_at: string;
  resets_at: string;
  /** Whether the period's allowance is spent: past it, the plan stops or slows the user's rules. */
  spent: boolean;
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
  expires_at: string | null;
  expired: number;
  rule_count: number;
  traffic_used: number;
  traffic_period_start: string | null;
  traffic_resets_at: string | null;
  traffic_spent: number;
  version: number;
  created_at: string;
  updated_at: string;
}

function toUser(row: Row): UserWithHash {
  return {
    id: row.id,
    username: row.username,
    role: row.role,
    plan_id: row.plan_id,
    password_hash: row.password_hash,
    scopes: JSON.parse(row.scopes) as Scope[],
    disabled: row.disabled === 1,
    expires_at: row.expires_at,
    expired: row.expired === 1,
    usage: {
      rules: row.rule_count,
      traffic:
        row.traffic_period_start === null
          ? null
          : {
              used_bytes: row.traffic_used,
              period_started_at: row.traffic_period_start,
              resets_at: row.traffic_resets_at!,
              spent: row.traffic_spent === 1,
            },
    },
    version: row.version,
    created_at: row.created_at,
    updated_at: row.updated_at,
  };
}

/** How many rules the user in `users` owns, as the tallies keep it: one row read. */
const RULE_COUNT = 'coalesce((SELECT rules FROM owner_tallies WHERE rowid = users.id), 0) AS rule_count';

/** A user's columns, with the count of the rules they own. */
const SELECT = `SELECT *, ${RULE_COUNT} FROM users`;

/** A user whose traffic a report counted: where their allowance stands now. */
export interface Counted {
  id: number;
  plan_id: number | null;
  traffic_used: number;
  traffic_spent: number;
}

function withoutHash({ password_hash: _, ...user }: UserWithHash): User {
  return user;
}

export interface UserListFilter {
  afterId: number;
  limit: number;
  q: string | null;
  disabled: boolean | null;
  /** Only the users a plan holds. */
  plan_id?: number | null;
  /** Also count every match (JsonPage.total). */
  count?: boolean;
  /** Another order than by id (then afterId is not used). */
  sorted?: SortedPage;
}

/** What lists of users sort by, as SQL: each key then id. */
export const USER_SORTS: SortSql<typeof userSorts> = {
  id: 'id',
  username: 'username COLLATE NOCASE',
  created_at: 'created_at',
};

/** Each list filter's condition on `users` (see FilteredQuery). */
export const USER_FILTERS = {
  q: 'instr(lower(username), lower(:q)) > 0',
  disabled: 'disabled = :disabled',
  plan_id: 'plan_id = :plan_id',
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
  /** What the filters in use may read (see FilterBound). */
  readonly bound;
  private readonly sortedQueries;
  private readonly pageQuery;
  private readonly insertStmt;
  private readonly updateStmt;
  private readonly deleteStmt;
  private readonly passwordStmt;
  private readonly countStmt;
  private readonly holdersStmt;
  private readonly countTrafficStmt;
  private readonly periodStmt;
  private readonly expiryDueStmt;
  private readonly expireStmt;
  private readonly resetsDueStmt;
  private readonly idsOnPlanStmt;

  constructor(
    db: Database,
    private readonly credentials: Generation,
  ) {
    this.byId = db.prepare(`${SELECT} WHERE id = ?`);
    this.byName = db.prepare(`${SELECT} WHERE username = ?`);
    this.namesStmt = db.prepare('SELECT id, username FROM users');
    this.ownedStmt = db.prepare(`SELECT coalesce((SELECT rules FROM owner_tallies WHERE rowid = ?1), 0) AS rules,
      (SELECT count(*) FROM tunnels WHERE owner_id = ?1) AS tunnels`);
    this.rendered = renderedRows<Row>(db, 'users', `${SELECT} WHERE id IN (SELECT value FROM json_each(?))`, (row) => ({
      version: row.version,
      json: JSON.stringify(withoutHash(toUser(row))),
    }));
    db.onKeyChange('rules', 'owner_id', (id) => this.rendered.forget(id));
    this.pageQuery = new FilteredQuery(
      db,
      'SELECT id FROM users WHERE id > :after {filters} ORDER BY id LIMIT :limit + 1',
      USER_FILTERS,
    );
    this.countQuery = new FilteredCount(db, 'SELECT count(*) AS n FROM users WHERE 1 {filters}', USER_FILTERS);
    this.bound = new FilterBound(db, 'users', 'users', USER_FILTERS);
    this.sortedQueries = new KeysetQueries(db, { select: 'id', from: 'users', id: 'id' }, USER_SORTS, this.bound);
    this.insertStmt = db.prepare(`INSERT INTO users (username, role, plan_id, password_hash, scopes, disabled,
        expires_at, expired, created_at, updated_at)
      VALUES (:username, :role, :plan_id, :password_hash, :scopes, :disabled, :expires_at,
        coalesce(:expires_at <= :at, 0), :at,
        :at) RETURNING *, 0 AS rule_count`);
    this.updateStmt = db.prepare(`UPDATE users SET username = :username, role = :role, plan_id = :plan_id,
        password_hash = coalesce(:password_hash, password_hash), scopes = :scopes, disabled = :disabled,
        expires_at = :expires_at, expired = coalesce(:expires_at <= :at, 0), version = version + 1, updated_at = :at
      WHERE id = :id RETURNING *, ${RULE_COUNT}`);
    this.countTrafficStmt = db.prepare(`UPDATE users SET traffic_used = ${safeCount('traffic_used + owed.bytes')}
      FROM (SELECT r.owner_id AS owner, sum((e.value ->> '$.bytes_in') + (e.value ->> '$.bytes_out')) AS bytes
        FROM json_each(:report) e CROSS JOIN rules r ON r.id = e.value ->> '$.id' AND r.node_id = :node
        GROUP BY r.owner_id) AS owed
      WHERE users.id = owed.owner AND owed.bytes > 0 AND users.traffic_period_start IS NOT NULL
      RETURNING users.id, users.plan_id, users.traffic_used, users.traffic_spent`);
    this.periodStmt = db.prepare(`UPDATE users SET traffic_used = CASE WHEN traffic_period_start IS :start
        THEN traffic_used ELSE 0 END, traffic_period_start = :start, traffic_resets_at = :next,
        traffic_spent = coalesce(:bytes <= CASE WHEN traffic_period_start IS :start THEN traffic_used ELSE 0 END, 0)
      WHERE id = :id`);
    this.expiryDueStmt = db.prepare('SELECT id FROM users WHERE expires_at <= ? AND expired = 0 ORDER BY id');
    this.expireStmt = db.prepare('UPDATE users SET expired = 1 WHERE id = ?');
    this.resetsDueStmt = db.prepare('SELECT id FROM users WHERE traffic_resets_at <= ? ORDER BY id');
    this.idsOnPlanStmt = db.prepare('SELECT id FROM users WHERE plan_id = ? ORDER BY id');
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
    const conditions = {
      q: filter.q,
      disabled: filter.disabled === null ? null : Number(filter.disabled),
      plan_id: filter.plan_id ?? null,
    };
    this.bound.check(conditions);
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
      expires_at?: string | null;
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
          expires_at: input.expires_at ?? null,
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
      expires_at: string | null;
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
          expires_at: input.expires_at,
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

  /**
   * Adds what a node's traffic report (`rules`, each with id, bytes_in and bytes_out) counted to the allowance of
   * each owner who has one, for the rules on node `nodeId` (what the rule's own count takes: the entry's). Returns the
   * users counted, as they stand after.
   */
  countTraffic(rules: readonly { id: number; bytes_in: number; bytes_out: number }[], nodeId: number): Counted[] {
    return this.countTrafficStmt.all({ report: JSON.stringify(rules), node: nodeId }) as unknown as Counted[];
  }

  /**
   * Puts user `id`'s allowance in the period from `start` to `next` (its count kept if it is the period it is in,
   * zero otherwise), spent once the count reaches `bytes`; all null: the user has no allowance.
   */
  setPeriod(id: number, period: { start: string; next: string; bytes: number } | null): void {
    this.periodStmt.run({ id, start: period?.start ?? null, next: period?.next ?? null, bytes: period?.bytes ?? null });
  }

  /** The users whose expires_at is at or before `at` and who are not marked expired yet. */
  expiryDue(at: string): number[] {
    return (this.expiryDueStmt.all(at) as { id: number }[]).map((row) => row.id);
  }

  /** Marks user `id` expired: their credentials stop working. */
  expire(id: number): void {
    this.expireStmt.run(id);
    this.credentials.bump();
  }

  /** The users whose allowance period ended at or before `at`. */
  resetsDue(at: string): number[] {
    return (this.resetsDueStmt.all(at) as { id: number }[]).map((row) => row.id);
  }

  /** The users plan `id` holds. */
  idsOnPlan(id: number): number[] {
    return (this.idsOnPlanStmt.all(id) as { id: number }[]).map((row) => row.id);
  }
}
