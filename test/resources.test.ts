import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { hashSecret } from '../internal/auth/secrets.ts';
import { assertProblem, call, node, rule, snapshot, startMaster } from './helpers.ts';

const KEY =
  '-----BEGIN OPENSSH PRIVATE ' +
  'KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n-----END OPENSSH PRIVATE ' +
  'KEY-----\n';

test(
  'nodes: created with defaults, the agent token shown once, credentials write-only and ' + 'sealed at rest',
  async (t) => {
    const m = await startMaster(t);
    const created = await node(m, 'edge-1', { ssh_private_key: KEY, tags: ['eu', 'edge'] });
    assert.match(created.agent_token, new RegExp(`^mat_${created.id}_[A-Za-z0-9_-]{43}$`));
    assert.deepEqual(
      {
        ssh_port: created.ssh_port,
        ssh_user: created.ssh_user,
        ssh_auth: created.ssh_auth,
        status: created.status,
        tags: created.tags,
        traffic: created.traffic,
      },
      {
        ssh_port: 22,
        ssh_user: 'root',
        ssh_auth: 'key',
        status: 'new',
        tags: ['eu', 'edge'],
        traffic: { bytes_in: 0, bytes_out: 0 },
      },
    );
    const got = await call(m.url, 'GET', `/api/nodes/${created.id}`, { token: m.admin });
    assert.equal(got.body.agent_token, undefined);
    assert.equal(got.body.ssh_private_key, undefined);
    assert.equal(got.headers.get('etag'), '"1"');

    m.app.store.db.prepare('PRAGMA wal_checkpoint(FULL)').run();
    for (const file of readdirSync(m.dataDir)) {
      const bytes = readFileSync(join(m.dataDir, file));
      assert.ok(!bytes.includes('b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ'), `${file} holds the key in clear`);
      assert.ok(!bytes.includes(created.agent_token.slice(4)), `${file} holds the agent token`);
    }
    const audit = await call(m.url, 'GET', '/api/audit-logs?action=node.create', { token: m.admin });
    assert.equal(audit.body.items[0].changes.after.ssh_private_key, '[redacted]');
    const sealed = m.app.store.nodes.sealedSecret(created.id)!;
    assert.equal(m.app.box.open(sealed.sealed!), KEY);
  },
);

test("nodes: a deleted node's id is never given again; a new node's agent token names its id", async (t) => {
  const m = await startMaster(t);
  const first = await node(m, 'first');
  assert.equal((await call(m.url, 'DELETE', `/api/nodes/${first.id}`, { token: m.admin })).status, 204);
  const second = await node(m, 'second');
  assert.equal(second.id, first.id + 1);
  assert.match(second.agent_token, new RegExp(`^mat_${second.id}_`));
  assert.deepEqual(m.app.store.nodes.agentTokenHash(second.id), new Uint8Array(hashSecret(second.agent_token)));
});

