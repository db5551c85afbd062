// SQL for forwarding rules. Every insert or update claims the rule's ports (triggers: see ports.ts)
// and resets its sync state to pending: the node has not applied the new version yet. A rule
// through a tunnel is applied only when both its node (the entry) and the exit applied it.

import type { SortSql, ruleSorts } from '../domain/sorts.ts';
import type { SQLInputValue } from 'node:sqlite';
import { quotaPeriodAt, type Quota } from '../domain/quota.ts';
import type { Standing } from '../domain/plans.ts';
import { formatTime } from '../schema/schema.ts';
import type { JsonPage } from './page.ts';
import { DomainError } from '../errors/errors.ts';
import { lastPort } from '../domain/ranges.ts';
import { safeSum } from './counts.ts';
import type { Database } from './database.ts';
import { FilterBound, FilteredCount, FilteredQuery, KeysetQueries, type SortedPage } from './filters.ts';
import { PortStore, type Claim } from './ports.ts';
import {
  COLUMNS,
  QUOTA_COLUMNS,
  RULE_JSON,
  STATE,
  stateOf,
  toRule,
  usageOf,
  type QuotaColumns,
  type RuleRow,
} from './rule-view.ts';
import {
  healthOf,
  ruleFieldsOf,
  transportsOf,
  type RuleHealth,
  type TargetHealth,
  type Path,
  type Rule,
  type OwnedRuleFields,
  type RuleFields,
  type SyncState,
} from '../domain/rules.ts';

/**
 * The quota columns of a rule written with `quota` at `at`. A quota whose period is unchanged keeps its period and
 * count (`current`, the row's columns before); a new or changed one starts a period at `at`, keeping the count.
 */
function quotaColumns(quota: Quota | null, current: QuotaColumns | null, at: string): QuotaColumns {
  const samePeriod =
    quota !== null &&
    current?.quota_bytes != null &&
    current.quota_period === quota.period &&
    current.quota_reset_day === quota.reset_day &&
    current.quota_reset_hour === quota.reset_hour;
  const period = quota && !samePeriod ? quotaPeriodAt(quota, Date.parse(at)) : null;
  return {
    quota_bytes: quota?.bytes ?? null,
    quota_period: quota?.period ?? null,
    quota_direction: quota?.direction ?? null,
    quota_reset_day: quota?.reset_day ?? null,
    quota_reset_hour: quota?.reset_hour ?? null,
    quota_used: quota ? (current?.quota_used ?? 0) : 0,
    quota_period_start: !quota ? null : samePeriod ? current!.quota_period_start : formatTime(period!.start),
    quota_resets_at: !quota ? null : samePeriod ? current!.quota_resets_at : nullableTime(period!.next),
    quota_spent: quota ? (current?.quota_spent ?? 0) : 0,
  };
}

/** The columns in the order the insert names them. */
function quotaValues(c: QuotaColumns): SQLInputValue[] {
  return [
    c.quota_bytes,
    c.quota_period,
    c.quota_direction,
    c.quota_reset_day,
    c.quota_reset_hour,
    c.quota_used,
    c.quota_period_start,
    c.quota_resets_at,
    c.quota_spent,
  ];
}

/** How a rule's targets stand before its node has checked them: unknown, each; null without a health_check. */
function freshHealth(fields: Pick<RuleFields, 'health_check' | 'targets'>): RuleHealth | null {
  if (!fields.health_check) return null;
  return healthOf(fields.targets.map((target) => ({ target, status: 'unknown', error: null, checked_at: null })));
}

function nullableTime(ms: number | null): string | null {
  return ms === null ? null : formatTime(ms);
}

export interface RuleFilter {
  afterId: number;
  limit: number;
  owner_id: number | null;
  node_id: number | null;
  tunnel_id: number | null;
  enabled: boolean | null;
  protocol: string | null;
  tag: string | null;
  q: string | null;
  sync_state: string | null;
  state: string | null;
  /** A port the rule listens on (its listen_port, or one of its range). */
  port: number | null;
  /** Also count every match (JsonPage.total). */
  count?: boolean;
  /** Another order than by id (then afterId is not used). */
  sorted?: SortedPage;
}

/** What lists of rules sort by, as SQL: each key then id. */
export const RULE_SORTS: SortSql<typeof ruleSorts> = {
  id: 'rules.id',
  name: 'rules.name COLLATE NOCASE',
  listen_port: 'rules.listen_port',
  traffic: '(rules.bytes_in + rules.bytes_out)',
  sync_state: 'rules.sync_state',
  node_id: 'rules.node_id',
};

/** A filter that selects every rule. */
export const EVERY_RULE = {
  owner_id: null,
  node_id: null,
  tunnel_id: null,
  enabled: null,
  protocol: null,
  tag: null,
  q: null,
  sync_state: null,
  state: null,
  port: null,
} as const satisfies Omit<RuleFilter, 'afterId' | 'limit'>;

interface SyncError {
  code: string;
  detail: string;
}

/** What one end of a tunnel reported for a rule. */
interface EndResult {
  state: SyncState;
  error: SyncError | null;
}

function parseResult(text: string | null): EndResult | null {
  return text === null ? null : (JSON.parse(text) as EndResult);
}

