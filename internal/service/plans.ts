// Plans' operations (domain/plans.ts): what a plan grants is checked as a whole when it is written, so that what
// holds tenants to it later never meets a range backwards or an allowance that cannot slow anything.

import { DomainError, notFound, validationFailed } from '../errors/errors.ts';
import { checkIfMatch } from './etag.ts';
import type { FieldError } from '../schema/schema.ts';
import { parsePortRange, type Plan, type PlanFields } from '../domain/plans.ts';
import { holdPlanUsers } from './standing.ts';
import { diff, type Change, type WriteDeps } from './write.ts';

const KEYS: readonly (keyof PlanFields)[] = [
  'name',
  'node_ids',
  'node_tags',
  'port_ranges',
  'max_rules',
  'max_connections',
  'bandwidth_limit',
  'max_new_connections_per_second',
  'traffic',
];

function check(app: WriteDeps, fields: PlanFields): void {
  const errors: FieldError[] = [];
  fields.node_ids.forEach((nodeId, index) => {
    if (!app.store.nodes.exists(nodeId))
      errors.push({ pointer: `#/node_ids/${index}`, detail: `node ${nodeId} does not exist` });
  });
  fields.port_ranges.forEach((text, index) => {
    if (!parsePortRange(text))
      errors.push({
        pointer: `#/port_ranges/${index}`,
        detail: 'must be a port (1-65535) or a range of them, first to last (30000-30099)',
      });
  });
  const traffic = fields.traffic;
  if (traffic && (traffic.past === 'slow') !== (traffic.slow_to !== null))
    errors.push({ pointer: '#/traffic/slow_to', detail: 'is given exactly when past is slow' });
  if (errors.length > 0) throw validationFailed(errors);
}

/** Inside a transaction. Throws `validation_failed`, `conflict` (the name). */
export function insertPlan(app: WriteDeps, change: Change, fields: PlanFields): Plan {
  check(app, fields);
  const plan = app.store.plans.insert(fields, app.timestamp());
  change.audit({ action: 'plan.create', resource: 'plan', resource_id: plan.id, changes: { after: fields } });
  return plan;
}

/** Inside a transaction. Throws `not_found`, `precondition_failed`, `validation_failed`, `conflict` (the name). */
export function updatePlan(app: WriteDeps, change: Change, id: number, fields: PlanFields, ifMatch?: string): Plan {
  const current = app.store.plans.find(id);
  if (!current) throw notFound('plan', id);
  checkIfMatch(ifMatch, current.version);
  check(app, fields);
  const plan = app.store.plans.update(id, fields, app.timestamp());
  holdPlanUsers(app, change, id);
  change.audit({ action: 'plan.update', resource: 'plan', resource_id: id, changes: diff(current, fields, KEYS) });
  return plan;
}

/** Inside a transaction. Throws `not_found`, `precondition_failed`, `conflict` (users are on it). */
export function removePlan(app: WriteDeps, change: Change, id: number, ifMatch?: string): void {
  const current = app.store.plans.find(id);
  if (!current) throw notFound('plan', id);
  checkIfMatch(ifMatch, current.version);
  const held = app.store.users.onPlan(id);
  if (held > 0)
    throw new DomainError('conflict', `plan ${id} holds ${held} user(s): put them on another plan first`, {
      data: { users: held },
    });
  app.store.plans.delete(id);
  change.audit({ action: 'plan.delete', resource: 'plan', resource_id: id, changes: { before: current } });
}
