// Plans: named sets of grants a tenant is held to (issue 49): the nodes they may use (by id or tag) and the ports on
// them, how many rules, the most each rule's controls may ask for, and a traffic allowance per period for all their
// rules together, with what happens past it.

import type { QuotaPeriod } from './quota.ts';

/** What happens to a tenant's rules once their allowance for the period is spent. */
export const pastAllowance = ['stop', 'slow'] as const;
export type PastAllowance = (typeof pastAllowance)[number];

/** A period's traffic for all of a tenant's rules together, counted as a rule's quota with direction both. */
export interface Allowance {
  bytes: number;
  period: Exclude<QuotaPeriod, 'none'>;
  /** The day of the month a monthly period starts (UTC). */
  reset_day: number;
  /** The hour (UTC) a daily or monthly period starts. */
  reset_hour: number;
  past: PastAllowance;
  /** With `past: slow`: the bytes a second each of the tenant's rules is held to, each way. */
  slow_to: number | null;
}

/** What a plan's writer sets. */
export interface PlanFields {
  name: string;
  node_ids: number[];
  node_tags: string[];
  /** Ports or inclusive ranges (`30000`, `30000-30099`). */
  port_ranges: string[];
  /** The most rules; null: any number. */
  max_rules: number | null;
  /** The most a rule's max_connections may be (and what a rule without one is held to); null: no cap. */
  max_connections: number | null;
  /** The most a rule's bandwidth_limit may be (and what a rule without one is held to); null: no cap. */
  bandwidth_limit: number | null;
  /** The most a rule's max_new_connections_per_second may be (and what one without is held to); null: no cap. */
  max_new_connections_per_second: number | null;
  traffic: Allowance | null;
}

export interface Plan extends PlanFields {
  id: number;
  version: number;
  created_at: string;
  updated_at: string;
}

/** A port range as a plan holds it: first and last port, inclusive. */
export interface PortRange {
  first: number;
  last: number;
}

/** `30000` or `30000-30099` as a range; null for anything else (out of 1-65535, or backwards). */
export function parsePortRange(text: string): PortRange | null {
  const match = /^(\d{1,5})(?:-(\d{1,5}))?$/.exec(text);
  if (!match) return null;
  const first = Number(match[1]);
  const last = match[2] === undefined ? first : Number(match[2]);
  if (first < 1 || last > 65535 || last < first) return null;
  return { first, last };
}

/** Whether a plan grants a node: by its id, or by one of its tags. */
export function grantsNode(plan: Pick<PlanFields, 'node_ids' | 'node_tags'>, node: { id: number; tags: string[] }) {
  return plan.node_ids.includes(node.id) || node.tags.some((tag) => plan.node_tags.includes(tag));
}

/** Whether `first` to `last` lies within one of the plan's port ranges. */
export function portsGranted(plan: Pick<PlanFields, 'port_ranges'>, first: number, last: number): boolean {
  return plan.port_ranges.some((text) => {
    const range = parsePortRange(text);
    return range !== null && range.first <= first && last <= range.last;
  });
}

/**
 * Why a tenant's rule does not forward though its writer left it enabled, by what their account and plan say now:
 * the account has expired, the plan no longer grants the rule's node or ports, or the period's allowance is spent
 * and the plan stops rules past it.
 */
export const holds = ['account_expired', 'not_granted', 'allowance_exceeded'] as const;
export type Hold = (typeof holds)[number];

/**
 * What an owner's account and plan do to one of their rules now: stop it (and why), or hold its controls to at most
 * `max_connections`, `bandwidth_limit` and `max_new_connections_per_second` (the plan's caps, and past a `slow`
 * allowance its slow_to).
 */
export interface Standing {
  held: Hold | null;
  max_connections: number | null;
  bandwidth_limit: number | null;
  max_new_connections_per_second: number | null;
}

export const UNHELD: Standing = {
  held: null,
  max_connections: null,
  bandwidth_limit: null,
  max_new_connections_per_second: null,
};

/** What of a rule's owner its standing depends on. */
export interface OwnerStanding {
  tenant: boolean;
  expired: boolean;
  /** Whether the period's allowance is spent. */
  spent: boolean;
}

/**
 * The standing of a rule listening on `first`-`last` at `nodes[0]` (and through a tunnel, leaving at `nodes[1]`;
 * undefined: gone) whose owner is `owner` on `plan` (undefined: none). An operator's rules are never held: their owner
 * answers for them.
 */
export function standingOf(
  owner: OwnerStanding,
  plan: Plan | undefined,
  nodes: readonly ({ id: number; tags: string[] } | undefined)[],
  ports: { first: number; last: number; preserveSource: boolean },
): Standing {
  if (!owner.tenant) return UNHELD;
  const caps = {
    max_connections: plan?.max_connections ?? null,
    bandwidth_limit: plan?.bandwidth_limit ?? null,
    max_new_connections_per_second: plan?.max_new_connections_per_second ?? null,
  };
  if (owner.expired) return { held: 'account_expired', ...caps };
  const granted = (node: { id: number; tags: string[] } | undefined) => node !== undefined && grantsNode(plan!, node);
  if (!plan || !nodes.every(granted) || !portsGranted(plan, ports.first, ports.last))
    return { held: 'not_granted', ...caps };
  if (!owner.spent || !plan.traffic) return { held: null, ...caps };
  // Slowing is the relay's, which connects from the node's own address: a rule that keeps the client's is stopped.
  if (plan.traffic.past === 'stop' || ports.preserveSource) return { held: 'allowance_exceeded', ...caps };
  const slowTo = plan.traffic.slow_to!;
  return { held: null, ...caps, bandwidth_limit: Math.min(caps.bandwidth_limit ?? slowTo, slowTo) };
}
