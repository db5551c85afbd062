// SQL for alerting: channels (where notifications go; a channel's secret sealed by the caller), alert rules (what to
// watch), alerts (what a rule finds now, from pending to firing to clearing), and deliveries (the outbox: each
// notification to a channel, with its stable message id, attempts and outcome, kept as the delivery log).

import type { AlertCondition } from '../domain/alerts.ts';
import type { Database } from './database.ts';
import { unlessTaken } from './errors.ts';
import type { AlertState, ChannelType, DeliveryState } from '../domain/alerts.ts';

/** What a channel is, but its secret: the fields of its type (a webhook's url, a bot's chat, a mail server). */
export type ChannelConfig = Record<string, string | number | boolean | string[] | null>;

export interface ChannelFields {
  name: string;
  type: ChannelType;
  config: ChannelConfig;
}

export interface Channel extends ChannelFields {
  id: number;
  /** Whether its secret is set (an imported bot or mail login has none until it is). */
  has_secret: boolean;
  /** Since when its deliveries have been failing; null while they go through. */
  failing_since: string | null;
  last_error: string | null;
  version: number;
  created_at: string;
  updated_at: string;
}

interface ChannelRow {
  id: number;
  has_secret: number;
  name: string;
  type: ChannelType;
  config: string;
  failing_since: string | null;
  last_error: string | null;
  version: number;
  created_at: string;
  updated_at: string;
}

const toChannel = (row: ChannelRow): Channel => ({
  ...row,
  has_secret: row.has_secret === 1,
  config: JSON.parse(row.config) as ChannelConfig,
});

const CHANNEL_COLUMNS = `id, name, type, config, secret IS NOT NULL AS has_secret, failing_since, last_error, version,
  created_at, updated_at`;

export class ChannelStore {
  private readonly byId;
  private readonly byName;
  private readonly pageStmt;
  private readonly countStmt;
  private readonly manyStmt;
  private readonly insertStmt;
  private readonly updateStmt;
  private readonly deleteStmt;
  private readonly secretStmt;
  private readonly outcomeStmt;

  constructor(db: Database) {
    this.byId = db.prepare(`SELECT ${CHANNEL_COLUMNS} FROM channels WHERE id = ?`);
    this.byName = db.prepare(`SELECT ${CHANNEL_COLUMNS} FROM channels WHERE name = ?`);
    this.pageStmt = db.prepare(`SELECT ${CHANNEL_COLUMNS} FROM channels WHERE id > ? ORDER BY id LIMIT ?`);
    this.countStmt = db.prepare('SELECT count(*) AS n FROM channels');
    this.manyStmt = db.prepare(`SELECT id FROM channels WHERE id IN (SELECT value FROM json_each(?))`);
    this.insertStmt = db.prepare(`INSERT INTO channels (name, type, config, secret, created_at, updated_at)
      VALUES (:name, :type, :config, :secret, :at, :at) RETURNING ${CHANNEL_COLUMNS}`);
    this.updateStmt = db.prepare(`UPDATE channels SET name = :name, type = :type, config = :config,
      secret = CASE WHEN :replace THEN :secret ELSE coalesce(:secret, secret) END, version = version + 1,
      updated_at = :at WHERE id = :id
      RETURNING ${CHANNEL_COLUMNS}`);
    this.deleteStmt = db.prepare('DELETE FROM channels WHERE id = ?');
    this.secretStmt = db.prepare('SELECT secret FROM channels WHERE id = ?');
    // A success clears the failure; a failure keeps when the failing began.
    this.outcomeStmt = db.prepare(`UPDATE channels SET last_error = :error,
      failing_since = CASE WHEN :error IS NULL THEN NULL ELSE coalesce(failing_since, :at) END WHERE id = :id`);
  }

  find(id: number): Channel | undefined {
    const row = this.byId.get(id) as ChannelRow | undefined;
    return row && toChannel(row);
  }

  page(afterId: number, limit: number): Channel[] {
    return (this.pageStmt.all(afterId, limit + 1) as unknown as ChannelRow[]).map(toChannel);
  }

  count(): number {
    return Number((this.countStmt.get() as { n: number }).n);
  }

  findByName(name: string): Channel | undefined {
    const row = this.byName.get(name) as ChannelRow | undefined;
    return row && toChannel(row);
  }

  /** Which of `ids` are channels. */
  existing(ids: readonly number[]): Set<number> {
    return new Set((this.manyStmt.all(JSON.stringify(ids)) as { id: number }[]).map((row) => Number(row.id)));
  }

