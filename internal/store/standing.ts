// What a tenant's account and plan do to their rules, kept on each rule (its `held` columns) so that every read and
// every config sent says it without looking further: one function brings a user's rules to it, called inside the
// write that changed anything it depends on (the user, their plan, a node's tags, a rule of theirs, the allowance's
// count or period, the account's expiry).

import { quotaPeriodAt } from '../domain/quota.ts';
import { standingOf, type Plan } from '../domain/plans.ts';
import { formatTime } from '../schema/schema.ts';
import type { Store } from './store.ts';
import type { User } from './users.ts';

/**
 * Inside a write, at `at`: starts user `userId`'s allowance period where a new one has come (or their plan's allowance
 * changed), then holds each of their rules to what their account and plan say now. Returns the nodes whose configs
 * that changed: each rule changed, its node and (through a tunnel) the tunnel's exit. `only` narrows it to some
 * rules: `written` ones, just made or replaced in this write, keep the version it gave them.
 */
export function restand(
  store: Store,
  userId: number,
  at: string,
  only?: { ids: readonly number[]; written: boolean },
): Set<number> {
  const touched = new Set<number>();
  const user = store.users.find(userId);
  if (!user) return touched;
  const plan = user.plan_id === null ? undefined : store.plans.find(user.plan_id);
  const spent = keepPeriod(store, user, user.role === 'tenant' ? plan : undefined, at);
  const owner = { tenant: user.role === 'tenant', expired: user.expired, spent };
  const nodes = new Map<number, { id: number; tags: string[] } | undefined>();
  const nodeOf = (id: number) => (nodes.has(id) ? nodes.get(id) : nodes.set(id, store.nodes.find(id)).get(id));
  const rules = only?.ids.map((id) => store.rules.find(id)).filter((rule) => rule !== undefined);
  // An operator's rules are held by nothing: only those a standing of before still holds are looked at (an
  // operator may own every rule of the fleet).
  const all = () => (owner.tenant ? store.rules.ownedBy(userId) : store.rules.heldOf(userId));
  for (const rule of rules ?? all()) {
    if (rule.owner_id !== userId) continue;
    // Through a tunnel, the traffic leaves at its exit: that node is to be granted too.
    const exit = rule.tunnel_id === null ? undefined : store.tunnels.find(rule.tunnel_id)?.exit_node_id;
    const carriers = exit === undefined ? [rule.node_id] : [rule.node_id, exit];
    const ports = {
      first: rule.listen_port,
      last: rule.listen_port_end ?? rule.listen_port,
      preserveSource: rule.preserve_source,
    };
    const standing = standingOf(owner, plan, carriers.map(nodeOf), ports);
    if (!store.rules.hold(rule.id, standing, only?.written)) continue;
    for (const nodeId of carriers) touched.add(nodeId);
  }
  return touched;
}

/**
 * Puts the user's allowance in the period of `at` by their plan (none without one), written only where that changes
 * anything; whether it is spent.
 */
function keepPeriod(store: Store, user: User, plan: Plan | undefined, at: string): boolean {
  const allowance = plan?.traffic;
  const now = user.usage.traffic;
  if (!allowance) {
    if (now) store.users.setPeriod(user.id, null);
    return false;
  }
  const period = quotaPeriodAt({ ...allowance, direction: 'both' }, Date.parse(at));
  const start = formatTime(period.start);
  const next = formatTime(period.next!);
  const used = now?.period_started_at === start ? now.used_bytes : 0;
  const spent = used >= allowance.bytes;
  if (now?.period_started_at !== start || now.resets_at !== next || now.spent !== spent)
    store.users.setPeriod(user.id, { start, next, bytes: allowance.bytes });
  return spent;
}
