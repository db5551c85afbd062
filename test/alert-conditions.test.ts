// Every alert condition, as a class: each finds what it names (from what agents really report over their links, or
// the master's own license and certificate) and nothing else, and a rule's selector narrows it.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'node:test';
import { send } from '../internal/agentlink/wire.ts';
import { alertConditions } from '../internal/domain/alerts.ts';
import { DELIVERIES_KEPT } from '../internal/store/alerts.ts';
import { evaluateAlerts } from '../internal/service/alerting.ts';
import { generateLicenseKeys, issueLicense } from '../internal/license/license.ts';
import { call, node, startMaster, type Running } from './helpers.ts';
import { until } from './net.ts';
import { MAX_ALERT_RULES } from '../internal/service/alert-rules.ts';
import { MAX_CHANNELS } from '../internal/service/channels.ts';
import { link, type RawLink } from './rawlink.ts';

/** A channel nothing listens at, on loopback: deliveries fail at once, and no test reaches past the machine. */
const CLOSED_PORT = { name: 'ops', type: 'webhook', url: 'http://127.0.0.1:1/hook' };

async function made(m: Running, path: string, body: unknown) {
  const answer = await call(m.url, 'POST', path, { token: m.admin, body });
  assert.equal(answer.status, 201, `${path}: ${JSON.stringify(answer.body)}`);
  return answer.body;
}

/** Alert rules firing at once over `channel`, by name: what each finds now, as `resource/id`. */
async function found(m: Running, rules: Record<string, number>, expected: Record<string, string[]>) {
  const names = new Map(Object.entries(rules).map(([name, id]) => [id, name]));
  const now = async () => {
    const alerts = (await call(m.url, 'GET', '/api/alerts?limit=1000', { token: m.admin })).body.items;
    const byRule: Record<string, string[]> = Object.fromEntries(Object.keys(rules).map((name) => [name, []]));
    for (const alert of alerts) byRule[names.get(alert.alert_rule_id)!]!.push(`${alert.resource}/${alert.resource_id}`);
    return byRule;
  };
  const want = Object.fromEntries(Object.keys(rules).map((name) => [name, expected[name] ?? []]));
  await until('the alerts expected', async () => JSON.stringify(await now()) === JSON.stringify(want), 10_000).catch(
    async () => assert.deepEqual(await now(), want),
  );
}

