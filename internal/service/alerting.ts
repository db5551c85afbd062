// The alert rules at work, on the master's clock: each second every enabled rule's condition is read, and what it
// holds for moves through pending (for less than for_seconds), firing (notified), clearing (gone, for less than
// damping_seconds: back within it, nothing is notified again) and resolved (notified, forgotten). What is due to a
// channel in one evaluation goes as one notification, written to the outbox in the same transaction as the alerts'
// new states, so a master stopped between the two neither loses nor repeats a turn. Nothing is written while nothing
// changes.

import { randomUUID } from 'node:crypto';
import { alertPayload, type AlertNotice } from '../domain/alerts.ts';
import { formatTime } from '../schema/schema.ts';
import type { Alert, AlertRule } from '../store/alerts.ts';
import type { Finding } from '../store/conditions.ts';
import { theMaster } from './master.ts';
import { transact, type Committer } from './write.ts';

/** What the evaluation needs of the master besides writing: its clock in milliseconds, and when it started. */
export interface Alerting extends Committer {
  clock: { now(): number };
  startedAt: number;
  /** The master's own version, which agents are compared with. */
  version: string;
  /** The certificate the master serves, if it serves HTTPS itself. */
  tls: { notAfter: string } | null;
}

const DAY_MS = 24 * 60 * 60 * 1000;

/**
 * After a master starts, how long a node its agent has not linked to yet is not taken for offline: every agent tries
 * again within 30 s (its longest wait between attempts), so a restart of the master alone alerts nobody.
 */
export const RELINK_GRACE_MS = 35_000;

type Step =
  | { kind: 'insert'; rule: AlertRule; finding: Finding; state: 'pending' | 'firing' }
  | { kind: 'update'; rule: AlertRule; alert: Alert; notice: AlertNotice['status'] | null; repeat: boolean }
  | { kind: 'delete'; rule: AlertRule; alert: Alert; notify: boolean };

/** What `rule`'s condition holds for at `now`: rows the store finds, or the master's own license and certificate. */
function findingsOf(app: Alerting, rule: AlertRule, now: number): Finding[] {
  const days = (rule.threshold ?? 0) * DAY_MS;
  if (rule.condition === 'license_expiring' || rule.condition === 'certificate_expiring') {
    const [what, resource, at] =
      rule.condition === 'license_expiring'
        ? ['the license', 'license', app.licenseView().expires_at]
        : ["the master's TLS certificate", 'certificate', app.tls?.notAfter ?? null];
    if (at === null || Date.parse(at) > now + days) return [];
    const when = Date.parse(at) <= now ? 'expired' : 'expires';
    return [{ resource, resource_id: 0, summary: `${what} ${when} at ${formatTime(Date.parse(at))}` }];
  }
  return app.store.conditions.findings(rule.condition, rule.selector, {
    threshold: rule.threshold,
    horizon: formatTime(now + days),
    since: formatTime(now - (rule.threshold ?? 0) * 60_000),
    version: app.version,
  });
}

/** Evaluates every enabled alert rule once; writes (and notifies) only what changed. */
export async function evaluateAlerts(app: Alerting): Promise<void> {
  if (app.store.db.writesHeld) return;
  if (plan(app, app.clock.now()).length === 0) return;
  await transact(app, theMaster('alert.evaluate'), () => apply(app, plan(app, app.clock.now())));
}

const since = (time: string | null) => (time === null ? 0 : Date.parse(time));

/** What evaluating every enabled rule at `now` would change. */
function plan(app: Alerting, now: number): Step[] {
  const steps: Step[] = [];
  const at = formatTime(now);
  for (const rule of app.store.alertRules.enabled()) {
    const findings = findingsOf(app, rule, now);
    const found = new Map(findings.map((finding) => [`${finding.resource}/${finding.resource_id}`, finding]));
    // Nodes not heard from yet since the master started are neither offline nor back: their alerts stay as they are.
    const relinking = (finding: Finding | undefined) =>
      finding?.resource === 'node' &&
      now - app.startedAt < RELINK_GRACE_MS &&
      !app.sync.linkedSinceStart(finding.resource_id);
    for (const [key, finding] of found) if (relinking(finding)) found.delete(key);
    for (const alert of app.store.alerts.ofRule(rule.id)) {
      const key = `${alert.resource}/${alert.resource_id}`;
      const finding = found.get(key);
      found.delete(key);
      if (!finding && alert.resource === 'node' && relinking({ ...alert })) continue;
      if (finding) {
        steps.push(
          ...holding(rule, { ...alert, summary: finding.summary }, now, at, finding.summary !== alert.summary),
        );
      } else steps.push(...gone(rule, alert, now, at));
    }
    for (const finding of found.values())
      steps.push({ kind: 'insert', rule, finding, state: rule.for_seconds === 0 ? 'firing' : 'pending' });
  }
  return steps;
}

