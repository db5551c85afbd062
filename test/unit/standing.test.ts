// What a tenant's account and plan do to one of their rules (domain/plans.ts standingOf), case by case.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { standingOf, UNHELD, type Plan, type Standing } from '../../internal/domain/plans.ts';

const plan: Plan = {
  id: 1,
  name: 'starter',
  node_ids: [1],
  node_tags: ['eu'],
  port_ranges: ['30000-30099'],
  max_rules: 10,
  max_connections: 100,
  bandwidth_limit: 1_000_000,
  max_new_connections_per_second: 50,
  traffic: { bytes: 2 ** 30, period: 'month', reset_day: 1, reset_hour: 0, past: 'slow', slow_to: 250_000 },
  version: 1,
  created_at: '2026-11-27T00:00:00Z',
  updated_at: '2026-11-27T00:00:00Z',
};
const tenant = { tenant: true, expired: false, spent: false };
const [byId, byTag, neither] = [
  { id: 1, tags: [] },
  { id: 2, tags: ['eu'] },
  { id: 3, tags: ['us'] },
];
const ports = { first: 30000, last: 30009, preserveSource: false };
const caps = { max_connections: 100, bandwidth_limit: 1_000_000, max_new_connections_per_second: 50 };

const cases: [string, Standing, Parameters<typeof standingOf>][] = [
  ["an operator's rule is never held", UNHELD, [{ ...tenant, tenant: false, expired: true }, undefined, [], ports]],
  ['a granted rule carries the caps', { held: null, ...caps }, [tenant, plan, [byId], ports]],
  ['a node granted by tag', { held: null, ...caps }, [tenant, plan, [byTag], ports]],
  ['an expired account', { held: 'account_expired', ...caps }, [{ ...tenant, expired: true }, plan, [byId], ports]],
  ['a node not granted', { held: 'not_granted', ...caps }, [tenant, plan, [neither], ports]],
  ['a node gone', { held: 'not_granted', ...caps }, [tenant, plan, [undefined], ports]],
  ["a tunnel's exit not granted", { held: 'not_granted', ...caps }, [tenant, plan, [byId, neither], ports]],
  ['a port outside the ranges', { held: 'not_granted', ...caps }, [tenant, plan, [byId], { ...ports, last: 30100 }]],
  ['no plan', { ...UNHELD, held: 'not_granted' }, [tenant, undefined, [byId], ports]],
  [
    'spent, slow: held to slow_to',
    { held: null, max_connections: 100, bandwidth_limit: 250_000, max_new_connections_per_second: 50 },
    [{ ...tenant, spent: true }, plan, [byId], ports],
  ],
  [
    'spent, slow, under a lower cap: the cap',
    { held: null, max_connections: 100, bandwidth_limit: 100_000, max_new_connections_per_second: 50 },
    [{ ...tenant, spent: true }, { ...plan, bandwidth_limit: 100_000 }, [byId], ports],
  ],
  [
    'spent, slow, keeping the client address: stopped',
    { held: 'allowance_exceeded', ...caps },
    [{ ...tenant, spent: true }, plan, [byId], { ...ports, preserveSource: true }],
  ],
  [
    'spent, stop',
    { held: 'allowance_exceeded', ...caps },
    [
      { ...tenant, spent: true },
      { ...plan, traffic: { ...plan.traffic!, past: 'stop', slow_to: null } },
      [byId],
      ports,
    ],
  ],
];

for (const [name, expected, args] of cases)
  test(`standing: ${name}`, () => assert.deepEqual(standingOf(...args), expected));
