// Every filter and every sort of every list that grows with the fleet, run through the plan SQLite records for it on
// a database with more rows than a list may read unindexed: each one reads an index, or is refused past the cap.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { routes } from '../../internal/api/routes.ts';
import { DomainError } from '../../internal/errors/errors.ts';
import { AUDIT_FILTERS, EVERY_ENTRY } from '../../internal/store/audit.ts';
import {
  MAX_UNINDEXED_ROWS,
  type FilteredQuery,
  type FilterBound,
  type KeysetQueries,
} from '../../internal/store/filters.ts';
import { NODE_FILTERS, NODE_SORTS } from '../../internal/store/nodes.ts';
import { EVERY_RULE, RULE_FILTERS, RULE_SORTS } from '../../internal/store/rules.ts';
import { openStore, type Store } from '../../internal/store/store.ts';
import { TOKEN_FILTERS, TOKEN_SORTS } from '../../internal/store/tokens.ts';
import { TUNNEL_FILTERS, TUNNEL_SORTS } from '../../internal/store/tunnels.ts';
import { USER_FILTERS, USER_SORTS } from '../../internal/store/users.ts';

const AT = '2026-11-23T10:00:00Z';
const ROWS = MAX_UNINDEXED_ROWS + 1;

/** ROWS of each list's table, written as SQL (a thousandth as fast through the stores' validating inserts). */
function seed(store: Store): void {
  const n = `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${ROWS})`;
  const statements = `
      ${n} INSERT INTO users (username, password_hash, scopes, created_at, updated_at)
        SELECT 'user' || i, 'x', '[]', '${AT}', '${AT}' FROM n;
      ${n} INSERT INTO nodes (name, host, ssh_port, ssh_user, ssh_auth, tags, agent_token_hash, created_at, updated_at)
        SELECT 'node' || i, 'node' || i || '.example', 22, 'root', 'none', '["eu"]', randomblob(32), '${AT}', '${AT}'
        FROM n;
      ${n} INSERT INTO tunnels (name, owner_id, entry_node_id, exit_node_id, listen_port, transport, created_at,
          updated_at)
        SELECT 'tunnel' || i, 1, i, i % ${ROWS} + 1, 40000, 'tls', '${AT}', '${AT}' FROM n;
      ${n} INSERT INTO rules (name, owner_id, node_id, protocol, listen_port, targets, strategy, enabled, tags,
          created_at, updated_at)
        SELECT 'rule' || i, 1, 1, 'tcp', i, '["10.0.0.1:80"]', 'round_robin', 1, '["web"]', '${AT}', '${AT}' FROM n;
      ${n} INSERT INTO tokens (kind, name, user_id, scopes, secret_hash, created_at)
        SELECT 'api', 'token' || i, 1, '[]', randomblob(32), '${AT}' FROM n;
      ${n} INSERT INTO audit_log (at, actor_type, actor_name, action, resource, resource_id, status)
        SELECT '${AT}', 'user', 'admin', 'rule.create', 'rule', i, 'success' FROM n`;
  store.write(() => {
    for (const sql of statements.split(';')) store.db.prepare(sql).run();
  });
}

/** A list: its filters and sorts as the store has them, a value of each filter, and a page read through the store. */
interface List {
  filters: Record<string, string>;
  /** Filters the store sets itself rather than being asked (rules' trigrams, from q). */
  internal?: string[];
  values: Record<string, unknown>;
  sorts: Record<string, string>;
  page(filter: Record<string, unknown>, sort?: string): unknown;
}

