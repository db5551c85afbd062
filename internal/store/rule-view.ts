// A rule's row as the API shows it, in the two languages the master speaks, side by side: `toRule` in TypeScript, for
// what the store reads to work with, and `ruleJsonSql` in SQL, which SQLite renders as a page is read so that lists
// concatenate text; the same for its state. What triggers keep of rules (the tallies the dashboard reads, the index of
// names) is defined here too, installed when the database opens (see derived.ts).

import type { AllowHours } from '../domain/hours.ts';
import type { Quota, QuotaDirection, QuotaPeriod, QuotaUsage } from '../domain/quota.ts';
import type { Hold } from '../domain/plans.ts';
import type {
  HealthCheck,
  Path,
  PlanLimits,
  Rule,
  RuleFields,
  RuleHealth,
  RuleState,
  SyncState,
} from '../domain/rules.ts';
import { trigger, type Derivation } from './trigger.ts';
import { safeCount } from './counts.ts';

export interface RuleRow
  extends
    Omit<
      RuleFields,
      | 'targets'
      | 'weights'
      | 'enabled'
      | 'tags'
      | 'allow_sources'
      | 'deny_sources'
      | 'quota'
      | 'health_check'
      | 'preserve_source'
      | 'owner_id'
      | 'allow_hours'
    >,
    QuotaColumns {
  owner_id: number;
  weights: string | null;
  preserve_source: number;
  allow_hours: string | null;
  health_check: string | null;
  health: string | null;
  id: number;
  targets: string;
  enabled: number;
  tags: string;
  allow_sources: string;
  deny_sources: string;
  expired: number;
  held: Hold | null;
  held_connections: number | null;
  held_bandwidth: number | null;
  held_new_connections: number | null;
  refused: number;
  sync_state: SyncState;
  sync_error: string | null;
  sync_applied_at: string | null;
  sync_path: Path | null;
  relay_reason: string | null;
  bytes_in: number;
  bytes_out: number;
  version: number;
  created_at: string;
  updated_at: string;
}

/** A rule's quota and the count of its period, as the table keeps them. */
export interface QuotaColumns {
  quota_bytes: number | null;
  quota_period: QuotaPeriod | null;
  quota_direction: QuotaDirection | null;
  quota_reset_day: number | null;
  quota_reset_hour: number | null;
  quota_used: number;
  quota_period_start: string | null;
  quota_resets_at: string | null;
  quota_spent: number;
}

function quotaOf(row: QuotaColumns): Quota | null {
  return row.quota_bytes === null
    ? null
    : {
        bytes: row.quota_bytes,
        period: row.quota_period!,
        direction: row.quota_direction!,
        reset_day: row.quota_reset_day!,
        reset_hour: row.quota_reset_hour!,
      };
}

export function usageOf(row: QuotaColumns): QuotaUsage | null {
  return row.quota_bytes === null
    ? null
    : { used_bytes: row.quota_used, period_started_at: row.quota_period_start!, resets_at: row.quota_resets_at };
}

/** A rule's state from its columns; `ruleStateSql` is the same in SQL. */
export function stateOf(expired: boolean, held: Hold | null, quotaSpent: boolean, enabled: boolean): RuleState {
  return expired ? 'expired' : (held ?? (quotaSpent ? 'quota_exceeded' : enabled ? 'active' : 'disabled'));
}

function planLimitsOf(
  row: Pick<RuleRow, 'held_connections' | 'held_bandwidth' | 'held_new_connections'>,
): PlanLimits | null {
  return row.held_connections === null && row.held_bandwidth === null && row.held_new_connections === null
    ? null
    : {
        max_connections: row.held_connections,
        bandwidth_limit: row.held_bandwidth,
        max_new_connections_per_second: row.held_new_connections,
      };
}

