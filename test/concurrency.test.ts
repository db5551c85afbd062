// Writes under contention: live writes beside batches and imports wait their turn, never answer
// 5xx after their change was committed, and replay by their Idempotency-Key.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  ADMIN_PASSWORD,
  assertProblem,
  call,
  mintToken,
  node,
  rule,
  ruleBodies,
  startMaster,
  type Answer,
  type Running,
} from './helpers.ts';
import { link, type RawLink } from './rawlink.ts';
import { send as sendToMaster } from '../internal/agentlink/wire.ts';

const ROUNDS = 6;

interface Sent {
  what: string;
  single: boolean;
  path: string;
  body: unknown;
  key?: string;
  answer: Answer;
}

async function send(m: Running, token: string, what: string, path: string, body: unknown, key?: string) {
  const headers: Record<string, string> = key ? { 'idempotency-key': key } : {};
  const single = !path.includes('/batch-');
  return { what, single, path, body, key, answer: await call(m.url, 'POST', path, { token, body, headers }) };
}

async function countNamed(m: Running, name: string): Promise<number> {
  const listed = await call(m.url, 'GET', `/api/rules?q=${encodeURIComponent(name)}&limit=1000`, { token: m.admin });
  return listed.body.items.filter((r: { name: string }) => r.name === name).length;
}

test(
  'under concurrent batches and single writes none answers 5xx, no single write waits into a 503, and every ' +
    'committed write with an Idempotency-Key replays',
  { timeout: 60_000 },
  async (t) => {
    const m = await startMaster(t);
    const token = await mintToken(m, ['*']);
    const edge = await node(m, 'edge');
    const seeded = await call(m.url, 'POST', '/api/rules/batch-create', {
      token,
      body: { rules: ruleBodies(edge.id, 300, 10_000, 'seed') },
    });
    assert.equal(seeded.status, 201);
    const ids: number[] = seeded.body.results.map((r: { id: number }) => r.id);
    const sent: Sent[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const port = 20_000 + round * 100;
      const requests = [
        send(m, token, 'batch-update', '/api/rules/batch-update', {
          ids: ids.slice(0, 150),
          changes: { enabled: round % 2 === 0 },
        }),
        send(m, token, 'batch-update', '/api/rules/batch-update', {
          ids: ids.slice(150),
          changes: { enabled: round % 2 === 1 },
        }),
        send(
          m,
          token,
          'batch-create',
          '/api/rules/batch-create',
          { rules: ruleBodies(edge.id, 40, port, `b${round}`) },
          `bc-${round}`,
        ),
        ...[0, 1, 2, 3].map((i) =>
          send(m, token, 'rule', '/api/rules', ruleBodies(edge.id, 4, port + 50, `s${round}`)[i], `rule-${round}-${i}`),
        ),
        send(
          m,
          token,
          'user',
          '/api/users',
          { username: `u${round}`, password: 'a-long-enough-password', scopes: ['rules:read'] },
          `user-${round}`,
        ),
        send(m, token, 'token', '/api/tokens', { name: `t${round}`, scopes: ['rules:read'] }, `token-${round}`),
        send(m, token, 'login', '/api/auth/login', { username: 'admin', password: ADMIN_PASSWORD }),
      ];
      sent.push(...(await Promise.all(requests)));
    }
    const failures = sent.filter((s) => s.answer.status >= 500 || (s.single && s.answer.status === 503));
    assert.deepEqual(
      failures.map((s) => `${s.what}: ${s.answer.status} ${JSON.stringify(s.answer.body)}`),
      [],
      'no 5xx, and no single write refused for waiting',
    );
    assert.deepEqual(
      sent
        .filter((s) => s.answer.status >= 300)
        .map((s) => `${s.what}: ${s.answer.status} ${JSON.stringify(s.answer.body)}`),
      [],
      'every write was carried out',
    );

    // A retry with the same key gets the answer given, and changes nothing more.
    for (const s of sent.filter((one) => one.key)) {
      const again = await call(m.url, 'POST', s.path, { token, body: s.body, headers: { 'idempotency-key': s.key! } });
      assert.equal(again.status, s.answer.status, `${s.what} ${s.key}: ${JSON.stringify(again.body)}`);
      assert.equal(again.headers.get('idempotent-replayed'), 'true');
      assert.equal(again.body.id ?? null, s.answer.body.id ?? null);
    }
    for (let round = 0; round < ROUNDS; round++) {
      for (const name of [`b${round}-0`, `b${round}-39`, `s${round}-0`, `s${round}-3`])
        assert.equal(await countNamed(m, name), 1, `${name} exists once`);
    }
    const metrics = await call(m.url, 'GET', '/api/metrics', { token });
    assert.match(metrics.body, /^portplane_writes_refused_busy_total 0$/m);
  },
);

