import assert from 'node:assert/strict';
import { test } from 'node:test';
import { batchesInWorker } from '../cmd/master/workers.ts';
import type { BatchJob } from '../internal/service/batch.ts';
import { DomainError } from '../internal/errors/errors.ts';
import { VERSION } from '../internal/version.ts';
import {
  assertProblem,
  call,
  NO_CONTROLS,
  node,
  rule,
  ruleBodies,
  snapshot,
  startMaster,
  yieldingThreads,
  type Running,
} from './helpers.ts';

const ACTIONS = {
  deleteNodes: 'node.delete',
  deleteRules: 'rule.delete',
  deleteTunnels: 'tunnel.delete',
  updateRules: 'rule.update',
  createRules: 'rule.create',
};

/** A batch for a batcher called directly, as the system (no caller: nothing here needs a scope). */
function batchJob(m: Running, fields: Pick<BatchJob, 'operation'> & Partial<BatchJob>): BatchJob {
  return {
    ids: [],
    cascade: false,
    changes: {},
    rules: [],
    dryRun: false,
    requester: {
      actor: { actor_type: 'system', actor_id: null, actor_name: 'test', ip: null, request_id: null },
      action: ACTIONS[fields.operation],
      caller: { scopes: ['*'], userId: 1, role: 'operator', planId: null },
    },
    timestamp: m.app.timestamp(),
    license: m.app.licenseView(),
    targets: m.app.targetPolicy(),
    channels: m.app.channelPolicy(),
    ...fields,
  };
}

async function batchCreate(m: Running, rules: unknown[], query = '') {
  return call(m.url, 'POST', `/api/rules/batch-create${query}`, { token: m.admin, body: { rules } });
}

test('batch-create makes up to 1000 rules in one call and answers with their ids in order', async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const answer = await batchCreate(m, ruleBodies(n.id, 1000));
  assert.equal(answer.status, 201, JSON.stringify(answer.body).slice(0, 300));
  assert.equal(answer.body.results.length, 1000);
  assert.deepEqual(answer.body.results[0], { index: 0, id: answer.body.results[0].id, outcome: 'created' });
  assert.ok(
    answer.body.results.every(
      (r: { index: number; outcome: string }, i: number) => r.index === i && r.outcome === 'created',
    ),
  );
  const page = await call(m.url, 'GET', `/api/rules?node_id=${n.id}&limit=1000`, { token: m.admin });
  assert.equal(page.body.items.length, 1000);
  const audit = await call(m.url, 'GET', '/api/audit-logs?action=rule.create&limit=1000', { token: m.admin });
  assert.equal(audit.body.items.length, 1000, 'one audit entry per rule');
  assertProblem(await batchCreate(m, ruleBodies(n.id, 1001, 20000)), 422, 'validation_failed');
});

test('batch-create is all or nothing: every problem is reported with its index and nothing is created', async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const holder = (await rule(m, { node_id: n.id, listen_port: 10003 })).body;
  const before = snapshot(m);
  const rules: Record<string, unknown>[] = ruleBodies(n.id, 8);
  rules[2] = { ...rules[2], listen_port: 0 };
  rules[5] = { ...rules[5], listen_port: 10001 };
  rules[6] = { ...rules[6], node_id: 999 };
  const answer = await batchCreate(m, rules);
  assertProblem(answer, 422, 'validation_failed');
  assert.deepEqual(
    answer.body.errors.map((e: { pointer: string }) => e.pointer),
    ['#/rules/2/listen_port'],
    'schema problems are reported first, before anything is tried',
  );
  rules[2] = { ...rules[2], listen_port: 10002 };
  const second = await batchCreate(m, rules);
  assertProblem(second, 422, 'validation_failed');
  assert.deepEqual(second.body.errors, [
    { pointer: '#/rules/3/listen_port', detail: `port 10003/tcp on node ${n.id} is taken by rule ${holder.id}` },
    { pointer: '#/rules/5/listen_port', detail: `port 10001/tcp on node ${n.id} is taken by #/rules/1` },
    { pointer: '#/rules/6/node_id', detail: 'node 999 does not exist' },
  ]);
  assert.deepEqual(
    second.body.results.map((r: { outcome: string }) => r.outcome),
    ['invalid', 'invalid', 'invalid', 'conflict', 'invalid', 'conflict', 'invalid', 'invalid'],
  );
  assert.equal(snapshot(m), before);
});

