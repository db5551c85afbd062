// SQL for the event journal. Resources' changes are written by the triggers defined below (`eventDerivations`), in
// the transaction that makes them, whichever connection writes, stamped with the master's clock; what is not a row's
// change (a license expiring) is appended here.

import type { Database } from './database.ts';
import { trigger, type Derivation } from './trigger.ts';
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

/** The journal's event types that agents cause by what they report, of which a resource keeps only the newest. */
const REPORTED = "('rule.sync', 'rule.health', 'tunnel.status', 'node.status', 'node.agent')";

/** How many events of REPORTED types a resource keeps (see `events_reported_bound`). */
const REPORTED_KEPT = 1000;

/** A journal entry for `row` (`NEW` or `OLD`) of `resource`: its type, and the nodes it concerns. */
function journal(resource: string, type: string, row: string, nodes?: { node: string; other?: string }): string {
  const columns = nodes ? (nodes.other ? ', node_id, other_node_id' : ', node_id') : '';
  const values = nodes ? `, ${nodes.node}${nodes.other ? `, ${nodes.other}` : ''}` : '';
  const id = row === '' ? 'NULL' : `${row}.id`;
  return `INSERT INTO events (at, type, resource, resource_id${columns})
    VALUES (app_time(), ${type}, '${resource}', ${id}${values});`;
}

/** A rule's node, and through a tunnel its exit node too. */
const ruleNodes = (row: string) => ({
  node: `${row}.node_id`,
  other: `(SELECT exit_node_id FROM tunnels WHERE id = ${row}.tunnel_id)`,
});
const tunnelNodes = (row: string) => ({ node: `${row}.entry_node_id`, other: `${row}.exit_node_id` });

/**
 * Resources' changes as the journal tells them. Traffic counts change every report and are not events of their own
 * (the stream's traffic ticks carry them); nor are a node's last-heard time, config version or agent token, or a
 * tunnel's round trip; a node applying a config again with the same outcome changes nothing worth telling either.
 */
