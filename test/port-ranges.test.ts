// Port ranges on the master: a rule covering listen_port to listen_port_end claims each of its ports, clashes are
// named by the port, lists find a rule by any port of its range, and every way in (create, replace, batches, import)
// holds to the same bounds. What a node does with a range is tested with a real agent (forward.test.ts) and in the
// kernel across namespaces (e2e/kernel-netns.test.ts).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MAX_PORTS_PER_REQUEST } from '../internal/domain/ranges.ts';
import { assertProblem, call, node, rule, snapshot, startMaster } from './helpers.ts';

const CLASHES =
  'a range claims each of its ports: a rule on one of them, or a range over one, is 409 naming the port and the ' +
  'holder; another protocol is free';

test(CLASHES, async (t) => {
  const m = await startMaster(t);
  const edge = await node(m, 'edge');
  const range = await rule(m, { node_id: edge.id, listen_port: 30000, listen_port_end: 30099 });
  assert.equal(range.status, 201, JSON.stringify(range.body));
  assert.equal(range.body.listen_port_end, 30099);
  for (const [body, port] of [
    [{ listen_port: 30050 }, 30050],
    [{ listen_port: 29990, listen_port_end: 30005 }, 30000],
    [{ listen_port: 30099, listen_port_end: 30100, protocol: 'tcp+udp' }, 30099],
  ] as const) {
    const clash = await rule(m, { node_id: edge.id, ...body });
    assert.equal(clash.status, 409, JSON.stringify(body));
    assert.match(
      clash.body.detail,
      new RegExp(`port ${port}/tcp on node ${edge.id} is taken by rule ${range.body.id}`),
    );
  }
  assert.equal((await rule(m, { node_id: edge.id, listen_port: 30050, protocol: 'udp' })).status, 201);
  assert.equal((await rule(m, { node_id: edge.id, listen_port: 30100 })).status, 201, 'the port after the range');

  // Narrowed, the range frees what it no longer covers.
  const narrowed = await call(m.url, 'PUT', `/api/rules/${range.body.id}`, {
    token: m.admin,
    body: { ...range.body, listen_port_end: 30009 },
  });
  assert.equal(narrowed.status, 200, JSON.stringify(narrowed.body));
  assert.equal((await rule(m, { node_id: edge.id, listen_port: 30050 })).status, 201);
});

const FOUND = '?port= finds the rules listening on a port, in their ranges or on it alone, in lists and batch filters';

test(FOUND, async (t) => {
  const m = await startMaster(t);
  const edge = await node(m, 'edge');
  const other = await node(m, 'other');
  const made = [
    (await rule(m, { node_id: edge.id, listen_port: 30000, listen_port_end: 30999 })).body,
    (await rule(m, { node_id: other.id, listen_port: 30500 })).body,
    (await rule(m, { node_id: other.id, listen_port: 30501 })).body,
  ];
  const listed = await call(m.url, 'GET', '/api/rules?port=30500', { token: m.admin });
  assert.deepEqual(
    listed.body.items.map((r: { id: number }) => r.id),
    [made[0].id, made[1].id],
  );
  const onEdge = await call(m.url, 'GET', `/api/rules?port=30999&node_id=${edge.id}`, { token: m.admin });
  assert.deepEqual(
    onEdge.body.items.map((r: { id: number }) => r.id),
    [made[0].id],
  );
  const batch = await call(m.url, 'POST', '/api/rules/batch-update', {
    token: m.admin,
    body: { filter: { port: 30001 }, changes: { tags: ['game'] } },
  });
  assert.equal(batch.status, 200, JSON.stringify(batch.body));
  assert.deepEqual(
    batch.body.results.map((r: { id: number }) => r.id),
    [made[0].id],
  );
  assertProblem(await call(m.url, 'GET', '/api/rules?port=70000', { token: m.admin }), 400, 'invalid_query');
});