test('batch-create dry run previews without creating', async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const before = snapshot(m);
  const answer = await batchCreate(m, ruleBodies(n.id, 3), '?dry_run=true');
  assert.equal(answer.status, 200);
  assert.deepEqual(answer.body, {
    dry_run: true,
    results: [0, 1, 2].map((index) => ({ index, id: null, outcome: 'created' })),
  });
  assert.equal(snapshot(m), before);
});

test('batch-delete answers per id in order, audits each, and dry_run changes nothing', async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const ids = (await batchCreate(m, ruleBodies(n.id, 3))).body.results.map((r: { id: number }) => r.id);
  const before = snapshot(m);
  const preview = await call(m.url, 'POST', '/api/rules/batch-delete?dry_run=true', {
    token: m.admin,
    body: { ids: [ids[0], 424242, ids[2]] },
  });
  assert.deepEqual(
    preview.body.results.map((r: { outcome: string }) => r.outcome),
    ['deleted', 'not_found', 'deleted'],
  );
  assert.equal(preview.body.dry_run, true);
  assert.equal(snapshot(m), before);

  const done = await call(m.url, 'POST', '/api/rules/batch-delete', {
    token: m.admin,
    body: { ids: [ids[0], 424242, ids[2]] },
  });
  assert.deepEqual(done.body, {
    dry_run: false,
    results: [
      { id: ids[0], outcome: 'deleted' },
      { id: 424242, outcome: 'not_found', error: { code: 'not_found', detail: 'rule 424242 does not exist' } },
      { id: ids[2], outcome: 'deleted' },
    ],
  });
  const remaining = (await call(m.url, 'GET', '/api/rules', { token: m.admin })).body.items.map(
    (r: { id: number }) => r.id,
  );
  assert.deepEqual(remaining, [ids[1]]);
  assert.equal(
    (await call(m.url, 'GET', '/api/audit-logs?action=rule.delete', { token: m.admin })).body.items.length,
    2,
  );
});

test('batch-delete of nodes and tunnels reports conflicts per item unless cascade', async (t) => {
  const m = await startMaster(t);
  const busy = await node(m, 'busy');
  const idle = await node(m, 'idle');
  await rule(m, { node_id: busy.id, listen_port: 80 });
  const answer = await call(m.url, 'POST', '/api/nodes/batch-delete', {
    token: m.admin,
    body: { ids: [busy.id, idle.id] },
  });
  assert.deepEqual(
    answer.body.results.map((r: { outcome: string }) => r.outcome),
    ['conflict', 'deleted'],
  );
  assert.match(answer.body.results[0].error.detail, /cascade=true/);
  const cascade = await call(m.url, 'POST', '/api/nodes/batch-delete?cascade=true', {
    token: m.admin,
    body: { ids: [busy.id] },
  });
  assert.deepEqual(cascade.body.results, [{ id: busy.id, outcome: 'deleted' }]);

  const a = await node(m, 'a');
  const b = await node(m, 'b');
  const tunnel = (
    await call(m.url, 'POST', '/api/tunnels', {
      token: m.admin,
      body: { name: 't', entry_node_id: a.id, exit_node_id: b.id },
    })
  ).body;
  await rule(m, { node_id: a.id, listen_port: 81, tunnel_id: tunnel.id });
  const tunnels = await call(m.url, 'POST', '/api/tunnels/batch-delete', {
    token: m.admin,
    body: { ids: [tunnel.id, 999] },
  });
  assert.deepEqual(
    tunnels.body.results.map((r: { outcome: string }) => r.outcome),
    ['conflict', 'not_found'],
  );
  const cascaded = await call(m.url, 'POST', '/api/tunnels/batch-delete?cascade=true', {
    token: m.admin,
    body: { ids: [tunnel.id] },
  });
  assert.deepEqual(cascaded.body.results, [{ id: tunnel.id, outcome: 'deleted' }]);
});