test('nodes: PUT keeps credentials when absent, clears them with null, and round-trips GET output', async (t) => {
  const m = await startMaster(t);
  const created = await node(m, 'edge-2', { ssh_password: 'hunter2-hunter2' });
  const got = await call(m.url, 'GET', `/api/nodes/${created.id}`, { token: m.admin });
  const kept = await call(m.url, 'PUT', `/api/nodes/${created.id}`, {
    token: m.admin,
    body: { ...got.body, tags: ['edge'] },
    headers: { 'if-match': '"1"' },
  });
  assert.equal(kept.status, 200, JSON.stringify(kept.body));
  assert.deepEqual([kept.body.tags, kept.body.ssh_auth, kept.body.version], [['edge'], 'password', 2]);
  // The credential was given for this host, port and user: moving the node needs it again.
  for (const move of [{ ssh_port: 2222 }, { host: 'other.example.net' }, { ssh_user: 'deploy' }]) {
    const moved = await call(m.url, 'PUT', `/api/nodes/${created.id}`, {
      token: m.admin,
      body: { ...kept.body, ...move },
    });
    assertProblem(moved, 422, 'validation_failed');
    assert.equal(moved.body.errors[0].pointer, '#/ssh_private_key');
  }
  const reauth = await call(m.url, 'PUT', `/api/nodes/${created.id}`, {
    token: m.admin,
    body: { ...kept.body, ssh_port: 2222, ssh_password: 'for-the-new-port' },
  });
  assert.deepEqual([reauth.body.ssh_port, reauth.body.ssh_auth, reauth.body.version], [2222, 'password', 3]);
  const cleared = await call(m.url, 'PUT', `/api/nodes/${created.id}`, {
    token: m.admin,
    body: { name: 'edge-2', host: '2001:db8::7', ssh_password: null },
  });
  assert.deepEqual([cleared.body.ssh_auth, cleared.body.host, cleared.body.ssh_port], ['none', '2001:db8::7', 22]);
  assertProblem(
    await call(m.url, 'PUT', `/api/nodes/${created.id}`, {
      token: m.admin,
      body: { name: 'edge-2', host: 'x.net' },
      headers: { 'if-match': '"1"' },
    }),
    412,
    'precondition_failed',
  );
  // With no credential stored, there is nothing to bind: the node moves freely.
  assert.equal(
    (await call(m.url, 'PUT', `/api/nodes/${created.id}`, { token: m.admin, body: { name: 'edge-2', host: 'x.net' } }))
      .status,
    200,
  );
});

test('nodes: hosts, users and names that could reach a shell are refused', async (t) => {
  const m = await startMaster(t);
  const before = snapshot(m);
  const cases = [
    { body: { name: 'a', host: 'example.com; rm -rf /' }, pointer: '#/host' },
    { body: { name: 'a', host: '$(reboot)' }, pointer: '#/host' },
    { body: { name: 'a', host: '-oProxyCommand=sh' }, pointer: '#/host' },
    { body: { name: 'a', host: '999.1.1.1' }, pointer: '#/host' },
    { body: { name: 'a', host: 'ok.net', ssh_user: 'root -oProxyCommand=x' }, pointer: '#/ssh_user' },
    { body: { name: 'a b', host: 'ok.net' }, pointer: '#/name' },
    { body: { name: 'a', host: 'ok.net', ssh_private_key: 'not a key' }, pointer: '#/ssh_private_key' },
    {
      body: { name: 'a', host: 'ok.net', ssh_private_key: KEY, ssh_password: 'both-given' },
      pointer: '#/ssh_password',
    },
    { body: { name: 'a', host: 'ok.net', tags: ['a', 'a'] }, pointer: '#/tags/1' },
  ];
  for (const c of cases) {
    const answer = await call(m.url, 'POST', '/api/nodes', { token: m.admin, body: c.body });
    assertProblem(answer, 422, 'validation_failed');
    assert.ok(
      answer.body.errors.some((e: { pointer: string }) => e.pointer === c.pointer),
      `${JSON.stringify(c.body)} -> ${JSON.stringify(answer.body.errors)}`,
    );
  }
  assert.equal(snapshot(m), before);
});

test('nodes: names are unique, lists filter by status, tag and q', async (t) => {
  const m = await startMaster(t);
  const a = await node(m, 'web-a', { tags: ['web'] });
  await node(m, 'db-a', { tags: ['db'] });
  const taken = await call(m.url, 'POST', '/api/nodes', { token: m.admin, body: { name: 'WEB-A', host: 'x.net' } });
  assertProblem(taken, 409, 'conflict');
  assert.equal(taken.body.conflicting_id, a.id);
  const names = async (q: string) =>
    (await call(m.url, 'GET', `/api/nodes${q}`, { token: m.admin })).body.items.map((n: { name: string }) => n.name);
  assert.deepEqual(await names('?tag=web'), ['web-a']);
  assert.deepEqual(await names('?status=new'), ['web-a', 'db-a']);
  assert.deepEqual(await names('?status=online'), []);
  assert.deepEqual(await names('?q=DB'), ['db-a']);
  assertProblem(await call(m.url, 'GET', '/api/nodes?status=sleeping', { token: m.admin }), 400, 'invalid_query');
});

