// What a node's status says is true: it comes from the live agent link, never from what the
// database held before a restart, a crash or a restore; the node list, the dashboard and the
// metrics agree at every moment.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { keepAlive } from '../internal/agentlink/wire.ts';
import { backupDataDir, restoreDataDir } from '../internal/backup/backup.ts';
import { agentInProcess, nodeOf } from './agents.ts';
import { ADMIN_PASSWORD, call, node, startMaster } from './helpers.ts';
import { freePort, until } from './net.ts';
import { link, type RawLink } from './rawlink.ts';
import { bundledMaster } from './bundled.ts';

/** How each view of the master counts nodes as online, and how many agents it says are linked. */
async function views(base: string, token: string) {
  const dashboard = (await call(base, 'GET', '/api/dashboard', { token })).body;
  const metrics = (await call(base, 'GET', '/api/metrics', { token })).body as string;
  const listed = (await call(base, 'GET', '/api/nodes?status=online', { token })).body.items.length;
  const gauge = (name: string) => Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(metrics)?.[1]);
  return {
    dashboard: dashboard.nodes.by_status.online,
    listed,
    metric: gauge('portplane_nodes\\{status="online"\\}'),
    connected: gauge('portplane_agents_connected'),
  };
}

function agreeOn(seen: Awaited<ReturnType<typeof views>>, online: number): void {
  assert.deepEqual(seen, { dashboard: online, listed: online, metric: online, connected: online });
}

test(
  'a node whose agent died while the master was down is offline as soon as the master is ' +
    'back, and online again when its agent returns; every view agrees',
  async (t) => {
    const dataDir = mkdtempSync(join(tmpdir(), 'portplane-status-'));
    const port = await freePort();
    const first = await startMaster(t, { dataDir, port });
    const edge = await node(first, 'edge');
    const agent = await agentInProcess(t, first.url, edge.agent_token);
    await until('the agent to link', async () => (await nodeOf(first, edge.id)).status === 'online');
    agreeOn(await views(first.url, first.admin), 1);

    await first.close();
    await agent.stop();
    const second = await startMaster(t, { dataDir, port });
    const shown = await nodeOf(second, edge.id);
    assert.equal(shown.status, 'offline');
    assert.match(shown.status_detail, /master (shut down|restarted)/);
    agreeOn(await views(second.url, second.admin), 0);

    await agentInProcess(t, second.url, edge.agent_token, { stateDir: agent.stateDir });
    await until('the agent to link again', async () => (await nodeOf(second, edge.id)).status === 'online');
    agreeOn(await views(second.url, second.admin), 1);
  },
);

test(
  'a master killed while its agents were linked shows them offline when it starts again, ' + 'until they link',
  async (t) => {
    const dataDir = mkdtempSync(join(tmpdir(), 'portplane-status-'));
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    const spawnMaster = () => bundledMaster(t, dataDir, port);
    const ready = async () =>
      until('the master to serve', async () => {
        const health = await call(base, 'GET', '/api/health').catch(() => null);
        return health?.status === 200;
      });
    const login = async () =>
      (await call(base, 'POST', '/api/auth/login', { body: { username: 'admin', password: ADMIN_PASSWORD } })).body
        .token as string;

    const first = spawnMaster();
    await ready();
    let token = await login();
    const made = await call(base, 'POST', '/api/nodes', { token, body: { name: 'edge', host: 'edge.example.net' } });
    const agent = await agentInProcess(t, base, made.body.agent_token);
    const status = async () => (await call(base, 'GET', `/api/nodes/${made.body.id}`, { token })).body.status;
    await until('the agent to link', async () => (await status()) === 'online');

    // No clean stop: nothing gets to record the link's end.
    first.kill('SIGKILL');
    await once(first, 'exit');
    await agent.stop();
    spawnMaster();
    await ready();
    token = await login();
    assert.equal(await status(), 'offline');
    agreeOn(await views(base, token), 0);
  },
);

test('last_seen_at moves with every message the agent sends, and the node stays online while it talks', async (t) => {
  const m = await startMaster(t);
  const edge = await node(m, 'edge');
  const raw = (await link(m, edge.agent_token)) as RawLink;
  await raw.next('config');
  let seen = Date.parse((await nodeOf(m, edge.id)).last_seen_at);
  for (let minute = 0; minute < 2; minute++) {
    m.advance(60_000);
    // When the master heard it, by its clock (seconds: the next second, if one begins on the way, is as good).
    const sent = Date.parse(m.app.timestamp());
    raw.socket.write('{"type":"pong"}\n');
    seen = await until(`last_seen_at at ${new Date(sent).toISOString()}`, async () => {
      const at = Date.parse((await nodeOf(m, edge.id)).last_seen_at);
      return at >= sent && at <= sent + 5000 && at;
    });
    assert.equal((await nodeOf(m, edge.id)).status, 'online');
  }
  raw.socket.destroy();
  await until('the node to go offline', async () => (await nodeOf(m, edge.id)).status === 'offline');
  const last = await nodeOf(m, edge.id);
  assert.equal(Date.parse(last.last_seen_at), seen, 'the last message, not the end of the link');
  assert.equal(last.status_detail, 'the agent link closed');
});

test('a link silent for its time-out is ended within the time-out and a check', async (t: TestContext) => {
  const { createServer, connect } = await import('node:net');
  const ended: string[] = [];
  const server = createServer((socket) => {
    socket.on('error', (error) => ended.push(error.message));
    keepAlive(socket, 900);
  }).listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => server.close());
  const client = connect((server.address() as { port: number }).port, '127.0.0.1');
  await once(client, 'connect');
  client.on('error', () => undefined);
  const pings: number[] = [];
  const started = Date.now();
  client.on('data', () => pings.push(Date.now() - started));
  await once(client, 'close');
  const lasted = Date.now() - started;
  assert.ok(lasted >= 900 && lasted < 900 + 100 + 200, `ended after ${lasted} ms`);
  assert.ok(pings.length >= 2, 'it pinged every third of the time-out meanwhile');
  assert.deepEqual(ended, ['the peer went silent']);
});

test('a master restored from a backup taken while agents were linked shows their nodes offline', async (t) => {
  const m = await startMaster(t);
  const edge = await node(m, 'edge');
  const raw = (await link(m, edge.agent_token)) as RawLink;
  await raw.next('config');
  await until(
    'the node to be recorded online',
    () => m.app.store.db.prepare('SELECT status FROM nodes').get()?.status === 'online',
  );
  const archive = await backupDataDir(m.dataDir);
  const target = join(mkdtempSync(join(tmpdir(), 'portplane-restored-')), 'data');
  restoreDataDir(target, archive);
  const restored = await startMaster(t, { dataDir: target });
  const shown = await nodeOf(restored, edge.id);
  assert.equal(shown.status, 'offline');
  assert.match(shown.status_detail, /master restarted/);
  agreeOn(await views(restored.url, restored.admin), 0);
  assert.equal((await nodeOf(m, edge.id)).status, 'online', 'the master it came from still has the link');
});