test('batch-update disables or moves rules, each item on its own', async (t) => {
  const m = await startMaster(t);
  const from = await node(m, 'from');
  const to = await node(m, 'to');
  const ids = (await batchCreate(m, ruleBodies(from.id, 3))).body.results.map((r: { id: number }) => r.id);
  await rule(m, { node_id: to.id, listen_port: 10001 });
  const disabled = await call(m.url, 'POST', '/api/rules/batch-update', {
    token: m.admin,
    body: { ids: [...ids, 999], changes: { enabled: false } },
  });
  assert.deepEqual(
    disabled.body.results.map((r: { outcome: string }) => r.outcome),
    ['updated', 'updated', 'updated', 'not_found'],
  );
  const moved = await call(m.url, 'POST', '/api/rules/batch-update', {
    token: m.admin,
    body: { ids, changes: { node_id: to.id } },
  });
  assert.deepEqual(
    moved.body.results.map((r: { outcome: string }) => r.outcome),
    ['updated', 'conflict', 'updated'],
  );
  const onTo = (
    await call(m.url, 'GET', `/api/rules?node_id=${to.id}&enabled=false`, { token: m.admin })
  ).body.items.map((r: { id: number }) => r.id);
  assert.deepEqual(onTo, [ids[0], ids[2]]);
  assertProblem(
    await call(m.url, 'POST', '/api/rules/batch-update', { token: m.admin, body: { ids, changes: {} } }),
    422,
    'validation_failed',
  );
});

test('batch-sync reports each rule as the nodes acknowledged it', async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const created = (await rule(m, { node_id: n.id, listen_port: 80 })).body;
  const answer = await call(m.url, 'POST', '/api/rules/batch-sync', {
    token: m.admin,
    body: { ids: [created.id, 999] },
  });
  assert.deepEqual(answer.body.results, [
    { id: created.id, outcome: 'pending' },
    { id: 999, outcome: 'not_found', error: { code: 'not_found', detail: 'rule 999 does not exist' } },
  ]);
});

test('a batch is written beside the API by a thread at the lowest priority: a request is answered first', async (t) => {
  const others = yieldingThreads();
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const ids = (await batchCreate(m, ruleBodies(n.id, 1000))).body.results.map((r: { id: number }) => r.id);
  const order: string[] = [];
  let yielded = false;
  let answered = false;
  const batch = call(m.url, 'POST', '/api/rules/batch-delete', { token: m.admin, body: { ids } }).then((a) => {
    answered = true;
    order.push(`batch ${a.status}`);
  });
  // The live request goes once the batch is being written (its thread holds the writes), not after a guess of when.
  while (!m.app.store.db.writesHeld && !answered) await new Promise((resolve) => setImmediate(resolve));
  assert.ok(!answered, 'the batch was still being written when the live request went');
  const live = call(m.url, 'GET', '/api/auth/me', { token: m.admin }).then((a) => order.push(`live ${a.status}`));
  while (!answered) {
    if (m.app.store.db.writesHeld) yielded ||= yieldingThreads(others).size > 0;
    await new Promise((resolve) => setImmediate(resolve));
  }
  await Promise.all([batch, live]);
  assert.deepEqual(order, ['live 200', 'batch 200']);
  if (process.platform === 'linux') assert.ok(yielded, "the batch's thread yields to requests");
  assert.equal((await call(m.url, 'GET', '/api/dashboard', { token: m.admin })).body.rules.total, 0);
});

