// The alert rules at work, on the master's clock: each second every enabled rule's condition is read, and what it
// holds for moves through pending (for less than for_seconds), firing (notified), clearing (gone, for less than
// damping_seconds: back within it, nothing is notified again) and resolved (notified, forgotten). A turn that falls
// in a silence is not notified (the alert is marked muted), and an alert still firing when its silence ends is
// notified then. What is due to a channel in one evaluation goes as one notification, written to the outbox in the
// same transaction as the alerts' new states, so a master stopped between the two neither loses nor repeats a turn.
// Nothing is written while nothing changes.

import { randomUUID } from 'node:crypto';
import { alertPayload, type AlertNotice } from '../domain/alerts.ts';
import type { Logger } from '../log/log.ts';
import { formatTime } from '../schema/schema.ts';
import type { Alert, AlertRule, AlertSelector, Silence } from '../store/alerts.ts';
import { type Finding } from '../store/conditions.ts';
import { theMaster } from './master.ts';
import { transact, type Committer } from './write.ts';
import { MAX_FINDINGS } from '../domain/alerts.ts';

/** What the evaluation needs of the master besides writing: its clock in milliseconds, and when it started. */
export interface Alerting extends Committer {
  clock: { now(): number };
  startedAt: number;
  /** The master's own version, which agents are compared with. */
  version: string;
  /** The certificate the master serves, if it serves HTTPS itself. */
  tls: { notAfter: string } | null;
  log: Logger;
}

const DAY_MS = 24 * 60 * 60 * 1000;

/**
 * After a master starts, how long a node its agent has not linked to yet is not taken for offline: every agent tries
 * again within 30 s (its longest wait between attempts), so a restart of the master alone alerts nobody.
 */
export const RELINK_GRACE_MS = 35_000;

/** An alert as it is to be written: new ones have no id yet. */
type Written = Omit<Alert, 'id'> & { id?: number };

/** One alert's change: written (or deleted), and the turn it tells, if one is told. */
interface Step {
  rule: AlertRule;
  alert: Written;
  deleted: boolean;
  notice: { status: AlertNotice['status']; repeat: boolean } | null;
}

/** What a condition holds for, read once an evaluation for every rule of that condition and threshold. */
type Holding = (rule: AlertRule) => Finding[];

/**
 * What each rule's condition holds for at `now`: rows the store finds, or the master's own license and certificate.
 * A condition is read once for all its rules, and each rule's selector narrows what was read: the evaluation's cost
 * follows the conditions in use and what they find, not the number of rules.
 */
function holdingAt(app: Alerting, now: number): Holding {
  const read = new Map<string, Finding[]>();
  return (rule) => {
    const key = `${rule.condition}/${rule.threshold}`;
    let findings = read.get(key);
    if (!findings) read.set(key, (findings = conditionAt(app, rule, now)));
    return findings.filter((finding) => selects(rule.selector, finding)).slice(0, MAX_FINDINGS);
  };
}

function conditionAt(app: Alerting, rule: AlertRule, now: number): Finding[] {
  const days = (rule.threshold ?? 0) * DAY_MS;
  // Nothing can be written while writes are refused: that condition is watched apart (refused-alerts.ts).
  if (rule.condition === 'writes_refused') return [];
  if (rule.condition === 'license_expiring' || rule.condition === 'certificate_expiring') {
    const [what, resource, at] =
      rule.condition === 'license_expiring'
        ? ['the license', 'license', app.licenseView().expires_at]
        : ["the master's TLS certificate", 'certificate', app.tls?.notAfter ?? null];
    if (at === null || Date.parse(at) > now + days) return [];
    const when = Date.parse(at) <= now ? 'expired' : 'expires';
    const summary = `${what} ${when} at ${formatTime(Date.parse(at))}`;
    return [{ resource, resource_id: 0, summary, node_id: null, other_node_id: null, tags: [] }];
  }
  return app.store.conditions.findings(rule.condition, {
    threshold: rule.threshold,
    horizon: formatTime(now + days),
    since: formatTime(now - (rule.threshold ?? 0) * 60_000),
    version: app.version,
  });
}

/** Whether a rule's selector takes `finding`: each part in use matches (a tunnel's node at either end). */
function selects(selector: AlertSelector, finding: Finding): boolean {
  const nodes = [finding.node_id, finding.other_node_id];
  return (
    (selector.node_ids.length === 0 || nodes.some((id) => id !== null && selector.node_ids.includes(id))) &&
    (selector.resource_ids.length === 0 || selector.resource_ids.includes(finding.resource_id)) &&
    (selector.tags.length === 0 || finding.tags.some((tag) => selector.tags.includes(tag)))
  );
}