/** Each list filter's condition on `rules` (see FilteredQuery). */
export const RULE_FILTERS = {
  owner_id: 'rules.owner_id = :owner_id',
  node_id: 'rules.node_id = :node_id',
  tunnel_id: 'rules.tunnel_id = :tunnel_id',
  enabled: 'rules.enabled = :enabled',
  protocol: 'rules.protocol = :protocol',
  // Through their index, rule_tag_index: each rule's own tags read for every rule grew with the fleet.
  tag: 'rules.id IN (SELECT rule_id FROM rule_tag_index WHERE tag = :tag)',
  q: 'instr(lower(rules.name), lower(:q)) > 0',
  // A name search's trigrams (see trigramPattern), through their index (rule_names): which names may hold the text,
  // which q then checks. Set by the store, not asked for.
  trigrams: 'rules.id IN (SELECT rowid FROM rule_names WHERE name LIKE :trigrams)',
  sync_state: 'rules.sync_state = :sync_state',
  state: `(${STATE}) = :state`,
  // Through the claims, a row per port (an index of ports): a rule's range holds the port if it claims it.
  port: 'rules.id IN (SELECT rule_id FROM port_claims WHERE port = :port AND rule_id IS NOT NULL)',
};

/**
 * The LIKE pattern for the trigram index of a name search (rule_names), or null where the index cannot answer it:
 * fewer than three characters, or a LIKE wildcard in the text (the index takes no ESCAPE).
 */
function trigramPattern(q: string | null): string | null {
  return q !== null && [...q].length >= 3 && !/[%_]/.test(q) ? `%${q}%` : null;
}

/** The 409 for a port someone else holds, naming the port and its holder. */
export function portTaken(claim: Claim, port = claim.port): DomainError {
  const by = claim.rule_id !== null ? `rule ${claim.rule_id}` : `tunnel ${claim.tunnel_id}`;
  return new DomainError('conflict', `port ${port}/${claim.protocol} on node ${claim.node_id} is taken by ${by}`, {
    conflict: {
      kind: 'port',
      nodeId: claim.node_id,
      protocol: claim.protocol,
      port,
      ruleId: claim.rule_id,
      tunnelId: claim.tunnel_id,
    },
  });
}

/** Whether a rule with `expiresAt` has stopped at `at` (both timestamps in the same UTC form, which sorts). */
function expiredAt(expiresAt: string | null, at: string): boolean {
  return expiresAt !== null && expiresAt <= at;
}

/** Whether every control of `fields` is at its default (see controlDefaults). */
function withoutControls(f: RuleFields): boolean {
  return (
    f.tags.length === 0 &&
    f.allow_sources.length === 0 &&
    f.deny_sources.length === 0 &&
    f.max_connections === null &&
    f.bandwidth_limit === null &&
    f.max_new_connections_per_second === null &&
    f.expires_at === null &&
    f.proxy_protocol === 'none' &&
    f.quota === null &&
    f.health_check === null &&
    !f.preserve_source &&
    f.source_address === null &&
    f.allow_hours === null
  );
}

/** What an insert binds of where a rule listens and sends, in the order both inserts name the columns. */
function placeValues(f: OwnedRuleFields): SQLInputValue[] {
  return [
    f.name,
    f.owner_id,
    f.node_id,
    f.tunnel_id,
    f.protocol,
    f.listen_port,
    f.listen_port_end,
    JSON.stringify(f.targets),
    f.strategy,
    f.weights && JSON.stringify(f.weights),
    f.forwarding,
    Number(f.enabled),
  ];
}

/** What the full insert binds of a rule's controls (and what they start as), in the order it names the columns. */
function controlValues(f: RuleFields, at: string): SQLInputValue[] {
  return [
    JSON.stringify(f.tags),
    JSON.stringify(f.allow_sources),
    JSON.stringify(f.deny_sources),
    f.max_connections,
    f.bandwidth_limit,
    f.max_new_connections_per_second,
    f.expires_at,
    f.proxy_protocol,
    Number(expiredAt(f.expires_at, at)),
    ...quotaValues(quotaColumns(f.quota, null, at)),
    f.health_check && JSON.stringify(f.health_check),
    f.health_check && JSON.stringify(freshHealth(f)),
    Number(f.preserve_source),
    f.source_address,
    f.allow_hours && JSON.stringify(f.allow_hours),
  ];
}

/** A rule just inserted (`fields` are its writable fields alone): what the table's defaults make of a new row. */
function created(id: number, fields: OwnedRuleFields, at: string): Rule {
  return {
    id,
    ...fields,
    targets: [...fields.targets],
    state: stateOf(expiredAt(fields.expires_at, at), null, false, fields.enabled),
    quota_usage: fields.quota && usageOf(quotaColumns(fields.quota, null, at)),
    plan_limits: null,
    health: freshHealth(fields),
    sync: { state: 'pending', error: null, applied_at: null, applied_path: null, relayed_because: null },
    traffic: { bytes_in: 0, bytes_out: 0, refused: 0 },
    version: 1,
    created_at: at,
    updated_at: at,
  };
}