test('the batch worker stays for the next batch and ends once idle; one of another version refuses', async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const ids = (await batchCreate(m, ruleBodies(n.id, 6))).body.results.map((r: { id: number }) => r.id);
  const setup = { version: VERSION, databasePath: m.app.store.db.path, sealingKey: m.app.box.key() };
  const job = (some: number[]) => batchJob(m, { operation: 'deleteRules', ids: some });
  const idle = yieldingThreads();
  const batches = batchesInWorker(setup, 1000);
  t.after(() => batches.close());
  const outcomes: string[] = [];
  const threads: number[] = [];
  for (const some of [ids.slice(0, 2), ids.slice(2, 4)]) {
    const done = await m.app.store.db.holdWrites(
      () => batches.run(job(some)),
      (committed) => committed.finished,
    );
    await done.finished;
    outcomes.push(...JSON.parse(done.json.toString()).results.map((r: { outcome: string }) => r.outcome));
    threads.push(yieldingThreads(idle).size);
  }
  assert.deepEqual(outcomes, ['deleted', 'deleted', 'deleted', 'deleted']);
  // A refused batch and the next one sent at once: the next is answered (it once got the first one's last message).
  const refused = batches.run(
    batchJob(m, {
      operation: 'createRules',
      rules: [
        {
          name: 'nowhere',
          owner_id: null,
          node_id: 999_999,
          tunnel_id: null,
          protocol: 'tcp',
          listen_port: 10_000,
          listen_port_end: null,
          targets: ['10.0.0.1:80'],
          strategy: 'round_robin',
          weights: null,
          forwarding: 'auto',
          enabled: true,
          ...NO_CONTROLS,
        },
      ],
    }),
  );
  const next = batches.run(job([ids[4]!]));
  await assert.rejects(refused, (error: unknown) => error instanceof DomainError && error.code === 'validation_failed');
  assert.equal(JSON.parse((await next).json.toString()).results[0].outcome, 'deleted');
  if (process.platform === 'linux') {
    assert.deepEqual(threads, [1, 1], 'one worker, kept between the batches');
    // Its end, at nice 19, waits for CPU the other tests leave: up to 10 s.
    for (let waited = 0; yieldingThreads(idle).size > 0 && waited < 10_000; waited += 50)
      await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(yieldingThreads(idle).size, 0, 'the worker ended once idle');
  }
  // A worker of another version (an upgrade copied its file over this master's) refuses, writing nothing.
  const other = batchesInWorker({ ...setup, version: `${VERSION}-other` });
  t.after(() => other.close());
  await assert.rejects(
    m.app.store.db.holdWrites(() => other.run(job(ids.slice(5)))),
    (error: unknown) =>
      error instanceof DomainError && error.code === 'unavailable' && /program file changed/.test(error.detail),
  );
  assert.equal((await call(m.url, 'GET', '/api/dashboard', { token: m.admin })).body.rules.total, 1);
});

test('a batch whose worker runs out of memory is a 413 and writes nothing; the next gets another worker', async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const setup = { version: VERSION, databasePath: m.app.store.db.path, sealingKey: m.app.box.key(), heapMiB: 8 };
  // 8 MiB is less than loading the worker's code takes: each worker runs out before its batch is done.
  const batches = batchesInWorker(setup, 1000);
  t.after(() => batches.close());
  const job = batchJob(m, { operation: 'deleteNodes', ids: [n.id], cascade: true });
  for (const attempt of ['first', 'second']) {
    await assert.rejects(
      m.app.store.db.holdWrites(() => batches.run(job)),
      (error: unknown) =>
        error instanceof DomainError &&
        error.code === 'payload_too_large' &&
        /this batch needs more than the 8 MiB it may use/.test(error.detail),
      attempt,
    );
  }
  const made = await call(m.url, 'POST', '/api/nodes', {
    token: m.admin,
    body: { name: 'after', host: 'after.example' },
  });
  assert.equal(made.status, 201, 'writes are not held back any more');
  assert.equal((await call(m.url, 'GET', `/api/nodes/${n.id}`, { token: m.admin })).status, 200, 'nothing deleted');
});

const RECORDED =
  'a batch recorded for standbys answers with what it committed as one changeset, none for a dry run, and none ' +
  'past the limit of a record (standbys then seed anew)';

test(RECORDED, async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const ids = (await batchCreate(m, ruleBodies(n.id, 6))).body.results.map((r: { id: number }) => r.id);
  const setup = { version: VERSION, databasePath: m.app.store.db.path, sealingKey: m.app.box.key() };
  const run = async (batches: ReturnType<typeof batchesInWorker>, job: BatchJob) => {
    const done = await m.app.store.db.holdWrites(
      () => batches.run(job),
      (committed) => committed.finished,
    );
    await done.finished;
    return done.changes;
  };
  const batches = batchesInWorker(setup, 1000);
  t.after(() => batches.close());
  const deleting = (some: number[], dryRun = false) =>
    batchJob(m, { operation: 'deleteRules', ids: some, dryRun, recordChanges: true });
  assert.ok((await run(batches, deleting(ids.slice(0, 2))))!.length > 0);
  assert.equal((await run(batches, deleting(ids.slice(2, 4), true)))!.length, 0, 'a dry run commits nothing');
  const small = batchesInWorker({ ...setup, maxJobChanges: 16 }, 1000);
  t.after(() => small.close());
  assert.equal(await run(small, deleting(ids.slice(4, 6))), null, 'past the limit: no record');
  // Deleted all the same, but for the dry run's two.
  assert.equal((await call(m.url, 'GET', '/api/dashboard', { token: m.admin })).body.rules.total, 2);
});
