// SQL for the audit log. Entries are written inside the same transaction as the change
// they describe (callers run `record` within `Database.write`), with secrets redacted.

import type { Database } from './database.ts';
import { FilterBound, FilteredCount, FilteredQuery } from './filters.ts';
import type { JsonPage } from './page.ts';
import { redactSecrets } from '../domain/secret-fields.ts';

export type ActorType = 'user' | 'token' | 'agent' | 'system' | 'anonymous';
export type AuditStatus = 'success' | 'denied' | 'failed';

export interface Actor {
  actor_type: ActorType;
  actor_id: number | null;
  actor_name: string;
  ip: string | null;
  request_id: string | null;
}

/** The master acting on its own: at start, when an install ends, on a rule's expiry or spent quota. */
export const SYSTEM_ACTOR: Actor = {
  actor_type: 'system',
  actor_id: null,
  actor_name: 'system',
  ip: null,
  request_id: null,
};

export interface AuditInput {
  action: string;
  resource: string;
  resource_id: number | null;
  status: AuditStatus;
  changes?: unknown;
}

export interface AuditEntry extends Actor, AuditInput {
  id: number;
  at: string;
  changes: unknown;
}

export interface AuditFilter {
  beforeId: number;
  limit: number;
  /** Only entries about this user's resources and account, their own attempts included (what a tenant reads). */
  owner: { id: number; username: string } | null;
  action: string | null;
  resource: string | null;
  resource_id: number | null;
  actor: string | null;
  actor_type: string | null;
  status: string | null;
  since: string | null;
  until: string | null;
  /** Also count every match (JsonPage.total). */
  count?: boolean;
}

/** A filter that selects every entry (the newest first, from `beforeId`). */
export const EVERY_ENTRY = {
  owner: null,
  action: null,
  resource: null,
  resource_id: null,
  actor: null,
  actor_type: null,
  status: null,
  since: null,
  until: null,
} as const satisfies Omit<AuditFilter, 'beforeId' | 'limit' | 'count'>;

/** What a change's before or after says of whose it is. */
interface Named {
  owner_id?: number;
  created_by?: { id: number };
}

interface Row extends Omit<AuditEntry, 'changes'> {
  changes: string | null;
}

/** Each list filter's condition on `audit_log` (see FilteredQuery); each reads an index (migration 42). */
export const AUDIT_FILTERS = {
  owner: 'owner_id = :owner',
  action: 'action = :action',
  resource: 'resource = :resource',
  // An entry about many (an import's) names them in spans (migration 21).
  resource_id: `(resource_id = :resource_id OR (resource_id IS NULL AND id IN
    (SELECT audit_id FROM audit_spans WHERE last_id >= :resource_id AND first_id <= :resource_id)))`,
  actor: 'actor_name = :actor',
  actor_type: 'actor_type = :actor_type',
  status: 'status = :status',
  since: 'at >= :since',
  until: 'at < :until',
};

export class AuditStore {
  private readonly insertRows;
  private readonly listQuery;
  private readonly pageQuery;
  private readonly countQuery;
  /** What the filters in use may read (see FilterBound). */
  readonly bound;
  private readonly pruneStmt;
  private readonly spanStmt;
  private readonly ownerStmts;

  constructor(
    db: Database,
    /** Fields whose values are secrets: recorded as REDACTED (see `redactSecrets`). */
    private readonly secretFields: ReadonlySet<string>,
  ) {
    this.insertRows = db.insertRows(
      `INSERT INTO audit_log (at, actor_type, actor_id, actor_name, ip, action, resource, resource_id, status,
        request_id, changes, owner_id) VALUES`,
      12,
    );
    this.ownerStmts = {
      rule: db.prepare('SELECT owner_id AS id FROM rules WHERE id = ?'),
      tunnel: db.prepare('SELECT owner_id AS id FROM tunnels WHERE id = ?'),
      token: db.prepare('SELECT user_id AS id FROM tokens WHERE id = ?'),
    };
    this.listQuery = new FilteredQuery(
      db,
      'SELECT * FROM audit_log WHERE id < :before {filters} ORDER BY id DESC LIMIT :limit',
      AUDIT_FILTERS,
    );
    // A page is rendered by SQLite, row by row, but for `changes`: JSON this store wrote (JSON.stringify), put in as
    // it is. No object is made of an entry, nor its changes parsed and written again (by JavaScript or by SQLite's
    // json(), which was as costly), which was most of what a page cost.
    this.pageQuery = new FilteredQuery(
      db,
      `SELECT id, json_object('id', id, 'at', at, 'actor_type', actor_type,
        'actor_id', actor_id, 'actor_name', actor_name,
        -- Where a request came from is the caller's to see for their own acts only.
        'ip', CASE WHEN :viewer IS NULL OR actor_name = :viewer THEN ip END, 'action', action, 'resource', resource,
        'resource_id', resource_id, 'status', status,
        'request_id', CASE WHEN :viewer IS NULL OR actor_name = :viewer THEN request_id END) AS json, changes
      FROM audit_log WHERE id < :before {filters} ORDER BY id DESC LIMIT :limit`,
      AUDIT_FILTERS,
    );
    this.countQuery = new FilteredCount(db, 'SELECT count(*) AS n FROM audit_log WHERE 1 {filters}', AUDIT_FILTERS);
    this.bound = new FilterBound(db, 'audit_log', 'audit entries', AUDIT_FILTERS);
    this.pruneStmt = db.prepare('DELETE FROM audit_log WHERE at < ?');
    this.spanStmt = db.prepare('INSERT INTO audit_spans (audit_id, first_id, last_id) VALUES (?, ?, ?)');
  }