  /** Inside a write. Throws `conflict` for a name in use. */
  insert(fields: ChannelFields, secret: Uint8Array | null, at: string): Channel {
    return unlessTaken(
      `the channel name ${fields.name}`,
      () => this.findByName(fields.name)?.id,
      () => toChannel(this.insertStmt.get({ ...this.params(fields), secret, at }) as unknown as ChannelRow),
    );
  }

  /** Inside a write; a null secret keeps the one it has unless `replace`. Throws `conflict` for a name in use. */
  update(id: number, fields: ChannelFields, secret: Uint8Array | null, replace: boolean, at: string): Channel {
    const params = { ...this.params(fields), secret, replace: replace ? 1 : 0, at, id };
    return unlessTaken(
      `the channel name ${fields.name}`,
      () => this.findByName(fields.name)?.id,
      () => toChannel(this.updateStmt.get(params) as unknown as ChannelRow),
    );
  }

  delete(id: number): void {
    this.deleteStmt.run(id);
  }

  /** The channel's secret as sealed, if it has one. */
  sealedSecret(id: number): Uint8Array | null {
    const row = this.secretStmt.get(id) as { secret: Uint8Array | null } | undefined;
    return row?.secret ?? null;
  }

  /** Inside a write: how the channel's last delivery went (`error` null: it went through). */
  recordOutcome(id: number, error: string | null, at: string): void {
    this.outcomeStmt.run({ id, error, at });
  }

  private params(fields: ChannelFields) {
    return { name: fields.name, type: fields.type, config: JSON.stringify(fields.config) };
  }
}

/** Which resources an alert rule watches: all of its condition's kind, or those named, on the nodes or tags named. */
export interface AlertSelector {
  node_ids: number[];
  resource_ids: number[];
  tags: string[];
}

export interface AlertRuleFields {
  name: string;
  condition: AlertCondition;
  /** A percentage, days or minutes, for the conditions that take one (service/alert-rules.ts); else null. */
  threshold: number | null;
  selector: AlertSelector;
  for_seconds: number;
  repeat_seconds: number | null;
  damping_seconds: number;
  channel_ids: number[];
  enabled: boolean;
}

export interface AlertRule extends AlertRuleFields {
  id: number;
  version: number;
  created_at: string;
  updated_at: string;
}

interface AlertRuleRow extends Omit<AlertRule, 'selector' | 'channel_ids' | 'enabled'> {
  selector: string;
  channel_ids: string;
  enabled: number;
}

const toAlertRule = (row: AlertRuleRow): AlertRule => ({
  ...row,
  selector: JSON.parse(row.selector) as AlertSelector,
  channel_ids: JSON.parse(row.channel_ids) as number[],
  enabled: row.enabled === 1,
});

const RULE_COLUMNS = `id, name, condition, threshold, selector, for_seconds, repeat_seconds, damping_seconds,
  channel_ids, enabled, version, created_at, updated_at`;

export class AlertRuleStore {
  private readonly byId;
  private readonly byName;
  private readonly pageStmt;
  private readonly countStmt;
  private readonly enabledStmt;
  private readonly insertStmt;
  private readonly updateStmt;
  private readonly deleteStmt;
  private readonly usingChannelStmt;

  constructor(db: Database) {
    this.byId = db.prepare(`SELECT ${RULE_COLUMNS} FROM alert_rules WHERE id = ?`);
    this.byName = db.prepare(`SELECT ${RULE_COLUMNS} FROM alert_rules WHERE name = ?`);
    this.pageStmt = db.prepare(`SELECT ${RULE_COLUMNS} FROM alert_rules WHERE id > ? ORDER BY id LIMIT ?`);
    this.countStmt = db.prepare('SELECT count(*) AS n FROM alert_rules');
    this.enabledStmt = db.prepare(`SELECT ${RULE_COLUMNS} FROM alert_rules WHERE enabled = 1 ORDER BY id`);
    const values = `:name, :condition, :threshold, :selector, :for_seconds, :repeat_seconds, :damping_seconds,
      :channel_ids, :enabled`;
    this.insertStmt = db.prepare(`INSERT INTO alert_rules (name, condition, threshold, selector, for_seconds,
      repeat_seconds, damping_seconds, channel_ids, enabled, created_at, updated_at)
      VALUES (${values}, :at, :at) RETURNING ${RULE_COLUMNS}`);
    this.updateStmt = db.prepare(`UPDATE alert_rules SET name = :name, condition = :condition,
      threshold = :threshold, selector = :selector, for_seconds = :for_seconds, repeat_seconds = :repeat_seconds,
      damping_seconds = :damping_seconds, channel_ids = :channel_ids, enabled = :enabled, version = version + 1,
      updated_at = :at WHERE id = :id RETURNING ${RULE_COLUMNS}`);
    this.deleteStmt = db.prepare('DELETE FROM alert_rules WHERE id = ?');
    this.usingChannelStmt = db.prepare(`SELECT id FROM alert_rules
      WHERE EXISTS (SELECT 1 FROM json_each(channel_ids) WHERE value = ?) ORDER BY id`);
  }

