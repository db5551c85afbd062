// Forwarding rules' operations: create, replace, remove, cascade from what they depend on, sync, and what the
// master's clock does to them (expiries, quota periods). Every write marks the rule's node (and a tunnel's exit) as
// changed; sync reports what the node acknowledged, never that a command was sent.

import { DomainError, notFound, validationFailed } from '../errors/errors.ts';
import { checkIfMatch } from './etag.ts';
import { canonicalAddress, isSrvName, parseTarget } from '../schema/net.ts';
import type { FieldError } from '../schema/schema.ts';
import { combinationErrors, targetRefusal, type Rule, type RuleFields, type TargetPolicy } from '../domain/rules.ts';
import type { Claim } from '../store/ports.ts';
import { grantedRule, reaches, requireRoom, rulePolicy, unnamedToTenants } from './grants.ts';
import { theMaster } from './master.ts';
import { holdWritten } from './standing.ts';
import { diff, transact, type Change, type Committer, type Requester, type WriteDeps } from './write.ts';

/** Problems with what a rule refers to, as field errors under `prefix` (e.g. `#/rules/3`). */
function ruleReferenceErrors(app: WriteDeps, fields: RuleFields, prefix = '#'): FieldError[] {
  const errors: FieldError[] = [];
  if (!app.store.nodes.exists(fields.node_id))
    errors.push({ pointer: `${prefix}/node_id`, detail: `node ${fields.node_id} does not exist` });
  if (fields.tunnel_id !== null) {
    const tunnel = app.store.tunnels.find(fields.tunnel_id);
    if (!tunnel) errors.push({ pointer: `${prefix}/tunnel_id`, detail: `tunnel ${fields.tunnel_id} does not exist` });
    else if (tunnel.entry_node_id !== fields.node_id) {
      errors.push({
        pointer: `${prefix}/node_id`,
        detail: `must be ${tunnel.entry_node_id}, the entry node of tunnel ${tunnel.id}`,
      });
    }
  }
  return errors;
}

/** Marks the configs a rule is part of as changed: its node's and, through a tunnel, the exit's (but `except`). */
function touchRule(
  app: WriteDeps,
  change: Change,
  rule: Pick<RuleFields, 'node_id' | 'tunnel_id'>,
  except?: number,
): void {
  if (rule.node_id !== except) change.touchNode(rule.node_id);
  if (rule.tunnel_id === null) return;
  for (const exit of app.store.tunnels.find(rule.tunnel_id)?.exit_node_ids ?? [])
    if (exit !== except) change.touchNode(exit);
}

function checkReferences(app: WriteDeps, fields: RuleFields): void {
  const errors = ruleReferenceErrors(app, fields);
  if (errors.length > 0) throw validationFailed(errors);
}

function checkCombination(fields: RuleFields): void {
  const errors = combinationErrors(fields);
  if (errors.length > 0) throw validationFailed(errors);
}

/** Throws `validation_failed` for targets the policy refuses on the rule's node (see `targetRefusal`). */
function checkTargets(fields: RuleFields, nodeHost: string | undefined, policy: TargetPolicy): void {
  if (nodeHost === undefined) return;
  const errors: FieldError[] = [];
  fields.targets.forEach((target, i) => {
    // An SRV name's records are checked where they are dialled, as they resolve (the agent's policy, after DNS).
    if (isSrvName(target)) return;
    const refusal = targetRefusal(parseTarget(target)!.host, nodeHost, policy);
    if (refusal) errors.push({ pointer: `#/targets/${i}`, detail: refusal });
  });
  if (errors.length > 0) throw validationFailed(errors);
}

/** The addresses node `nodeId` reported having (its vitals), or null where it reported none. */
function addressesOf(app: WriteDeps, nodeId: number): readonly string[] | null {
  const addresses = app.store.nodes.find(nodeId)?.vitals?.addresses;
  return addresses && addresses.length > 0 ? addresses : null;
}

/**
 * Throws `validation_failed` for a source_address the node that dials the rule's targets (its own, or its tunnel's
 * exit) does not have, where its agent said which it has; `addresses` looks them up (a list's rules share nodes).
 */