/** Evaluates every enabled alert rule once; writes (and notifies) only what changed. */
export async function evaluateAlerts(app: Alerting): Promise<void> {
  // Nothing could be written: what changes meanwhile is found at the first evaluation after.
  if (app.store.db.writesHeld || app.store.db.writesRefused) return;
  if (plan(app, app.clock.now()).length === 0) return;
  await transact(app, theMaster('alert.evaluate'), () => apply(app, plan(app, app.clock.now())));
}

const since = (time: string | null) => (time === null ? 0 : Date.parse(time));

/** Whether `silence` mutes `alert` of `rule`: each of its matchers in use matches. */
function mutes(silence: Silence, rule: AlertRule, alert: Written): boolean {
  const nodes = [alert.node_id, alert.other_node_id];
  return (
    (silence.alert_rule_ids.length === 0 || silence.alert_rule_ids.includes(rule.id)) &&
    (silence.node_ids.length === 0 || nodes.some((id) => id !== null && silence.node_ids.includes(id))) &&
    (silence.tags.length === 0 || alert.tags.some((tag) => silence.tags.includes(tag)))
  );
}

/** What evaluating every enabled rule at `now` would change. */
function plan(app: Alerting, now: number): Step[] {
  const steps: Step[] = [];
  const at = formatTime(now);
  const silences = app.store.silences.active(at);
  const silenced = (rule: AlertRule, alert: Written) => silences.some((silence) => mutes(silence, rule, alert));
  const holding = holdingAt(app, now);
  for (const rule of app.store.alertRules.enabled()) {
    try {
      steps.push(...planRule(app, rule, holding(rule), now, at, silenced));
    } catch (error) {
      // One rule that cannot be evaluated (what it reads is broken) holds up no other.
      app.log.error('evaluating an alert rule failed', { alert_rule: rule.id, error: (error as Error).message });
    }
  }
  return steps;
}

/** What evaluating `rule` at `now` would change. */
function planRule(
  app: Alerting,
  rule: AlertRule,
  findings: Finding[],
  now: number,
  at: string,
  silenced: (rule: AlertRule, alert: Written) => boolean,
): Step[] {
  const found = new Map(findings.map((finding) => [`${finding.resource}/${finding.resource_id}`, finding]));
  // Nodes not heard from yet since the master started are neither offline nor back: their alerts stay as they are.
  const relinking = (resource: string, id: number) =>
    resource === 'node' && now - app.startedAt < RELINK_GRACE_MS && !app.sync.linkedSinceStart(id);
  for (const [key, finding] of found) if (relinking(finding.resource, finding.resource_id)) found.delete(key);
  const turns: Step[] = [];
  for (const alert of app.store.alerts.ofRule(rule.id)) {
    const key = `${alert.resource}/${alert.resource_id}`;
    const finding = found.get(key);
    found.delete(key);
    if (finding) turns.push(...holding(rule, alert, finding, now, at, silenced(rule, alert)));
    else if (!relinking(alert.resource, alert.resource_id)) turns.push(...gone(rule, alert, now, at));
  }
  for (const finding of found.values()) {
    const firing = rule.for_seconds === 0;
    const alert: Written = {
      ...placeOf(finding),
      alert_rule_id: rule.id,
      resource: finding.resource,
      resource_id: finding.resource_id,
      summary: finding.summary,
      state: firing ? 'firing' : 'pending',
      muted: false,
      since: at,
      fired_at: firing ? at : null,
      notified_at: firing ? at : null,
      cleared_at: null,
    };
    turns.push({ rule, alert, deleted: false, notice: firing ? { status: 'firing', repeat: false } : null });
  }
  // A turn in a silence is not told: the alert keeps that it was muted (a resolution of one never told, neither).
  for (const step of turns) {
    if (step.notice === null) continue;
    if (
      step.notice.status === 'resolved' ? step.alert.muted || silenced(rule, step.alert) : silenced(rule, step.alert)
    ) {
      step.alert = { ...step.alert, muted: true };
      step.notice = null;
    }
  }
  return turns;
}

/** Where a finding is, as an alert keeps it for silences. */
function placeOf(finding: Finding): Pick<Alert, 'node_id' | 'other_node_id' | 'tags'> {
  return { node_id: finding.node_id, other_node_id: finding.other_node_id, tags: finding.tags };
}

/**
 * An alert whose condition still holds: it fires once held long enough, repeats if asked, comes back from clearing,
 * or is told at last once a silence that muted it is over.
 */