test('nodes: the free edition allows 5 nodes, then says so clearly', async (t) => {
  const m = await startMaster(t);
  for (let i = 0; i < 5; i++) await node(m, `n${i}`);
  const sixth = await call(m.url, 'POST', '/api/nodes', { token: m.admin, body: { name: 'n5', host: 'n5.net' } });
  assertProblem(sixth, 403, 'license_limit');
  assert.match(sixth.body.detail, /free license allows 5 nodes/);
});

test(
  'rules: created pending with defaults; a taken port is 409 naming the holder; tcp and udp ' + 'share a number',
  async (t) => {
    const m = await startMaster(t);
    const n = await node(m, 'edge');
    const first = await rule(m, {
      node_id: n.id,
      listen_port: 8080,
      targets: ['10.0.0.1:80', '[2001:db8::1]:443', 'backend.internal:8080'],
    });
    assert.equal(first.status, 201, JSON.stringify(first.body));
    assert.deepEqual(
      {
        strategy: first.body.strategy,
        enabled: first.body.enabled,
        tunnel_id: first.body.tunnel_id,
        sync: first.body.sync,
        traffic: first.body.traffic,
      },
      {
        strategy: 'round_robin',
        enabled: true,
        tunnel_id: null,
        sync: { state: 'pending', error: null, applied_at: null, applied_path: null, relayed_because: null },
        traffic: { bytes_in: 0, bytes_out: 0, refused: 0 },
      },
    );
    const clash = await rule(m, { node_id: n.id, listen_port: 8080, protocol: 'tcp+udp' });
    assertProblem(clash, 409, 'conflict');
    assert.equal(clash.body.conflicting_rule_id, first.body.id);
    assert.match(clash.body.detail, new RegExp(`port 8080/tcp on node ${n.id} is taken by rule ${first.body.id}`));
    assert.equal((await rule(m, { node_id: n.id, listen_port: 8080, protocol: 'udp' })).status, 201);
    const other = await node(m, 'edge-2');
    assert.equal((await rule(m, { node_id: other.id, listen_port: 8080 })).status, 201);
  },
);

test('rules: bad targets and missing nodes or tunnels are 422 on the right field', async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const before = snapshot(m);
  // Each message names the part of the target at fault: the port, the host, or the brackets.
  const cases: { body: Record<string, unknown>; pointer: string; says?: RegExp }[] = [
    { body: { node_id: n.id, listen_port: 1, targets: ['10.0.0.1'] }, pointer: '#/targets/0', says: /:PORT/ },
    { body: { node_id: n.id, listen_port: 1, targets: ['10.0.0.1:0'] }, pointer: '#/targets/0', says: /port 0/ },
    {
      body: { node_id: n.id, listen_port: 1, targets: ['2001:db8::1:80'] },
      pointer: '#/targets/0',
      says: /IPv6 address in brackets/,
    },
    {
      body: { node_id: n.id, listen_port: 1, targets: ['a.net:80', 'b.net:99999'] },
      pointer: '#/targets/1',
      says: /port 99999/,
    },
    {
      body: { node_id: n.id, listen_port: 1, targets: ['bad_host!:80'] },
      pointer: '#/targets/0',
      says: /host "bad_host!", which is not a hostname/,
    },
    { body: { node_id: n.id, listen_port: 1, targets: ['[10.0.0.1]:80'] }, pointer: '#/targets/0', says: /host/ },
    { body: { node_id: n.id, listen_port: 1, targets: [] }, pointer: '#/targets' },
    { body: { node_id: n.id, listen_port: 70000 }, pointer: '#/listen_port' },
    { body: { node_id: n.id, listen_port: 1, protocol: 'sctp' }, pointer: '#/protocol' },
    { body: { node_id: 999, listen_port: 1 }, pointer: '#/node_id' },
    { body: { node_id: n.id, listen_port: 1, tunnel_id: 999 }, pointer: '#/tunnel_id' },
  ];
  for (const c of cases) {
    const answer = await rule(m, c.body);
    assertProblem(answer, 422, 'validation_failed');
    const error = answer.body.errors.find((e: { pointer: string }) => e.pointer === c.pointer);
    assert.ok(error, `${JSON.stringify(c.body)} -> ${JSON.stringify(answer.body.errors)}`);
    if (c.says) assert.match(error.detail, c.says);
  }
  assert.equal(snapshot(m), before);
});

