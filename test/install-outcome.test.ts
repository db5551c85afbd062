// An install always ends in a final state: racing batches, past its time, or left running by a
// master that stopped; the node is never left installing, and can be installed again.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtempSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { Installer } from '../internal/install/installer.ts';
import { assertProblem, call, mintToken, node, ruleBodies, startMaster } from './helpers.ts';
import { until } from './net.ts';

test(
  'an install racing batches ends in a final state, and the node takes another install after',
  { timeout: 60_000 },
  async (t) => {
    const m = await startMaster(t);
    const token = await mintToken(m, ['*']);
    // Nothing listens on port 1 of loopback: ssh fails at once, so the install's last writes race the batches.
    const target = await node(m, 'unreachable', { host: '127.0.0.1', ssh_port: 1 });
    const edge = await node(m, 'edge');
    for (let round = 0; round < 4; round++) {
      const batches = Array.from({ length: 3 }, (_, i) =>
        call(m.url, 'POST', '/api/rules/batch-create', {
          token,
          body: { rules: ruleBodies(edge.id, 30, 30_000 + round * 1000 + i * 100, `r${round}-${i}`) },
        }),
      );
      const started = await call(
        m.url,
        'POST',
        `/api/nodes/${target.id}/${round === 0 ? 'install-ssh' : 'reinstall'}`,
        {
          token,
          body: { master_url: 'http://127.0.0.1:9' },
        },
      );
      assert.equal(started.status, 202, JSON.stringify(started.body));
      assert.equal(started.body.status, 'installing');
      for (const answer of await Promise.all(batches)) assert.equal(answer.status, 201);
      const ended = await until('the install to end', async () => {
        const shown = (await call(m.url, 'GET', `/api/nodes/${target.id}`, { token })).body;
        return shown.status !== 'installing' && !m.app.installer.isRunning(target.id) ? shown : null;
      });
      assert.equal(ended.status, 'install_failed');
      assert.match(ended.status_detail, /^unreachable: /);
      assert.ok(ended.install.finished_at);
    }
  },
);

test('an install past its time ends install_failed (timed_out), its SSH command cut short', async (t) => {
  const m = await startMaster(t);
  // A host that accepts the connection and never says a word: ssh would wait for its banner.
  const silent = createServer(() => undefined).listen(0, '127.0.0.1');
  await once(silent, 'listening');
  t.after(() => silent.close());
  const target = await node(m, 'silent', { host: '127.0.0.1', ssh_port: (silent.address() as AddressInfo).port });
  const installer = new Installer(m.app, 'ssh', 1000);
  await m.app.store.db.writeInTurn(() => installer.markStarted(target.id, 'install'));
  const started = Date.now();
  await installer.run(target.id, 'install', { masterUrl: 'http://127.0.0.1:9', pin: null, releaseKeys: [] }, false);
  assert.ok(Date.now() - started < 5000, `it ended after ${Date.now() - started} ms`);
  const ended = (await call(m.url, 'GET', `/api/nodes/${target.id}`, { token: m.admin })).body;
  assert.equal(ended.status, 'install_failed');
  assert.match(ended.status_detail, /^timed_out: the install did not finish within 1 s/);
  assert.equal(installer.isRunning(target.id), false);
});

test('an install a stopped master left running is install_failed (interrupted) when it starts again', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'portplane-interrupted-'));
  const first = await startMaster(t, { dataDir });
  const target = await node(first, 'target', { host: '127.0.0.1', ssh_port: 1 });
  // What a master killed mid-install leaves: the node recorded installing, and no job to finish it.
  await first.app.store.db.writeInTurn(() =>
    first.app.store.nodes.installStarted(target.id, 'install: probing the node', first.app.timestamp()),
  );
  await first.close();
  const second = await startMaster(t, { dataDir });
  const shown = (await call(second.url, 'GET', `/api/nodes/${target.id}`, { token: second.admin })).body;
  assert.equal(shown.status, 'install_failed');
  assert.match(shown.status_detail, /^interrupted: the master stopped during the install/);
  assert.ok(shown.install.finished_at);
  assert.match(shown.install.log_tail, /failed: interrupted/);
  const again = await call(second.url, 'POST', `/api/nodes/${target.id}/install-ssh`, {
    token: second.admin,
    body: { master_url: 'http://127.0.0.1:9' },
  });
  assert.equal(again.status, 202, 'it may be installed again');
});

test(
  'an install goes only where * said: another master_url needs *, and behind a TLS proxy the ' + 'address must be set',
  async (t) => {
    const m = await startMaster(t);
    const narrow = await mintToken(m, ['nodes:write', 'nodes:read']);
    const target = await node(m, 'target', { host: '127.0.0.1', ssh_port: 1 });
    const install = (token: string, body: object) =>
      call(m.url, 'POST', `/api/nodes/${target.id}/install-ssh`, { token, body });
    const elsewhere = await install(narrow, { master_url: 'https://attacker.example:8443' });
    assertProblem(elsewhere, 403, 'insufficient_scope');
    assert.match(elsewhere.body.detail, /needs the scope \*/);
    assert.equal((await call(m.url, 'GET', `/api/nodes/${target.id}`, { token: narrow })).body.status, 'new');
    const denied = await call(m.url, 'GET', '/api/audit-logs?action=node.install&status=denied', { token: m.admin });
    assert.equal(denied.body.items.length, 1, 'the attempt is audited as denied');
    const set = await call(m.url, 'PATCH', '/api/settings', {
      token: m.admin,
      body: { install_master_url: 'http://127.0.0.1:9' },
    });
    assert.equal(set.status, 200);
    assert.equal((await install(narrow, { master_url: 'http://127.0.0.1:9/' })).status, 202, 'the configured address');

    const proxied = await startMaster(t, { host: '0.0.0.0', insecureHttp: true });
    const local = proxied.url.replace('0.0.0.0', '127.0.0.1');
    const made = await call(local, 'POST', '/api/nodes', {
      token: proxied.admin,
      body: { name: 'behind', host: '127.0.0.1', ssh_port: 1 },
    });
    assert.equal(made.body.agent_command, null, 'no command that would send a token in clear to a guessed address');
    const refused = await call(local, 'POST', `/api/nodes/${made.body.id}/install-ssh`, {
      token: proxied.admin,
      body: {},
    });
    assertProblem(refused, 422, 'validation_failed');
    assert.match(refused.body.errors[0].detail, /set install_master_url to the proxy's https:\/\/ address/);
  },
);