export class RuleStore {
  private readonly ports: PortStore;
  private readonly byId;
  private readonly listQuery;
  private readonly pageQuery;
  private readonly searchQuery;
  private readonly taggedQuery;
  private readonly jsonStmt;
  private readonly insertRows;
  private readonly insertPlainRows;
  private readonly updateStmt;
  private readonly deleteStmt;
  private readonly byNodeStmt;
  private readonly idsByNodeStmt;
  private readonly idsByTunnelStmt;
  private readonly countsStmt;
  private readonly ownedCountsStmt;
  private readonly pendingStmt;
  private readonly relayedStmt;
  private readonly syncStmt;
  private readonly byTunnelStmt;
  private readonly sidesStmt;
  private readonly resultsStmt;
  private readonly dueStmt;
  private readonly ownedStmt;
  private readonly carriersStmt;
  private readonly heldStmt;
  private readonly holdStmt;
  private readonly tenantsOnStmt;
  private readonly ownersStmt;
  private readonly placesStmt;
  private readonly quotaStmt;
  private readonly healthStmt;
  private readonly spendStmt;
  private readonly resetsDueStmt;
  private readonly anyResetDueStmt;
  private readonly resetStmt;
  private readonly anyDueStmt;
  private readonly expireStmt;
  private readonly countQuery;
  /** What the filters in use may read (see FilterBound). */
  readonly bound;
  private readonly sortedQueries;
  private readonly idsQuery;

