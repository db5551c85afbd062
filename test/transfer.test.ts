import assert from 'node:assert/strict';
import { statSync } from 'node:fs';
import { DatabaseSync } from 'node:sqlite';
import { test, type TestContext } from 'node:test';
import { DomainError } from '../internal/errors/errors.ts';
import { transact, writeInSteps } from '../internal/service/write.ts';
import { importInWorker } from '../cmd/master/workers.ts';
import { MAX_IMPORT_OPENED } from '../internal/api/transfer.ts';
import type { ImportJob } from '../internal/service/transfer.ts';
import { VERSION } from '../internal/version.ts';
import {
  assertProblem,
  call,
  NO_CONTROLS,
  node,
  rule,
  snapshot,
  startMaster,
  yieldingThreads,
  type Running,
} from './helpers.ts';

/** An export document of `names` as nodes, each with `perNode` TCP rules on ports from `firstPort`. */
function bulkDocument(names: string[], perNode: number, firstPort: number) {
  return {
    format: 'portplane-export',
    version: 1,
    nodes: names.map((name) => ({ name, host: `${name}.example.net`, ssh_port: 22, ssh_user: 'root', tags: [] })),
    tunnels: [],
    rules: names.flatMap((node) =>
      Array.from({ length: perNode }, (_, i) => ({
        name: `${node}-${i}`,
        node,
        tunnel: null,
        protocol: 'tcp',
        listen_port: firstPort + i,
        targets: [`10.1.${i >> 8}.${i & 255}:80`],
        strategy: 'round_robin',
        enabled: true,
      })),
    ),
  };
}

async function populate(m: Running) {
  const a = await node(m, 'edge-a', { ssh_password: 'secret-password', tags: ['eu'] });
  const b = await node(m, 'edge-b');
  const tunnel = (
    await call(m.url, 'POST', '/api/tunnels', {
      token: m.admin,
      body: { name: 'a-to-b', entry_node_id: a.id, exit_node_id: b.id },
    })
  ).body;
  await rule(m, {
    name: 'web',
    node_id: a.id,
    listen_port: 80,
    targets: ['10.0.0.1:80', '10.0.0.2:80'],
    strategy: 'failover',
  });
  await rule(m, {
    name: 'dns',
    node_id: a.id,
    listen_port: 53,
    protocol: 'udp',
    targets: ['9.9.9.9:53'],
    enabled: false,
  });
  await rule(m, {
    name: 'via',
    node_id: a.id,
    listen_port: 8443,
    tunnel_id: tunnel.id,
    targets: ['[2001:db8::5]:443'],
  });
}

test('export lists nodes without secrets, tunnels and rules by name', async (t) => {
  const m = await startMaster(t);
  await populate(m);
  const answer = await call(m.url, 'GET', '/api/export', { token: m.admin });
  assert.equal(answer.status, 200);
  const doc = answer.body;
  assert.equal(doc.format, 'portplane-export');
  assert.deepEqual(doc.nodes[0], {
    name: 'edge-a',
    host: 'edge-a.example.net',
    ssh_port: 22,
    ssh_user: 'root',
    tags: ['eu'],
  });
  assert.deepEqual(doc.tunnels, [
    { name: 'a-to-b', owner: 'admin', entry_node: 'edge-a', exit_node: 'edge-b', listen_port: 40000, transport: 'tls' },
  ]);
  assert.deepEqual(doc.rules[2], {
    name: 'via',
    owner: 'admin',
    node: 'edge-a',
    tunnel: 'a-to-b',
    protocol: 'tcp',
    listen_port: 8443,
    listen_port_end: null,
    targets: ['[2001:db8::5]:443'],
    strategy: 'round_robin',
    weights: null,
    forwarding: 'auto',
    enabled: true,
    ...NO_CONTROLS,
  });
  assert.ok(!JSON.stringify(doc).includes('secret-password'));
});

