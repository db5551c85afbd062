// Nodes as a tenant sees them: only those their plan grants, and of each only what a tenant needs to give their
// clients (its name, the address they connect to, its tags, whether it is up), never how it is reached over SSH,
// its agent or its machine's vitals.

import type { JsonPage } from '../store/page.ts';
import { grantsNode, type Plan } from '../domain/plans.ts';
import { describe } from '../schema/schema.ts';
import type { Principal } from '../auth/principal.ts';
import { record } from './common.ts';
import type { Ctx } from './route.ts';
import { nodeStatuses } from '../domain/nodes.ts';

const GRANTED_FIELDS = ['id', 'name', 'host', 'tags', 'status'] as const;

export const grantedNodeSchema = record(
  'GrantedNode',
  {
    id: { type: 'integer' },
    name: { type: 'string' },
    host: { type: 'string', description: 'The address clients connect to.' },
    tags: { type: 'array', items: { type: 'string' } },
    status: { type: 'string', enum: [...nodeStatuses] },
  },
  'A node as a tenant sees it: one their plan grants.',
);

/** A node's answer: the whole node for an operator, a GrantedNode for a tenant. */
export function nodeAnswer(nodeSchemaJson: object) {
  return describe({ oneOf: [nodeSchemaJson, grantedNodeSchema.json] });
}

/** The plan of a tenant caller (null for an operator; a tenant without one is granted no node). */
function planOf(ctx: Pick<Ctx<unknown, unknown>, 'app' | 'caller'>): Pick<Plan, 'node_ids' | 'node_tags'> | null {
  const caller: Principal = ctx.caller;
  if (caller.role !== 'tenant') return null;
  return (
    (caller.planId === null ? undefined : ctx.app.store.plans.find(caller.planId)) ?? { node_ids: [], node_tags: [] }
  );
}

/** What a list of nodes is narrowed to for the caller: null for an operator, the plan's grants for a tenant. */
export function grantedTo(ctx: Pick<Ctx<unknown, unknown>, 'app' | 'caller'>) {
  const plan = planOf(ctx);
  return plan && { ids: plan.node_ids, tags: plan.node_tags };
}

function granted(node: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(GRANTED_FIELDS.map((field) => [field, node[field]]));
}

/** A page of whole nodes (JSON text) as a tenant sees it. */
export function grantedPage(page: JsonPage): JsonPage {
  const items = (JSON.parse(page.items) as Record<string, unknown>[]).map(granted);
  return { ...page, items: JSON.stringify(items) };
}

/** A node (its JSON text) as the caller may see it: whole for an operator; for a tenant, null unless granted. */
export function nodeFor(ctx: Pick<Ctx<unknown, unknown>, 'app' | 'caller'>, json: string): string | null {
  const plan = planOf(ctx);
  if (!plan) return json;
  const node = JSON.parse(json) as Record<string, unknown> & { id: number; tags: string[] };
  return grantsNode(plan, node) ? JSON.stringify(granted(node)) : null;
}