test(
  'a write that waits past write_wait_seconds behind bulk work is a 503 with Retry-After, ' +
    'counted, and changes nothing',
  async (t) => {
    const m = await startMaster(t);
    const edge = await node(m, 'edge');
    const patched = await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { write_wait_seconds: 1 } });
    assert.equal(patched.status, 200);
    let over = false;
    const bulk = m.app.store.db.longWrite(async (step) => {
      while (!over) await (step() ?? new Promise((resolve) => setTimeout(resolve, 10)));
    });
    const started = Date.now();
    const refused = await rule(m, { node_id: edge.id, listen_port: 8080 });
    assertProblem(refused, 503, 'unavailable');
    assert.equal(refused.headers.get('retry-after'), '5');
    assert.ok(Date.now() - started >= 1000, 'it waited its second first');
    over = true;
    await bulk;
    const metrics = await call(m.url, 'GET', '/api/metrics', { token: m.admin });
    assert.match(metrics.body, /^portplane_writes_refused_busy_total 1$/m);
    assert.equal((await call(m.url, 'GET', '/api/rules', { token: m.admin })).body.items.length, 0);
    assert.equal((await rule(m, { node_id: edge.id, listen_port: 8080 })).status, 201, 'and goes through after');
  },
);

test('a keyed write whose answer could not be kept is not done again: its retry learns what it did', async (t) => {
  const m = await startMaster(t);
  const edge = await node(m, 'edge');
  const keep = m.app.store.idempotency.save.bind(m.app.store.idempotency);
  // The answer's own write fails (a full disk, say) after the change and its key's mark were committed.
  m.app.store.idempotency.save = (tokenId, key, response, at) => {
    if (response.status !== 0) throw new Error('disk full');
    keep(tokenId, key, response, at);
  };
  const body = { name: 'once', node_id: edge.id, protocol: 'tcp', listen_port: 8080, targets: ['10.0.0.1:80'] };
  const headers = { 'idempotency-key': 'just-once' };
  const first = await call(m.url, 'POST', '/api/rules', { token: m.admin, body, headers });
  assert.equal(first.status, 201, 'the change was committed, so it is answered as such');
  // A create is answered as it was: 201, the rule (as it is now) and where it lives.
  const retry = await call(m.url, 'POST', '/api/rules', { token: m.admin, body, headers });
  assert.equal(retry.status, 201, JSON.stringify(retry.body));
  assert.equal(retry.headers.get('idempotent-replayed'), 'true');
  assert.equal(retry.headers.get('location'), `/api/rules/${first.body.id}`);
  assert.deepEqual([retry.body.id, retry.body.name], [first.body.id, 'once']);
  assert.equal(await countNamed(m, 'once'), 1);
  // Another kind of answer cannot be rebuilt: the retry is told what was done, ids included.
  const deleted = await call(m.url, 'POST', '/api/rules/batch-delete', {
    token: m.admin,
    body: { ids: [first.body.id] },
    headers: { 'idempotency-key': 'delete-once' },
  });
  assert.equal(deleted.status, 200);
  const again = await call(m.url, 'POST', '/api/rules/batch-delete', {
    token: m.admin,
    body: { ids: [first.body.id] },
    headers: { 'idempotency-key': 'delete-once' },
  });
  assertProblem(again, 409, 'conflict');
  assert.match(again.body.detail, new RegExp(`was carried out.*it did: rule\\.delete rule ${first.body.id}`));
});

test(
  'a keyed sync the node could not apply replays its 502: the sync was recorded, so it is ' + 'not done again',
  async (t) => {
    const m = await startMaster(t);
    const edge = await node(m, 'edge');
    const made = await rule(m, { node_id: edge.id, listen_port: 8080 });
    const agent = (await link(m, edge.agent_token)) as RawLink;
    const failEach = async () => {
      for (;;) {
        const config = await agent.next('config');
        sendToMaster(agent.socket, {
          type: 'applied',
          version: config.version as number,
          results: [
            { id: made.body.id, state: 'failed', error: { code: 'port_in_use', detail: 'port 8080 is in use' } },
          ],
        });
      }
    };
    void failEach().catch(() => undefined);
    const headers = { 'idempotency-key': 'sync-once' };
    const first = await call(m.url, 'POST', `/api/rules/${made.body.id}/sync`, { token: m.admin, headers });
    assertProblem(first, 502, 'bad_gateway');
    const retry = await call(m.url, 'POST', `/api/rules/${made.body.id}/sync`, { token: m.admin, headers });
    assert.equal(retry.status, 502);
    assert.equal(retry.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(retry.body, first.body);
    const audit = await call(m.url, 'GET', `/api/audit-logs?action=rule.sync`, { token: m.admin });
    assert.equal(audit.body.items.length, 1, 'synced once');
    agent.socket.destroy();
  },
);