test('an export imported into an empty master recreates everything; importing again changes nothing', async (t) => {
  const source = await startMaster(t);
  await populate(source);
  const doc = (await call(source.url, 'GET', '/api/export', { token: source.admin })).body;

  const target = await startMaster(t);
  const preview = await call(target.url, 'POST', '/api/import?dry_run=true', { token: target.admin, body: doc });
  assert.equal(preview.status, 200, JSON.stringify(preview.body));
  assert.deepEqual(
    preview.body.rules.map((r: { outcome: string }) => r.outcome),
    ['created', 'created', 'created'],
  );
  assert.equal(preview.body.nodes[0].agent_token, undefined, 'a dry run mints no tokens');
  assert.equal((await call(target.url, 'GET', '/api/rules', { token: target.admin })).body.items.length, 0);

  const imported = await call(target.url, 'POST', '/api/import', { token: target.admin, body: doc });
  assert.equal(imported.status, 200);
  assert.match(imported.body.nodes[0].agent_token, /^mat_/);
  const again = (await call(target.url, 'GET', '/api/export', { token: target.admin })).body;
  assert.deepEqual({ ...again, exported_at: null }, { ...doc, exported_at: null });

  const before = snapshot(target, ['audit_log', 'tokens']);
  const repeat = await call(target.url, 'POST', '/api/import', { token: target.admin, body: doc });
  assert.deepEqual(
    [...repeat.body.nodes, ...repeat.body.tunnels, ...repeat.body.rules].map((r: { outcome: string }) => r.outcome),
    Array(6).fill('exists'),
  );
  assert.equal(snapshot(target, ['audit_log', 'tokens']), before);
});

test('a tunnel inside a WebSocket exports its transport and via, and imports with them', async (t) => {
  const source = await startMaster(t);
  const [a, b] = [await node(source, 'a'), await node(source, 'b')];
  const via = 'wss://cdn.example.net/portplane/t?key=1';
  const made = await call(source.url, 'POST', '/api/tunnels', {
    token: source.admin,
    body: { name: 'ws', entry_node_id: a.id, exit_node_id: b.id, listen_port: 40100, transport: 'ws', via },
  });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const doc = (await call(source.url, 'GET', '/api/export', { token: source.admin })).body;
  assert.deepEqual(
    doc.tunnels.map((tunnel: { transport: string; via?: string }) => [tunnel.transport, tunnel.via]),
    [['ws', via]],
  );
  const target = await startMaster(t);
  assert.equal((await call(target.url, 'POST', '/api/import', { token: target.admin, body: doc })).status, 200);
  const imported = (await call(target.url, 'GET', '/api/tunnels', { token: target.admin })).body.items[0];
  assert.deepEqual([imported.transport, imported.via], ['ws', via]);
});

test("a dead node's rules move to another node by editing the document", async (t) => {
  const m = await startMaster(t);
  await populate(m);
  const doc = (await call(m.url, 'GET', '/api/export', { token: m.admin })).body;
  const c = await node(m, 'edge-c');
  const moved = {
    ...doc,
    nodes: [],
    tunnels: [],
    rules: doc.rules
      .filter((r: { tunnel: string | null }) => r.tunnel === null)
      .map((r: object) => ({ ...r, node: 'edge-c' })),
  };
  const answer = await call(m.url, 'POST', '/api/import', { token: m.admin, body: moved });
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  const onC = await call(m.url, 'GET', `/api/rules?node_id=${c.id}`, { token: m.admin });
  assert.deepEqual(
    onC.body.items.map((r: { name: string }) => r.name),
    ['web', 'dns'],
  );
});

