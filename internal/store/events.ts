// SQL for the event journal. Resources' changes are written by the triggers defined below (`eventDerivations`), in
// the transaction that makes them, whichever connection writes, stamped with the master's clock; what is not a row's
// change (a license expiring) is appended here.

import type { Database } from './database.ts';
import { trigger, type Derivation, type Trigger } from './trigger.ts';
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
  /** Only the events of this user's own resources, and of nodes (a tenant's stream: see EventStreams). */
  owner_id?: number | null;
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
        owner_id: "(owner_id = :owner_id OR resource = 'node')",
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
    return this.pageQuery.all({ ...filter, owner_id: filter.owner_id ?? null }) as unknown as EventRow[];
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

/**
 * Whose each resource's events are, by its row (what a tenant's stream follows: their own), as SQL over `row`; a
 * resource not here is no one's.
 */
const OWNERS: Record<string, (row: string) => string> = {
  rule: (row) => `${row}.owner_id`,
  tunnel: (row) => `${row}.owner_id`,
  user: (row) => `${row}.id`,
  token: (row) => `${row}.user_id`,
};

/** A journal entry for `row` (`NEW` or `OLD`) of `resource`: its type, the nodes it concerns, and whose it is. */
function journal(resource: string, type: string, row: string, nodes?: { node: string; other?: string }): string {
  const columns = nodes ? (nodes.other ? ', node_id, other_node_id' : ', node_id') : '';
  const values = nodes ? `, ${nodes.node}${nodes.other ? `, ${nodes.other}` : ''}` : '';
  const id = row === '' ? 'NULL' : `${row}.id`;
  const owner = row !== '' && OWNERS[resource] ? OWNERS[resource](row) : 'NULL';
  return `INSERT INTO events (at, type, resource, resource_id, owner_id${columns})
    VALUES (app_time(), ${type}, '${resource}', ${id}, ${owner}${values});`;
}

/** A rule's node, and through a tunnel its exit node too. */
const ruleNodes = (row: string) => ({
  node: `${row}.node_id`,
  other: `(SELECT exit_node_id FROM tunnels WHERE id = ${row}.tunnel_id)`,
});
const tunnelNodes = (row: string) => ({ node: `${row}.entry_node_id`, other: `${row}.exit_node_id` });

/** The trigger `events_<name>` that journals `entry` after each `on` (`INSERT ON rules`), when `when` holds. */
function journalling(name: string, on: string, entry: string, when?: string): Trigger {
  return trigger(`events_${name}`, `AFTER ${on}${when ? ` WHEN ${when}` : ''} BEGIN\n    ${entry}\n  END`);
}

/** A resource's created and deleted events, from its rows of `table` (`when` they are the resource's). */
function createdAndDeleted(
  resource: string,
  table: string,
  nodes?: (row: string) => { node: string; other?: string },
  when?: (row: string) => string,
): Trigger[] {
  return [
    journalling(
      `${resource}_insert`,
      `INSERT ON ${table}`,
      journal(resource, `'${resource}.created'`, 'NEW', nodes?.('NEW')),
      when?.('NEW'),
    ),
    journalling(
      `${resource}_delete`,
      `DELETE ON ${table}`,
      journal(resource, `'${resource}.deleted'`, 'OLD', nodes?.('OLD')),
      when?.('OLD'),
    ),
  ];
}

/** Whether any of `columns` differs between OLD and NEW. */
const changed = (...columns: string[]) => columns.map((c) => `NEW.${c} IS NOT OLD.${c}`).join(' OR ');

/**
 * Resources' changes as the journal tells them. Traffic counts change every report and are not events of their own
 * (the stream's traffic ticks carry them); nor are a node's last-heard time, config version or agent token, or a
 * tunnel's round trip; a node applying a config again with the same outcome changes nothing worth telling either.
 */
