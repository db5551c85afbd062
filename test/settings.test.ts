import assert from 'node:assert/strict';
import { test } from 'node:test';
import { defaults as values, shownOf } from '../internal/settings/settings.ts';
import { assertProblem, call, snapshot, startMaster } from './helpers.ts';

const defaults = () => shownOf(values());

test('settings show every key with its default', async (t) => {
  const m = await startMaster(t);
  const answer = await call(m.url, 'GET', '/api/settings', { token: m.admin });
  assert.deepEqual(answer.body, defaults());
  assert.match(answer.headers.get('etag')!, /^"[A-Za-z0-9_-]+"$/);
});

test('a merge patch changes only the keys it names, null resets, and the change is audited', async (t) => {
  const m = await startMaster(t);
  const patched = await call(m.url, 'PATCH', '/api/settings', {
    token: m.admin,
    body: { session_ttl_seconds: 3600, audit_retention_days: 7 },
    headers: { 'content-type': 'application/merge-patch+json' },
  });
  assert.equal(patched.status, 200);
  assert.deepEqual(patched.body, { ...defaults(), session_ttl_seconds: 3600, audit_retention_days: 7 });

  const reset = await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { audit_retention_days: null } });
  assert.deepEqual(reset.body, { ...defaults(), session_ttl_seconds: 3600 });

  const audit = await call(m.url, 'GET', '/api/audit-logs?action=settings.update', { token: m.admin });
  assert.deepEqual(
    audit.body.items.map((e: { changes: unknown }) => e.changes),
    [
      { before: { audit_retention_days: 7 }, after: { audit_retention_days: 90 } },
      {
        before: { session_ttl_seconds: 43200, audit_retention_days: 90 },
        after: { session_ttl_seconds: 3600, audit_retention_days: 7 },
      },
    ],
  );
});

test('unknown keys and bad values are 422 and change nothing', async (t) => {
  const m = await startMaster(t);
  const before = snapshot(m);
  const answer = await call(m.url, 'PATCH', '/api/settings', {
    token: m.admin,
    body: { session_ttl_seconds: 5, sync_wait_seconds: 'soon', colour: 'blue', audit_retention_days: 30 },
  });
  assertProblem(answer, 422, 'validation_failed');
  assert.deepEqual(answer.body.errors.map((e: { pointer: string }) => e.pointer).sort(), [
    '#/colour',
    '#/session_ttl_seconds',
    '#/sync_wait_seconds',
  ]);
  assert.equal(snapshot(m), before);
  assert.deepEqual((await call(m.url, 'GET', '/api/settings', { token: m.admin })).body, defaults());
});

test('a stale If-Match is 412 and a current one applies', async (t) => {
  const m = await startMaster(t);
  const etag = (await call(m.url, 'GET', '/api/settings', { token: m.admin })).headers.get('etag')!;
  const first = await call(m.url, 'PATCH', '/api/settings', {
    token: m.admin,
    body: { sync_wait_seconds: 9 },
    headers: { 'if-match': etag },
  });
  assert.equal(first.status, 200);
  assert.notEqual(first.headers.get('etag'), etag);
  const second = await call(m.url, 'PATCH', '/api/settings', {
    token: m.admin,
    body: { sync_wait_seconds: 1 },
    headers: { 'if-match': etag },
  });
  assertProblem(second, 412, 'precondition_failed');
  assert.equal(second.headers.get('etag'), first.headers.get('etag'));
});

test('settings survive a restart', async (t) => {
  const m = await startMaster(t);
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { write_budget_per_minute: 77 } });
  await m.close();
  const again = await startMaster(t, { dataDir: m.dataDir });
  assert.equal(
    (await call(again.url, 'GET', '/api/settings', { token: again.admin })).body.write_budget_per_minute,
    77,
  );
});

test("an install's folder and service are its own: system folders and services are refused", async (t) => {
  const m = await startMaster(t);
  const patch = (body: object) => call(m.url, 'PATCH', '/api/settings', { token: m.admin, body });
  for (const install_dir of [
    '/etc',
    '/etc/portplane',
    '/usr/bin/x',
    '/tmp/agent',
    '/var/log/pp',
    '/opt',
    '/root',
    '/a/../etc',
  ])
    assertProblem(await patch({ install_dir }), 422, 'validation_failed');
  for (const install_service_name of [
    'ssh',
    'sshd',
    'systemd-networkd',
    'dbus',
    'cron',
    'networking',
    'portplane-master',
  ])
    assertProblem(await patch({ install_service_name }), 422, 'validation_failed');
  const kept = await patch({ install_dir: '/srv/portplane/agent', install_service_name: 'portplane-edge' });
  assert.equal(kept.status, 200, JSON.stringify(kept.body));
  assert.equal((await patch({ install_dir: '/usr/local/portplane' })).status, 200);
});