test('an import with problems changes nothing and points at each one', async (t) => {
  const m = await startMaster(t);
  await populate(m);
  const doc = (await call(m.url, 'GET', '/api/export', { token: m.admin })).body;
  const before = snapshot(m);
  const broken = {
    ...doc,
    nodes: [...doc.nodes, { name: 'edge-new', host: 'new.example.net', ssh_port: 22, ssh_user: 'root', tags: [] }],
    rules: [
      ...doc.rules,
      { ...doc.rules[0], name: 'other web', targets: ['10.9.9.9:80'] },
      { ...doc.rules[0], node: 'nowhere', listen_port: 81 },
      { ...doc.rules[0], tunnel: 'no-such-tunnel', listen_port: 82 },
    ],
  };
  const answer = await call(m.url, 'POST', '/api/import', { token: m.admin, body: broken });
  assertProblem(answer, 422, 'validation_failed');
  assert.deepEqual(
    answer.body.errors.map((e: { pointer: string }) => e.pointer),
    ['#/rules/3/listen_port', '#/rules/4/node', '#/rules/5/tunnel'],
  );
  assert.deepEqual(
    answer.body.results.rules.map((r: { outcome: string }) => r.outcome),
    ['exists', 'exists', 'exists', 'conflict', 'invalid', 'invalid'],
  );
  assert.equal(snapshot(m), before);
  assertProblem(
    await call(m.url, 'POST', '/api/import', { token: m.admin, body: { ...doc, format: 'other' } }),
    422,
    'validation_failed',
  );
});

test("an import's own problems past 1,000: counted, the first 1,000 listed, every item's result kept", async (t) => {
  const m = await startMaster(t);
  const rules = Array.from({ length: 1100 }, (_, i) => ({
    name: `r-${i}`,
    node: 'nowhere',
    protocol: 'tcp',
    listen_port: 1000 + i,
    targets: ['10.0.0.1:80'],
  }));
  const body = { format: 'portplane-export', version: 1, nodes: [], tunnels: [], rules };
  const answer = await call(m.url, 'POST', '/api/import', { token: m.admin, body });
  assertProblem(answer, 422, 'validation_failed');
  assert.equal(answer.body.detail, '1100 problem(s) in the document; nothing was imported; the first 1000 are listed');
  assert.equal(answer.body.errors.length, 1000);
  assert.deepEqual(answer.body.errors[999], {
    pointer: '#/rules/999/node',
    detail: "node 'nowhere' is neither in this document nor on this master",
  });
  assert.equal(answer.body.results.rules.length, 1100);
});

test('an import matches names as the database does: any ASCII case, but no other letter folded into one', async (t) => {
  const m = await startMaster(t);
  await populate(m);
  await node(m, 'kept-k');
  const doc = (await call(m.url, 'GET', '/api/export', { token: m.admin })).body;
  const before = snapshot(m);
  // U+212A, the Kelvin sign, is k to JavaScript's toLowerCase but not to SQLite's NOCASE.
  const kelvin = '\u212a';
  const onNode = (name: string, listen_port: number) => ({
    ...doc.rules[0],
    name: `on ${name}`,
    node: name,
    listen_port,
  });
  const answer = await call(m.url, 'POST', '/api/import', {
    token: m.admin,
    body: {
      ...doc,
      nodes: [...doc.nodes, { name: 'new-k', host: 'new.example.net', ssh_port: 22, ssh_user: 'root', tags: [] }],
      rules: [
        ...doc.rules,
        onNode('NEW-K', 9001),
        onNode(`new-${kelvin}`, 9002),
        onNode('KEPT-K', 9003),
        onNode(`kept-${kelvin}`, 9004),
      ],
    },
  });
  assertProblem(answer, 422, 'validation_failed');
  const first = doc.rules.length;
  assert.deepEqual(
    answer.body.errors.map((e: { pointer: string }) => e.pointer),
    [`#/rules/${first + 1}/node`, `#/rules/${first + 3}/node`],
  );
  assert.equal(snapshot(m), before);
});

test("an import respects the license's node limit: nothing is created past it", async (t) => {
  const m = await startMaster(t);
  const nodes = Array.from({ length: 6 }, (_, i) => ({
    name: `n${i}`,
    host: `n${i}.example.net`,
    ssh_port: 22,
    ssh_user: 'root',
    tags: [],
  }));
  const before = snapshot(m);
  const answer = await call(m.url, 'POST', '/api/import', {
    token: m.admin,
    body: { format: 'portplane-export', version: 1, nodes, tunnels: [], rules: [] },
  });
  // The same status as a node created past the limit on its own.
  assertProblem(answer, 403, 'license_limit');
  assert.equal(answer.body.errors.length, 1);
  assert.equal(answer.body.errors[0].pointer, '#/nodes/5');
  assert.match(answer.body.errors[0].detail, /free license allows 5 nodes/);
  assert.equal(snapshot(m), before);
});