test('every condition finds what it names from what agents report, and a selector narrows it', async (t) => {
  const m = await startMaster(t, { localTargets: true });
  const channel = await made(m, '/api/channels', CLOSED_PORT);
  const [a, b, c] = [await node(m, 'a', { tags: ['eu'] }), await node(m, 'b'), await node(m, 'c')];
  const rule = (name: string, nodeId: number, extra: Record<string, unknown> = {}) =>
    made(m, '/api/rules', { name, node_id: nodeId, protocol: 'tcp', targets: ['10.0.0.1:80'], ...extra });
  const failing = await rule('failing', a.id, { listen_port: 9001 });
  const checked = await rule('checked', a.id, {
    listen_port: 9002,
    targets: ['10.0.0.1:80', '10.0.0.2:80'],
    health_check: { interval_seconds: 5, timeout_ms: 500, fall: 1, rise: 1 },
  });
  const metered = await rule('metered', a.id, { listen_port: 9003, quota: { bytes: 1000, period: 'day' } });
  const expiring = await rule('expiring', b.id, { listen_port: 9004, expires_at: m.app.timestamp(3600_000) });
  const tunnel = await made(m, '/api/tunnels', { name: 'a-b', entry_node_id: a.id, exit_node_id: b.id });

  const linked = async (n: { agent_token: string }, version?: string) => {
    const raw = (await link(m, n.agent_token, undefined, version)) as RawLink;
    return { raw, config: await raw.next('config') };
  };
  const agentA = await linked(a, '0.0.1');
  const agentB = await linked(b);
  const agentC = await linked(c);
  agentC.raw.socket.destroy();
  send(agentA.raw.socket, {
    type: 'applied',
    version: agentA.config.version,
    results: [{ id: failing.id, state: 'failed', error: { code: 'port_in_use', detail: 'held by sshd' } }],
  });
  send(agentA.raw.socket, {
    type: 'health',
    rules: [
      {
        id: checked.id,
        targets: [
          { target: '10.0.0.1:80', status: 'up', error: null, checked_at: m.app.timestamp() },
          { target: '10.0.0.2:80', status: 'down', error: 'ECONNREFUSED', checked_at: m.app.timestamp() },
        ],
      },
    ],
  });
  send(agentA.raw.socket, {
    type: 'tunnel_status',
    tunnels: [{ id: tunnel.id, state: 'down', error: 'refused', rtt_us: null }],
  });
  // B's supervisor went back from a bundle that crash-looped: it runs the one it went back to.
  send(agentB.raw.socket, { type: 'fell_back', from_version: '0.9.0', exits: 3, within_seconds: 12 });
  send(agentA.raw.socket, {
    type: 'paths',
    kernel: { available: true, reason: null, drifts: 1, last_drift_at: m.app.timestamp() },
  });
  const at = Math.floor(m.app.clock.now() / 1000);
  send(agentA.raw.socket, {
    type: 'traffic',
    stream: 's',
    seq: 1,
    at,
    rules: [{ id: metered.id, bytes_in: 600, bytes_out: 600 }],
  });

  const watching = { for_seconds: 0, channel_ids: [channel.id] };
  const threshold: Record<string, number> = {
    quota_percent: 50,
    rule_expiring: 1,
    kernel_drift: 10,
    license_expiring: 30,
    certificate_expiring: 30,
  };
  const rules: Record<string, number> = {};
  for (const condition of alertConditions)
    rules[condition] = (
      await made(m, '/api/alert-rules', { name: condition, condition, threshold: threshold[condition], ...watching })
    ).id;
  const narrowed = {
    'offline on b': { condition: 'node_offline', node_ids: [b.id] },
    'expiring tagged eu': { condition: 'rule_expiring', threshold: 1, tags: ['eu'] },
    'failing by id': { condition: 'rule_sync_failed', resource_ids: [checked.id] },
    'drift on eu': { condition: 'kernel_drift', threshold: 10, tags: ['eu'] },
  };
  for (const [name, body] of Object.entries(narrowed))
    rules[name] = (await made(m, '/api/alert-rules', { name, ...body, ...watching })).id;

  await found(m, rules, {
    node_offline: [`node/${c.id}`],
    agent_outdated: [`node/${a.id}`],
    agent_crashloop: [`node/${b.id}`],
    kernel_drift: [`node/${a.id}`],
    rule_sync_failed: [`rule/${failing.id}`],
    rule_degraded: [`rule/${checked.id}`],
    tunnel_down: [`tunnel/${tunnel.id}`],
    quota_percent: [`rule/${metered.id}`],
    quota_spent: [`rule/${metered.id}`],
    rule_expiring: [`rule/${expiring.id}`],
    'drift on eu': [`node/${a.id}`],
  });
  // An agent's reason in words, never its JSON.
  const alerts = (await call(m.url, 'GET', '/api/alerts?limit=1000', { token: m.admin })).body.items;
  const failed = alerts.find((alert: { alert_rule_id: number }) => alert.alert_rule_id === rules.rule_sync_failed);
  assert.equal(failed.summary, 'rule failing failed to apply on node a: held by sshd (port_in_use)');
  agentA.raw.socket.destroy();
  agentB.raw.socket.destroy();
});