/** An alert whose condition still holds: it fires once held long enough, repeats if asked, or comes back. */
function holding(rule: AlertRule, alert: Alert, now: number, at: string, changed: boolean): Step[] {
  if (alert.state === 'pending') {
    if (now - since(alert.since) < rule.for_seconds * 1000)
      return changed ? [{ kind: 'update', rule, alert, notice: null, repeat: false }] : [];
    return [
      {
        kind: 'update',
        rule,
        alert: { ...alert, state: 'firing', fired_at: at, notified_at: at },
        notice: 'firing',
        repeat: false,
      },
    ];
  }
  if (alert.state === 'clearing')
    return [
      { kind: 'update', rule, alert: { ...alert, state: 'firing', cleared_at: null }, notice: null, repeat: false },
    ];
  if (rule.repeat_seconds !== null && now - since(alert.notified_at) >= rule.repeat_seconds * 1000)
    return [{ kind: 'update', rule, alert: { ...alert, notified_at: at }, notice: 'firing', repeat: true }];
  return changed ? [{ kind: 'update', rule, alert, notice: null, repeat: false }] : [];
}

/** An alert whose condition is gone: forgotten if it never fired, resolved once clear for the damping window. */
function gone(rule: AlertRule, alert: Alert, now: number, at: string): Step[] {
  if (alert.state === 'pending') return [{ kind: 'delete', rule, alert, notify: false }];
  if (alert.state === 'firing' && rule.damping_seconds > 0)
    return [
      { kind: 'update', rule, alert: { ...alert, state: 'clearing', cleared_at: at }, notice: null, repeat: false },
    ];
  if (alert.state === 'clearing' && now - since(alert.cleared_at) < rule.damping_seconds * 1000) return [];
  return [{ kind: 'delete', rule, alert, notify: true }];
}

/** Inside the write: the steps, their events, and one outbox entry per channel for what they notify. */
function apply(app: Alerting, steps: Step[]): void {
  const at = app.timestamp();
  const byChannel = new Map<number, AlertNotice[]>();
  const notify = (rule: AlertRule, notice: AlertNotice) => {
    for (const channelId of rule.channel_ids) byChannel.set(channelId, [...(byChannel.get(channelId) ?? []), notice]);
    const event = notice.status === 'firing' ? 'alert.firing' : 'alert.resolved';
    app.store.events.append(event, 'alert_rule', rule.id, notice, at);
  };
  const noticeOf = (rule: AlertRule, alert: Pick<Alert, 'resource' | 'resource_id' | 'summary' | 'since'>) => ({
    alert_rule: { id: rule.id, name: rule.name },
    condition: rule.condition,
    resource: alert.resource,
    resource_id: alert.resource_id,
    summary: alert.summary,
    since: alert.since,
  });
  for (const step of steps) {
    if (step.kind === 'insert') {
      const firing = step.state === 'firing';
      const alert = { ...step.finding, alert_rule_id: step.rule.id, state: step.state, since: at };
      app.store.alerts.insert({ ...alert, fired_at: firing ? at : null, notified_at: firing ? at : null });
      if (firing)
        notify(step.rule, { status: 'firing', ...noticeOf(step.rule, alert), repeat: false, resolved_at: null });
    } else if (step.kind === 'update') {
      app.store.alerts.update(step.alert);
      if (step.notice)
        notify(step.rule, {
          status: 'firing',
          ...noticeOf(step.rule, step.alert),
          repeat: step.repeat,
          resolved_at: null,
        });
    } else {
      app.store.alerts.delete(step.alert.id);
      if (step.notify)
        notify(step.rule, {
          status: 'resolved',
          ...noticeOf(step.rule, step.alert),
          repeat: false,
          resolved_at: step.alert.cleared_at ?? at,
        });
    }
  }
  const existing = app.store.channels.existing([...byChannel.keys()]);
  for (const [channelId, notices] of byChannel)
    if (existing.has(channelId))
      app.store.deliveries.enqueue(`msg_${randomUUID()}`, channelId, alertPayload(notices, at), at);
}