test("a document's rules go in together as if one by one: ids in order, with their ports and one audit", async (t) => {
  const m = await startMaster(t);
  const edge = await node(m, 'edge');
  const rules = Array.from({ length: 150 }, (_, i) => ({
    name: `r-${i}`,
    node: 'edge',
    protocol: i % 3 === 0 ? 'tcp+udp' : 'tcp',
    listen_port: 30_000 + i,
    targets: [`10.0.0.${1 + (i % 200)}:80`],
  }));
  const doc = { format: 'portplane-export', version: 1, nodes: [], tunnels: [], rules };
  const before = snapshot(m);
  // Two rules of the document on one port: the second conflicts with the first, named by the id it had.
  const clash = { ...doc, rules: rules.map((r, i) => (i === 40 ? { ...r, listen_port: 30_031 } : r)) };
  const refused = await call(m.url, 'POST', '/api/import', { token: m.admin, body: clash });
  assertProblem(refused, 422, 'validation_failed');
  const firstId = refused.body.results.rules[31].id;
  assert.deepEqual(refused.body.errors, [
    {
      pointer: '#/rules/40/listen_port',
      detail: `port 30031/tcp on node ${edge.id} is taken by rule ${firstId}`,
    },
  ]);
  assert.equal(snapshot(m), before, 'nothing was written');

  const answer = await call(m.url, 'POST', '/api/import', { token: m.admin, body: doc });
  assert.equal(answer.status, 200, JSON.stringify(answer.body).slice(0, 300));
  const listed = (await call(m.url, 'GET', '/api/rules?limit=200', { token: m.admin })).body.items;
  assert.deepEqual(
    answer.body.rules.map((r: { id: number; name: string }) => [r.id, r.name]),
    listed.map((r: { id: number; name: string }) => [r.id, r.name]),
  );
  for (const rule of [listed[0], listed[64], listed[149]])
    assert.deepEqual((await call(m.url, 'GET', `/api/rules/${rule.id}`, { token: m.admin })).body, rule);
  // Every port of every rule is claimed: the last rule's UDP port too.
  const taken = await call(m.url, 'POST', '/api/rules', {
    token: m.admin,
    body: { name: 'late', node_id: edge.id, protocol: 'udp', listen_port: 30_147, targets: ['10.0.0.9:53'] },
  });
  assertProblem(taken, 409, 'conflict');
  // One entry for the rules the import made, naming their ids; listed by id, each rule finds it.
  const audit = (await call(m.url, 'GET', '/api/audit-logs?action=rule.create&limit=200', { token: m.admin })).body
    .items;
  const ids = listed.map((r: { id: number }) => r.id);
  assert.equal(audit.length, 1);
  assert.deepEqual(audit[0].changes, { created: 150, ids: [[ids[0], ids[149]]] });
  assert.equal(audit[0].resource_id, null);
  for (const id of [ids[0], ids[64], ids[149]]) {
    const query = `/api/audit-logs?resource=rule&resource_id=${id}`;
    const found = (await call(m.url, 'GET', query, { token: m.admin })).body.items;
    assert.deepEqual(
      found.map((e: { id: number }) => e.id),
      [audit[0].id],
    );
  }
  const outside = `/api/audit-logs?resource=rule&resource_id=${ids[149] + 1}`;
  assert.deepEqual((await call(m.url, 'GET', outside, { token: m.admin })).body.items, []);
});