  /**
   * Records one entry about many of `entry.resource` (its resource_id null), naming their ids in `spans` ([first,
   * last], in order): listed by resource_id, it is found for each of them.
   */
  recordSpanning(actor: Actor, entry: AuditInput, spans: readonly [number, number][], at: string): void {
    const [id] = this.recordAll(actor, [{ ...entry, resource_id: null }], at);
    for (const [first, last] of spans) this.spanStmt.run(id!, first, last);
  }

  record(actor: Actor, entry: AuditInput, at: string): void {
    this.recordAll(actor, [entry], at);
  }

  /**
   * Whose an entry is: a refused attempt its actor's; one about a rule, tunnel or token its owner's (as the change
   * names it, or as it stands); one about a user that user's; anything else its actor's.
   */
  private ownerOf(actor: Actor, entry: AuditInput): number | null {
    const acting = () =>
      actor.actor_type === 'user'
        ? actor.actor_id
        : actor.actor_type === 'token'
          ? this.lookup('token', actor.actor_id)
          : null;
    if (entry.status === 'denied') return acting();
    const changes = (entry.changes ?? {}) as { before?: Named; after?: Named };
    const named = (side?: Named) => side?.owner_id ?? side?.created_by?.id;
    switch (entry.resource) {
      case 'rule':
      case 'tunnel':
      case 'token':
        return named(changes.after) ?? named(changes.before) ?? this.lookup(entry.resource, entry.resource_id);
      case 'user':
        return entry.resource_id;
      default:
        return acting();
    }
  }

  private lookup(kind: keyof AuditStore['ownerStmts'], id: number | null): number | null {
    if (id === null) return null;
    return (this.ownerStmts[kind].get(id) as { id: number | null } | undefined)?.id ?? null;
  }

  /** Records `entries`, in order, as done by `actor` at `at`; returns their ids. */
  recordAll(actor: Actor, entries: readonly AuditInput[], at: string): number[] {
    return this.insertRows(
      entries.map((entry) => [
        at,
        actor.actor_type,
        actor.actor_id,
        actor.actor_name,
        actor.ip,
        entry.action,
        entry.resource,
        entry.resource_id,
        entry.status,
        actor.request_id,
        entry.changes === undefined ? null : JSON.stringify(redactSecrets(entry.changes, this.secretFields)),
        this.ownerOf(actor, entry),
      ]),
    );
  }

  list(filter: AuditFilter): AuditEntry[] {
    const { beforeId, count: _, owner, ...rest } = filter;
    const rows = this.listQuery.all({ ...rest, owner: owner?.id ?? null, before: beforeId }) as unknown as Row[];
    return rows.map((row) => ({ ...row, changes: row.changes === null ? null : JSON.parse(row.changes) }));
  }

  /** The entries of `filter`, newest first, as JSON text, and the last id when more follow. */
  page(filter: AuditFilter): JsonPage {
    const { beforeId, limit, count, owner, ...others } = filter;
    const rest = { ...others, owner: owner?.id ?? null };
    this.bound.check(rest);
    const rows = this.pageQuery.all({
      ...rest,
      viewer: owner?.username ?? null,
      before: beforeId,
      limit: limit + 1,
    }) as {
      id: number;
      json: string;
      changes: string | null;
    }[];
    const more = rows.length > limit;
    if (more) rows.pop();
    const items = rows.map((row) => `${row.json.slice(0, -1)},"changes":${row.changes ?? 'null'}}`);
    return {
      items: `[${items.join(',')}]`,
      lastId: more ? rows[rows.length - 1]!.id : null,
      total: count ? this.countQuery.total(rest) : undefined,
    };
  }

  /** Deletes entries older than `before`; returns how many. */
  prune(before: string): number {
    return Number(this.pruneStmt.run(before).changes);
  }
}
