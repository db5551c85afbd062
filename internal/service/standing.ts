// What the master's clock, a plan's change and a node's tags do to tenants' rules (see store/standing.ts): accounts
// that expire, allowance periods that start over, grants that narrow or widen. Each is one write, audited once per
// user, and the nodes whose rules it changed get their new configs.

import { holds } from '../domain/plans.ts';
import type { Rule } from '../domain/rules.ts';
import { restand } from '../store/standing.ts';
import { theMaster } from './master.ts';
import { transact, type Change, type Committer, type WriteDeps } from './write.ts';

/**
 * Inside a write: holds user `userId`'s rules (or `only` some of them: see restand) to their standing now; touches
 * their nodes.
 */
export function holdToStanding(
  app: WriteDeps,
  change: Change,
  userId: number,
  only?: { ids: readonly number[]; written: boolean },
): void {
  for (const nodeId of restand(app.store, userId, app.timestamp(), only)) change.touchNode(nodeId);
}

/**
 * Inside a write: holds rules just written to their owners' standing (a tenant's, or one a tenant's standing held
 * before it changed hands); returns them as they are now. The writer's role is known: an operator's own rules cost
 * nothing, another owner's one look at them.
 */
export function holdWritten(app: WriteDeps, change: Change, rules: Rule[]): Rule[] {
  const { userId, role } = change.caller;
  const tenant = new Map<number, boolean>([[userId, role === 'tenant']]);
  const byOwner = new Map<number, number[]>();
  for (const rule of rules) {
    if (!tenant.has(rule.owner_id)) tenant.set(rule.owner_id, app.store.users.find(rule.owner_id)?.role === 'tenant');
    if (!tenant.get(rule.owner_id) && rule.plan_limits === null && !isHold(rule.state)) continue;
    byOwner.set(rule.owner_id, [...(byOwner.get(rule.owner_id) ?? []), rule.id]);
  }
  if (byOwner.size === 0) return rules;
  for (const [userId, ids] of byOwner) holdToStanding(app, change, userId, { ids, written: true });
  const held = new Set([...byOwner.values()].flat());
  return rules.map((rule) => (held.has(rule.id) ? (app.store.rules.find(rule.id) ?? rule) : rule));
}

function isHold(state: string): boolean {
  return (holds as readonly string[]).includes(state);
}

/** Inside a write: holds the rules of every user plan `planId` holds to what the plan grants now. */
export function holdPlanUsers(app: WriteDeps, change: Change, planId: number): void {
  for (const userId of app.store.users.idsOnPlan(planId)) holdToStanding(app, change, userId);
}

/** Inside a write: holds the tenants' rules on node `nodeId` to their grants (its tags changed). */
export function holdNodeRules(app: WriteDeps, change: Change, nodeId: number): void {
  const byOwner = new Map<number, number[]>();
  for (const rule of app.store.rules.tenantsOn(nodeId))
    byOwner.set(rule.owner_id, [...(byOwner.get(rule.owner_id) ?? []), rule.id]);
  for (const [userId, ids] of byOwner) holdToStanding(app, change, userId, { ids, written: false });
}

/**
 * What the master's clock does to tenants each second: accounts whose expires_at has come expire (their rules stop,
 * their credentials stop working: audited as user.expire), and allowance periods that ended start over (a rule the
 * allowance stopped or slowed goes on as before: user.allowance_reset). Looks before it writes.
 */
export async function tickAccounts(app: Committer): Promise<void> {
  const at = app.timestamp();
  const expiring = app.store.users.expiryDue(at);
  const resetting = app.store.users.resetsDue(at);
  if (expiring.length === 0 && resetting.length === 0) return;
  await transact(app, theMaster('user.expire'), (change) => {
    for (const userId of app.store.users.expiryDue(at)) {
      app.store.users.expire(userId);
      holdToStanding(app, change, userId);
      change.audit({ action: 'user.expire', resource: 'user', resource_id: userId, changes: { after: { at } } });
    }
    for (const userId of app.store.users.resetsDue(at)) {
      const before = app.store.users.find(userId)?.usage.traffic;
      holdToStanding(app, change, userId);
      change.audit({
        action: 'user.allowance_reset',
        resource: 'user',
        resource_id: userId,
        changes: { before: { traffic: before }, after: { traffic: app.store.users.find(userId)?.usage.traffic } },
      });
    }
  });
}