test('rules: update moves ports, delete frees them, lists filter, and each write bumps the node config', async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const configVersion = () => m.app.store.nodes.find(n.id)!.config_version;
  const v0 = configVersion();
  const created = (await rule(m, { node_id: n.id, listen_port: 9000, name: 'web' })).body;
  assert.equal(configVersion(), v0 + 1);
  const moved = await call(m.url, 'PUT', `/api/rules/${created.id}`, {
    token: m.admin,
    body: { ...created, listen_port: 9001, enabled: false },
    headers: { 'if-match': '"1"' },
  });
  assert.equal(moved.status, 200, JSON.stringify(moved.body));
  assert.deepEqual([moved.body.listen_port, moved.body.enabled, moved.body.version], [9001, false, 2]);
  assert.equal(configVersion(), v0 + 2);
  assert.equal(
    (await rule(m, { node_id: n.id, listen_port: 9000, name: 'reuse' })).status,
    201,
    'the old port is free again',
  );
  const names = async (q: string) =>
    (await call(m.url, 'GET', `/api/rules${q}`, { token: m.admin })).body.items.map((r: { name: string }) => r.name);
  assert.deepEqual(await names('?enabled=false'), ['web']);
  assert.deepEqual(await names(`?node_id=${n.id}&q=reu`), ['reuse']);
  assert.equal((await call(m.url, 'DELETE', `/api/rules/${created.id}`, { token: m.admin })).status, 204);
  assert.equal((await rule(m, { node_id: n.id, listen_port: 9001 })).status, 201);
  const audit = await call(m.url, 'GET', `/api/audit-logs?resource=rule&resource_id=${created.id}`, { token: m.admin });
  assert.deepEqual(
    audit.body.items.map((e: { action: string }) => e.action),
    ['rule.delete', 'rule.update', 'rule.create'],
  );
  assert.deepEqual(audit.body.items[1].changes, {
    before: { listen_port: 9000, enabled: true },
    after: { listen_port: 9001, enabled: false },
  });
});

test('rules: sync answers 202 pending while the node has no agent connected', async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const created = (await rule(m, { node_id: n.id, listen_port: 9000 })).body;
  const answer = await call(m.url, 'POST', `/api/rules/${created.id}/sync`, { token: m.admin });
  assert.equal(answer.status, 202);
  assert.equal(answer.body.sync.state, 'pending');
  assertProblem(await call(m.url, 'POST', '/api/rules/999/sync', { token: m.admin }), 404, 'not_found');
});