function checkSource(
  app: WriteDeps,
  fields: RuleFields,
  addresses: (nodeId: number) => readonly string[] | null = (nodeId) => addressesOf(app, nodeId),
): void {
  if (fields.source_address === null) return;
  // Through a tunnel, every exit dials the targets: each must have the address.
  const nodeIds =
    fields.tunnel_id === null ? [fields.node_id] : (app.store.tunnels.find(fields.tunnel_id)?.exit_node_ids ?? []);
  const wanted = canonicalAddress(fields.source_address);
  for (const nodeId of nodeIds) {
    const known = addresses(nodeId);
    if (known === null || known.some((address) => canonicalAddress(address) === wanted)) continue;
    const which =
      fields.tunnel_id === null ? `node ${nodeId}` : `node ${nodeId}, an exit of tunnel ${fields.tunnel_id},`;
    const listed = known.slice(0, 8).join(', ') + (known.length > 8 ? ', ...' : '');
    throw validationFailed([
      { pointer: '#/source_address', detail: `is not an address of ${which} (its agent reports ${listed})` },
    ]);
  }
}

// A quota's rules on writes, in one place: enabling a rule the quota stopped is refused while its period has nothing
// left (`checkQuotaLeft`), and a quota lowered to what the period has used already stops the rule at once
// (`spendsQuota`). The clock's side (a period ending, bytes reported) is resetQuotas here and the agent link's.

/** Throws `conflict` when `fields` would enable `current` while its quota's period has nothing left. */
function checkQuotaLeft(current: Rule, fields: RuleFields): void {
  if (!fields.enabled || current.enabled || !fields.quota || !current.quota_usage) return;
  const { used_bytes, resets_at } = current.quota_usage;
  if (used_bytes < fields.quota.bytes) return;
  throw new DomainError(
    'conflict',
    `rule ${current.id} has used ${used_bytes} of its ${fields.quota.bytes} bytes this period: it can be enabled ` +
      `${resets_at ? `after ${resets_at}, when the period starts over, ` : ''}with quota.bytes above ${used_bytes}`,
    { data: { state: current.state, quota_usage: current.quota_usage } },
  );
}

/** Whether `current` written as `fields` is to stop at once: enabled, with a quota its period has used up already. */
function spendsQuota(current: Rule, fields: RuleFields): boolean {
  return fields.enabled && fields.quota !== null && (current.quota_usage?.used_bytes ?? 0) >= fields.quota.bytes;
}

/** Inside a transaction. Throws `validation_failed` (references), `conflict` (port). */
export function insertRule(app: WriteDeps, change: Change, fields: RuleFields): Rule {
  return insertRules(app, change, [fields])[0]!;
}

/**
 * Inside a transaction: rules in order, inserted together (see `Database.insertRows`). Throws
 * for the first problem found, references checked before ports. `holders` is what the caller
 * found holding each rule's port (see `RuleStore.insertAll`).
 */
export function insertRules(
  app: WriteDeps,
  change: Change,
  list: readonly RuleFields[],
  holders?: readonly (Claim | undefined)[],
): Rule[] {
  requireRoom(app, change.caller, list.length);
  const owned = list.map((fields) =>
    grantedRule(app, change.caller, { ...fields, owner_id: change.ownerFor(fields.owner_id, null) }),
  );
  // A list's rules mostly share a few nodes: each pair of references, and each node's host, is looked up once.
  const checked = new Set<string>();
  const hosts = new Map<number, string | undefined>();
  const policies = new Map<number, TargetPolicy>();
  const addresses = new Map<number, readonly string[] | null>();
  for (const fields of owned) {
    const references = `${fields.node_id}/${fields.tunnel_id}`;
    checkCombination(fields);
    if (!checked.has(references)) {
      checkReferences(app, fields);
      checked.add(references);
    }
    if (!hosts.has(fields.node_id)) hosts.set(fields.node_id, app.store.nodes.find(fields.node_id)?.host);
    if (!policies.has(fields.owner_id)) policies.set(fields.owner_id, rulePolicy(app, change.caller, fields.owner_id));
    checkTargets(fields, hosts.get(fields.node_id), policies.get(fields.owner_id)!);
    checkSource(app, fields, (nodeId) => {
      if (!addresses.has(nodeId)) addresses.set(nodeId, addressesOf(app, nodeId));
      return addresses.get(nodeId)!;
    });
  }
  const inserted = unnamedToTenants(app, change.caller, () =>
    app.store.rules.insertAll(owned, app.timestamp(), holders),
  );
  for (const rule of inserted) touchRule(app, change, rule);
  const rules = holdWritten(app, change, inserted);
  change.auditAll(
    rules.map((rule, i) => ({
      action: 'rule.create',
      resource: 'rule',
      resource_id: rule.id,
      changes: { after: owned[i] },
    })),
  );
  return rules;
}

