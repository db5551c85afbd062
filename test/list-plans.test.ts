import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { FilteredQuery } from '../internal/store/filters.ts';
import { startMaster } from './helpers.ts';

test('every list reads its page in id order through its filters, never sorting what it read', async (t) => {
  const m = await startMaster(t);
  // The stores keep their list statements private; the test reads them as the store does.
  const store = m.app.store as unknown as Record<string, Record<string, FilteredQuery<string>>>;
  const lists: [string, FilteredQuery<string>, string[][]][] = [
    ['rules', store.rules!.pageQuery!, [[], ['node_id'], ['tunnel_id'], ['enabled'], ['protocol'], ['q']]],
    ['rules (export)', store.rules!.listQuery!, [[]]],
    ['rules by name', store.rules!.searchQuery!, [[], ['enabled'], ['protocol']]],
    ['nodes', store.nodes!.pageQuery!, [[], ['status'], ['tag'], ['q']]],
    // A node's tunnels come from both its indexes (entry and exit) and are sorted: those of one node only.
    ['tunnels', store.tunnels!.pageQuery!, [[], ['status'], ['q']]],
    ['tunnels (export)', store.tunnels!.listQuery!, [[]]],
    ['users', store.users!.pageQuery!, [[], ['q'], ['disabled']]],
    ['tokens', store.tokens!.pageQuery!, [[], ['user_id']]],
    [
      'audit log',
      store.audit!.pageQuery!,
      [
        [],
        ['resource'],
        ['resource', 'resource_id'],
        ['action'],
        ['actor'],
        ['actor_type'],
        ['status'],
        ['since'],
        ['until'],
      ],
    ],
  ];
  for (const [name, query, combinations] of lists)
    for (const filters of combinations) {
      const plan = query.plan(filters);
      assert.ok(!plan.some((step) => step.includes('TEMP B-TREE')), `${name} with ${filters}: ${plan.join('; ')}`);
    }
});
