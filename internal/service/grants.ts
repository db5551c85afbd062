// What a tenant's plan grants them, held to every rule they write: the node it listens on (by id or tag), its ports,
// how many rules they have, and the most each rule's max_connections, bandwidth_limit and
// max_new_connections_per_second may be (what a rule without one is held to). An operator's writes pass untouched.
// Refusals are 403 not_granted naming the grant.

import { DomainError } from '../errors/errors.ts';
import { grantsNode, parsePortRange, portsGranted, type Plan } from '../domain/plans.ts';
import { ownerPolicy, type OwnedRuleFields, type TargetPolicy } from '../domain/rules.ts';
import type { Caller, WriteDeps } from './write.ts';

/** Who writes, as far as grants go. */
export type Grantee = Pick<Caller, 'userId' | 'role' | 'planId'>;

/** Whether user `owner` is a tenant: the grantee's own role when it is theirs, otherwise as stored. */
export function isTenant(app: WriteDeps, grantee: Grantee, owner: number): boolean {
  return owner === grantee.userId ? grantee.role === 'tenant' : app.store.users.find(owner)?.role === 'tenant';
}

/** Which targets a rule owned by `owner` may have now: a tenant's never reach what is local (see ownerPolicy). */
export function rulePolicy(app: WriteDeps, grantee: Grantee, owner: number): TargetPolicy {
  return ownerPolicy(app.targetPolicy(), isTenant(app, grantee, owner));
}

/** Whether `grantee` may see and change what `owner` owns: an operator anything, a tenant their own. */
export function reaches(grantee: Grantee, owner: number): boolean {
  return grantee.role !== 'tenant' || owner === grantee.userId;
}

function notGranted(detail: string): DomainError {
  return new DomainError('not_granted', detail);
}

/** The tenant's plan; throws `not_granted` for a tenant on none. */
function planOf(app: WriteDeps, grantee: Grantee): Plan {
  const plan = grantee.planId === null ? undefined : app.store.plans.find(grantee.planId);
  if (!plan) throw notGranted('you are on no plan, and a tenant without one is granted nothing');
  return plan;
}

/** Throws `not_granted` unless the plan grants node `id` (by its id, or one of its tags). */
function requireNode(app: WriteDeps, plan: Plan, id: number): void {
  const node = app.store.nodes.find(id);
  if (!node || !grantsNode(plan, node)) throw notGranted(`node ${id} is not granted by your plan '${plan.name}'`);
}

/** Throws `not_granted` unless `first` to `last` lies within one of the plan's port ranges. */
function requirePorts(plan: Plan, first: number, last: number): void {
  if (portsGranted(plan, first, last)) return;
  const ports = last === first ? `port ${last} is` : `ports ${first}-${last} are`;
  const ranges = plan.port_ranges.length > 0 ? plan.port_ranges.join(', ') : 'none';
  throw notGranted(`${ports} not in your plan '${plan.name}' (its ports: ${ranges})`);
}

/**
 * `fields` as a tenant may write them under their plan (the plan's caps filled in where the rule has none); the
 * fields as given for an operator. Throws `not_granted`.
 */
export function grantedRule(app: WriteDeps, grantee: Grantee, fields: OwnedRuleFields): OwnedRuleFields {
  if (grantee.role !== 'tenant') return fields;
  const plan = planOf(app, grantee);
  requireNode(app, plan, fields.node_id);
  if (fields.tunnel_id !== null && app.store.tunnels.find(fields.tunnel_id)?.owner_id !== grantee.userId)
    throw notGranted(`tunnel ${fields.tunnel_id} is not yours: your rules go through your own tunnels`);
  requirePorts(plan, fields.listen_port, fields.listen_port_end ?? fields.listen_port);
  return {
    ...fields,
    max_connections: capped(plan, 'max_connections', fields.max_connections),
    bandwidth_limit: capped(plan, 'bandwidth_limit', fields.bandwidth_limit),
    max_new_connections_per_second: capped(
      plan,
      'max_new_connections_per_second',
      fields.max_new_connections_per_second,
    ),
  };
}

/** Throws `not_granted` when a tenant's plan has no room for `adding` more rules. */
export function requireRoom(app: WriteDeps, grantee: Grantee, adding: number): void {
  if (grantee.role !== 'tenant') return;
  const plan = planOf(app, grantee);
  if (plan.max_rules === null) return;
  const have = app.store.users.owned(grantee.userId).rules;
  if (have + adding > plan.max_rules)
    throw notGranted(`your plan '${plan.name}' allows ${plan.max_rules} rules, and you have ${have}`);
}

/** A rule's limit under the plan's cap: the cap where the rule has none; throws `not_granted` above it. */
function capped(
  plan: Plan,
  limit: 'max_connections' | 'bandwidth_limit' | 'max_new_connections_per_second',
  value: number | null,
): number | null {
  const cap = plan[limit];
  if (cap === null) return value;
  if (value === null) return cap;
  if (value > cap) throw notGranted(`${limit} ${value} is over your plan '${plan.name}' cap of ${cap}`);
  return value;
}

/**
 * Runs a rule's write for `grantee`; a port it finds taken by what a tenant cannot see (another's rule or tunnel) is
 * reported as taken, without naming what holds it.
 */
export function unnamedToTenants<T>(app: WriteDeps, grantee: Grantee, write: () => T): T {
  try {
    return write();
  } catch (error) {
    const held = error instanceof DomainError && error.facts.conflict?.kind === 'port' ? error.facts.conflict : null;
    if (!held || grantee.role !== 'tenant') throw error;
    const owner =
      held.ruleId !== null
        ? app.store.rules.find(held.ruleId)?.owner_id
        : app.store.tunnels.find(held.tunnelId!)?.owner_id;
    if (owner === grantee.userId) throw error;
    throw new DomainError('conflict', `port ${held.port}/${held.protocol} on node ${held.nodeId} is taken`, {
      conflict: { ...held, ruleId: null, tunnelId: null },
    });
  }
}

/**
 * Holds a tenant's tunnel to their plan: both ends granted nodes, its port on the exit node within the plan's ranges;
 * returns the port to listen on (`requested`, or a free one within the ranges, `pick` finding it on the exit node).
 * An operator's passes as given. Throws `not_granted`.
 */
export function grantedTunnel(
  app: WriteDeps,
  grantee: Grantee,
  ends: { entry_node_id: number; exit_node_id: number },
  requested: number | null,
  pick: (first: number, last: number) => number | null,
): number | null {
  if (grantee.role !== 'tenant') return requested;
  const plan = planOf(app, grantee);
  requireNode(app, plan, ends.entry_node_id);
  requireNode(app, plan, ends.exit_node_id);
  if (requested !== null) {
    requirePorts(plan, requested, requested);
    return requested;
  }
  for (const range of plan.port_ranges.map(parsePortRange).filter((found) => found !== null)) {
    const port = pick(range.first, range.last);
    if (port !== null) return port;
  }
  throw notGranted(`no port of your plan '${plan.name}' is free on node ${ends.exit_node_id}`);
}