  constructor(db: Database) {
    this.ports = new PortStore(db);
    this.byId = db.prepare(`SELECT ${COLUMNS} FROM rules WHERE id = ?`);
    this.listQuery = new FilteredQuery(
      db,
      `SELECT ${COLUMNS} FROM rules WHERE id > :after {filters} ORDER BY id LIMIT :limit`,
      RULE_FILTERS,
    );
    // Pages are JSON SQLite renders of the page's rows alone (RULE_JSON), one row past the page to tell whether
    // another follows. Rendering them as they were read cost 0.8 µs a row more than reading a copy triggers kept
    // rendered (rule_views until migration 59), which was 1,026 of the 1,455 bytes a rule took on disk and a
    // rendering at every write, a report's included. (Concatenating in SQL took twice as long: a group_concat in id
    // order sorts in a temporary b-tree. Taking only the ids here and their JSON from a cache, as nodes do, took
    // three times as long where random pages of 100,000 rules mostly miss the cache.)
    this.pageQuery = new FilteredQuery(
      db,
      `SELECT rules.id, ${RULE_JSON} AS json FROM rules
        WHERE rules.id > :after {filters} ORDER BY rules.id LIMIT :limit + 1`,
      RULE_FILTERS,
    );
    // A name search alone walks the trigram index in id order and stops at the page's end (scanning a million names
    // took 80 ms; this, under a millisecond). The filters still apply, instr() included, so what matches is what the
    // scan would match (the index folds case beyond ASCII, and says only which names hold every trigram). With an
    // owner, a node or a tunnel the scan of their rules through its index is the shorter way.
    this.searchQuery = new FilteredQuery(
      db,
      `SELECT rules.id, ${RULE_JSON} AS json FROM rule_names n JOIN rules ON rules.id = n.rowid
        WHERE n.name LIKE :trigrams AND n.rowid > :after {filters} ORDER BY n.rowid LIMIT :limit + 1`,
      RULE_FILTERS,
    );
    // A tag's page (without a name search) walks the tag's index in id order, as far as the page goes: its condition
    // in pageQuery makes SQLite list every rule of the tag first.
    this.taggedQuery = new FilteredQuery(
      db,
      `SELECT rules.id, ${RULE_JSON} AS json FROM rule_tag_index t JOIN rules ON rules.id = t.rule_id
        WHERE t.tag = :tagged AND t.rule_id > :after {filters} ORDER BY t.rule_id LIMIT :limit + 1`,
      RULE_FILTERS,
    );
    this.countQuery = new FilteredCount(db, 'SELECT count(*) AS n FROM rules WHERE 1 {filters}', RULE_FILTERS);
    this.bound = new FilterBound(db, 'rules', 'rules', RULE_FILTERS);
    this.sortedQueries = new KeysetQueries(
      db,
      { select: `rules.id, ${RULE_JSON} AS json`, from: 'rules', id: 'rules.id' },
      RULE_SORTS,
      this.bound,
    );
    this.idsQuery = new FilteredQuery(
      db,
      'SELECT id FROM rules WHERE id > :after {filters} ORDER BY id LIMIT :limit',
      RULE_FILTERS,
    );
    this.jsonStmt = db.prepare(`SELECT version, owner_id, ${RULE_JSON} AS json FROM rules WHERE id = ?`);
    // Positional parameters and no RETURNING: an import runs this for 100,000 rules, and binding by
    // name plus reading the row back cost about 5 µs of its 15.
    this.insertRows = db.insertRows(
      `INSERT INTO rules (name, owner_id, node_id, tunnel_id, protocol, listen_port, listen_port_end, targets, strategy,
        weights, forwarding, enabled, tags, allow_sources, deny_sources, max_connections, bandwidth_limit,
        max_new_connections_per_second, expires_at, proxy_protocol, expired, quota_bytes, quota_period,
        quota_direction, quota_reset_day, quota_reset_hour, quota_used, quota_period_start, quota_resets_at,
        quota_spent, health_check, health, preserve_source, source_address, allow_hours, created_at, updated_at)
        VALUES`,
      37,
    );
    this.insertPlainRows = db.insertRows(
      `INSERT INTO rules (name, owner_id, node_id, tunnel_id, protocol, listen_port, listen_port_end, targets, strategy,
        weights, forwarding, enabled, created_at, updated_at) VALUES`,
      14,
    );
    this.updateStmt =
      db.prepare(`UPDATE rules SET name = :name, owner_id = :owner_id, node_id = :node_id, tunnel_id = :tunnel_id,
        protocol = :protocol, listen_port = :listen_port, listen_port_end = :listen_port_end, targets = :targets,
        strategy = :strategy, weights = :weights,
        forwarding = :forwarding,
        enabled = :enabled, tags = :tags, allow_sources = :allow_sources, deny_sources = :deny_sources,
        max_connections = :max_connections, bandwidth_limit = :bandwidth_limit,
        max_new_connections_per_second = :max_new_connections_per_second, expires_at = :expires_at,
        proxy_protocol = :proxy_protocol, expired = :expired, quota_bytes = :quota_bytes, quota_period = :quota_period,
        quota_direction = :quota_direction, quota_reset_day = :quota_reset_day, quota_reset_hour = :quota_reset_hour,
        quota_used = :quota_used, quota_period_start = :quota_period_start, quota_resets_at = :quota_resets_at,
        quota_spent = :quota_spent, health_check = :health_check, health = :health,
        preserve_source = :preserve_source, source_address = :source_address, allow_hours = :allow_hours,
        sync_state = 'pending',
        sync_error = NULL,
        sync_path = NULL, entry_result = NULL, exit_result = NULL, version = version + 1,
        updated_at = :at
      WHERE id = :id`);
    this.deleteStmt = db.prepare('DELETE FROM rules WHERE id = ?');
    this.byNodeStmt = db.prepare(`SELECT ${COLUMNS} FROM rules WHERE node_id = ? ORDER BY id`);
    this.idsByNodeStmt = db.prepare('SELECT id FROM rules WHERE node_id = ? ORDER BY id');
    this.idsByTunnelStmt = db.prepare('SELECT id FROM rules WHERE tunnel_id = ? ORDER BY id');
    // Kept by the tallies' triggers (rule-view.ts).
    this.countsStmt = db.prepare('SELECT rules AS total, enabled, sync_state FROM rule_tallies');
    // A tenant's, through the owner index: as many rows as they have rules (what their plan bounds).
    this.ownedCountsStmt = db.prepare(`SELECT sync_state, count(*) AS total, coalesce(sum(enabled), 0) AS enabled,
        ${safeSum('max(0, bytes_in)')} AS bytes_in, ${safeSum('max(0, bytes_out)')} AS bytes_out
      FROM rules WHERE owner_id = ? GROUP BY sync_state`);
    this.relayedStmt = db.prepare(
      "UPDATE rules SET sync_path = 'relay', relay_reason = ? WHERE node_id = ? AND sync_path = 'kernel'",
    );
    this.pendingStmt = db.prepare(`UPDATE rules SET sync_state = 'pending', sync_error = NULL, sync_path = NULL,
        entry_result = NULL, exit_result = NULL
      WHERE id = ?`);
    this.byTunnelStmt = db.prepare(`SELECT ${COLUMNS} FROM rules WHERE tunnel_id = ? ORDER BY id`);
    this.sidesStmt = db.prepare(`SELECT r.node_id, r.entry_result, r.exit_result,
        CASE WHEN t.id IS NOT NULL THEN json_array(t.exit_node_id) END AS first_exit,
        (SELECT json_group_array(node_id) FROM (SELECT node_id FROM tunnel_exits e WHERE e.tunnel_id = t.id
          ORDER BY position)) AS more_exits
      FROM rules r LEFT JOIN tunnels t ON t.id = r.tunnel_id WHERE r.id = ?`);
    this.resultsStmt = db.prepare(`UPDATE rules SET entry_result = :entry, exit_result = :exit, sync_state = :state,
        sync_error = :error, sync_applied_at = CASE WHEN :state = 'applied' THEN :at ELSE sync_applied_at END,
        sync_path = CASE WHEN :state = 'applied' THEN 'relay' END,
        relay_reason = 'rules through a tunnel are carried by the relay'
      WHERE id = :id`);
    this.dueStmt = db.prepare(`SELECT ${COLUMNS} FROM rules WHERE expires_at <= ? AND expired = 0`);
    this.ownersStmt = db.prepare('SELECT id, owner_id FROM rules WHERE id IN (SELECT value FROM json_each(?))');
    this.placesStmt = db.prepare(
      'SELECT id, node_id, owner_id FROM rules WHERE id IN (SELECT value FROM json_each(?))',
    );
    this.tenantsOnStmt = db.prepare(`SELECT id, owner_id FROM rules
      WHERE (node_id = ?1 OR tunnel_id IN (SELECT id FROM tunnels WHERE exit_node_id = ?1
          UNION SELECT tunnel_id FROM tunnel_exits WHERE node_id = ?1))
        AND owner_id IN (SELECT id FROM users WHERE role = 'tenant') ORDER BY id`);
    this.ownedStmt = db.prepare(`SELECT ${COLUMNS} FROM rules WHERE owner_id = ? ORDER BY id`);
    this.carriersStmt = db.prepare(`SELECT node_id FROM rules WHERE owner_id = ?1
      UNION SELECT exit_node_id FROM tunnels WHERE id IN (SELECT tunnel_id FROM rules WHERE owner_id = ?1)
      UNION SELECT node_id FROM tunnel_exits WHERE tunnel_id IN (SELECT tunnel_id FROM rules WHERE owner_id = ?1)`);
    // Through rules_held (migration 37), whose condition this repeats.
    this.heldStmt = db.prepare(`SELECT ${COLUMNS} FROM rules WHERE owner_id = ?
      AND (held IS NOT NULL OR held_connections IS NOT NULL OR held_bandwidth IS NOT NULL
        OR held_new_connections IS NOT NULL) ORDER BY id`);
    this.holdStmt = db.prepare(`UPDATE rules SET held = :held, held_connections = :max_connections,
        held_bandwidth = :bandwidth_limit, held_new_connections = :max_new_connections_per_second,
        sync_state = 'pending', sync_error = NULL, sync_path = NULL,
        entry_result = NULL, exit_result = NULL, version = version + :bump
      WHERE id = :id AND (held IS NOT :held OR held_connections IS NOT :max_connections
        OR held_bandwidth IS NOT :bandwidth_limit OR held_new_connections IS NOT :max_new_connections_per_second)`);
    this.quotaStmt = db.prepare(`SELECT ${QUOTA_COLUMNS}, targets, health_check, health FROM rules WHERE id = ?`);
    this.healthStmt = db.prepare(
      'UPDATE rules SET health = ? WHERE id = ? AND node_id = ? AND health_check IS NOT NULL',
    );
    this.spendStmt =
      db.prepare(`UPDATE rules SET enabled = 0, quota_spent = 1, sync_state = 'pending', sync_error = NULL,
        sync_path = NULL, entry_result = NULL, exit_result = NULL, version = version + 1
      WHERE id IN (SELECT value FROM json_each(?)) AND enabled = 1 AND quota_used >= quota_bytes
      RETURNING ${COLUMNS}`);
    this.resetsDueStmt = db.prepare(`SELECT ${COLUMNS} FROM rules WHERE quota_resets_at <= ?`);
    this.anyResetDueStmt = db.prepare('SELECT 1 FROM rules WHERE quota_resets_at <= ? LIMIT 1');
    this.resetStmt = db.prepare(`UPDATE rules SET quota_used = 0, quota_period_start = :start, quota_resets_at = :next,
        enabled = CASE WHEN quota_spent = 1 THEN 1 ELSE enabled END, quota_spent = 0, sync_state = 'pending',
        sync_error = NULL, sync_path = NULL, entry_result = NULL, exit_result = NULL, version = version + 1
      WHERE id = :id`);
    this.anyDueStmt = db.prepare('SELECT 1 FROM rules WHERE expires_at <= ? AND expired = 0 LIMIT 1');
    this.expireStmt = db.prepare(`UPDATE rules SET expired = 1, sync_state = 'pending', sync_error = NULL,
        sync_path = NULL, entry_result = NULL, exit_result = NULL, version = version + 1
      WHERE id = ?`);
    // A result the rule has already (a rule a config carried unchanged) writes nothing: a node of 10,000 rules
    // acknowledges each config with all of them, and each written row is rendered again by the view's triggers.
    this.syncStmt = db.prepare(`UPDATE rules SET sync_state = :state, sync_error = :error,
        sync_applied_at = CASE WHEN :state = 'applied' THEN :at ELSE sync_applied_at END,
        sync_path = CASE WHEN :state = 'applied' THEN :path END, relay_reason = :reason
      WHERE id = :id AND node_id = :node_id
        AND NOT (sync_state = :state AND sync_error IS :error AND relay_reason IS :reason
          AND sync_path IS CASE WHEN :state = 'applied' THEN :path END)`);
  }

