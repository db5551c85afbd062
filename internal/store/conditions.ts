// SQL for what alert rules watch: for each condition, the resources it holds for now, narrowed by a rule's selector.
// Each reads only what is in the condition (partial indexes on failed syncs, unhealthy rules, quotas, down tunnels
// and expiring rules; nodes are read whole, as their status is their agents' links), and at most a bound of them.

import type { Database, Statement } from './database.ts';
import type { AlertCondition, AlertSelector } from './alerts.ts';

/** A resource an alert rule's condition holds for. */
export interface Finding {
  resource: string;
  resource_id: number;
  summary: string;
}

/** How many resources one rule follows at once: the first by id; the rest wait for these to clear. */
export const MAX_FINDINGS = 1000;

/** What an agent said, as far as a notification repeats it. */
const SAID = (column: string) => `substr(coalesce(${column}, ''), 1, 200)`;

/**
 * Each condition's resources, as `resource, resource_id, node_id, other_node_id, tags, summary`; `:threshold` is the
 * rule's, `:horizon` the time an expiry is near from.
 */
const CONDITIONS: Record<AlertCondition, string> = {
  node_offline: `SELECT 'node' AS resource, id AS resource_id, id AS node_id, NULL AS other_node_id, tags,
    'node ' || name || ' is offline' AS summary FROM nodes WHERE node_status(id, status) = 'offline'`,
  rule_sync_failed: `SELECT 'rule' AS resource, r.id AS resource_id, r.node_id, NULL AS other_node_id, r.tags,
    'rule ' || r.name || ' failed to apply on node ' || n.name || ': ' || ${SAID('r.sync_error')} AS summary
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

/** A rule's selector in SQL: each part in use narrows, an empty one does not. */
const SELECTED = `(json_array_length(:node_ids) = 0 OR node_id IN (SELECT value FROM json_each(:node_ids))
    OR other_node_id IN (SELECT value FROM json_each(:node_ids)))
  AND (json_array_length(:resource_ids) = 0 OR resource_id IN (SELECT value FROM json_each(:resource_ids)))
  AND (json_array_length(:tags) = 0 OR EXISTS (SELECT 1 FROM json_each(found.tags) AS t
    WHERE t.value IN (SELECT value FROM json_each(:tags))))`;

export class ConditionStore {
  private readonly statements = new Map<AlertCondition, Statement>();

  constructor(private readonly db: Database) {}

  /** The resources `condition` holds for now under `selector`, by id, at most MAX_FINDINGS. */
  findings(condition: AlertCondition, selector: AlertSelector, threshold: number | null, horizon: string): Finding[] {
    let statement = this.statements.get(condition);
    if (!statement) {
      statement = this.db.prepare(`SELECT resource, resource_id, summary FROM (${CONDITIONS[condition]}) AS found
        WHERE ${SELECTED} ORDER BY resource_id LIMIT ${MAX_FINDINGS}`);
      this.statements.set(condition, statement);
    }
    const params: Record<string, string | number | null> = {
      node_ids: JSON.stringify(selector.node_ids),
      resource_ids: JSON.stringify(selector.resource_ids),
      tags: JSON.stringify(selector.tags),
    };
    if (CONDITIONS[condition].includes(':threshold')) params.threshold = threshold ?? 0;
    if (CONDITIONS[condition].includes(':horizon')) params.horizon = horizon;
    return statement.all(params) as unknown as Finding[];
  }
}