test('a range and its targets that do not go together are 422 naming the field, and nothing is written', async (t) => {
  const m = await startMaster(t);
  const edge = await node(m, 'edge');
  const entry = await node(m, 'entry');
  const tunnel = await call(m.url, 'POST', '/api/tunnels', {
    token: m.admin,
    body: { name: 't', entry_node_id: entry.id, exit_node_id: edge.id },
  });
  const cases = [
    [{ listen_port: 30010, listen_port_end: 30000 }, '#/listen_port_end', /below listen_port/],
    [{ listen_port: 30000, listen_port_end: 40000 }, '#/listen_port_end', /10,001 ports; a rule covers at most 10,000/],
    [{ listen_port: 30000, targets: ['10.0.0.1:80-89'] }, '#/targets/0', /for a rule with listen_port_end/],
    [
      { listen_port: 30000, listen_port_end: 30009, targets: ['10.0.0.1:80', '10.0.0.2:80-88'] },
      '#/targets/1',
      /covers 9 ports and the rule 10/,
    ],
    [{ listen_port: 30000, listen_port_end: 30009, targets: ['10.0.0.1:90-80'] }, '#/targets/0', /does not go up/],
    [
      { node_id: entry.id, tunnel_id: tunnel.body.id, listen_port: 30000, listen_port_end: 30009 },
      '#/listen_port_end',
      /direct rules/,
    ],
    // Wider than the relay takes: only the kernel can carry it, so not with what keeps a rule on the relay.
    [
      { listen_port: 30000, listen_port_end: 31999, bandwidth_limit: 65536 },
      '#/listen_port_end',
      /2,000 ports, which only the kernel carries .* bandwidth_limit/,
    ],
  ] as const;
  const before = snapshot(m);
  for (const [fields, pointer, detail] of cases) {
    const answer = await rule(m, { node_id: edge.id, ...fields });
    assertProblem(answer, 422, 'validation_failed');
    const error = answer.body.errors.find((e: { pointer: string }) => e.pointer === pointer);
    assert.ok(error, `${JSON.stringify(fields)}: ${JSON.stringify(answer.body.errors)}`);
    assert.match(error.detail, detail);
  }
  assert.deepEqual(snapshot(m), before);
});

const MOVED = 'a range goes through export and import, and a batch or import claiming too many ports is refused whole';

test(MOVED, async (t) => {
  const m = await startMaster(t);
  const edge = await node(m, 'edge');
  const made = await rule(m, {
    node_id: edge.id,
    listen_port: 30000,
    listen_port_end: 30999,
    targets: ['10.0.0.1:40000-40999'],
  });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const exported = await call(m.url, 'GET', '/api/export', { token: m.admin });
  const [saved] = exported.body.rules;
  assert.equal(saved.listen_port_end, 30999);
  assert.deepEqual(saved.targets, ['10.0.0.1:40000-40999']);

  const other = await startMaster(t);
  const imported = await call(other.url, 'POST', '/api/import', { token: other.admin, body: exported.body });
  assert.equal(imported.status, 200, JSON.stringify(imported.body));
  const copy = await call(other.url, 'GET', `/api/rules/${imported.body.rules[0].id}`, { token: other.admin });
  assert.equal(copy.body.listen_port_end, 30999);

  // 101 rules of 10,000 ports for TCP and UDP: 2,020,000 claims, over the bound before anything is looked at.
  const rules = Array.from({ length: 101 }, (_, i) => ({
    name: `wide-${i}`,
    node_id: edge.id,
    protocol: 'tcp+udp',
    listen_port: 1000,
    listen_port_end: 10_999,
    targets: ['10.0.0.1:80'],
  }));
  const before = snapshot(m);
  const batch = await call(m.url, 'POST', '/api/rules/batch-create', { token: m.admin, body: { rules } });
  assertProblem(batch, 422, 'validation_failed');
  assert.match(batch.body.errors[0].detail, new RegExp(`at most ${MAX_PORTS_PER_REQUEST.toLocaleString('en')}`));
  const document = {
    ...exported.body,
    nodes: [],
    rules: rules.map(({ node_id: _, ...r }) => ({ ...r, node: 'edge' })),
  };
  assertProblem(await call(m.url, 'POST', '/api/import', { token: m.admin, body: document }), 422, 'validation_failed');
  assert.deepEqual(snapshot(m), before);
});