  find(id: number): Rule | undefined {
    const row = this.byId.get(id) as RuleRow | undefined;
    return row && toRule(row);
  }

  list(filter: RuleFilter): Rule[] {
    return (this.listQuery.all(this.filterParams(filter)) as unknown as RuleRow[]).map(toRule);
  }

  private filterParams(filter: RuleFilter) {
    return { after: filter.afterId, limit: filter.limit, ...this.conditions(filter) };
  }

  /**
   * The values of the filters' conditions: a name search of three characters or more reads its trigrams' index, but
   * where an owner, a node or a tunnel narrow the list (their rules, read through its index, are the shorter way).
   */
  private conditions(filter: RuleFilter) {
    const narrowed = filter.owner_id !== null || filter.node_id !== null || filter.tunnel_id !== null;
    return {
      owner_id: filter.owner_id,
      node_id: filter.node_id,
      tunnel_id: filter.tunnel_id,
      enabled: filter.enabled === null ? null : Number(filter.enabled),
      protocol: filter.protocol,
      tag: filter.tag,
      q: filter.q,
      trigrams: narrowed ? null : trigramPattern(filter.q),
      sync_state: filter.sync_state,
      state: filter.state,
      port: filter.port,
    };
  }

  /** The ids of the rules `filter` matches, in order, up to its limit: what a batch selects by filter. */
  idsMatching(filter: RuleFilter): number[] {
    this.bound.check(this.conditions(filter));
    return (this.idsQuery.all(this.filterParams(filter)) as { id: number }[]).map((row) => row.id);
  }