test('during a large import the API answers, sees none of it, and other writes wait their turn', async (t) => {
  const others = yieldingThreads();
  const m = await startMaster(t);
  // However long the import takes on a busy machine, the write below waits for it rather than being refused.
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { write_wait_seconds: 300 } });
  const doc = bulkDocument(['bulk-a', 'bulk-b'], 2000, 20_000);
  const fileSize = () => statSync(m.app.store.db.path).size;
  const sizeBefore = fileSize();
  let imported = false;
  const importing = call(m.url, 'POST', '/api/import', { token: m.admin, body: doc }).then((answer) => {
    imported = true;
    return answer;
  });
  // Reads and a write sent while the import is being written.
  const seen: number[] = [];
  let yielded = false;
  let writeSent = false;
  let write: Promise<Awaited<ReturnType<typeof call>>> | undefined;
  while (!imported) {
    const dashboard = await call(m.url, 'GET', '/api/dashboard', { token: m.admin });
    if (imported) break;
    seen.push(dashboard.body.rules.total);
    if (m.app.store.db.writesHeld) yielded ||= yieldingThreads(others).size > 0;
    if (m.app.store.db.writesHeld && !writeSent) {
      writeSent = true;
      write = call(m.url, 'POST', '/api/nodes', {
        token: m.admin,
        body: { name: 'during', host: 'during.example.net' },
      });
    }
  }
  const answer = await importing;
  assert.equal(answer.status, 200, JSON.stringify(answer.body).slice(0, 300));
  assert.equal(writeSent, true, 'the import was still being written when a read came back');
  if (process.platform === 'linux') assert.ok(yielded, "the import's thread yields to requests");
  // A read may come back after the commit and before the import's own answer: then it sees all of it.
  assert.deepEqual(
    seen.filter((total) => total !== 0 && total !== 4000),
    [],
    'no read saw part of the import',
  );
  assert.ok(seen.filter((total) => total === 0).length >= 2, `reads answered during the import: ${seen}`);
  // Until then the import's pages were in the write-ahead log only: the master's connection committed nothing since.
  await m.app.store.db.writable();
  assert.ok(
    fileSize() - sizeBefore > 2 ** 20,
    'the worker copied its pages into the database file before writes went on',
  );
  const created = await write!;
  assert.equal(created.status, 201, 'a write sent during the import is made after it');
  const after = (await call(m.url, 'GET', '/api/dashboard', { token: m.admin })).body;
  assert.equal(after.rules.total, 4000);
  assert.equal(after.nodes.total, 3);
});

/** An import for an importer called directly, as the system (no caller: an import needs no scope here). */
function importJob(m: Running, text: string): ImportJob {
  return {
    document: Buffer.from(text),
    dryRun: false,
    requester: {
      actor: { actor_type: 'system', actor_id: null, actor_name: 'test', ip: null, request_id: null },
      action: 'config.import',
      caller: undefined as never,
    },
    timestamp: m.app.timestamp(),
    license: m.app.licenseView(),
    targets: m.app.targetPolicy(),
    channels: m.app.channelPolicy(),
  };
}

test("an import's thread yields to requests from its start, before it has loaded the program", async (t) => {
  const m = await startMaster(t);
  const importer = importInWorker({ version: VERSION, databasePath: m.app.store.db.path, sealingKey: m.app.box.key() });
  const node = { name: 'edge', host: 'edge.example.net', ssh_port: 22, ssh_user: 'root', tags: [] };
  const text = JSON.stringify({ format: 'portplane-export', version: 1, nodes: [node], tunnels: [], rules: [] });
  const before = yieldingThreads();
  let atStart = 0;
  const done = m.app.store.db.holdWrites(
    () => {
      const importing = importer(importJob(m, text));
      // The thread has only just been made: it cannot have loaded the program yet, let alone lowered itself.
      atStart = yieldingThreads(before).size;
      return importing;
    },
    (committed) => committed.finished,
  );
  const committed = await done;
  if (process.platform === 'linux') assert.equal(atStart, 1);
  assert.equal(JSON.parse(committed.json.toString()).nodes[0].outcome, 'created');
});

