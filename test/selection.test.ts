// Finding and acting on many: list filters by sync and rule state, counts of every match, and batches that select
// what a filter matches rather than a page's ids.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MAX_SELECTED } from '../internal/api/batch.ts';
import { assertProblem, call, mintToken, node, ruleBodies, snapshot, startMaster, type Running } from './helpers.ts';

async function createRules(m: Running, rules: ReturnType<typeof ruleBodies>): Promise<number[]> {
  const ids: number[] = [];
  for (let i = 0; i < rules.length; i += 1000) {
    const made = await call(m.url, 'POST', '/api/rules/batch-create', {
      token: m.admin,
      body: { rules: rules.slice(i, i + 1000) },
    });
    assert.equal(made.status, 201, JSON.stringify(made.body).slice(0, 300));
    ids.push(...made.body.results.map((r: { id: number }) => r.id));
  }
  return ids;
}

test('rules filter by sync state and state, and every list counts its matches when asked', async (t) => {
  const m = await startMaster(t);
  const [a, b] = [await node(m, 'a'), await node(m, 'b')];
  const onA = await createRules(m, ruleBodies(a.id, 30, 10000, 'a'));
  await createRules(m, ruleBodies(b.id, 20, 10000, 'b'));
  // Twelve of node a's rules failed on it; three are disabled.
  await m.app.store.db.writable();
  m.app.store.write(() => {
    for (const id of onA.slice(0, 12))
      m.app.store.rules.setSync(id, a.id, 'failed', { code: 'port_in_use', detail: 'taken' }, m.app.timestamp());
  });
  await m.app.store.committed();
  const disabled = await call(m.url, 'POST', '/api/rules/batch-update', {
    token: m.admin,
    body: { ids: onA.slice(20, 23), changes: { enabled: false } },
  });
  assert.equal(disabled.status, 200);

  const list = async (query: string) => (await call(m.url, 'GET', `/api/rules?${query}`, { token: m.admin })).body;
  const failed = await list(`node_id=${a.id}&sync_state=failed&count=true&limit=5`);
  assert.equal(failed.total, 12);
  assert.equal(failed.items.length, 5);
  assert.ok(failed.items.every((r: any) => r.node_id === a.id && r.sync.state === 'failed'));
  assert.equal((await list('state=disabled&count=true')).total, 3);
  assert.equal((await list('state=active&count=true')).total, 47);
  assert.equal((await list(`node_id=${b.id}&sync_state=failed&count=true`)).total, 0);
  assert.equal((await list('limit=5')).total, undefined, 'no count unless asked');

  // Every list answers total with count=true: the class, not the example.
  for (const path of ['/api/nodes', '/api/tunnels', '/api/users', '/api/tokens', '/api/audit-logs', '/api/rules']) {
    const answer = await call(m.url, 'GET', `${path}?count=true&limit=1`, { token: m.admin });
    assert.equal(answer.status, 200, path);
    assert.equal(typeof answer.body.total, 'number', path);
    assert.ok(answer.body.total >= answer.body.items.length, path);
  }
  assert.equal((await call(m.url, 'GET', '/api/nodes?count=true&q=b', { token: m.admin })).body.total, 1);
  assertProblem(await call(m.url, 'GET', '/api/rules?state=broken', { token: m.admin }), 400, 'invalid_query');
});

