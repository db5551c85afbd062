// A fence an agent carries and cannot forge: a promoted master hands its agents a statement signed with its TLS key,
// and an old primary that comes back while that master is down (so it cannot ask it) is fenced by the first agent
// that shows it, since it holds that key's pin for its peer.

import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'node:test';
import { start } from '../cmd/master/start.ts';
import { silentLogger } from '../internal/log/log.ts';
import { selfSignedFiles } from '../internal/tls/identity.ts';
import { agentInProcess, nodeOf } from './agents.ts';
import { call, holdingWrites, mintToken, node, plainConfig, startMaster, trustMaster } from './helpers.ts';
import { freePort, until } from './net.ts';

const CARRIED =
  "an old primary back while the promoted master is down is fenced by an agent carrying the latter's statement";

test(CARRIED, async (t) => {
  const dirA = mkdtempSync(join(tmpdir(), 'portplane-old-primary-'));
  const portA = await freePort();
  const tlsA = selfSignedFiles(dirA, '127.0.0.1');
  const primary = await startMaster(t, { dataDir: dirA, port: portA, tls: tlsA });
  const dirB = mkdtempSync(join(tmpdir(), 'portplane-promoted-'));
  const token = await mintToken(primary, ['replication'], 'standby');
  const standby = await startMaster(t, {
    dataDir: dirB,
    tls: selfSignedFiles(dirB, '127.0.0.1'),
    follow: { url: primary.url, token, pin: primary.app.tls!.pin },
  });
  const [pinA, pinB] = [primary.app.tls!.pin, standby.app.tls!.pin];
  const set = await call(primary.url, 'PATCH', '/api/settings', {
    token: primary.admin,
    body: { standby_masters: `${standby.url} ${pinB}` },
  });
  assert.equal(set.status, 200, JSON.stringify(set.body));
  const edge = await node(primary, 'edge');
  const agent = await agentInProcess(t, `${primary.url},${standby.url}`, edge.agent_token, {
    extraArgs: ['--master-pin', `${pinA},${pinB}`],
  });
  await until('the agent linked to the primary', async () => (await nodeOf(primary, edge.id)).status === 'online');
  // Promoted only once its copy holds the node: what async replication had not copied yet is not the point here.
  const held = () => call(standby.url, 'GET', `/api/nodes/${edge.id}`, { token: primary.admin });
  await until('the standby holding the node', async () => (await held()).status === 200);

  await primary.close();
  const promoted = await call(standby.url, 'POST', '/api/replication/promote', { token: primary.admin });
  assert.equal(promoted.status, 200, JSON.stringify(promoted.body));
  await until('the agent linked to the promoted master', async () => {
    return (await call(standby.url, 'GET', `/api/nodes/${edge.id}`, { token: primary.admin })).body.status === 'online';
  });
  const kept = join(agent.stateDir, 'promotion.json');
  await until("the agent keeping the promoted master's statement", () => existsSync(kept));
  assert.match(JSON.parse(readFileSync(kept, 'utf8')).statement, /^[\w-]+\.[\w-]+$/);

  // The promoted master goes down; the old one comes back as it was, asks its peer, hears nothing, and serves...
  await standby.close();
  const old = await start({ ...plainConfig(dirA, portA), tls: tlsA }, silentLogger);
  t.after(() => old.close());
  trustMaster(old.url, readFileSync(tlsA.certPath, 'utf8'));
  // ... until the agent, trying it, shows the statement: fenced, naming the master that signed it.
  await until(
    'the old primary fenced by the agent',
    async () => (await call(old.url, 'GET', '/api/health')).body.role === 'fenced',
    20_000,
  );
  assert.deepEqual((await call(old.url, 'GET', '/api/health')).body.fenced_by, { epoch: 2, primary: standby.url });
  const refused = await call(old.url, 'POST', '/api/nodes', {
    token: primary.admin,
    body: { name: 'x', host: '192.0.2.9' },
  });
  assert.equal(refused.status, 503);
  assert.equal(refused.body.primary, standby.url);
});

const FENCE_HELD =
  'a fence that comes while an import holds writes is kept once the hold ends: started again, it is fenced';

test(FENCE_HELD, async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'portplane-fenced-'));
  const m = await startMaster(t, { dataDir });
  const hold = await holdingWrites(m);
  m.app.fence(7, 'https://newer.example');
  assert.equal((await call(m.url, 'GET', '/api/health')).body.role, 'fenced', 'at once, in memory');
  hold.release();
  await hold.ended;
  await m.app.store.committed();
  await m.close();
  // Started as it was (a fenced master takes no login: startMaster's would fail).
  const again = await start(plainConfig(dataDir), silentLogger);
  t.after(() => again.close());
  const health = (await call(again.url, 'GET', '/api/health')).body;
  assert.deepEqual([health.role, health.fenced_by], ['fenced', { epoch: 7, primary: 'https://newer.example' }]);
});