/** Inside a transaction. Throws `not_found`, `precondition_failed`, `validation_failed`, `conflict`. */
export function updateRule(app: WriteDeps, change: Change, id: number, given: RuleFields, ifMatch?: string): Rule {
  const current = app.store.rules.find(id);
  if (!current || !reaches(change.caller, current.owner_id)) throw notFound('rule', id);
  checkIfMatch(ifMatch, current.version);
  const fields = grantedRule(app, change.caller, {
    ...given,
    owner_id: change.ownerFor(given.owner_id, current.owner_id),
  });
  checkCombination(fields);
  checkReferences(app, fields);
  checkTargets(fields, app.store.nodes.find(fields.node_id)?.host, rulePolicy(app, change.caller, fields.owner_id));
  checkSource(app, fields);
  checkQuotaLeft(current, fields);
  const written = unnamedToTenants(app, change.caller, () =>
    app.store.rules.update(id, fields, app.timestamp(), spendsQuota(current, fields)),
  );
  const [updated] = holdWritten(app, change, [written]) as [Rule];
  touchRule(app, change, current);
  touchRule(app, change, updated);
  change.audit({
    action: 'rule.update',
    resource: 'rule',
    resource_id: id,
    changes: diff<RuleFields>(current, fields, Object.keys(fields) as (keyof RuleFields)[]),
  });
  return updated;
}

/**
 * Inside a transaction: deletes rules because something they depend on goes (`from` names
 * it), each with its own audit entry; their nodes get the change, but for `goingNode`.
 */
export function cascadeRules(
  app: WriteDeps,
  change: Change,
  ruleIds: readonly number[],
  from: { node: number } | { tunnel: number },
  goingNode?: number,
): void {
  for (const ruleId of ruleIds) {
    const rule = app.store.rules.find(ruleId)!;
    app.store.rules.delete(ruleId);
    touchRule(app, change, rule, goingNode);
    change.audit({
      action: 'rule.delete',
      resource: 'rule',
      resource_id: ruleId,
      changes: { before: rule, cascade_from: from },
    });
  }
}

/** Inside a transaction. Throws `not_found`, `precondition_failed`. */
export function removeRule(app: WriteDeps, change: Change, id: number, ifMatch?: string): void {
  const current = app.store.rules.find(id);
  if (!current || !reaches(change.caller, current.owner_id)) throw notFound('rule', id);
  checkIfMatch(ifMatch, current.version);
  touchRule(app, change, current);
  app.store.rules.delete(id);
  change.audit({ action: 'rule.delete', resource: 'rule', resource_id: id, changes: { before: current } });
}

/** What the master's clock does to rules each second: expiries that have come, quota periods that have ended. */
export async function tickRules(app: Committer): Promise<void> {
  await expireRules(app);
  await resetQuotas(app);
}

/**
 * Starts the next period of each quota whose period has ended: its count starts over and a rule its quota stopped is
 * enabled again (audited as rule.quota_reset); their nodes get the new period. Looks before it writes.
 */
async function resetQuotas(app: Committer): Promise<void> {
  if (!app.store.rules.anyQuotaResetDue(app.timestamp())) return;
  await transact(app, theMaster('rule.quota_reset'), (change) => {
    for (const rule of app.store.rules.resetQuotas(app.timestamp())) {
      touchRule(app, change, rule);
      if (rule.state !== 'quota_exceeded') continue;
      change.audit({
        action: 'rule.quota_reset',
        resource: 'rule',
        resource_id: rule.id,
        changes: { before: { state: rule.state, quota_usage: rule.quota_usage }, after: { state: 'active' } },
      });
    }
  });
}