/** A rule from its row (COLUMNS); `ruleJsonSql` is the same in SQL, for the pages SQLite renders. */
export function toRule(row: RuleRow): Rule {
  return {
    id: row.id,
    name: row.name,
    owner_id: row.owner_id,
    node_id: row.node_id,
    tunnel_id: row.tunnel_id,
    protocol: row.protocol,
    listen_port: row.listen_port,
    listen_port_end: row.listen_port_end,
    targets: JSON.parse(row.targets) as string[],
    strategy: row.strategy,
    weights: row.weights === null ? null : (JSON.parse(row.weights) as number[]),
    forwarding: row.forwarding,
    enabled: row.enabled === 1,
    tags: JSON.parse(row.tags) as string[],
    allow_sources: JSON.parse(row.allow_sources) as string[],
    deny_sources: JSON.parse(row.deny_sources) as string[],
    max_connections: row.max_connections,
    bandwidth_limit: row.bandwidth_limit,
    max_new_connections_per_second: row.max_new_connections_per_second,
    expires_at: row.expires_at,
    proxy_protocol: row.proxy_protocol,
    quota: quotaOf(row),
    health_check: row.health_check === null ? null : (JSON.parse(row.health_check) as HealthCheck),
    preserve_source: row.preserve_source === 1,
    source_address: row.source_address,
    allow_hours: row.allow_hours === null ? null : (JSON.parse(row.allow_hours) as AllowHours),
    state: stateOf(row.expired === 1, row.held, row.quota_spent === 1, row.enabled === 1),
    quota_usage: usageOf(row),
    plan_limits: planLimitsOf(row),
    health: row.health === null ? null : (JSON.parse(row.health) as RuleHealth),
    sync: {
      state: row.sync_state,
      error: row.sync_error === null ? null : JSON.parse(row.sync_error),
      applied_at: row.sync_applied_at,
      applied_path: row.sync_path,
      relayed_because: row.sync_path === 'relay' ? row.relay_reason : null,
    },
    traffic: { bytes_in: row.bytes_in, bytes_out: row.bytes_out, refused: row.refused },
    version: row.version,
    created_at: row.created_at,
    updated_at: row.updated_at,
  };
}

/** A rule's state in SQL, over the columns of `row` (`NEW`, or a table's name): `stateOf`'s twin. */
function ruleStateSql(row: string, asJson = false): string {
  const word = (state: RuleState) => (asJson ? `'"${state}"'` : `'${state}'`);
  const held = asJson ? `json_quote(${row}.held)` : `${row}.held`;
  return `CASE WHEN ${row}.expired = 1 THEN ${word('expired')} WHEN ${row}.held IS NOT NULL THEN ${held}
    WHEN ${row}.quota_spent = 1 THEN ${word('quota_exceeded')} WHEN ${row}.enabled = 1 THEN ${word('active')}
    ELSE ${word('disabled')} END`;
}

/**
 * A rule's API JSON in SQL, over the columns of `row`: `toRule`'s twin, as text put together in one `concat`, a page's
 * rows as they are read. Spent where it counts, a few hundred nanoseconds a row: `json_object` built each row in
 * SQLite's binary JSON and parsed every JSON column again (2.2 µs a row), and `json_quote` costs 90 ns a call, so it
 * quotes only text a writer chose (a name, a reason). What goes in as it is: the JSON columns, which hold the text
 * `JSON.stringify` made (the store writes them so, and only the store); the times, which are the master's RFC 3339 text
 * (`formatTime`: digits, dashes, colons, T and Z); and the words the schema's CHECKs hold columns to.
 */