  /** The page of `filter` as JSON text, for answering lists without building objects. */
  page(filter: Omit<RuleFilter, 'limit'> & { limit: number }): JsonPage {
    this.bound.check(this.conditions(filter));
    if (filter.sorted) return this.sortedPage(filter, filter.sorted);
    const params = this.filterParams(filter);
    // A name search walks its trigrams' index in id order (searchQuery), a tag its own (taggedQuery), as far as the
    // page goes.
    const { trigrams, ...rest } = params;
    const rows = (
      trigrams
        ? this.searchQuery.all({ ...rest, trigrams })
        : params.tag !== null
          ? this.taggedQuery.all({ ...params, tag: null, tagged: params.tag })
          : this.pageQuery.all(params)
    ) as { id: number; json: string }[];
    const more = rows.length > filter.limit;
    if (more) rows.pop();
    return {
      items: `[${rows.map((row) => row.json).join(',')}]`,
      lastId: more ? rows[rows.length - 1]!.id : null,
      total: filter.count ? this.countQuery.total(this.conditions(filter)) : undefined,
    };
  }

  private sortedPage(filter: RuleFilter, sorted: SortedPage): JsonPage {
    const { rows, lastKey } = this.sortedQueries.rows<{ id: number; json: string }>(
      sorted,
      filter.limit,
      this.conditions(filter),
    );
    const more = rows.length > filter.limit;
    if (more) rows.pop();
    return {
      items: `[${rows.map((row) => row.json).join(',')}]`,
      lastId: more ? rows[rows.length - 1]!.id : null,
      lastKey,
      total: filter.count ? this.countQuery.total(this.conditions(filter)) : undefined,
    };
  }

  /** One rule as JSON text, with its version for the ETag. */
  json(id: number): { version: number; owner_id: number; json: string } | undefined {
    return this.jsonStmt.get(id) as { version: number; owner_id: number; json: string } | undefined;
  }

  forNode(nodeId: number): Rule[] {
    return (this.byNodeStmt.all(nodeId) as unknown as RuleRow[]).map(toRule);
  }

  /** The rules through a tunnel, which its exit serves. */
  forTunnel(tunnelId: number): Rule[] {
    return (this.byTunnelStmt.all(tunnelId) as unknown as RuleRow[]).map(toRule);
  }

  /** The claim that would stop `fields` from listening, if any (`except` is the rule being replaced). */
  portHolder(
    fields: Pick<RuleFields, 'node_id' | 'protocol' | 'listen_port' | 'listen_port_end'>,
    exceptRuleId?: number,
  ): Claim | undefined {
    return this.ports.holder(
      fields.node_id,
      transportsOf(fields.protocol),
      fields.listen_port,
      lastPort(fields),
      exceptRuleId === undefined ? {} : { rule_id: exceptRuleId },
    );
  }

  /** Throws `conflict` naming the holder when the port is taken. */
  insert(fields: OwnedRuleFields, at: string): Rule {
    return this.insertAll([fields], at)[0]!;
  }

  /**
   * Inserts rules in order, each claiming its ports; throws `conflict` naming the holder at
   * the first whose port is taken (by a rule or tunnel, or an earlier one of `list`). Given
   * `holders`, what `portHolder` found for each rule in this transaction since the last
   * insert, a rule's port is not looked up again unless an earlier one of `list` claims it.
   */
  insertAll(list: readonly OwnedRuleFields[], at: string, holders?: readonly (Claim | undefined)[]): Rule[] {
    const made: Rule[] = [];
    const pending: OwnedRuleFields[] = [];
    const pendingPorts = new Set<string>();
    const flush = () => {
      // Rules with every control at its default (what an import mostly holds) leave those columns to the table's
      // defaults: a third of the values to bind.
      const ids = pending.every(withoutControls)
        ? this.insertPlainRows(pending.map((f) => [...placeValues(f), at, at]))
        : this.insertRows(pending.map((f) => [...placeValues(f), ...controlValues(f, at), at, at]));
      for (const [i, fields] of pending.entries()) made.push(created(ids[i]!, fields, at));
      pending.length = 0;
      pendingPorts.clear();
    };
    let inserted = false;
    for (const [i, fields] of list.entries()) {
      const ports = transportsOf(fields.protocol).flatMap((transport) => {
        const keys: string[] = [];
        for (let port = fields.listen_port; port <= lastPort(fields); port++)
          keys.push(`${fields.node_id}/${transport}/${port}`);
        return keys;
      });
      // A port an earlier rule of the list claims: that rule goes in first, to be named as the holder.
      if (ports.some((port) => pendingPorts.has(port))) {
        flush();
        inserted = true;
      }
      const holder = holders && !inserted ? holders[i] : this.portHolder(fields);
      if (holder) throw portTaken(holder);
      pending.push(fields);
      for (const port of ports) pendingPorts.add(port);
    }
    if (pending.length > 0) flush();
    return made;
  }

  /**
   * Writes rule `id` as `fields`; with `quotaSpent` it is stopped by its quota (disabled, state quota_exceeded), as
   * the service decides. Throws `conflict` naming the holder when the port is taken.
   */
  update(id: number, fields: OwnedRuleFields, at: string, quotaSpent = false): Rule {
    const holder = this.portHolder(fields, id);
    if (holder) throw portTaken(holder);
    const current = this.quotaStmt.get(id) as unknown as QuotaColumns &
      Pick<RuleRow, 'targets' | 'health_check' | 'health'>;
    const quota = quotaColumns(fields.quota, current, at);
    // What the node reported of the targets stands until the targets or their check change.
    const healthCheck = fields.health_check && JSON.stringify(fields.health_check);
    const sameChecks = healthCheck === current.health_check && JSON.stringify(fields.targets) === current.targets;
    const health = sameChecks ? current.health : healthCheck && JSON.stringify(freshHealth(fields));
    let enabled = fields.enabled;
    if (enabled) quota.quota_spent = 0;
    if (quotaSpent) {
      enabled = false;
      quota.quota_spent = 1;
    }
    this.updateStmt.run({
      ...this.params({ ...fields, enabled }, at),
      ...quota,
      health_check: healthCheck,
      health,
      id,
    });
    return this.find(id)!;
  }