test("an import's worker out of memory is a 413, one of another version a 503; neither writes", async (t) => {
  const m = await startMaster(t);
  const setup = { version: VERSION, databasePath: m.app.store.db.path, sealingKey: m.app.box.key() };
  const importer = importInWorker({ ...setup, heapMiB: 32 });
  const rules = Array.from({ length: 100_000 }, (_, i) => ({
    name: `r-${i}`,
    node: 'edge',
    protocol: 'tcp',
    listen_port: 1 + (i % 65_535),
    targets: [`10.${i >> 16}.${(i >> 8) & 255}.${i & 255}:80`],
  }));
  const nodes = [{ name: 'edge', host: 'edge.example.net', ssh_port: 22, ssh_user: 'root', tags: [] }];
  const text = JSON.stringify({ format: 'portplane-export', version: 1, nodes, tunnels: [], rules });
  // Each call its own document: a worker takes the memory of the one it is given.
  const job = () => importJob(m, text);
  await assert.rejects(
    m.app.store.db.holdWrites(() => importer(job())),
    (error: unknown) =>
      error instanceof DomainError &&
      error.code === 'payload_too_large' &&
      /importing this document needs more than the 32 MiB it may use/.test(error.detail),
  );
  const made = await call(m.url, 'POST', '/api/nodes', {
    token: m.admin,
    body: { name: 'after', host: 'after.example' },
  });
  assert.equal(made.status, 201, 'writes are not held back any more');
  // A worker of another version (an upgrade copied its file over this master's) refuses, writing nothing.
  const other = importInWorker({ ...setup, version: `${VERSION}-other` });
  await assert.rejects(
    m.app.store.db.holdWrites(() => other(job())),
    (error: unknown) =>
      error instanceof DomainError && error.code === 'unavailable' && /program file changed/.test(error.detail),
  );
  const { body } = await call(m.url, 'GET', '/api/dashboard', { token: m.admin });
  assert.deepEqual([body.nodes.total, body.rules.total], [1, 0]);
});

const OPENS_TOO_MANY =
  'an import whose document opens more than 2,000,000 arrays and objects is a 413 before it is parsed: the master ' +
  'stays up and nothing is written';
test(OPENS_TOO_MANY, async (t) => {
  const m = await startMaster(t);
  // 6 MiB of empty rules: parsed, each would cost the worker's heap 25 times its text (a 60 MiB body of them filled
  // the worker's 1 GiB, and ended the whole process).
  const rules = `[${'{},'.repeat(MAX_IMPORT_OPENED)}{}]`;
  const body = `{"format":"portplane-export","version":1,"nodes":[],"tunnels":[],"rules":${rules}}`;
  const refused = await call(m.url, 'POST', '/api/import', { token: m.admin, body });
  assertProblem(refused, 413, 'payload_too_large');
  assert.match(refused.body.detail, /opens more than 2000000 arrays and objects: send it in parts/);
  assert.equal((await call(m.url, 'GET', '/api/health')).status, 200);
  const { body: after } = await call(m.url, 'GET', '/api/dashboard', { token: m.admin });
  assert.deepEqual([after.nodes.total, after.rules.total], [0, 0]);
});

test('an import whose worker meets a schema its code does not know is a 503, and migrates nothing', async (t) => {
  const m = await startMaster(t);
  // What an upgrade in progress looks like to the worker: the program file on disk and the database disagree.
  const raw = new DatabaseSync(m.app.store.db.path);
  t.after(() => raw.close());
  const { version } = raw.prepare('SELECT max(version) AS version FROM schema_migrations').get() as { version: number };
  raw
    .prepare("INSERT INTO schema_migrations (version, applied_at) VALUES (?, '2026-11-23T00:00:00Z')")
    .run(version + 1);
  const before = snapshot(m);
  const node = { name: 'edge', host: 'edge.example.net', ssh_port: 22, ssh_user: 'root', tags: [] };
  const body = { format: 'portplane-export', version: 1, nodes: [node], tunnels: [], rules: [] };
  const answer = await call(m.url, 'POST', '/api/import', { token: m.admin, body });
  assertProblem(answer, 503, 'unavailable');
  assert.match(answer.body.detail, /program file changed since it started .*; restart the master/);
  assert.equal(snapshot(m), before);
});

