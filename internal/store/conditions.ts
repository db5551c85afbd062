// SQL for what alert rules watch: for each condition, the resources it holds for now.
// Each reads only what is in the condition (partial indexes on failed syncs, unhealthy rules, quotas, down tunnels
// and expiring rules; nodes are read whole, as their status is their agents' links), and at most a bound of them.

import { olderVersion, type AlertCondition } from '../domain/alerts.ts';
import type { Database, Statement } from './database.ts';

/** A resource an alert rule's condition holds for, with what silences match it by. */
export interface Finding {
  resource: string;
  resource_id: number;
  summary: string;
  /** The node it is on (a tunnel: its entry; other_node_id its exit); null for the master's own. */
  node_id: number | null;
  other_node_id: number | null;
  tags: string[];
}

/** How many resources a condition's query reads at most, for every rule of that condition at once. */
export const MAX_HOLDING = 10_000;

/** An agent's error (`{"code", "detail"}`) in words: its detail, then its code; anything else as it is. */
const IN_WORDS = (column: string) =>
  `CASE WHEN json_valid(${column}) AND json_type(${column}) = 'object' THEN ` +
  `json_extract(${column}, '$.detail') || ' (' || json_extract(${column}, '$.code') || ')' ELSE ${column} END`;

/** What an agent said, as far as a notification repeats it. */
const SAID = (column: string) => `substr(coalesce(${column}, ''), 1, 200)`;

/** The conditions of the master itself, not of a row: the alerts' evaluation finds them (service/alerting.ts). */
export type MasterCondition = 'license_expiring' | 'certificate_expiring' | 'writes_refused';
export type RowCondition = Exclude<AlertCondition, MasterCondition>;

/**
 * Each condition's resources, as `resource, resource_id, node_id, other_node_id, tags, summary`; `:threshold` is the
 * rule's, `:horizon` the time an expiry is near from (and `:since` the time a drift is recent from), `:version` the
 * master's.
 */
const CONDITIONS: Record<RowCondition, string> = {
  node_offline: `SELECT 'node' AS resource, id AS resource_id, id AS node_id, NULL AS other_node_id, tags,
    'node ' || name || ' is offline' AS summary FROM nodes WHERE node_status(id, status) = 'offline'`,
  agent_outdated: `SELECT 'node' AS resource, id AS resource_id, id AS node_id, NULL AS other_node_id, tags,
    'node ' || name || ' runs agent ' || agent_version || ', older than the master (' || :version || ')' AS summary
    FROM nodes WHERE agent_version IS NOT NULL AND version_older(agent_version, :version)`,
  agent_crashloop: `SELECT 'node' AS resource, id AS resource_id, id AS node_id, NULL AS other_node_id, tags,
    'node ' || name || ' went back from agent ' || json_extract(agent_fell_back, '$.from_version') ||
    ', which crash-looped (' || json_extract(agent_fell_back, '$.exits') || ' exits within ' ||
    json_extract(agent_fell_back, '$.within_seconds') || ' s), to ' || agent_version AS summary
    FROM nodes WHERE agent_fell_back IS NOT NULL AND agent_version = json_extract(agent_fell_back, '$.to_version')`,
  kernel_drift: `SELECT 'node' AS resource, id AS resource_id, id AS node_id, NULL AS other_node_id, tags,
    'node ' || name || ': something else changed its kernel table at ' ||
    json_extract(kernel_path, '$.last_drift_at') || ' (written back)' AS summary
    FROM nodes WHERE json_extract(kernel_path, '$.last_drift_at') >= :since`,
  rule_sync_failed: `SELECT 'rule' AS resource, r.id AS resource_id, r.node_id, NULL AS other_node_id, r.tags,
    'rule ' || r.name || ' failed to apply on node ' || n.name || ': ' || ${SAID(IN_WORDS('r.sync_error'))} AS summary
    FROM rules r JOIN nodes n ON n.id = r.node_id WHERE r.sync_state = 'failed' AND r.enabled = 1`,
  rule_degraded: `SELECT 'rule' AS resource, id AS resource_id, node_id, NULL AS other_node_id, tags,
    'rule ' || name || ': its targets are ' || json_extract(health, '$.status') AS summary
    FROM rules WHERE json_extract(health, '$.status') IN ('degraded', 'down') AND enabled = 1`,
  tunnel_down: `SELECT 'tunnel' AS resource, id AS resource_id, entry_node_id AS node_id,
    exit_node_id AS other_node_id, '[]' AS tags, 'tunnel ' || name || ' is down' || CASE
      WHEN coalesce(entry_error, exit_error) IS NULL THEN '' ELSE ': ' || ${SAID('coalesce(entry_error, exit_error)')}
    END AS summary FROM tunnels WHERE status = 'down'`,
  quota_percent: `SELECT 'rule' AS resource, id AS resource_id, node_id, NULL AS other_node_id, tags,
    'rule ' || name || ' has used ' || (quota_used * 100 / quota_bytes) || '% of its quota' AS summary
    FROM rules WHERE quota_bytes IS NOT NULL AND quota_used * 100 >= :threshold * quota_bytes`,
  quota_spent: `SELECT 'rule' AS resource, id AS resource_id, node_id, NULL AS other_node_id, tags,
    'rule ' || name || ' has spent its quota' AS summary
    FROM rules WHERE quota_bytes IS NOT NULL AND quota_spent = 1`,
  rule_expiring: `SELECT 'rule' AS resource, id AS resource_id, node_id, NULL AS other_node_id, tags,
    'rule ' || name || ' expires at ' || expires_at AS summary
    FROM rules WHERE expires_at IS NOT NULL AND expired = 0 AND expires_at <= :horizon`,
};

/** What a condition's query is given. */
export interface ConditionParams {
  threshold: number | null;
  /** Expiries before it are near. */
  horizon: string;
  /** Drifts after it are recent. */
  since: string;
  /** The master's version. */
  version: string;
}

export class ConditionStore {
  private readonly statements = new Map<RowCondition, Statement>();

  constructor(private readonly db: Database) {
    db.defineFunction('version_older', (a, b) => (olderVersion(String(a), String(b)) ? 1 : 0));
  }

  /**
   * The resources `condition` holds for now, by id, at most MAX_HOLDING: read once an evaluation for all the rules
   * of that condition (and threshold), each narrowing them by its selector (service/alerting.ts).
   */
  findings(condition: RowCondition, given: ConditionParams): Finding[] {
    let statement = this.statements.get(condition);
    if (!statement) {
      statement = this.db.prepare(`SELECT resource, resource_id, summary, node_id, other_node_id, tags
        FROM (${CONDITIONS[condition]}) ORDER BY resource_id LIMIT ${MAX_HOLDING}`);
      this.statements.set(condition, statement);
    }
    const params: Record<string, string | number | null> = {};
    if (CONDITIONS[condition].includes(':threshold')) params.threshold = given.threshold ?? 0;
    for (const name of ['horizon', 'since', 'version'] as const)
      if (CONDITIONS[condition].includes(`:${name}`)) params[name] = given[name];
    const rows = statement.all(params) as unknown as (Omit<Finding, 'tags'> & { tags: string })[];
    return rows.map((row) => ({ ...row, tags: JSON.parse(row.tags) as string[] }));
  }
}
