// Faults the master meets on its own machine: a disk that fills up under it, and being killed
// again and again while it writes.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { bundledMaster } from '../bundled.ts';
import { ADMIN_PASSWORD, assertProblem, call, login, node, startMaster, type Running } from '../helpers.ts';
import { freePort, until } from '../net.ts';
import { fill, smallDisk } from '../disk.ts';

const ruleBody = (nodeId: number, i: number) => ({
  name: `r${i}`,
  node_id: nodeId,
  protocol: 'tcp',
  listen_port: 1000 + i,
  targets: ['10.0.0.1:80'],
});

test(
  'on a full disk writes answer 507 and change nothing, reads go on, the master stays, and ' +
    'writes resume once there is room',
  async (t) => {
    const dataDir = smallDisk(t, 16);
    if (!dataDir) return t.skip('cannot mount a tmpfs here (needs root)');
    let m: Running = await startMaster(t, { dataDir });
    const edge = await node(m, 'edge');
    const acknowledged: number[] = [];
    const write = async (i: number) => {
      const made = await call(m.url, 'POST', '/api/rules', { token: m.admin, body: ruleBody(edge.id, i) });
      if (made.status === 201) acknowledged.push(made.body.id);
      return made;
    };
    for (let i = 0; i < 20; i++) assert.equal((await write(i)).status, 201);

    const free = fill(dataDir);
    const statuses: number[] = [];
    let refused;
    for (let i = 20; i < 400 && !refused; i++) {
      const made = await write(i);
      statuses.push(made.status);
      if (made.status !== 201) refused = made;
    }
    assert.ok(refused, 'a write is refused once the disk is full');
    assertProblem(refused, 507, 'insufficient_storage');
    assert.match(refused.body.detail, /disk is full: nothing was changed/);
    assert.equal(refused.headers.get('retry-after'), '30');
    assert.deepEqual(
      statuses.filter((status) => status !== 201 && status !== 507),
      [],
      'nothing but successes and 507s',
    );
    const listed = await call(m.url, 'GET', '/api/rules?limit=1000', { token: m.admin });
    assert.equal(listed.status, 200, 'reads go on');
    const health = await call(m.url, 'GET', '/api/health');
    assert.equal(health.status, 503, 'health says writes are refused');
    assert.equal(health.body.status, 'ok', 'the master is still up');
    assert.equal(health.body.database, 'refusing_writes');
    assert.match(health.body.database_detail, /disk is full/);
    assert.doesNotMatch(health.body.database_detail, /SQLITE|database or disk/i, "SQLite's words stay in the log");

    free();
    const resumed = await write(1000);
    assert.equal(resumed.status, 201, `writes resume by themselves: ${JSON.stringify(resumed.body)}`);
    const healthy = await call(m.url, 'GET', '/api/health');
    assert.deepEqual([healthy.status, healthy.body.database], [200, 'ok'], 'and health says so');

    await m.close();
    m = await startMaster(t, { dataDir });
    const kept = new Set(
      (await call(m.url, 'GET', '/api/rules?limit=1000', { token: m.admin })).body.items.map(
        (r: { id: number }) => r.id,
      ),
    );
    assert.deepEqual(
      acknowledged.filter((id) => !kept.has(id)),
      [],
      'every acknowledged write is still there',
    );
    const audited = await call(m.url, 'GET', '/api/audit-logs?action=rule.create&limit=1000', { token: m.admin });
    assert.equal(audited.body.items.length, acknowledged.length, 'each with its audit entry, and no other');
  },
);

test(
  '50 kills during concurrent writes lose no acknowledged write and leave no write ' + 'unaudited',
  { timeout: 180_000 },
  async (t) => {
    const dataDir = mkdtempSync(join(tmpdir(), 'portplane-crash-'));
    t.after(() => rmSync(dataDir, { recursive: true, force: true }));
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    const serving = async () => {
      const master = bundledMaster(t, dataDir, port);
      await until(
        'the master to serve',
        async () => (await call(base, 'GET', '/api/health').catch(() => null))?.status === 200,
      );
      return master;
    };
    let master = await serving();
    const admin = await login(base, 'admin', ADMIN_PASSWORD);
    const token = (await call(base, 'POST', '/api/tokens', { token: admin, body: { name: 'w', scopes: ['*'] } })).body
      .token;
    const edge = (await call(base, 'POST', '/api/nodes', { token, body: { name: 'edge', host: 'edge.example.net' } }))
      .body;
    const acknowledged = new Map<number, string>();
    let next = 0;
    for (let cycle = 0; cycle < 50; cycle++) {
      let killed = false;
      const writer = async () => {
        while (!killed) {
          const i = next++;
          const made = await call(base, 'POST', '/api/rules', { token, body: ruleBody(edge.id, i) }).catch(() => null);
          if (made?.status === 201) acknowledged.set(made.body.id, made.body.name);
        }
      };
      const writers = [writer(), writer(), writer(), writer()];
      await new Promise((resolve) => setTimeout(resolve, 50 + Math.random() * 200));
      master.kill('SIGKILL');
      killed = true;
      await once(master, 'exit');
      await Promise.all(writers);
      master = await serving();
    }
    /** Every item of a list, page by page. */
    const all = async <T>(path: string): Promise<T[]> => {
      const items: T[] = [];
      for (let cursor: string | null = ''; cursor !== null;) {
        const query = `${path.includes('?') ? '&' : '?'}limit=1000${cursor ? `&cursor=${cursor}` : ''}`;
        const page: { items: T[]; next_cursor: string | null } = (await call(base, 'GET', path + query, { token }))
          .body;
        items.push(...page.items);
        cursor = page.next_cursor;
      }
      return items;
    };
    const rules = await all<{ id: number; name: string }>('/api/rules');
    const kept = new Map(rules.map((r) => [r.id, r.name]));
    assert.ok(acknowledged.size > 100, `${acknowledged.size} writes acknowledged`);
    assert.deepEqual(
      [...acknowledged].filter(([id, name]) => kept.get(id) !== name),
      [],
      'every acknowledged write survived',
    );
    const audited = new Set(
      (await all<{ resource_id: number }>('/api/audit-logs?action=rule.create')).map((entry) => entry.resource_id),
    );
    assert.deepEqual(
      rules.filter((r) => !audited.has(r.id)).map((r) => r.id),
      [],
      'every rule that exists was audited',
    );
    assert.equal(audited.size, rules.length, 'and no audit entry names a rule that was not kept');
    t.diagnostic(`${acknowledged.size} writes acknowledged over 50 kills; ${rules.length} rules kept, each audited`);
  },
);