test('a write that comes while a long write holds writes waits in line for its end, never mixed into it', async (t) => {
  const m = await startMaster(t);
  let done = false;
  const holding = m.app.store.db.longWrite(async (step) => {
    m.app.store.settings.put('bulk_marker', true);
    while (!done) await (step() ?? undefined);
  });
  const ctx = {
    actor: { actor_type: 'system', actor_id: null, actor_name: 'test', ip: null, request_id: null },
    action: 'settings.update',
    caller: undefined as never,
  } as const;
  const seen: unknown[] = [];
  const write = transact(m.app, ctx, () => {
    seen.push(m.app.store.settings.all().bulk_marker);
    m.app.store.settings.put('live_marker', true);
    return 'written';
  });
  await new Promise((resolve) => setTimeout(resolve, 100));
  assert.deepEqual(seen, [], 'it waits while the long write runs');
  done = true;
  await holding;
  assert.equal(await write, 'written');
  assert.deepEqual(seen, [true], 'it ran after the long write committed, seeing all of it');
  assert.equal(m.app.store.settings.all().live_marker, true);
});

/** Items a, b and c written as one bulk write, in which b throws a domain error before or after it writes. */
async function bulkWriteFailingAtB(t: TestContext, when: 'before writing' | 'after writing') {
  const m = await startMaster(t);
  const ctx = {
    actor: { actor_type: 'system', actor_id: null, actor_name: 'test', ip: null, request_id: null },
    action: 'settings.update',
    caller: undefined as never,
  } as const;
  const runs: string[] = [];
  const { result: results } = await writeInSteps(m.app, ctx, (effects, inSteps) =>
    inSteps(['a', 'b', 'c'], (key) => {
      runs.push(key);
      try {
        effects.attempt(() => {
          if (key === 'b' && when === 'before writing') throw new DomainError('not_found', 'b is refused');
          m.app.store.settings.put(`bulk_${key}`, true);
          if (key === 'b') throw new DomainError('conflict', 'b fails after it wrote');
        });
        return 'done';
      } catch (error) {
        if (!(error instanceof DomainError)) throw error;
        return 'failed';
      }
    }),
  );
  const kept = Object.keys(m.app.store.settings.all()).filter((key) => key.startsWith('bulk_'));
  return { results, runs, kept: kept.sort() };
}

test('a bulk write whose item fails after writing is redone item by item: only that item is undone', async (t) => {
  const { results, runs, kept } = await bulkWriteFailingAtB(t, 'after writing');
  assert.deepEqual(results, ['done', 'failed', 'done']);
  assert.deepEqual(runs, ['a', 'b', 'a', 'b', 'c'], 'stopped at the failure, then redone from the start');
  assert.deepEqual(kept, ['bulk_a', 'bulk_c']);
});

test('a bulk write whose item is refused before it writes anything is not redone: it fails alone', async (t) => {
  const { results, runs, kept } = await bulkWriteFailingAtB(t, 'before writing');
  assert.deepEqual(results, ['done', 'failed', 'done']);
  assert.deepEqual(runs, ['a', 'b', 'c'], 'each item ran once');
  assert.deepEqual(kept, ['bulk_a', 'bulk_c']);
});

test('an export is made off the event loop: the API answers while it is read and encoded', async (t) => {
  const m = await startMaster(t);
  const doc = bulkDocument(['exp-a', 'exp-b', 'exp-c', 'exp-d'], 2_500, 10_000);
  assert.equal((await call(m.url, 'POST', '/api/import', { token: m.admin, body: doc })).status, 200);
  const order: string[] = [];
  const exported = call(m.url, 'GET', '/api/export', { token: m.admin }).then((answer) => {
    order.push('export');
    return answer;
  });
  // Asked for after the export started: on the event loop, it would wait for all 10,000 rules to be read and encoded
  // (a third of a second here).
  await new Promise((resolve) => setTimeout(resolve, 20));
  const health = await call(m.url, 'GET', '/api/health');
  order.push('health');
  assert.equal(health.status, 200);
  const answer = await exported;
  assert.equal(answer.status, 200);
  assert.equal(answer.body.rules.length, 10_000);
  assert.deepEqual(order, ['health', 'export']);
});