function ruleJsonSql(row: string): string {
  const r = (column: string) => `${row}.${column}`;
  const text = (column: string) => `CASE WHEN ${r(column)} IS NULL THEN 'null' ELSE json_quote(${r(column)}) END`;
  const bare = (column: string) => `CASE WHEN ${r(column)} IS NULL THEN 'null' ELSE concat('"', ${r(column)}, '"') END`;
  const word = (column: string) => `'"', ${r(column)}, '"'`;
  const number = (column: string) => `coalesce(${r(column)}, 'null')`;
  const json = number;
  const flag = (column: string) => `CASE ${r(column)} WHEN 1 THEN 'true' ELSE 'false' END`;
  const count = (column: string) => safeCount(r(column));
  return `concat('{"id":', ${r('id')}, ',"name":', json_quote(${r('name')}), ',"owner_id":', ${r('owner_id')},
    ',"node_id":', ${r('node_id')}, ',"tunnel_id":', ${number('tunnel_id')}, ',"protocol":', ${word('protocol')},
    ',"listen_port":', ${r('listen_port')}, ',"listen_port_end":', ${number('listen_port_end')},
    ',"targets":', ${r('targets')}, ',"strategy":', ${word('strategy')}, ',"weights":', ${json('weights')},
    ',"forwarding":', ${word('forwarding')}, ',"enabled":', ${flag('enabled')}, ',"tags":', ${r('tags')},
    ',"allow_sources":', ${r('allow_sources')}, ',"deny_sources":', ${r('deny_sources')},
    ',"max_connections":', ${number('max_connections')}, ',"bandwidth_limit":', ${number('bandwidth_limit')},
    ',"max_new_connections_per_second":', ${number('max_new_connections_per_second')},
    ',"expires_at":', ${bare('expires_at')}, ',"proxy_protocol":', ${word('proxy_protocol')},
    ',"quota":', CASE WHEN ${r('quota_bytes')} IS NULL THEN 'null' ELSE concat('{"bytes":', ${r('quota_bytes')},
      ',"period":', ${bare('quota_period')}, ',"direction":', ${bare('quota_direction')},
      ',"reset_day":', ${number('quota_reset_day')}, ',"reset_hour":', ${number('quota_reset_hour')}, '}') END,
    ',"health_check":', ${json('health_check')}, ',"preserve_source":', ${flag('preserve_source')},
    ',"source_address":', ${text('source_address')}, ',"allow_hours":', ${json('allow_hours')},
    ',"state":', ${ruleStateSql(row, true)},
    ',"quota_usage":', CASE WHEN ${r('quota_bytes')} IS NULL THEN 'null' ELSE concat(
      '{"used_bytes":', ${count('quota_used')}, ',"period_started_at":', ${bare('quota_period_start')},
      ',"resets_at":', ${bare('quota_resets_at')}, '}') END,
    ',"plan_limits":', CASE WHEN ${r('held_connections')} IS NULL AND ${r('held_bandwidth')} IS NULL
        AND ${r('held_new_connections')} IS NULL THEN 'null'
      ELSE concat('{"max_connections":', ${number('held_connections')},
        ',"bandwidth_limit":', ${number('held_bandwidth')},
        ',"max_new_connections_per_second":', ${number('held_new_connections')}, '}') END,
    ',"health":', ${json('health')},
    ',"sync":{"state":', ${word('sync_state')}, ',"error":', ${json('sync_error')},
      ',"applied_at":', ${bare('sync_applied_at')}, ',"applied_path":', ${bare('sync_path')},
      ',"relayed_because":', CASE WHEN ${r('sync_path')} = 'relay' THEN ${text('relay_reason')} ELSE 'null' END,
    '},"traffic":{"bytes_in":', ${count('bytes_in')}, ',"bytes_out":', ${count('bytes_out')},
      ',"refused":', ${count('refused')},
    '},"version":', ${r('version')}, ',"created_at":"', ${r('created_at')},
    '","updated_at":"', ${r('updated_at')}, '"}')`;
}

export const QUOTA_COLUMNS = `quota_bytes, quota_period, quota_direction, quota_reset_day, quota_reset_hour,
  ${safeCount('quota_used')} AS quota_used, quota_period_start, quota_resets_at, quota_spent`;

/** What `toRule` reads of a rule's row. */
export const COLUMNS = `id, name, owner_id, node_id, tunnel_id, protocol, listen_port, listen_port_end, targets,
  strategy, weights, forwarding,
  enabled, tags, allow_sources, deny_sources, max_connections, bandwidth_limit, max_new_connections_per_second,
  expires_at, proxy_protocol, expired, held, held_connections, held_bandwidth, held_new_connections, ${QUOTA_COLUMNS},
  health_check, preserve_source, source_address, allow_hours, health,
  ${safeCount('refused')} AS refused, sync_state, sync_error, sync_applied_at, sync_path, relay_reason,
  ${safeCount('bytes_in')} AS bytes_in, ${safeCount('bytes_out')} AS bytes_out, version, created_at, updated_at`;

/** A rule's API JSON, rendered from its row in `rules`. */
export const RULE_JSON = ruleJsonSql('rules');

/** A rule's state as its JSON shows it, for filtering on it. */
export const STATE = ruleStateSql('rules');

/** A rule's row counted in the tallies as it comes (NEW) or taken out as it goes (OLD). */
function tally(row: 'NEW' | 'OLD'): string {
  const sign = row === 'NEW' ? '+' : '-';
  return `UPDATE rule_tallies SET rules = rules ${sign} 1, enabled = enabled ${sign} ${row}.enabled,
      bytes_in = bytes_in ${sign} ${safeCount(`${row}.bytes_in`)},
      bytes_out = bytes_out ${sign} ${safeCount(`${row}.bytes_out`)}
    WHERE sync_state = ${row}.sync_state;`;
}