const journalTriggers: Derivation = {
  name: 'events',
  triggers: [
    ...createdAndDeleted('rule', 'rules', ruleNodes),
    journalling(
      'rule_update',
      'UPDATE ON rules',
      journal(
        'rule',
        `CASE WHEN NEW.version IS NOT OLD.version THEN 'rule.updated'
        WHEN NEW.health IS NOT OLD.health AND NEW.sync_state IS OLD.sync_state AND NEW.sync_error IS OLD.sync_error
          AND NEW.sync_path IS OLD.sync_path THEN 'rule.health'
        ELSE 'rule.sync' END`,
        'NEW',
        ruleNodes('NEW'),
      ),
      changed('version', 'sync_state', 'sync_error', 'sync_path', 'health'),
    ),
    ...createdAndDeleted('node', 'nodes', (row) => ({ node: `${row}.id` })),
    journalling(
      'node_update',
      'UPDATE ON nodes',
      journal(
        'node',
        `CASE WHEN NEW.version IS NOT OLD.version THEN 'node.updated'
        WHEN NEW.status IS NOT OLD.status THEN 'node.status'
        WHEN ${changed('install_log', 'install_started_at', 'install_finished_at')} THEN 'node.install'
        ELSE 'node.agent' END`,
        'NEW',
        { node: 'NEW.id' },
      ),
      changed(
        'version',
        'status',
        'status_detail',
        'agent_version',
        'kernel_path',
        'install_log',
        'install_started_at',
        'install_finished_at',
      ),
    ),
    ...createdAndDeleted('tunnel', 'tunnels', tunnelNodes),
    journalling(
      'tunnel_update',
      'UPDATE ON tunnels',
      journal(
        'tunnel',
        "CASE WHEN NEW.version IS NOT OLD.version THEN 'tunnel.updated' ELSE 'tunnel.status' END",
        'NEW',
        tunnelNodes('NEW'),
      ),
      changed('version', 'status', 'entry_status', 'entry_error', 'exit_status', 'exit_error', 'chosen_exit_node_id'),
    ),
    ...createdAndDeleted('rollout', 'rollouts'),
    journalling(
      'rollout_update',
      'UPDATE ON rollouts',
      journal('rollout', "'rollout.updated'", 'NEW'),
      changed('state', 'reason', 'wave', 'wave_passed_at'),
    ),
    // Each node of a rollout moving on (to upgrading, passed or failed): the rollout's event, about that node.
    journalling(
      'rollout_node_update',
      'UPDATE ON rollout_nodes',
      `INSERT INTO events (at, type, resource, resource_id, node_id, detail) VALUES (app_time(), 'rollout.node',
      'rollout', NEW.rollout_id, NEW.node_id, json_object('state', NEW.state, 'detail', NEW.detail));`,
      changed('state'),
    ),
    // A standby promoted: the epoch it raised.
    ...['INSERT', 'UPDATE'].map((on) =>
      journalling(`master_${on.toLowerCase()}`, `${on} ON master_epoch`, journal('master', "'master.promoted'", '')),
    ),
    ...createdAndDeleted('user', 'users'),
    journalling('user_update', 'UPDATE ON users', journal('user', "'user.updated'", 'NEW'), changed('version')),
    // API tokens only: logins' sessions are not tokens the API shows.
    ...createdAndDeleted('token', 'tokens', undefined, (row) => `${row}.kind = 'api'`),
    ...['INSERT', 'UPDATE', 'DELETE'].map((on) =>
      journalling(
        `settings_${on.toLowerCase()}`,
        `${on} ON settings`,
        journal('settings', "'settings.updated'", ''),
        on === 'UPDATE' ? changed('value') : undefined,
      ),
    ),
  ],
};

/**
 * A trigger that keeps, of the events of `types` (an SQL list), a resource's newest REPORTED_KEPT: what agents cause
 * however fast they cause it. A partial index on those types (a migration's) makes the bound cost other writes
 * nothing.
 */
function newestKept(name: string, types: string): Derivation {
  return {
    name,
    triggers: [
      trigger(
        name,
        `AFTER INSERT ON events WHEN NEW.type IN ${types} BEGIN
    DELETE FROM events
      WHERE type IN ${types} AND resource = NEW.resource AND resource_id IS NEW.resource_id
        AND id <= (SELECT id FROM events
          WHERE type IN ${types} AND resource = NEW.resource AND resource_id IS NEW.resource_id
          ORDER BY id DESC LIMIT 1 OFFSET ${REPORTED_KEPT});
  END`,
      ),
    ],
  };
}

/** The journal's alert events (service/alerting.ts), which agents cause too: a node's link dropped and back. */
const ALERT_TYPES = "('alert.firing', 'alert.resolved')";

/**
 * What agents report is journalled as it changes, and kept as `newestKept` says (a client resuming from before the
 * older ones misses states its resource has left since, and is sent the newer ones; migration 19's index). So are an
 * alert rule's alert events: an agent that drops its link and comes back, again and again, fires and resolves its
 * node's alerts as often, unless the rule damps them (migration 26's index).
 */
export const eventDerivations: readonly Derivation[] = [
  journalTriggers,
  newestKept('events_reported_bound', REPORTED),
  newestKept('events_alert_bound', ALERT_TYPES),
];