  find(id: number): AlertRule | undefined {
    const row = this.byId.get(id) as AlertRuleRow | undefined;
    return row && toAlertRule(row);
  }

  page(afterId: number, limit: number): AlertRule[] {
    return (this.pageStmt.all(afterId, limit + 1) as unknown as AlertRuleRow[]).map(toAlertRule);
  }

  count(): number {
    return Number((this.countStmt.get() as { n: number }).n);
  }

  findByName(name: string): AlertRule | undefined {
    const row = this.byName.get(name) as AlertRuleRow | undefined;
    return row && toAlertRule(row);
  }

  /** Every enabled rule, for an evaluation (their number is the operators' to keep: each is one row). */
  enabled(): AlertRule[] {
    return (this.enabledStmt.all() as unknown as AlertRuleRow[]).map(toAlertRule);
  }

  /** The rules that notify channel `channelId`. */
  usingChannel(channelId: number): number[] {
    return (this.usingChannelStmt.all(channelId) as { id: number }[]).map((row) => Number(row.id));
  }

  /** Inside a write. Throws `conflict` for a name in use. */
  insert(fields: AlertRuleFields, at: string): AlertRule {
    return unlessTaken(
      `the alert rule name ${fields.name}`,
      () => this.findByName(fields.name)?.id,
      () => toAlertRule(this.insertStmt.get({ ...params(fields), at }) as unknown as AlertRuleRow),
    );
  }

  /** Inside a write. Throws `conflict` for a name in use. */
  update(id: number, fields: AlertRuleFields, at: string): AlertRule {
    return unlessTaken(
      `the alert rule name ${fields.name}`,
      () => this.findByName(fields.name)?.id,
      () => toAlertRule(this.updateStmt.get({ ...params(fields), at, id }) as unknown as AlertRuleRow),
    );
  }

  /** Inside a write; its alerts go with it. */
  delete(id: number): void {
    this.deleteStmt.run(id);
  }
}

function params(fields: AlertRuleFields) {
  return {
    name: fields.name,
    condition: fields.condition,
    threshold: fields.threshold,
    selector: JSON.stringify(fields.selector),
    for_seconds: fields.for_seconds,
    repeat_seconds: fields.repeat_seconds,
    damping_seconds: fields.damping_seconds,
    channel_ids: JSON.stringify(fields.channel_ids),
    enabled: fields.enabled ? 1 : 0,
  };
}

/**
 * How an alert stands: pending while its condition has held for less than the rule's for_seconds, firing once it has
 * (and was notified), clearing once the condition is gone but for less than the rule's damping_seconds.
 */

export interface Alert {
  id: number;
  alert_rule_id: number;
  resource: string;
  resource_id: number;
  /** Where it is, for silences: its node (a tunnel's entry, and other_node_id its exit), its tags. */
  node_id: number | null;
  other_node_id: number | null;
  tags: string[];
  state: AlertState;
  /** A turn of it fell in a silence and was not notified. */
  muted: boolean;
  summary: string;
  since: string;
  fired_at: string | null;
  notified_at: string | null;
  cleared_at: string | null;
}

interface AlertRow extends Omit<Alert, 'tags' | 'muted'> {
  tags: string;
  muted: number;
}

const toAlert = (row: AlertRow): Alert => ({ ...row, tags: JSON.parse(row.tags) as string[], muted: row.muted === 1 });

const ALERT_COLUMNS = `id, alert_rule_id, resource, resource_id, node_id, other_node_id, tags, state, muted, summary,
  since, fired_at, notified_at, cleared_at`;

export class AlertStore {
  private readonly ofRuleStmt;
  private readonly pageStmt;
  private readonly insertStmt;
  private readonly updateStmt;
  private readonly deleteStmt;
  private readonly firingStmt;
  private readonly forgetStmt;
  private readonly countStmt;