/** Rules and their traffic counted by sync state, so the dashboard reads three rows instead of every rule. */
const ruleTallies: Derivation = {
  name: 'rule_tallies',
  triggers: [
    trigger(
      'rule_tallies_insert',
      `AFTER INSERT ON rules BEGIN
    ${tally('NEW')}
  END`,
    ),
    trigger(
      'rule_tallies_delete',
      `AFTER DELETE ON rules BEGIN
    ${tally('OLD')}
  END`,
    ),
    trigger(
      'rule_tallies_update',
      `AFTER UPDATE OF sync_state, enabled, bytes_in, bytes_out ON rules BEGIN
    ${tally('OLD')}
    ${tally('NEW')}
  END`,
    ),
  ],
  derivedOnCopies: ['rule_tallies'],
  rebuild: `DELETE FROM rule_tallies;
    INSERT INTO rule_tallies (sync_state, rules, enabled, bytes_in, bytes_out)
    SELECT s.value, count(r.id), coalesce(sum(r.enabled), 0), total(${safeCount('r.bytes_in')}),
      total(${safeCount('r.bytes_out')})
    FROM json_each('["pending", "applied", "failed"]') s LEFT JOIN rules r ON r.sync_state = s.value
    GROUP BY s.value`,
};

/** Rule names indexed by trigram (an FTS5 table over rules), so a search reads only the names that can match. */
const ruleNames: Derivation = {
  name: 'rule_names',
  triggers: [
    trigger(
      'rule_names_insert',
      `AFTER INSERT ON rules BEGIN
    INSERT INTO rule_names (rowid, name) VALUES (NEW.id, NEW.name);
  END`,
    ),
    trigger(
      'rule_names_delete',
      `AFTER DELETE ON rules BEGIN
    INSERT INTO rule_names (rule_names, rowid, name) VALUES ('delete', OLD.id, OLD.name);
  END`,
    ),
    trigger(
      'rule_names_update',
      `AFTER UPDATE OF name ON rules BEGIN
    INSERT INTO rule_names (rule_names, rowid, name) VALUES ('delete', OLD.id, OLD.name);
    INSERT INTO rule_names (rowid, name) VALUES (NEW.id, NEW.name);
  END`,
    ),
  ],
  // The full-text table and what FTS5 keeps it in (external content: no _content table).
  derivedOnCopies: ['rule_names', 'rule_names_data', 'rule_names_idx', 'rule_names_config'],
  rebuild: "INSERT INTO rule_names (rule_names) VALUES ('rebuild')",
};

/** How many rules each user owns, so that a user's usage (and a plan's room) is one row read, not a count. */
const ownerTallies: Derivation = {
  name: 'owner_tallies',
  triggers: [
    trigger(
      'owner_tallies_insert',
      `AFTER INSERT ON rules BEGIN
    INSERT INTO owner_tallies (rowid, rules) VALUES (NEW.owner_id, 1)
      ON CONFLICT (rowid) DO UPDATE SET rules = rules + 1;
  END`,
    ),
    trigger(
      'owner_tallies_delete',
      `AFTER DELETE ON rules BEGIN
    UPDATE owner_tallies SET rules = rules - 1 WHERE rowid = OLD.owner_id;
  END`,
    ),
    trigger(
      'owner_tallies_update',
      `AFTER UPDATE OF owner_id ON rules WHEN OLD.owner_id IS NOT NEW.owner_id BEGIN
    UPDATE owner_tallies SET rules = rules - 1 WHERE rowid = OLD.owner_id;
    INSERT INTO owner_tallies (rowid, rules) VALUES (NEW.owner_id, 1)
      ON CONFLICT (rowid) DO UPDATE SET rules = rules + 1;
  END`,
    ),
  ],
  derivedOnCopies: ['owner_tallies'],
  rebuild: `DELETE FROM owner_tallies;
    INSERT INTO owner_tallies (rowid, rules) SELECT owner_id, count(*) FROM rules GROUP BY owner_id`,
};

/** What triggers keep of rules. */
export const ruleDerivations: readonly Derivation[] = [ruleTallies, ruleNames, ownerTallies];
