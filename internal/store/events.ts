// SQL for the event journal. Resources' changes are written by the triggers of migration 15, in the transaction that
// makes them, whichever connection writes; what is not a row's change (a license expiring) is appended here.

import type { Database } from './database.ts';
import { FilteredQuery } from './filters.ts';

export interface EventRow {
  id: number;
  at: string;
  type: string;
  resource: string;
  resource_id: number | null;
  node_id: number | null;
  other_node_id: number | null;
  detail: string | null;
}

export interface EventFilter {
  /** Events after this id. */
  after: number;
  limit: number;
  /** The resources whose events may be read at all (the caller's scopes), as a JSON array. */
  resources: string;
  /** Only these types or whole resources (`rule`, `node.status`), as a JSON array. */
  types: string | null;
  /** Only events concerning this node. */
  node_id: number | null;
  resource_id: number | null;
}

export class EventStore {
  private readonly pageQuery;
  private readonly headStmt;
  private readonly firstStmt;
  private readonly appendStmt;
  private readonly pruneStmt;

  constructor(db: Database) {
    this.pageQuery = new FilteredQuery(
      db,
      `SELECT id, at, type, resource, resource_id, node_id, other_node_id, detail FROM events
      WHERE id > :after AND resource IN (SELECT value FROM json_each(:resources)) {filters}
      ORDER BY id LIMIT :limit`,
      {
        types: '(type IN (SELECT value FROM json_each(:types)) OR resource IN (SELECT value FROM json_each(:types)))',
        node_id: '(node_id = :node_id OR other_node_id = :node_id)',
        resource_id: 'resource_id = :resource_id',
      },
    );
    // The last id given, pruned or not.
    this.headStmt = db.prepare("SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0) AS id");
    this.firstStmt = db.prepare('SELECT min(id) AS id FROM events');
    this.appendStmt = db.prepare(
      'INSERT INTO events (at, type, resource, resource_id, detail) VALUES (?, ?, ?, ?, ?) RETURNING id',
    );
    this.pruneStmt = db.prepare(`DELETE FROM events WHERE id <
      coalesce((SELECT id FROM events WHERE at >= ? ORDER BY id LIMIT 1), (SELECT max(id) + 1 FROM events))`);
  }

  /** The id of the latest event written (0 before the first). */
  head(): number {
    return Number((this.headStmt.get() as { id: number }).id);
  }

  /** The id of the oldest event kept, or null when none is (all were pruned). */
  first(): number | null {
    const row = this.firstStmt.get() as { id: number | null };
    return row.id === null ? null : Number(row.id);
  }

  page(filter: EventFilter): EventRow[] {
    return this.pageQuery.all({ ...filter }) as unknown as EventRow[];
  }

  /** An event that is no row's change, inside a write. */
  append(type: string, resource: string, resourceId: number | null, detail: unknown, at: string): number {
    const row = this.appendStmt.get(at, type, resource, resourceId, JSON.stringify(detail)) as { id: number };
    return Number(row.id);
  }

  /** Deletes the events before the first at or after `before` (the journal is in time order); returns how many. */
  prune(before: string): number {
    return Number(this.pruneStmt.run(before).changes);
  }
}