  delete(id: number): void {
    this.deleteStmt.run(id);
  }

  /**
   * The rules of node `nodeId` the kernel carried are carried by the relay now, which holds every kernel rule's port:
   * the node's kernel path went (its table could not be written back). Returns how many.
   */
  relayedByNode(nodeId: number, reason: string | null): number {
    return Number(this.relayedStmt.run(reason, nodeId).changes);
  }

  markPending(id: number): void {
    this.pendingStmt.run(id);
  }

  /**
   * Records what a node reported for the rule: its own node, or for a rule through a tunnel any of the tunnel's
   * exits. A rule through a tunnel is failed when its entry or an exit failed it, applied when the entry and every
   * exit applied it, pending until then (an exit offline keeps it pending; it is carried by the relay, as tunnels
   * are). A node that is neither is ignored. `path`: how the node carries it (null from an agent older than the
   * kernel path).
   */
  setSync(
    id: number,
    nodeId: number,
    state: SyncState,
    error: SyncError | null,
    at: string,
    path: Path | null = null,
    relayReason: string | null = null,
  ) {
    const row = this.sidesStmt.get(id) as
      | {
          node_id: number;
          first_exit: string | null;
          more_exits: string;
          entry_result: string | null;
          exit_result: string | null;
        }
      | undefined;
    if (!row) return;
    if (row.first_exit === null) {
      this.syncStmt.run({
        id,
        node_id: nodeId,
        state,
        error: error === null ? null : JSON.stringify(error),
        at,
        path,
        reason: relayReason,
      });
      return;
    }
    const exitNodes = [...(JSON.parse(row.first_exit) as number[]), ...(JSON.parse(row.more_exits) as number[])];
    const side = row.node_id === nodeId ? 'entry' : exitNodes.includes(nodeId) ? 'exit' : null;
    if (side === null) return;
    const result: EndResult = { state, error };
    const entry = side === 'entry' ? result : parseResult(row.entry_result);
    // Each exit's, by node: of the exits the tunnel has now.
    const before = (row.exit_result ? JSON.parse(row.exit_result) : {}) as Record<string, EndResult>;
    const exits: Record<string, EndResult> = {};
    for (const exitNode of exitNodes) {
      const said = exitNode === nodeId && side === 'exit' ? result : before[String(exitNode)];
      if (said) exits[String(exitNode)] = said;
    }
    const failedAt = exitNodes.find((exitNode) => exits[String(exitNode)]?.state === 'failed');
    const failed = failedAt === undefined ? undefined : exits[String(failedAt)];
    let combined: EndResult = { state: 'pending', error: null };
    if (entry?.state === 'failed') combined = entry;
    else if (failed?.error)
      combined = {
        state: 'failed',
        error: { code: failed.error.code, detail: `at the exit node ${failedAt}: ${failed.error.detail}` },
      };
    else if (entry?.state === 'applied' && exitNodes.every((exitNode) => exits[String(exitNode)]?.state === 'applied'))
      combined = { state: 'applied', error: null };
    this.resultsStmt.run({
      id,
      entry: entry && JSON.stringify(entry),
      exit: JSON.stringify(exits),
      state: combined.state,
      error: combined.error && JSON.stringify(combined.error),
      at,
    });
  }

  idsOfNode(nodeId: number): number[] {
    return (this.idsByNodeStmt.all(nodeId) as { id: number }[]).map((row) => row.id);
  }

  idsOfTunnel(tunnelId: number): number[] {
    return (this.idsByTunnelStmt.all(tunnelId) as { id: number }[]).map((row) => row.id);
  }

  /** The counts of `counts()` over the rules of one owner, and the bytes they carried. */
  ownedCounts(ownerId: number): {
    total: number;
    enabled: number;
    by_sync_state: Record<SyncState, number>;
    traffic: { bytes_in: number; bytes_out: number };
  } {
    const rows = this.ownedCountsStmt.all(ownerId) as {
      sync_state: SyncState;
      total: number;
      enabled: number;
      bytes_in: number;
      bytes_out: number;
    }[];
    const by = { pending: 0, applied: 0, failed: 0 };
    for (const row of rows) by[row.sync_state] = row.total;
    const add = (key: 'total' | 'enabled' | 'bytes_in' | 'bytes_out') => rows.reduce((n, r) => n + r[key], 0);
    return {
      total: add('total'),
      enabled: add('enabled'),
      by_sync_state: by,
      traffic: { bytes_in: add('bytes_in'), bytes_out: add('bytes_out') },
    };
  }

  counts(): { total: number; enabled: number; by_sync_state: Record<SyncState, number> } {
    const rows = this.countsStmt.all() as { total: number; enabled: number; sync_state: SyncState }[];
    const by = { pending: 0, applied: 0, failed: 0 };
    for (const row of rows) by[row.sync_state] = row.total;
    return {
      total: rows.reduce((n, r) => n + r.total, 0),
      enabled: rows.reduce((n, r) => n + r.enabled, 0),
      by_sync_state: by,
    };
  }