test("license_expiring and certificate_expiring watch the master's own license and TLS certificate", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'portplane-expiring-'));
  const keys = generateLicenseKeys();
  writeFileSync(join(dir, 'license.pem'), keys.publicKeyPem);
  const expires = new Date(Date.now() + 10 * 86_400_000).toISOString().replace(/\.\d+Z$/, 'Z');
  const license = issueLicense(
    {
      license_id: 'lic-soon',
      edition: 'pro',
      licensee: 'Example Hosting Ltd',
      limits: { max_nodes: 10 },
      issued_at: '2026-01-01T00:00:00Z',
      expires_at: expires,
    },
    keys.privateKeyPem,
  );
  // A certificate of five days, as a short-lived ACME one near its renewal.
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-days',
      '5',
      '-subj',
      '/CN=127.0.0.1',
      '-keyout',
      join(dir, 'key.pem'),
      '-out',
      join(dir, 'cert.pem'),
    ],
    { stdio: 'ignore' },
  );
  const m = await startMaster(t, {
    localTargets: true,
    licenseKeyPath: join(dir, 'license.pem'),
    prepare: (data) => writeFileSync(join(data, 'license.json'), license),
    tls: { certPath: join(dir, 'cert.pem'), keyPath: join(dir, 'key.pem') },
  });
  const channel = await made(m, '/api/channels', CLOSED_PORT);
  const rules: Record<string, number> = {};
  for (const [name, condition, days] of [
    ['license in 30 days', 'license_expiring', 30],
    ['license in 5 days', 'license_expiring', 5],
    ['certificate in 7 days', 'certificate_expiring', 7],
    ['certificate in 1 day', 'certificate_expiring', 1],
  ] as const)
    rules[name] = (
      await made(m, '/api/alert-rules', { name, condition, threshold: days, for_seconds: 0, channel_ids: [channel.id] })
    ).id;
  await found(m, rules, { 'license in 30 days': ['license/0'], 'certificate in 7 days': ['certificate/0'] });
  const [alert] = (await call(m.url, 'GET', '/api/alerts', { token: m.admin })).body.items;
  assert.match(alert.summary, /^the license expires at 20\d\d-/);
});

const REFUSED =
  'a condition takes the threshold it needs and the selector it can use, and nothing is written otherwise';

test(REFUSED, async (t) => {
  const m = await startMaster(t, { localTargets: true });
  const channel = await made(m, '/api/channels', CLOSED_PORT);
  for (const [body, pointer] of [
    [{ condition: 'quota_percent' }, '/threshold'],
    [{ condition: 'quota_percent', threshold: 101 }, '/threshold'],
    [{ condition: 'node_offline', threshold: 5 }, '/threshold'],
    [{ condition: 'license_expiring', threshold: 5, node_ids: [1] }, '/node_ids'],
    [{ condition: 'node_offline', node_ids: [999] }, '/node_ids/0'],
    [{ condition: 'node_offline', channel_ids: [999] }, '/channel_ids/0'],
  ] as const) {
    const answer = await call(m.url, 'POST', '/api/alert-rules', {
      token: m.admin,
      body: { name: 'x', channel_ids: [channel.id], ...body },
    });
    assert.equal(answer.status, 422, JSON.stringify(body));
    assert.ok(
      answer.body.errors.some((e: { pointer: string }) => e.pointer === `#${pointer}`),
      JSON.stringify(answer.body),
    );
  }
  assert.equal((await call(m.url, 'GET', '/api/alert-rules?count=true', { token: m.admin })).body.total, 0);
});

test('the master keeps at most 100 channels and 1,000 alert rules: one more is 409, nothing written', async (t) => {
  const m = await startMaster(t, { localTargets: true });
  const post = (path: string, body: unknown) => call(m.url, 'POST', path, { token: m.admin, body });
  const channel = (i: number) => ({ ...CLOSED_PORT, name: `ops-${i}` });
  const alertRule = (i: number) => ({ name: `down-${i}`, condition: 'node_offline', channel_ids: [1] });
  for (const [path, body, most] of [
    ['/api/channels', channel, MAX_CHANNELS],
    ['/api/alert-rules', alertRule, MAX_ALERT_RULES],
  ] as const) {
    for (let i = 0; i < most; i += 50)
      await Promise.all(Array.from({ length: Math.min(50, most - i) }, (_, j) => post(path, body(i + j))));
    const refused = await post(path, body(most));
    assert.equal(refused.status, 409, JSON.stringify(refused.body));
    assert.match(refused.body.detail, /keeps at most/);
    assert.equal((await call(m.url, 'GET', `${path}?count=true&limit=1`, { token: m.admin })).body.total, most);
  }
});

const BOUNDED =
  "what agents can make alerts write stays bounded: an alert rule's newest 1,000 events, a channel's newest " +
  '10,000 finished deliveries (pending ones all kept)';

