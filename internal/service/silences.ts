// Silences' operations: a window in which notifications of the alerts a silence matches (by alert rule, node, tag)
// are not sent, for maintenance. Alerts go on being found and shown meanwhile; one still firing when the window ends
// is notified then (service/alerting.ts).

import { notFound, validationFailed } from '../errors/errors.ts';
import { checkIfMatch } from './etag.ts';
import type { FieldError } from '../schema/schema.ts';
import { MAX_ACTIVE_SILENCES, type Silence, type SilenceFields } from '../store/alerts.ts';
import { diff, type Change, type WriteDeps } from './write.ts';

/** The longest window a silence may have: a maintenance, not a way to turn alerts off. */
export const MAX_SILENCE_DAYS = 30;

const KEYS: readonly (keyof SilenceFields)[] = [
  'comment',
  'alert_rule_ids',
  'node_ids',
  'tags',
  'starts_at',
  'ends_at',
];

function check(app: WriteDeps, fields: SilenceFields, id?: number): void {
  const errors: FieldError[] = [];
  const [starts, ends] = [Date.parse(fields.starts_at), Date.parse(fields.ends_at)];
  if (ends <= starts) errors.push({ pointer: '#/ends_at', detail: 'must be after starts_at' });
  else if (ends - starts > MAX_SILENCE_DAYS * 86_400_000)
    errors.push({ pointer: '#/ends_at', detail: `must be at most ${MAX_SILENCE_DAYS} days after starts_at` });
  else if (ends <= Date.parse(app.timestamp())) errors.push({ pointer: '#/ends_at', detail: 'must be in the future' });
  fields.alert_rule_ids.forEach((ruleId, index) => {
    if (!app.store.alertRules.find(ruleId))
      errors.push({ pointer: `#/alert_rule_ids/${index}`, detail: `alert rule ${ruleId} does not exist` });
  });
  fields.node_ids.forEach((nodeId, index) => {
    if (!app.store.nodes.find(nodeId))
      errors.push({ pointer: `#/node_ids/${index}`, detail: `node ${nodeId} does not exist` });
  });
  const inForce = app.store.silences.active(fields.starts_at).filter((silence) => silence.id !== id);
  if (inForce.length >= MAX_ACTIVE_SILENCES)
    errors.push({ pointer: '#/starts_at', detail: `${MAX_ACTIVE_SILENCES} silences are in force then already` });
  if (errors.length > 0) throw validationFailed(errors);
}

/** Inside a transaction. Throws `validation_failed`. */
export function insertSilence(app: WriteDeps, change: Change, fields: SilenceFields): Silence {
  check(app, fields);
  const silence = app.store.silences.insert(fields, app.timestamp());
  change.audit({ action: 'silence.create', resource: 'silence', resource_id: silence.id, changes: { after: fields } });
  return silence;
}

/** Inside a transaction. Throws `not_found`, `precondition_failed`, `validation_failed`. */
export function updateSilence(
  app: WriteDeps,
  change: Change,
  id: number,
  fields: SilenceFields,
  ifMatch?: string,
): Silence {
  const current = app.store.silences.find(id);
  if (!current) throw notFound('silence', id);
  checkIfMatch(ifMatch, current.version);
  check(app, fields, id);
  const silence = app.store.silences.update(id, fields, app.timestamp());
  change.audit({
    action: 'silence.update',
    resource: 'silence',
    resource_id: id,
    changes: diff(current, fields, KEYS),
  });
  return silence;
}

/** Inside a transaction: ends the silence at once. */
export function removeSilence(app: WriteDeps, change: Change, id: number, ifMatch?: string): void {
  const current = app.store.silences.find(id);
  if (!current) throw notFound('silence', id);
  checkIfMatch(ifMatch, current.version);
  app.store.silences.delete(id);
  change.audit({ action: 'silence.delete', resource: 'silence', resource_id: id, changes: { before: current } });
}
