// Alert rules' operations: what to watch (a condition, over the resources a selector names), how long it must hold
// before it fires, how often it repeats, how long it must stay clear before it resolves, and which channels hear it.
// A rule changed in what it watches, disabled or deleted forgets its alerts at once, without notifying them.

import { DomainError, notFound, validationFailed } from '../errors/errors.ts';
import { checkIfMatch } from './etag.ts';
import type { FieldError } from '../schema/schema.ts';
import type { AlertCondition } from '../domain/alerts.ts';
import type { AlertRule, AlertRuleFields } from '../store/alerts.ts';
import { diff, type Change, type WriteDeps } from './write.ts';

/** What a condition's threshold is, for the conditions that take one. */
export const THRESHOLDS: Partial<Record<AlertCondition, { what: string; min: number; max: number }>> = {
  quota_percent: { what: 'the percentage of the quota used', min: 1, max: 100 },
  rule_expiring: { what: 'the days before the expiry', min: 1, max: 365 },
  license_expiring: { what: 'the days before the expiry', min: 1, max: 365 },
  certificate_expiring: { what: 'the days before the expiry', min: 1, max: 365 },
  kernel_drift: { what: 'the minutes a drift counts as recent', min: 1, max: 1440 },
};

/** The conditions of the master itself (its license, its certificate), which no selector narrows. */
const MASTER_CONDITIONS: ReadonlySet<AlertCondition> = new Set([
  'license_expiring',
  'certificate_expiring',
  'writes_refused',
]);

const KEYS: readonly (keyof AlertRuleFields)[] = [
  'name',
  'condition',
  'threshold',
  'selector',
  'for_seconds',
  'repeat_seconds',
  'damping_seconds',
  'channel_ids',
  'enabled',
];

function check(app: WriteDeps, fields: AlertRuleFields): void {
  const errors: FieldError[] = [];
  const threshold = THRESHOLDS[fields.condition];
  if (threshold && fields.threshold === null)
    errors.push({ pointer: '#/threshold', detail: `is required for ${fields.condition}: ${threshold.what}` });
  else if (threshold && (fields.threshold! < threshold.min || fields.threshold! > threshold.max))
    errors.push({ pointer: '#/threshold', detail: `must be ${threshold.min} to ${threshold.max} (${threshold.what})` });
  else if (!threshold && fields.threshold !== null)
    errors.push({ pointer: '#/threshold', detail: `${fields.condition} takes no threshold` });
  if (MASTER_CONDITIONS.has(fields.condition))
    for (const part of ['node_ids', 'resource_ids', 'tags'] as const)
      if (fields.selector[part].length > 0)
        errors.push({
          pointer: `#/${part}`,
          detail: `${fields.condition} watches the master itself: nothing narrows it`,
        });
  const channels = app.store.channels.existing(fields.channel_ids);
  fields.channel_ids.forEach((id, index) => {
    if (!channels.has(id)) errors.push({ pointer: `#/channel_ids/${index}`, detail: `channel ${id} does not exist` });
  });
  fields.selector.node_ids.forEach((id, index) => {
    if (!app.store.nodes.find(id)) errors.push({ pointer: `#/node_ids/${index}`, detail: `node ${id} does not exist` });
  });
  if (errors.length > 0) throw validationFailed(errors);
}

/**
 * How many alert rules the master keeps: each is evaluated every second on the event loop, so their number is
 * bounded, like every list the master walks on its own.
 */
export const MAX_ALERT_RULES = 1000;

/** Inside a transaction. Throws `validation_failed`, `conflict` (the name, or MAX_ALERT_RULES reached). */
export function insertAlertRule(app: WriteDeps, change: Change, fields: AlertRuleFields): AlertRule {
  check(app, fields);
  if (app.store.alertRules.count() >= MAX_ALERT_RULES)
    throw new DomainError('conflict', `the master keeps at most ${MAX_ALERT_RULES} alert rules: delete one first`);
  const rule = app.store.alertRules.insert(fields, app.timestamp());
  change.audit({
    action: 'alert_rule.create',
    resource: 'alert_rule',
    resource_id: rule.id,
    changes: { after: fields },
  });
  return rule;
}

/** Inside a transaction. Throws `not_found`, `precondition_failed`, `validation_failed`, `conflict`. */
export function updateAlertRule(
  app: WriteDeps,
  change: Change,
  id: number,
  fields: AlertRuleFields,
  ifMatch?: string,
): AlertRule {
  const current = app.store.alertRules.find(id);
  if (!current) throw notFound('alert rule', id);
  checkIfMatch(ifMatch, current.version);
  check(app, fields);
  const rule = app.store.alertRules.update(id, fields, app.timestamp());
  const watched = (r: AlertRuleFields) => JSON.stringify([r.condition, r.threshold, r.selector, r.enabled]);
  if (watched(current) !== watched(fields)) app.store.alerts.forgetRule(id);
  change.audit({
    action: 'alert_rule.update',
    resource: 'alert_rule',
    resource_id: id,
    changes: diff(current, fields, KEYS),
  });
  return rule;
}

/** Inside a transaction; its alerts go with it. */
export function removeAlertRule(app: WriteDeps, change: Change, id: number, ifMatch?: string): void {
  const current = app.store.alertRules.find(id);
  if (!current) throw notFound('alert rule', id);
  checkIfMatch(ifMatch, current.version);
  app.store.alertRules.delete(id);
  change.audit({ action: 'alert_rule.delete', resource: 'alert_rule', resource_id: id, changes: { before: current } });
}