  constructor(db: Database) {
    this.forgetStmt = db.prepare('DELETE FROM alerts WHERE alert_rule_id = ?');
    this.countStmt = db.prepare('SELECT count(*) AS n FROM alerts');
    this.ofRuleStmt = db.prepare(`SELECT ${ALERT_COLUMNS} FROM alerts WHERE alert_rule_id = ?`);
    this.pageStmt = db.prepare(`SELECT ${ALERT_COLUMNS} FROM alerts WHERE id > ? ORDER BY id LIMIT ?`);
    this.insertStmt = db.prepare(`INSERT INTO alerts (alert_rule_id, resource, resource_id, node_id, other_node_id,
      tags, state, muted, summary, since, fired_at, notified_at) VALUES (:alert_rule_id, :resource, :resource_id,
      :node_id, :other_node_id, :tags, :state, :muted, :summary, :since, :fired_at, :notified_at)`);
    this.updateStmt = db.prepare(`UPDATE alerts SET state = :state, muted = :muted, summary = :summary,
      fired_at = :fired_at, notified_at = :notified_at, cleared_at = :cleared_at WHERE id = :id`);
    this.deleteStmt = db.prepare('DELETE FROM alerts WHERE id = ?');
    this.firingStmt = db.prepare("SELECT count(*) AS n FROM alerts WHERE state IN ('firing', 'clearing')");
  }

  /** What rule `ruleId` found last. */
  ofRule(ruleId: number): Alert[] {
    return (this.ofRuleStmt.all(ruleId) as unknown as AlertRow[]).map(toAlert);
  }

  page(afterId: number, limit: number): Alert[] {
    return (this.pageStmt.all(afterId, limit + 1) as unknown as AlertRow[]).map(toAlert);
  }

  count(): number {
    return Number((this.countStmt.get() as { n: number }).n);
  }

  /** How many alerts are firing (clearing ones included: they have not been resolved). */
  firing(): number {
    return Number((this.firingStmt.get() as { n: number }).n);
  }

  insert(alert: Omit<Alert, 'id' | 'cleared_at'>): void {
    this.insertStmt.run({
      alert_rule_id: alert.alert_rule_id,
      resource: alert.resource,
      resource_id: alert.resource_id,
      node_id: alert.node_id,
      other_node_id: alert.other_node_id,
      tags: JSON.stringify(alert.tags),
      state: alert.state,
      muted: alert.muted ? 1 : 0,
      summary: alert.summary,
      since: alert.since,
      fired_at: alert.fired_at,
      notified_at: alert.notified_at,
    });
  }

  update(alert: Alert): void {
    this.updateStmt.run({
      id: alert.id,
      state: alert.state,
      muted: alert.muted ? 1 : 0,
      summary: alert.summary,
      fired_at: alert.fired_at,
      notified_at: alert.notified_at,
      cleared_at: alert.cleared_at,
    });
  }

  delete(id: number): void {
    this.deleteStmt.run(id);
  }

  /** Inside a write: rule `ruleId`'s alerts, all. */
  forgetRule(ruleId: number): void {
    this.forgetStmt.run(ruleId);
  }
}

/** How many deliveries a channel's log keeps at most (besides those still pending). */
export const DELIVERIES_KEPT = 10_000;

export interface Delivery {
  id: number;
  /** The same for every attempt, so a receiver can drop a repeat (Standard Webhooks' webhook-id). */
  message_id: string;
  channel_id: number;
  state: DeliveryState;
  attempts: number;
  next_attempt_at: string | null;
  last_error: string | null;
  created_at: string;
  finished_at: string | null;
}

/** A delivery with what it carries, as the outbox hands it out. */
export interface DueDelivery extends Delivery {
  payload: string;
}

const DELIVERY_COLUMNS = `id, message_id, channel_id, state, attempts, next_attempt_at, last_error, created_at,
  finished_at`;

export class DeliveryStore {
  private readonly insertStmt;
  private readonly boundStmt;
  private readonly finishedStmt;
  private readonly dueStmt;
  private readonly pageStmt;
  private readonly sentStmt;
  private readonly retryStmt;
  private readonly failedStmt;
  private readonly pruneStmt;
  private readonly nextDueStmt;