/**
 * Marks the rules whose expires_at has come expired, each audited, and sends their nodes the change (which stops them;
 * each node also stops them at that time itself). Returns how many; looks before it writes, so a call with none due
 * costs one indexed read.
 */
async function expireRules(app: Committer): Promise<number> {
  if (!app.store.rules.anyDue(app.timestamp())) return 0;
  return transact(app, theMaster('rule.expire'), (change) => {
    const due = app.store.rules.expire(app.timestamp());
    for (const rule of due) {
      touchRule(app, change, rule);
      change.audit({
        action: 'rule.expire',
        resource: 'rule',
        resource_id: rule.id,
        changes: { before: { state: rule.state }, after: { state: 'expired' } },
      });
    }
    return due.length;
  });
}

/**
 * Asks the rules' nodes to apply their current config and waits, up to sync_wait_seconds,
 * for each node to acknowledge. Returns the rules as they stand afterwards.
 *
 * A config the master changes by itself meanwhile (a tunnel's picked port moved after its exit found it taken) leaves
 * the rules pending on a newer version: the wait goes on for that one, within the same time, so that the answer says
 * how the rule ended and not the failure the master already put right.
 */
export async function pushRules(app: Committer, requester: Requester, ids: number[]): Promise<Map<number, Rule>> {
  const versions = await transact(app, requester, (change) => {
    const byNode = new Map<number, number>();
    for (const id of ids) {
      const rule = app.store.rules.find(id);
      if (!rule || !reaches(requester.caller, rule.owner_id)) continue;
      app.store.rules.markPending(id);
      touchRule(app, change, rule);
      change.audit({ action: 'rule.sync', resource: 'rule', resource_id: id });
    }
    for (const nodeId of change.nodes) byNode.set(nodeId, app.store.nodes.find(nodeId)!.config_version);
    return byNode;
  });
  const deadline = performance.now() + app.settings.get('sync_wait_seconds') * 1000;
  for (let awaited = versions, waitMs = deadline - performance.now(); awaited.size > 0 && waitMs > 0;) {
    await Promise.all([...awaited].map(([nodeId, version]) => app.sync.waitApplied(nodeId, version, waitMs)));
    awaited = newerVersions(app, awaited, ids);
    waitMs = deadline - performance.now();
  }
  const out = new Map<number, Rule>();
  for (const id of ids) {
    const rule = app.store.rules.find(id);
    if (rule && reaches(requester.caller, rule.owner_id)) out.set(id, rule);
  }
  return out;
}

/** The nodes of `awaited` whose config moved on while rules of `ids` are pending again, with their versions now. */
function newerVersions(app: Committer, awaited: Map<number, number>, ids: number[]): Map<number, number> {
  const newer = new Map<number, number>();
  if (!ids.some((id) => app.store.rules.find(id)?.sync.state === 'pending')) return newer;
  for (const [nodeId, version] of awaited) {
    const now = app.store.nodes.find(nodeId)?.config_version;
    if (now !== undefined && now > version) newer.set(nodeId, now);
  }
  return newer;
}

/**
 * Pushes rule `id`'s node its config and waits, up to sync_wait_seconds, for the node to acknowledge. Returns the rule
 * as it stands then (sync.state applied, or pending when not acknowledged in time). Throws `not_found`, and
 * `bad_gateway` (the rule in its data) when the node reported it could not apply it.
 */
export async function syncRule(app: Committer, requester: Requester, id: number): Promise<Rule> {
  const found = app.store.rules.find(id);
  if (!found || !reaches(requester.caller, found.owner_id)) throw notFound('rule', id);
  const rule = (await pushRules(app, requester, [id])).get(id);
  if (!rule) throw notFound('rule', id);
  if (rule.sync.state === 'failed') {
    throw new DomainError(
      'bad_gateway',
      `node ${rule.node_id} could not apply rule ${id}: ${rule.sync.error?.detail ?? 'no reason given'}`,
      { data: { rule } },
    );
  }
  return rule;
}