test(BOUNDED, async (t) => {
  const m = await startMaster(t, { localTargets: true });
  const channel = await made(m, '/api/channels', CLOSED_PORT);
  const { store } = m.app;
  const at = m.app.timestamp();
  store.write(() => {
    for (let i = 0; i < 1_500; i++)
      store.events.append(i % 2 ? 'alert.resolved' : 'alert.firing', 'alert_rule', 1, {}, at);
    for (let i = 0; i < 10; i++) store.events.append('alert.firing', 'alert_rule', 2, {}, at);
    for (let i = 0; i < DELIVERIES_KEPT + 50; i++)
      store.deliveries.recordFinished(`msg_${i}`, channel.id, {}, null, at);
  });
  await store.committed();
  const count = (sql: string, ...params: number[]) => (store.db.prepare(sql).get(...params) as { n: number }).n;
  const events = "SELECT count(*) AS n FROM events WHERE resource = 'alert_rule' AND resource_id = ?";
  assert.equal(count(events, 1), 1_000, 'the newest 1,000 of the flapping alert rule');
  assert.equal(count(events, 2), 10, "another rule's are its own");
  assert.equal(count("SELECT count(*) AS n FROM deliveries WHERE state = 'sent'"), DELIVERIES_KEPT);
  assert.equal(
    store.deliveries.page(Number.MAX_SAFE_INTEGER, 1, channel.id)[0]!.message_id,
    `msg_${DELIVERIES_KEPT + 49}`,
  );
});

test('an evaluation reads each condition once, however many rules use it', async (t) => {
  const m = await startMaster(t, { localTargets: true });
  const channel = await made(m, '/api/channels', CLOSED_PORT);
  const [a, b] = [await node(m, 'a'), await node(m, 'b')];
  for (let i = 0; i < 50; i++)
    await made(m, '/api/alert-rules', {
      name: `down-${i}`,
      condition: 'node_offline',
      node_ids: [i % 2 ? a.id : b.id],
      channel_ids: [channel.id],
    });
  await made(m, '/api/alert-rules', { name: 'failed', condition: 'rule_sync_failed', channel_ids: [channel.id] });
  const { conditions } = m.app.store;
  const read: string[] = [];
  const findings = conditions.findings.bind(conditions);
  conditions.findings = (condition, given) => (read.push(condition), findings(condition, given));
  await evaluateAlerts(m.app);
  assert.deepEqual(read.sort(), ['node_offline', 'rule_sync_failed']);
});

test('a silence is refused, naming the field, for a window ending first, over 30 days long or past', async (t) => {
  const m = await startMaster(t, { localTargets: true });
  const at = (hours: number) => m.app.timestamp(hours * 3_600_000);
  for (const [body, pointer] of [
    [{ starts_at: at(2), ends_at: at(1) }, '/ends_at'],
    [{ starts_at: at(0), ends_at: at(31 * 24) }, '/ends_at'],
    [{ starts_at: at(-3), ends_at: at(-1) }, '/ends_at'],
    [{ ends_at: at(1), alert_rule_ids: [999] }, '/alert_rule_ids/0'],
    [{ ends_at: at(1), node_ids: [999] }, '/node_ids/0'],
  ] as const) {
    const answer = await call(m.url, 'POST', '/api/silences', { token: m.admin, body: { comment: 'x', ...body } });
    assert.equal(answer.status, 422, JSON.stringify(body));
    assert.equal(answer.body.errors[0].pointer, `#${pointer}`, JSON.stringify(answer.body));
  }
  assert.equal((await call(m.url, 'GET', '/api/silences?count=true', { token: m.admin })).body.total, 0);
});

test("during an import a channel's test waits its turn to record its delivery, rather than failing", async (t) => {
  const m = await startMaster(t, { localTargets: true });
  const channel = await made(m, '/api/channels', CLOSED_PORT);
  let done = false;
  const holding = m.app.store.db.longWrite(async (step) => {
    while (!done) await (step() ?? undefined);
  });
  const testing = call(m.url, 'POST', `/api/channels/${channel.id}/test`, { token: m.admin });
  await new Promise((resolve) => setTimeout(resolve, 300));
  done = true;
  await holding;
  const answer = await testing;
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  assert.equal(answer.body.state, 'failed', 'the closed port, recorded once writes were free again');
});