test(
  'tunnels: port chosen by the master, rules must enter at the entry node, deletes guarded ' + 'by cascade',
  async (t) => {
    const m = await startMaster(t);
    const entry = await node(m, 'entry');
    const exit = await node(m, 'exit');
    const tunnel = await call(m.url, 'POST', '/api/tunnels', {
      token: m.admin,
      body: { name: 'eu-us', entry_node_id: entry.id, exit_node_id: exit.id },
    });
    assert.equal(tunnel.status, 201, JSON.stringify(tunnel.body));
    assert.deepEqual([tunnel.body.listen_port, tunnel.body.transport, tunnel.body.status], [40000, 'tls', 'pending']);
    const second = await call(m.url, 'POST', '/api/tunnels', {
      token: m.admin,
      body: { name: 'eu-us-2', entry_node_id: entry.id, exit_node_id: exit.id },
    });
    assert.equal(second.body.listen_port, 40001);
    const clash = await rule(m, { node_id: exit.id, listen_port: 40000 });
    assertProblem(clash, 409, 'conflict');
    assert.equal(clash.body.conflicting_tunnel_id, tunnel.body.id);

    const same = await call(m.url, 'POST', '/api/tunnels', {
      token: m.admin,
      body: { name: 'loop', entry_node_id: entry.id, exit_node_id: entry.id },
    });
    assertProblem(same, 422, 'validation_failed');
    const wrongEntry = await rule(m, { node_id: exit.id, listen_port: 7000, tunnel_id: tunnel.body.id });
    assertProblem(wrongEntry, 422, 'validation_failed');
    assert.match(wrongEntry.body.errors[0].detail, new RegExp(`entry node of tunnel ${tunnel.body.id}`));
    const through = await rule(m, { node_id: entry.id, listen_port: 7000, tunnel_id: tunnel.body.id });
    assert.equal(through.status, 201);

    const blocked = await call(m.url, 'DELETE', `/api/tunnels/${tunnel.body.id}`, { token: m.admin });
    assertProblem(blocked, 409, 'conflict');
    assert.deepEqual(blocked.body.rule_ids, [through.body.id]);
    const movedEntry = await call(m.url, 'PUT', `/api/tunnels/${tunnel.body.id}`, {
      token: m.admin,
      body: { name: 'eu-us', entry_node_id: exit.id, exit_node_id: entry.id },
    });
    assertProblem(movedEntry, 409, 'conflict');
    assert.equal(
      (await call(m.url, 'DELETE', `/api/tunnels/${tunnel.body.id}?cascade=true`, { token: m.admin })).status,
      204,
    );
    assertProblem(await call(m.url, 'GET', `/api/rules/${through.body.id}`, { token: m.admin }), 404, 'not_found');
  },
);

test(
  'nodes: deleting one with rules or tunnels is 409 listing them; cascade removes them with ' + 'an audit entry each',
  async (t) => {
    const m = await startMaster(t);
    const a = await node(m, 'a');
    const b = await node(m, 'b');
    const tunnel = (
      await call(m.url, 'POST', '/api/tunnels', {
        token: m.admin,
        body: { name: 'a-b', entry_node_id: b.id, exit_node_id: a.id },
      })
    ).body;
    const own = (await rule(m, { node_id: a.id, listen_port: 1000 })).body;
    const via = (await rule(m, { node_id: b.id, listen_port: 2000, tunnel_id: tunnel.id })).body;
    const kept = (await rule(m, { node_id: b.id, listen_port: 3000 })).body;
    const before = snapshot(m);
    const blocked = await call(m.url, 'DELETE', `/api/nodes/${a.id}`, { token: m.admin });
    assertProblem(blocked, 409, 'conflict');
    assert.deepEqual([blocked.body.rule_ids, blocked.body.tunnel_ids], [[own.id, via.id], [tunnel.id]]);
    assert.equal(snapshot(m), before);

    assert.equal((await call(m.url, 'DELETE', `/api/nodes/${a.id}?cascade=true`, { token: m.admin })).status, 204);
    const remaining = (await call(m.url, 'GET', '/api/rules', { token: m.admin })).body.items.map(
      (r: { id: number }) => r.id,
    );
    assert.deepEqual(remaining, [kept.id]);
    const deletes = (await call(m.url, 'GET', '/api/audit-logs?limit=4', { token: m.admin })).body.items.map(
      (e: { action: string; resource_id: number }) => `${e.action} ${e.resource_id}`,
    );
    assert.deepEqual(deletes, [
      `node.delete ${a.id}`,
      `tunnel.delete ${tunnel.id}`,
      `rule.delete ${via.id}`,
      `rule.delete ${own.id}`,
    ]);
  },
);