function holding(
  rule: AlertRule,
  current: Alert,
  finding: Finding,
  now: number,
  at: string,
  silenced: boolean,
): Step[] {
  const alert: Alert = { ...current, ...placeOf(finding), summary: finding.summary };
  const changed = JSON.stringify(alert) !== JSON.stringify(current);
  const step = (written: Written, notice: Step['notice']): Step[] => [{ rule, alert: written, deleted: false, notice }];
  if (alert.state === 'pending') {
    if (now - since(alert.since) < rule.for_seconds * 1000) return changed ? step(alert, null) : [];
    return step({ ...alert, state: 'firing', fired_at: at, notified_at: at }, { status: 'firing', repeat: false });
  }
  if (alert.state === 'clearing') return step({ ...alert, state: 'firing', cleared_at: null }, null);
  if (alert.muted && !silenced)
    return step({ ...alert, muted: false, notified_at: at }, { status: 'firing', repeat: false });
  if (rule.repeat_seconds !== null && now - since(alert.notified_at) >= rule.repeat_seconds * 1000)
    return step({ ...alert, notified_at: at }, { status: 'firing', repeat: true });
  return changed ? step(alert, null) : [];
}

/** An alert whose condition is gone: forgotten if it never fired, resolved once clear for the damping window. */
function gone(rule: AlertRule, alert: Alert, now: number, at: string): Step[] {
  if (alert.state === 'pending') return [{ rule, alert, deleted: true, notice: null }];
  if (alert.state === 'firing' && rule.damping_seconds > 0)
    return [{ rule, alert: { ...alert, state: 'clearing', cleared_at: at }, deleted: false, notice: null }];
  if (alert.state === 'clearing' && now - since(alert.cleared_at) < rule.damping_seconds * 1000) return [];
  return [{ rule, alert, deleted: true, notice: { status: 'resolved', repeat: false } }];
}

/**
 * The alert's node by name and its page in the console, for people reading a notification: a node, rule or tunnel
 * found by its name on its list, anything else on the alerts' page. No link while public_url is unset.
 */
function whereShown(app: Alerting, alert: Written): Pick<AlertNotice, 'node' | 'link'> {
  const node = alert.node_id === null ? undefined : app.store.nodes.find(alert.node_id);
  const base = app.settings.get('public_url');
  const named = (page: string, name: string | undefined, extra = '') =>
    name === undefined ? '/alerts' : `/${page}?${extra}q=${encodeURIComponent(name)}`;
  const page =
    alert.resource === 'node'
      ? named('nodes', node?.name)
      : alert.resource === 'rule'
        ? named('rules', app.store.rules.find(alert.resource_id)?.name, node ? `node_id=${node.id}&` : '')
        : alert.resource === 'tunnel'
          ? named('tunnels', app.store.tunnels.find(alert.resource_id)?.name)
          : '/alerts';
  return { node: node ? { id: node.id, name: node.name } : null, link: base === '' ? null : `${base}/#${page}` };
}

/** Inside the write: the steps, their events, and one outbox entry per channel for what they notify. */
function apply(app: Alerting, steps: Step[]): void {
  const at = app.timestamp();
  const byChannel = new Map<number, AlertNotice[]>();
  for (const { rule, alert, deleted, notice } of steps) {
    if (deleted) app.store.alerts.delete(alert.id!);
    else if (alert.id === undefined) app.store.alerts.insert(alert);
    else app.store.alerts.update(alert as Alert);
    if (!notice) continue;
    const told: AlertNotice = {
      status: notice.status,
      alert_rule: { id: rule.id, name: rule.name },
      condition: rule.condition,
      resource: alert.resource,
      resource_id: alert.resource_id,
      summary: alert.summary,
      since: alert.since,
      repeat: notice.repeat,
      resolved_at: notice.status === 'resolved' ? (alert.cleared_at ?? at) : null,
      ...whereShown(app, alert),
    };
    for (const channelId of rule.channel_ids) byChannel.set(channelId, [...(byChannel.get(channelId) ?? []), told]);
    app.store.events.append(`alert.${notice.status}`, 'alert_rule', rule.id, told, at);
  }
  enqueueNotices(app, byChannel, at);
}

/**
 * Inside a write: one outbox entry per channel with the notices due to it (a channel deleted meanwhile is skipped),
 * each under a message id of its own.
 */
export function enqueueNotices(app: Committer, byChannel: ReadonlyMap<number, AlertNotice[]>, at: string): void {
  const existing = app.store.channels.existing([...byChannel.keys()]);
  for (const [channelId, notices] of byChannel)
    if (existing.has(channelId))
      app.store.deliveries.enqueue(`msg_${randomUUID()}`, channelId, alertPayload(notices, at), at);
}