  constructor(db: Database) {
    this.insertStmt = db.prepare(`INSERT INTO deliveries (message_id, channel_id, payload, state, next_attempt_at,
      created_at) VALUES (?, ?, ?, 'pending', ?, ?)`);
    this.boundStmt = db.prepare(`DELETE FROM deliveries WHERE channel_id = :channel AND state <> 'pending'
      AND id <= (SELECT id FROM deliveries WHERE channel_id = :channel ORDER BY channel_id, id DESC
        LIMIT 1 OFFSET ${DELIVERIES_KEPT})`);
    this.finishedStmt = db.prepare(`INSERT INTO deliveries (message_id, channel_id, payload, state, attempts,
      last_error, created_at, finished_at) VALUES (:message_id, :channel_id, :payload, :state, 1, :error, :at, :at)
      RETURNING ${DELIVERY_COLUMNS}`);
    this.dueStmt = db.prepare(`SELECT ${DELIVERY_COLUMNS}, payload FROM deliveries
      WHERE state = 'pending' AND next_attempt_at <= ? ORDER BY next_attempt_at, id LIMIT ?`);
    this.nextDueStmt = db.prepare(
      "SELECT min(next_attempt_at) AS at FROM deliveries WHERE state = 'pending' AND next_attempt_at IS NOT NULL",
    );
    this.pageStmt = new Map([
      [false, db.prepare(`SELECT ${DELIVERY_COLUMNS} FROM deliveries WHERE id < ? ORDER BY id DESC LIMIT ?`)],
      [
        true,
        db.prepare(`SELECT ${DELIVERY_COLUMNS} FROM deliveries WHERE channel_id = ? AND id < ?
          ORDER BY channel_id, id DESC LIMIT ?`),
      ],
    ]);
    this.sentStmt = db.prepare(`UPDATE deliveries SET state = 'sent', attempts = attempts + 1, last_error = NULL,
      next_attempt_at = NULL, finished_at = :at WHERE id = :id AND state = 'pending'`);
    this.retryStmt = db.prepare(`UPDATE deliveries SET attempts = attempts + 1, last_error = :error,
      next_attempt_at = :next WHERE id = :id AND state = 'pending'`);
    this.failedStmt = db.prepare(`UPDATE deliveries SET state = 'failed', attempts = attempts + 1,
      last_error = :error, next_attempt_at = NULL, finished_at = :at WHERE id = :id AND state = 'pending'`);
    this.pruneStmt = db.prepare("DELETE FROM deliveries WHERE created_at < ? AND state <> 'pending'");
  }

  /**
   * Inside a write: a notification for channel `channelId`, due at once. The channel's log keeps its newest
   * DELIVERIES_KEPT finished deliveries: what alerts fire, agents can make fire as fast as they drop their links.
   */
  enqueue(messageId: string, channelId: number, payload: unknown, at: string): void {
    this.insertStmt.run(messageId, channelId, JSON.stringify(payload), at, at);
    this.boundStmt.run({ channel: channelId });
  }

  /** Inside a write: a delivery made in one attempt, done (`error` null) or failed. */
  recordFinished(messageId: string, channelId: number, payload: unknown, error: string | null, at: string): Delivery {
    const state = error === null ? 'sent' : 'failed';
    const params = { message_id: messageId, channel_id: channelId, payload: JSON.stringify(payload), state, error, at };
    const delivery = this.finishedStmt.get(params) as unknown as Delivery;
    this.boundStmt.run({ channel: channelId });
    return delivery;
  }

  /** The pending deliveries due at `at`, oldest first, at most `limit`. */
  due(at: string, limit: number): DueDelivery[] {
    return this.dueStmt.all(at, limit) as unknown as DueDelivery[];
  }

  /** When the next pending delivery is due, if any is. */
  nextDue(): string | null {
    return (this.nextDueStmt.get() as { at: string | null }).at;
  }

  /** Newest first: the delivery log, of one channel or all. */
  page(beforeId: number, limit: number, channelId: number | null): Delivery[] {
    const rows =
      channelId === null
        ? this.pageStmt.get(false)!.all(beforeId, limit + 1)
        : this.pageStmt.get(true)!.all(channelId, beforeId, limit + 1);
    return rows as unknown as Delivery[];
  }

  sent(id: number, at: string): void {
    this.sentStmt.run({ id, at });
  }

  retry(id: number, error: string, next: string): void {
    this.retryStmt.run({ id, error, next });
  }

  failed(id: number, error: string, at: string): void {
    this.failedStmt.run({ id, error, at });
  }

  /** Finished deliveries made before `before` (the audit log's retention); returns how many were deleted. */
  prune(before: string): number {
    return Number(this.pruneStmt.run(before).changes);
  }
}