// Reads are built by SQLite (JSON text), writes answer with objects built in JavaScript:
// both must show the same resource.
test('what a read shows equals what the write answered, for nodes and rules, alone and in lists', async (t) => {
  const m = await startMaster(t);
  const created = await node(m, 'edge', { ssh_password: 'pw-1234567', tags: ['a', 'b'] });
  const { agent_token: _, master_pin: _pin, agent_command: _command, ...nodeBody } = created;
  assert.deepEqual((await call(m.url, 'GET', `/api/nodes/${created.id}`, { token: m.admin })).body, nodeBody);
  assert.deepEqual((await call(m.url, 'GET', '/api/nodes', { token: m.admin })).body.items, [nodeBody]);
  const tunnelPeer = await node(m, 'peer');
  const tunnel = (
    await call(m.url, 'POST', '/api/tunnels', {
      token: m.admin,
      body: { name: 't', entry_node_id: created.id, exit_node_id: tunnelPeer.id },
    })
  ).body;
  for (const body of [
    {
      node_id: created.id,
      listen_port: 1,
      targets: ['10.0.0.1:80', '[2001:db8::1]:443'],
      enabled: false,
      strategy: 'failover',
    },
    { node_id: created.id, listen_port: 2, protocol: 'tcp+udp', tunnel_id: tunnel.id },
  ]) {
    const made = (await rule(m, body)).body;
    assert.deepEqual((await call(m.url, 'GET', `/api/rules/${made.id}`, { token: m.admin })).body, made);
    const listed = (await call(m.url, 'GET', '/api/rules?limit=1000', { token: m.admin })).body;
    assert.deepEqual(
      listed.items.find((r: { id: number }) => r.id === made.id),
      made,
    );
  }
  m.app.store.write(() =>
    m.app.store.rules.setSync(1, created.id, 'failed', { code: 'port_in_use', detail: 'taken' }, m.app.timestamp()),
  );
  const failed = (await call(m.url, 'GET', '/api/rules/1', { token: m.admin })).body;
  assert.deepEqual(failed, {
    ...m.app.store.rules.find(1),
    sync: {
      state: 'failed',
      error: { code: 'port_in_use', detail: 'taken' },
      applied_at: null,
      applied_path: null,
      relayed_because: null,
    },
  });
});

test('rules: a name search finds through the name index what a scan finds, after renames and deletes', async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'edge');
  const ids = new Map<string, number>();
  const names = ['web-Alpha', 'web-beta', 'db_main', 'db-main', '100%', 'ÉCOLE', 'page-1', 'page-2', 'page-3'];
  for (const [index, name] of names.entries())
    ids.set(name, (await rule(m, { node_id: n.id, listen_port: 9000 + index, name })).body.id);
  /** Every page of a search, `limit` at a time: without a node the index answers it, with one the scan does. */
  const search = async (q: string, scan: boolean, limit = 100) => {
    const found: string[] = [];
    let cursor: string | null = null;
    do {
      const query = `?q=${encodeURIComponent(q)}&limit=${limit}${scan ? `&node_id=${n.id}` : ''}`;
      const page = await call(m.url, 'GET', `/api/rules${query}${cursor ? `&cursor=${cursor}` : ''}`, {
        token: m.admin,
      });
      assert.equal(page.status, 200);
      found.push(...page.body.items.map((r: { name: string }) => r.name));
      cursor = page.body.next_cursor;
    } while (cursor);
    return found;
  };
  const expect = async (q: string, names: string[]) => {
    assert.deepEqual(await search(q, false), names, `?q=${q}`);
    assert.deepEqual(await search(q, true), names, `?q=${q} with a node`);
  };
  await expect('WEB', ['web-Alpha', 'web-beta']);
  await expect('alp', ['web-Alpha']);
  await expect('b_m', ['db_main']);
  await expect('0%', ['100%']);
  await expect('ÉCOL', ['ÉCOLE']);
  await expect('écol', []);
  await expect('page-', ['page-1', 'page-2', 'page-3']);
  assert.deepEqual(await search('page-', false, 2), ['page-1', 'page-2', 'page-3'], 'pages of the index in id order');
  const beta = (await call(m.url, 'GET', `/api/rules/${ids.get('web-beta')}`, { token: m.admin })).body;
  const renamed = await call(m.url, 'PUT', `/api/rules/${beta.id}`, {
    token: m.admin,
    body: { ...beta, name: 'api-beta' },
  });
  assert.equal(renamed.status, 200);
  assert.equal((await call(m.url, 'DELETE', `/api/rules/${ids.get('web-Alpha')}`, { token: m.admin })).status, 204);
  await expect('web', []);
  await expect('api-b', ['api-beta']);
});