function lists(store: Store): Record<string, List> {
  const sorted = (sort: string | undefined) =>
    sort === undefined ? {} : { sorted: { sort: { name: sort, descending: false }, position: null } };
  return {
    '/api/rules': {
      filters: RULE_FILTERS,
      internal: ['trigrams'],
      values: {
        owner_id: 1,
        node_id: 1,
        tunnel_id: 1,
        enabled: false,
        protocol: 'udp',
        tag: 'web',
        q: 'ru',
        sync_state: 'failed',
        state: 'disabled',
        port: 80,
      },
      sorts: RULE_SORTS,
      page: (filter, sort) => store.rules.page({ ...EVERY_RULE, afterId: 0, limit: 5, ...filter, ...sorted(sort) }),
    },
    '/api/nodes': {
      filters: NODE_FILTERS,
      internal: ['granted'],
      values: { status: 'online', tag: 'eu', q: 'no' },
      sorts: NODE_SORTS,
      page: (filter, sort) =>
        store.nodes.page({ afterId: 0, limit: 5, status: null, tag: null, q: null, ...filter, ...sorted(sort) }),
    },
    '/api/tunnels': {
      filters: TUNNEL_FILTERS,
      values: { owner_id: 1, node_id: 1, status: 'up', q: 'tu' },
      sorts: TUNNEL_SORTS,
      page: (filter, sort) =>
        store.tunnels.page({
          afterId: 0,
          limit: 5,
          owner_id: null,
          node_id: null,
          status: null,
          q: null,
          ...filter,
          ...sorted(sort),
        }),
    },
    '/api/users': {
      filters: USER_FILTERS,
      values: { q: 'us', disabled: true, plan_id: 1 },
      sorts: USER_SORTS,
      page: (filter, sort) =>
        store.users.page({ afterId: 0, limit: 5, q: null, disabled: null, ...filter, ...sorted(sort) }),
    },
    '/api/tokens': {
      filters: TOKEN_FILTERS,
      values: { user_id: 1 },
      sorts: TOKEN_SORTS,
      page: (filter, sort) =>
        store.tokens.page({ afterId: 0, limit: 5, userId: (filter.user_id as number) ?? null, ...sorted(sort) }),
    },
    '/api/audit-logs': {
      filters: AUDIT_FILTERS,
      internal: ['owner'],
      values: {
        action: 'rule.delete',
        resource: 'node',
        resource_id: 7,
        actor: 'nobody',
        actor_type: 'agent',
        status: 'denied',
        since: '2026-12-01T00:00:00Z',
        until: '2026-11-01T00:00:00Z',
      },
      sorts: {},
      page: (filter) => store.audit.page({ beforeId: Number.MAX_SAFE_INTEGER, limit: 5, ...EVERY_ENTRY, ...filter }),
    },
  };
}

/** Lists whose tables do not grow with the fleet: each holds a bounded number, or what a channel keeps. */
const BOUNDED_LISTS = [
  '/api/plans',
  '/api/channels',
  '/api/alert-rules',
  '/api/alerts',
  '/api/silences',
  '/api/rollouts',
  '/api/rollouts/{id}/nodes',
  // By channel through (channel_id, id), at most 10,000 finished a channel: see internal/store/alerts.ts.
  '/api/deliveries',
];

/** The store's bound and sorts for a list, kept private by the store and read here as the store does. */
function internals(store: Store, path: string) {
  const name = { '/api/audit-logs': 'audit' }[path] ?? path.slice('/api/'.length);
  const part = (store as unknown as Record<string, { bound: FilterBound<string>; sortedQueries?: unknown }>)[name]!;
  return { bound: part.bound, sortedQueries: part.sortedQueries as KeysetQueries<string> | undefined };
}

function refusal(run: () => unknown): string | null {
  try {
    run();
    return null;
  } catch (error) {
    if (!(error instanceof DomainError) || error.code !== 'invalid_query') throw error;
    return error.message;
  }
}