test('a batch selects by filter: a preview says what each would do, the run does it, nothing else', async (t) => {
  const m = await startMaster(t);
  const [a, b] = [await node(m, 'a'), await node(m, 'b')];
  const onA = await createRules(m, ruleBodies(a.id, 40, 10000, 'a'));
  const onB = await createRules(m, ruleBodies(b.id, 10, 10000, 'b'));
  await m.app.store.db.writable();
  m.app.store.write(() => {
    for (const id of onA.slice(0, 12))
      m.app.store.rules.setSync(id, a.id, 'failed', { code: 'port_in_use', detail: 'taken' }, m.app.timestamp());
  });
  await m.app.store.committed();
  const failedOnA = { node_id: a.id, sync_state: 'failed' };

  const before = snapshot(m);
  const preview = await call(m.url, 'POST', '/api/rules/batch-update?dry_run=true', {
    token: m.admin,
    body: { filter: failedOnA, changes: { tags: ['to-fix'] } },
  });
  assert.equal(preview.status, 200);
  assert.equal(preview.body.dry_run, true);
  assert.deepEqual(
    preview.body.results.map((r: { id: number; outcome: string }) => [r.id, r.outcome]),
    onA.slice(0, 12).map((id) => [id, 'updated']),
  );
  assert.equal(snapshot(m), before, 'a preview changes nothing');

  const run = await call(m.url, 'POST', '/api/rules/batch-update', {
    token: m.admin,
    body: { filter: failedOnA, changes: { tags: ['to-fix'] } },
  });
  assert.equal(run.body.results.length, 12);
  const tagged = await call(m.url, 'GET', '/api/rules?tag=to-fix&count=true', { token: m.admin });
  assert.equal(tagged.body.total, 12);

  // Move every rule of node b to node a (other ports there: b's ports are a's too, so each is a conflict).
  const moved = await call(m.url, 'POST', '/api/rules/batch-update?dry_run=true', {
    token: m.admin,
    body: { filter: { node_id: b.id }, changes: { node_id: a.id } },
  });
  assert.deepEqual(
    [...new Set(moved.body.results.map((r: { outcome: string }) => r.outcome))],
    ['conflict'],
    'the preview names the clash of each',
  );

  const deleted = await call(m.url, 'POST', '/api/rules/batch-delete', {
    token: m.admin,
    body: { filter: { tag: 'to-fix' } },
  });
  assert.equal(deleted.body.results.length, 12);
  assert.equal((await call(m.url, 'GET', '/api/rules?count=true', { token: m.admin })).body.total, 38);
  const none = await call(m.url, 'POST', '/api/rules/batch-sync', {
    token: m.admin,
    body: { filter: { tag: 'gone' } },
  });
  assert.deepEqual(none.body, { dry_run: false, results: [] }, 'a filter that matches nothing acts on nothing');
  assert.equal(onB.length, 10);

  // A filter's misspelt key is refused, never read as no filter (which would select every rule).
  for (const body of [{}, { ids: [onA[20]], filter: { node_id: a.id } }, { filter: { nodeid: a.id } }])
    assertProblem(
      await call(m.url, 'POST', '/api/rules/batch-delete', { token: m.admin, body }),
      422,
      'validation_failed',
    );
  assertProblem(
    await call(m.url, 'POST', '/api/nodes/batch-delete', { token: m.admin, body: { filter: { status: 'sideways' } } }),
    422,
    'validation_failed',
  );
  // Nodes and tunnels select by their own lists' filters.
  const nodes = await call(m.url, 'POST', '/api/nodes/batch-delete?dry_run=true', {
    token: m.admin,
    body: { filter: { q: 'b' } },
  });
  assert.deepEqual(
    nodes.body.results.map((r: { id: number; outcome: string }) => [r.id, r.outcome]),
    [[b.id, 'conflict']],
  );
  // Tunnels too, by theirs: every tunnel at node a, previewed, then deleted.
  const tunnel = await call(m.url, 'POST', '/api/tunnels', {
    token: m.admin,
    body: { name: 'via-b', entry_node_id: a.id, exit_node_id: b.id },
  });
  const tunnels = await call(m.url, 'POST', '/api/tunnels/batch-delete', {
    token: m.admin,
    body: { filter: { node_id: a.id, q: 'via' } },
  });
  assert.deepEqual(
    tunnels.body.results.map((r: { id: number; outcome: string }) => [r.id, r.outcome]),
    [[tunnel.body.id, 'deleted']],
  );
  // A narrow token selects only what its scope allows it to act on: the route's scope holds as for ids.
  const reader = await mintToken(m, ['rules:read']);
  assertProblem(
    await call(m.url, 'POST', '/api/rules/batch-delete', { token: reader, body: { filter: { node_id: a.id } } }),
    403,
    'insufficient_scope',
  );
});

test(`a filter that selects more than ${MAX_SELECTED} items is refused, and nothing is done`, async (t) => {
  const m = await startMaster(t);
  // Node a and its rules in one import (batch creates took three times as long).
  const rules = ruleBodies(0, MAX_SELECTED + 1, 10000, 'r').map(({ node_id: _, ...r }) => ({ ...r, node: 'a' }));
  const nodes = [{ name: 'a', host: 'a.example.net', ssh_port: 22, ssh_user: 'root', tags: [] }];
  const imported = await call(m.url, 'POST', '/api/import', {
    token: m.admin,
    body: { format: 'portplane-export', version: 1, nodes, tunnels: [], rules },
  });
  assert.equal(imported.status, 200, JSON.stringify(imported.body).slice(0, 300));
  const a = (await call(m.url, 'GET', '/api/nodes', { token: m.admin })).body.items[0];
  const before = snapshot(m);
  const refused = await call(m.url, 'POST', '/api/rules/batch-update', {
    token: m.admin,
    body: { filter: { node_id: a.id }, changes: { enabled: false } },
  });
  assertProblem(refused, 422, 'validation_failed');
  assert.match(refused.body.errors[0].detail, /more than 10000 rules/);
  assert.equal(snapshot(m), before);

  // A list no index orders is sorted by SQLite match by match: past 10,000 matches it is refused with what to do,
  // whichever key and way; so is one whose filter no index serves (a name search of two characters), which would
  // read every rule to find few, sorted or not; a key read in order, or a filter an index serves, answer.
  for (const sort of ['traffic', '-traffic', '-listen_port']) {
    const sorted = await call(m.url, 'GET', `/api/rules?sort=${sort}&limit=5`, { token: m.admin });
    assertProblem(sorted, 400, 'invalid_query');
    assert.match(sorted.body.detail, /more than 10000 match: narrow the list/, sort);
  }
  for (const path of ['/api/rules?sort=-traffic&q=-1', '/api/rules?q=-1', '/api/rules?state=active&count=true']) {
    const searched = await call(m.url, 'GET', path, { token: m.admin });
    assertProblem(searched, 400, 'invalid_query');
    assert.match(searched.body.detail, /matched by reading each of the rules, and more than 10000 would be read/);
  }
  for (const path of [
    '/api/rules?sort=-name&limit=5',
    '/api/rules?sort=node_id&limit=5',
    '/api/rules?sort=sync_state&limit=5',
    '/api/rules?sort=-traffic&q=r-1000',
    `/api/rules?sort=-traffic&q=-1&node_id=${a.id}&enabled=false`,
  ]) {
    const answered = await call(m.url, 'GET', path, { token: m.admin });
    assert.equal(answered.status, 200, `${path}: ${JSON.stringify(answered.body)}`);
  }
});