export interface SilenceFields {
  comment: string;
  /** What it mutes: alerts of these alert rules, on these nodes, of resources with these tags (each empty: any). */
  alert_rule_ids: number[];
  node_ids: number[];
  tags: string[];
  starts_at: string;
  ends_at: string;
}

export interface Silence extends SilenceFields {
  id: number;
  version: number;
  created_at: string;
  updated_at: string;
}

interface SilenceRow extends Omit<Silence, 'alert_rule_ids' | 'node_ids' | 'tags'> {
  alert_rule_ids: string;
  node_ids: string;
  tags: string;
}

const toSilence = (row: SilenceRow): Silence => ({
  ...row,
  alert_rule_ids: JSON.parse(row.alert_rule_ids) as number[],
  node_ids: JSON.parse(row.node_ids) as number[],
  tags: JSON.parse(row.tags) as string[],
});

const SILENCE_COLUMNS =
  'id, comment, alert_rule_ids, node_ids, tags, starts_at, ends_at, version, created_at, updated_at';

export class SilenceStore {
  private readonly byId;
  private readonly pageStmt;
  private readonly countStmt;
  private readonly activeStmt;
  private readonly insertStmt;
  private readonly updateStmt;
  private readonly deleteStmt;
  private readonly pruneStmt;

  constructor(db: Database) {
    this.byId = db.prepare(`SELECT ${SILENCE_COLUMNS} FROM silences WHERE id = ?`);
    this.pageStmt = db.prepare(`SELECT ${SILENCE_COLUMNS} FROM silences WHERE id > ? ORDER BY id LIMIT ?`);
    this.countStmt = db.prepare('SELECT count(*) AS n FROM silences');
    this.activeStmt = db.prepare(`SELECT ${SILENCE_COLUMNS} FROM silences WHERE ends_at > :at AND starts_at <= :at
      ORDER BY id LIMIT ${MAX_ACTIVE_SILENCES}`);
    this.insertStmt = db.prepare(`INSERT INTO silences (comment, alert_rule_ids, node_ids, tags, starts_at, ends_at,
      created_at, updated_at) VALUES (:comment, :alert_rule_ids, :node_ids, :tags, :starts_at, :ends_at, :at, :at)
      RETURNING ${SILENCE_COLUMNS}`);
    this.updateStmt = db.prepare(`UPDATE silences SET comment = :comment, alert_rule_ids = :alert_rule_ids,
      node_ids = :node_ids, tags = :tags, starts_at = :starts_at, ends_at = :ends_at, version = version + 1,
      updated_at = :at WHERE id = :id RETURNING ${SILENCE_COLUMNS}`);
    this.deleteStmt = db.prepare('DELETE FROM silences WHERE id = ?');
    this.pruneStmt = db.prepare('DELETE FROM silences WHERE ends_at < ?');
  }

  find(id: number): Silence | undefined {
    const row = this.byId.get(id) as SilenceRow | undefined;
    return row && toSilence(row);
  }

  page(afterId: number, limit: number): Silence[] {
    return (this.pageStmt.all(afterId, limit + 1) as unknown as SilenceRow[]).map(toSilence);
  }

  count(): number {
    return Number((this.countStmt.get() as { n: number }).n);
  }

  /** The silences in force at `at` (at most MAX_ACTIVE_SILENCES, the first made). */
  active(at: string): Silence[] {
    return (this.activeStmt.all({ at }) as unknown as SilenceRow[]).map(toSilence);
  }

  insert(fields: SilenceFields, at: string): Silence {
    return toSilence(this.insertStmt.get({ ...silenceParams(fields), at }) as unknown as SilenceRow);
  }

  update(id: number, fields: SilenceFields, at: string): Silence {
    return toSilence(this.updateStmt.get({ ...silenceParams(fields), at, id }) as unknown as SilenceRow);
  }

  delete(id: number): void {
    this.deleteStmt.run(id);
  }

  /** Silences that ended before `before`; returns how many were deleted. */
  prune(before: string): number {
    return Number(this.pruneStmt.run(before).changes);
  }
}

/** How many silences are in force at once, at most (the API refuses more). */
export const MAX_ACTIVE_SILENCES = 1000;

function silenceParams(fields: SilenceFields) {
  return {
    comment: fields.comment,
    alert_rule_ids: JSON.stringify(fields.alert_rule_ids),
    node_ids: JSON.stringify(fields.node_ids),
    tags: JSON.stringify(fields.tags),
    starts_at: fields.starts_at,
    ends_at: fields.ends_at,
  };
}