  private params(fields: OwnedRuleFields, at: string) {
    const { quota: _quota, health_check: _check, ...columns } = ruleFieldsOf(fields);
    return {
      ...columns,
      targets: JSON.stringify(fields.targets),
      weights: fields.weights && JSON.stringify(fields.weights),
      enabled: Number(fields.enabled),
      preserve_source: Number(fields.preserve_source),
      tags: JSON.stringify(fields.tags),
      allow_sources: JSON.stringify(fields.allow_sources),
      deny_sources: JSON.stringify(fields.deny_sources),
      allow_hours: fields.allow_hours && JSON.stringify(fields.allow_hours),
      expired: Number(expiredAt(fields.expires_at, at)),
      at,
    };
  }

  /**
   * Of `ids` (rules a traffic report just counted), disables those whose quota the period has used up, marking them
   * spent; returns them as they are now.
   */
  spendQuotas(ids: readonly number[]): Rule[] {
    // One statement for a report's rules: most have no quota, and each would otherwise cost a statement of its own.
    return (this.spendStmt.all(JSON.stringify(ids)) as unknown as RuleRow[]).map(toRule);
  }

  /**
   * Records how the node `nodeId` says the targets of its rule `id` stand: only targets the rule has, each as its
   * latest report says (one not in the report stays as it was). Ignored for a rule that is not the node's, or has
   * no health_check.
   */
  setHealth(id: number, nodeId: number, reported: readonly TargetHealth[]): void {
    const rule = this.find(id);
    if (!rule || rule.node_id !== nodeId || !rule.health) return;
    const byTarget = new Map(reported.map((t) => [t.target, t]));
    const targets = rule.health.targets.map((t) => byTarget.get(t.target) ?? t);
    const health = JSON.stringify(healthOf(targets));
    if (health !== JSON.stringify(rule.health)) this.healthStmt.run(health, id, nodeId);
  }

  /** Whether a quota's period has come to its end at `at`. */
  anyQuotaResetDue(at: string): boolean {
    return this.anyResetDueStmt.get(at) !== undefined;
  }

  /**
   * Starts the next period of every quota whose period ended at or before `at`: the count starts over, and a rule its
   * quota stopped is enabled again. Returns the rules as they were.
   */
  resetQuotas(at: string): Rule[] {
    const due = (this.resetsDueStmt.all(at) as unknown as RuleRow[]).map(toRule);
    for (const rule of due) {
      const period = quotaPeriodAt(rule.quota!, Date.parse(at));
      this.resetStmt.run({ id: rule.id, start: formatTime(period.start), next: nullableTime(period.next) });
    }
    return due;
  }

  /** The rules user `ownerId` owns, through the owner index. */
  ownedBy(ownerId: number): Rule[] {
    return (this.ownedStmt.all(ownerId) as unknown as RuleRow[]).map(toRule);
  }

  /** The nodes that carry rules of `ownerId`: where they listen, and the exits of the tunnels they go through. */
  carriersOf(ownerId: number): number[] {
    return (this.carriersStmt.all(ownerId) as { node_id: number }[]).map((row) => row.node_id);
  }

  /** Where each rule of `ids` listens and whose it is (by primary key; rules gone are left out). */
  placesOf(ids: readonly number[]): Map<number, { node_id: number; owner_id: number }> {
    const rows = this.placesStmt.all(JSON.stringify(ids)) as { id: number; node_id: number; owner_id: number }[];
    return new Map(rows.map((row) => [row.id, { node_id: row.node_id, owner_id: row.owner_id }]));
  }

  /** The owners of the rules of `ids` (by primary key; rules gone are left out). */
  ownersOf(ids: readonly number[]): Map<number, number> {
    const rows = this.ownersStmt.all(JSON.stringify(ids)) as { id: number; owner_id: number }[];
    return new Map(rows.map((row) => [row.id, row.owner_id]));
  }

  /** The rules of user `ownerId` that their standing holds in any way (see hold). */
  heldOf(ownerId: number): Rule[] {
    return (this.heldStmt.all(ownerId) as unknown as RuleRow[]).map(toRule);
  }

  /** The rules tenants own that node `nodeId` carries (listening there, or leaving there through a tunnel). */
  tenantsOn(nodeId: number): { id: number; owner_id: number }[] {
    return this.tenantsOnStmt.all(nodeId) as { id: number; owner_id: number }[];
  }

  /**
   * Records what its owner's standing does to rule `id` now; whether that changed anything (then it is pending).
   * `written`: in the write that made or replaced it, whose version it keeps (it is one change).
   */
  hold(id: number, standing: Standing, written = false): boolean {
    return Number(this.holdStmt.run({ id, ...standing, bump: written ? 0 : 1 }).changes) > 0;
  }

  /** Whether a rule's expires_at is at or before `at` and it is not marked expired yet. */
  anyDue(at: string): boolean {
    return this.anyDueStmt.get(at) !== undefined;
  }

  /** Marks the rules whose expires_at is at or before `at` expired; returns them (as they were). */
  expire(at: string): Rule[] {
    const due = (this.dueStmt.all(at) as unknown as RuleRow[]).map(toRule);
    for (const rule of due) this.expireStmt.run(rule.id);
    return due;
  }
}