const journalTriggers: Derivation = {
  name: 'events',
  triggers: [
    trigger(
      'events_rule_insert',
      `AFTER INSERT ON rules BEGIN
    ${journal('rule', "'rule.created'", 'NEW', ruleNodes('NEW'))}
  END`,
    ),
    trigger(
      'events_rule_delete',
      `AFTER DELETE ON rules BEGIN
    ${journal('rule', "'rule.deleted'", 'OLD', ruleNodes('OLD'))}
  END`,
    ),
    trigger(
      'events_rule_update',
      `AFTER UPDATE ON rules
  WHEN NEW.version IS NOT OLD.version OR NEW.sync_state IS NOT OLD.sync_state OR NEW.sync_error IS NOT OLD.sync_error
    OR NEW.sync_path IS NOT OLD.sync_path OR NEW.health IS NOT OLD.health
  BEGIN
    ${journal(
      'rule',
      `CASE WHEN NEW.version IS NOT OLD.version THEN 'rule.updated'
        WHEN NEW.health IS NOT OLD.health AND NEW.sync_state IS OLD.sync_state AND NEW.sync_error IS OLD.sync_error
          AND NEW.sync_path IS OLD.sync_path THEN 'rule.health'
        ELSE 'rule.sync' END`,
      'NEW',
      ruleNodes('NEW'),
    )}
  END`,
    ),
    trigger(
      'events_node_insert',
      `AFTER INSERT ON nodes BEGIN
    ${journal('node', "'node.created'", 'NEW', { node: 'NEW.id' })}
  END`,
    ),
    trigger(
      'events_node_delete',
      `AFTER DELETE ON nodes BEGIN
    ${journal('node', "'node.deleted'", 'OLD', { node: 'OLD.id' })}
  END`,
    ),
    trigger(
      'events_node_update',
      `AFTER UPDATE ON nodes
  WHEN NEW.version IS NOT OLD.version OR NEW.status IS NOT OLD.status OR NEW.status_detail IS NOT OLD.status_detail
    OR NEW.agent_version IS NOT OLD.agent_version OR NEW.kernel_path IS NOT OLD.kernel_path
    OR NEW.install_log IS NOT OLD.install_log OR NEW.install_started_at IS NOT OLD.install_started_at
    OR NEW.install_finished_at IS NOT OLD.install_finished_at
  BEGIN
    ${journal(
      'node',
      `CASE WHEN NEW.version IS NOT OLD.version THEN 'node.updated'
        WHEN NEW.status IS NOT OLD.status THEN 'node.status'
        WHEN NEW.install_log IS NOT OLD.install_log OR NEW.install_started_at IS NOT OLD.install_started_at
          OR NEW.install_finished_at IS NOT OLD.install_finished_at THEN 'node.install'
        ELSE 'node.agent' END`,
      'NEW',
      { node: 'NEW.id' },
    )}
  END`,
    ),
    trigger(
      'events_tunnel_insert',
      `AFTER INSERT ON tunnels BEGIN
    ${journal('tunnel', "'tunnel.created'", 'NEW', tunnelNodes('NEW'))}
  END`,
    ),
    trigger(
      'events_tunnel_delete',
      `AFTER DELETE ON tunnels BEGIN
    ${journal('tunnel', "'tunnel.deleted'", 'OLD', tunnelNodes('OLD'))}
  END`,
    ),
    trigger(
      'events_tunnel_update',
      `AFTER UPDATE ON tunnels
  WHEN NEW.version IS NOT OLD.version OR NEW.status IS NOT OLD.status OR NEW.entry_status IS NOT OLD.entry_status
    OR NEW.entry_error IS NOT OLD.entry_error OR NEW.exit_status IS NOT OLD.exit_status
    OR NEW.exit_error IS NOT OLD.exit_error
  BEGIN
    ${journal(
      'tunnel',
      "CASE WHEN NEW.version IS NOT OLD.version THEN 'tunnel.updated' ELSE 'tunnel.status' END",
      'NEW',
      tunnelNodes('NEW'),
    )}
  END`,
    ),
    trigger(
      'events_user_insert',
      `AFTER INSERT ON users BEGIN
    ${journal('user', "'user.created'", 'NEW')}
  END`,
    ),
    trigger(
      'events_user_delete',
      `AFTER DELETE ON users BEGIN
    ${journal('user', "'user.deleted'", 'OLD')}
  END`,
    ),
    trigger(
      'events_user_update',
      `AFTER UPDATE ON users WHEN NEW.version IS NOT OLD.version BEGIN
    ${journal('user', "'user.updated'", 'NEW')}
  END`,
    ),
    // API tokens only: logins' sessions are not tokens the API shows.
    trigger(
      'events_token_insert',
      `AFTER INSERT ON tokens WHEN NEW.kind = 'api' BEGIN
    ${journal('token', "'token.created'", 'NEW')}
  END`,
    ),
    trigger(
      'events_token_delete',
      `AFTER DELETE ON tokens WHEN OLD.kind = 'api' BEGIN
    ${journal('token', "'token.deleted'", 'OLD')}
  END`,
    ),
    trigger(
      'events_settings_insert',
      `AFTER INSERT ON settings BEGIN
    ${journal('settings', "'settings.updated'", '')}
  END`,
    ),
    trigger(
      'events_settings_update',
      `AFTER UPDATE ON settings WHEN NEW.value IS NOT OLD.value BEGIN
    ${journal('settings', "'settings.updated'", '')}
  END`,
    ),
    trigger(
      'events_settings_delete',
      `AFTER DELETE ON settings BEGIN
    ${journal('settings', "'settings.updated'", '')}
  END`,
    ),
  ],
};

/**
 * What agents report is journalled as it changes; however fast a hostile or broken agent makes it change, a resource
 * keeps its newest REPORTED_KEPT such events (a client resuming from before the older ones misses states its resource
 * has left since, and is sent the newer ones). Migration 19's partial index makes the bound cost API writes nothing.
 */
const reportedBound: Derivation = {
  name: 'events_reported_bound',
  triggers: [
    trigger(
      'events_reported_bound',
      `AFTER INSERT ON events WHEN NEW.type IN ${REPORTED} BEGIN
    DELETE FROM events
      WHERE type IN ${REPORTED} AND resource = NEW.resource AND resource_id IS NEW.resource_id
        AND id <= (SELECT id FROM events
          WHERE type IN ${REPORTED} AND resource = NEW.resource AND resource_id IS NEW.resource_id
          ORDER BY id DESC LIMIT 1 OFFSET ${REPORTED_KEPT});
  END`,
    ),
  ],
};

/** What triggers keep of the journal. */
export const eventDerivations: readonly Derivation[] = [journalTriggers, reportedBound];
