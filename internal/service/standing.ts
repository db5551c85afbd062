// What a tenant's account and plan do to their rules: the policy, in one place. Each rule keeps its standing in its
// `held` columns (the store's), so that every read and every config sent says it without looking further; the
// functions here bring a user's rules to it, inside the write that changed anything it depends on (the user, their
// plan, a node's tags, a rule of theirs, the allowance's count or period, the account's expiry), and say which nodes
// get new configs. The master's clock, a plan's change and a node's tags each make one write, audited once per user.

import { holds, standingOf, type Plan } from '../domain/plans.ts';
import { quotaPeriodAt } from '../domain/quota.ts';
import type { Rule } from '../domain/rules.ts';
import { formatTime } from '../schema/schema.ts';
import type { User } from '../store/users.ts';
import { theMaster } from './master.ts';
import { transact, type Change, type Committer, type WriteBase } from './write.ts';

/**
 * Inside a write: starts user `userId`'s allowance period where a new one has come (or their plan's allowance changed),
 * then holds each of their rules to what their account and plan say now, touching the nodes whose configs that
 * changed: each rule's node and (through a tunnel) the tunnel's exit. `only` narrows it to some rules: `written` ones,
 * just made or replaced in this write, keep the version it gave them.
 */
export function holdToStanding(
  app: WriteBase,
  change: Change,
  userId: number,
  only?: { ids: readonly number[]; written: boolean },
): void {
  const { store } = app;
  const user = store.users.find(userId);
  if (!user) return;
  const plan = user.plan_id === null ? undefined : store.plans.find(user.plan_id);
  const spent = keepPeriod(app, user, user.role === 'tenant' ? plan : undefined);
  const owner = { tenant: user.role === 'tenant', expired: user.expired, spent };
  const nodes = new Map<number, { id: number; tags: string[] } | undefined>();
  const nodeOf = (id: number) => (nodes.has(id) ? nodes.get(id) : nodes.set(id, store.nodes.find(id)).get(id));
  const rules = only?.ids.map((id) => store.rules.find(id)).filter((rule) => rule !== undefined);
  // An operator's rules are held by nothing: only those a standing of before still holds are looked at (an
  // operator may own every rule of the fleet).
  const all = () => (owner.tenant ? store.rules.ownedBy(userId) : store.rules.heldOf(userId));
  for (const rule of rules ?? all()) {
    if (rule.owner_id !== userId) continue;
    // Through a tunnel, the traffic leaves at its exits: those nodes are to be granted too.
    const exits = rule.tunnel_id === null ? [] : (store.tunnels.find(rule.tunnel_id)?.exit_node_ids ?? []);
    const carriers = [rule.node_id, ...exits];
    const ports = {
      first: rule.listen_port,
      last: rule.listen_port_end ?? rule.listen_port,
      preserveSource: rule.preserve_source,
    };
    const standing = standingOf(owner, plan, carriers.map(nodeOf), ports);
    if (!store.rules.hold(rule.id, standing, only?.written)) continue;
    for (const nodeId of carriers) change.touchNode(nodeId);
  }
}

/**
 * Puts the user's allowance in the period of now by their plan (none without one), written only where that changes
 * anything; whether it is spent.
 */
function keepPeriod(app: WriteBase, user: User, plan: Plan | undefined): boolean {
  const allowance = plan?.traffic;
  const now = user.usage.traffic;
  if (!allowance) {
    if (now) app.store.users.setPeriod(user.id, null);
    return false;
  }
  const period = quotaPeriodAt({ ...allowance, direction: 'both' }, Date.parse(app.timestamp()));
  const start = formatTime(period.start);
  const next = formatTime(period.next!);
  const used = now?.period_started_at === start ? now.used_bytes : 0;
  const spent = used >= allowance.bytes;
  if (now?.period_started_at !== start || now.resets_at !== next || now.spent !== spent)
    app.store.users.setPeriod(user.id, { start, next, bytes: allowance.bytes });
  return spent;
}

/**
 * Inside the write that counted a tenant's traffic: once it reaches their plan's allowance, their rules stop or slow,
 * audited as user.allowance_exceeded (a report that comes after its period ended counts into the period the clock
 * starts over: not spent after all).
 */
export function spendAllowance(app: WriteBase, change: Change, userId: number, planId: number | null, used: number) {
  const allowance = planId === null ? null : app.store.plans.find(planId)?.traffic;
  if (!allowance || used < allowance.bytes) return;
  holdToStanding(app, change, userId);
  const traffic = app.store.users.find(userId)?.usage.traffic;
  if (!traffic?.spent) return;
  change.audit({
    action: 'user.allowance_exceeded',
    resource: 'user',
    resource_id: userId,
    changes: { after: { traffic, past: allowance.past } },
  });
}

/**
 * Inside a write: holds rules just written to their owners' standing (a tenant's, or one a tenant's standing held
 * before it changed hands); returns them as they are now. The writer's role is known: an operator's own rules cost
 * nothing, another owner's one look at them.
 */
export function holdWritten(app: WriteBase, change: Change, rules: Rule[]): Rule[] {
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
export function holdPlanUsers(app: WriteBase, change: Change, planId: number): void {
  for (const userId of app.store.users.idsOnPlan(planId)) holdToStanding(app, change, userId);
}

/** Inside a write: holds the tenants' rules on node `nodeId` to their grants (its tags changed). */
export function holdNodeRules(app: WriteBase, change: Change, nodeId: number): void {
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
