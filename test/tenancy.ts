// A tenant's world for tests of what their account and plan do on a real agent: the master and a node on a host of
// its own, a plan and a tenant on it, their rules, and traffic pushed through them.

import assert from 'node:assert/strict';
import type { TestContext } from 'node:test';
import { edgeElsewhere } from './agents.ts';
import { call, newTenant, type Running } from './helpers.ts';

export const MiB = 1024 * 1024;

/**
 * The master and its node "edge" on a host of its own (see edgeElsewhere), agents reporting each second: a tenant's
 * rules reach targets on `targetHost`, never what is local to the node. A string (why) where that cannot be made.
 */
export async function edgeWorld(t: TestContext, nodeFields: Record<string, unknown> = {}) {
  return edgeElsewhere(t, { agent_report_interval_seconds: 1 }, nodeFields);
}

/** A tenant on a plan of `plan`'s grants; signed in. */
export async function tenant(m: Running, plan: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  const made = await call(m.url, 'POST', '/api/plans', { token: m.admin, body: { name: 'customers', ...plan } });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const customer = await newTenant(m, 'customer', made.body.id, extra);
  // The answer is the user as their plan leaves them: an allowance's period is running from the start.
  assert.equal(customer.user.usage.traffic?.used_bytes, plan.traffic ? 0 : undefined);
  return { ...customer, plan: made.body as { id: number; version: number } & Record<string, unknown> };
}

/** Creates a TCP rule as `token`'s holder; returns the answer. */
export async function theirRule(m: Running, token: string, body: Record<string, unknown>) {
  const made = await call(m.url, 'POST', '/api/rules', { token, body: { name: 'theirs', protocol: 'tcp', ...body } });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  return made;
}

export async function sent(m: Running, token: string, id: number) {
  const synced = await call(m.url, 'POST', `/api/rules/${id}/sync`, { token });
  assert.equal(synced.status, 200, JSON.stringify(synced.body));
  assert.equal(synced.body.sync.state, 'applied', JSON.stringify(synced.body.sync));
  return synced.body;
}