test('every list sorts by its keys, both ways, and its cursors walk every match once in that order', async (t) => {
  const m = await startMaster(t);
  const [a, b] = [await node(m, 'zeta'), await node(m, 'Alpha')];
  // Names that sort differently by case and by number, ports that do not follow ids.
  const bodies = ['b-2', 'B-10', 'a-1', 'c-3', 'A-20', 'b-1', 'c-1'].map((name, i) => ({
    name,
    node_id: i % 2 ? a.id : b.id,
    protocol: 'tcp',
    listen_port: 9000 - i * 7,
    targets: ['10.0.0.1:80'],
  }));
  await createRules(m, bodies as ReturnType<typeof ruleBodies>);

  /** Every item of a list, page by page (pages of 2), following next_cursor. */
  const walk = async (path: string) => {
    const items: any[] = [];
    let cursor: string | null = null;
    do {
      const query: string = `${path}${path.includes('?') ? '&' : '?'}limit=2${cursor ? `&cursor=${cursor}` : ''}`;
      const page = await call(m.url, 'GET', query, { token: m.admin });
      assert.equal(page.status, 200, JSON.stringify(page.body));
      items.push(...page.body.items);
      cursor = page.body.next_cursor;
    } while (cursor);
    return items;
  };
  const names = (items: { name: string }[]) => items.map((i) => i.name);
  const byName = [...bodies.map((r) => r.name)].sort((x, y) => x.toLowerCase().localeCompare(y.toLowerCase()) || 0);
  const sortedNames = names(await walk('/api/rules?sort=name'));
  assert.deepEqual(
    sortedNames.map((n) => n.toLowerCase()),
    byName.map((n) => n.toLowerCase()),
  );
  assert.deepEqual(names(await walk('/api/rules?sort=-name')), [...sortedNames].reverse());
  const ports = (await walk('/api/rules?sort=listen_port')).map((r: { listen_port: number }) => r.listen_port);
  assert.deepEqual(
    ports,
    [...ports].sort((x, y) => x - y),
  );
  assert.equal(ports.length, bodies.length);
  // Filters and sorts go together; the count is of the filter's matches.
  const onA = await call(m.url, 'GET', `/api/rules?node_id=${a.id}&sort=-listen_port&count=true`, { token: m.admin });
  assert.equal(onA.body.total, 3);
  assert.deepEqual(
    onA.body.items.map((r: { listen_port: number }) => r.listen_port),
    [8993, 8979, 8965],
  );

  // The class: nodes, tunnels, users and tokens sort too.
  assert.deepEqual(names(await walk('/api/nodes?sort=name')), ['Alpha', 'zeta']);
  assert.deepEqual(names(await walk('/api/nodes?sort=-name')), ['zeta', 'Alpha']);
  await call(m.url, 'POST', '/api/users', { token: m.admin, body: { username: 'Bob', password: 'a-long-password' } });
  const users = (await walk('/api/users?sort=-username')).map((u: { username: string }) => u.username);
  assert.deepEqual(users, ['Bob', 'admin']);
  for (const name of ['b-token', 'a-token']) await mintToken(m, ['nodes:read'], name);
  assert.deepEqual(names(await walk('/api/tokens?sort=name')), ['a-token', 'b-token']);
  assert.equal((await walk('/api/tunnels?sort=-name')).length, 0);

  // A cursor belongs to its sort; an unknown sort is refused.
  const first = await call(m.url, 'GET', '/api/rules?sort=name&limit=2', { token: m.admin });
  assertProblem(
    await call(m.url, 'GET', `/api/rules?sort=listen_port&cursor=${first.body.next_cursor}`, { token: m.admin }),
    400,
    'invalid_query',
  );
  assertProblem(
    await call(m.url, 'GET', `/api/rules?cursor=${first.body.next_cursor}`, { token: m.admin }),
    400,
    'invalid_query',
  );
  assertProblem(await call(m.url, 'GET', '/api/rules?sort=password', { token: m.admin }), 400, 'invalid_query');
});