/** A store on a data dir of its own, which goes once the test `t` has ended (and closed the store). */
function scratchStore(t: TestContext): Store {
  const dir = mkdtempSync(join(tmpdir(), 'portplane-bounds-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return openStore(dir, { secretFields: new Set() });
}

test('every list route is one this file reads, or holds a bounded number', (t) => {
  const store = scratchStore(t);
  try {
    const known = lists(store);
    for (const route of routes) {
      const query = (route as { query?: Record<string, unknown> }).query ?? {};
      if (route.method !== 'GET' || !('cursor' in query)) continue;
      assert.ok(route.path in known || BOUNDED_LISTS.includes(route.path), `${route.path} is a list nobody bounds`);
      if (!(route.path in known)) continue;
      const list = known[route.path]!;
      const asked = Object.keys(query).filter((name) => !['limit', 'cursor', 'count', 'sort'].includes(name));
      assert.deepEqual(Object.keys(list.values).sort(), asked.sort(), `${route.path}: a value for each filter asked`);
      const own = Object.keys(list.filters).filter((name) => !list.internal?.includes(name));
      assert.deepEqual(own.sort(), asked.sort(), `${route.path}: the store's filters are the route's`);
    }
  } finally {
    store.close();
  }
});

test(`every filter and sort of every list reads an index, or is refused past ${MAX_UNINDEXED_ROWS} rows`, (t) => {
  const store = scratchStore(t);
  try {
    seed(store);
    const scanning: string[] = [];
    for (const [path, list] of Object.entries(lists(store))) {
      const { bound, sortedQueries } = internals(store, path);
      for (const [name, value] of Object.entries(list.values)) {
        const refused = refusal(() => list.page({ [name]: value }));
        // A rules' name search of three characters or more is its trigrams'.
        const scans = bound.scans(name);
        if (scans) scanning.push(`${path}?${name}`);
        if (scans) assert.match(refused ?? 'answered', /matched by reading each of the/, `${path}?${name}`);
        else assert.equal(refused, null, `${path}?${name}`);
        // Sorted or not, a page reads no more to find its matches.
        for (const sort of scans ? Object.keys(list.sorts) : [])
          assert.match(
            refusal(() => list.page({ [name]: value }, sort)) ?? 'answered',
            /matched by reading each of the/,
            `${path}?${name}&sort=${sort}`,
          );
      }
      for (const sort of Object.keys(list.sorts)) {
        const sorts = sortedQueries!.sorts({ name: sort, descending: false }, []);
        const refused = refusal(() => list.page({}, sort));
        if (sorts) assert.match(refused ?? 'answered', /orders every match/, `${path}?sort=${sort}`);
        else assert.equal(refused, null, `${path}?sort=${sort}`);
      }
    }
    // What must scan by design, and nothing else: a computed state, a substring too short for an index.
    assert.deepEqual(scanning.sort(), [
      '/api/nodes?q',
      '/api/nodes?status',
      '/api/rules?q',
      '/api/rules?state',
      '/api/tunnels?q',
      '/api/tunnels?status',
      '/api/users?disabled',
      '/api/users?q',
    ]);
    // A name search of three characters reads its trigrams' index: answered.
    assert.equal(
      refusal(() => store.rules.page({ ...EVERY_RULE, afterId: 0, limit: 5, q: 'rule1' })),
      null,
    );
  } finally {
    store.close();
  }
});

test("a tag's page of nodes or rules walks the tag's index in id order, listing no other row of the tag", (t) => {
  const store = scratchStore(t);
  try {
    for (const [part, index, column] of [
      ['nodes', 'node_tag_index', 'node_id'],
      ['rules', 'rule_tag_index', 'rule_id'],
    ] as const) {
      const tagged = (store[part] as unknown as { taggedQuery: FilteredQuery<string> }).taggedQuery;
      for (const filters of [[], ['q']]) {
        const plan = tagged.plan(filters).join('\n');
        assert.match(
          plan,
          new RegExp(`SEARCH t USING COVERING INDEX sqlite_autoindex_${index}_1 \\(tag=\\? AND ${column}>\\?\\)`),
        );
        assert.doesNotMatch(plan, /LIST SUBQUERY|TEMP B-TREE/, `${part} with ${filters.join()}:\n${plan}`);
      }
    }
  } finally {
    store.close();
  }
});
