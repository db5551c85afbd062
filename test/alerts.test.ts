// Alerts end to end: channels held to what rules' targets are, notifications signed as Standard Webhooks has it and
// verified with its own library, real agents going away and coming back, flapping damped, a failing channel beside a
// working one, Telegram's Bot API through a stand-in, and an outbox that outlives a master killed with -9.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { hostname, tmpdir } from 'node:os';
import { lookup } from 'node:dns/promises';
import { join } from 'node:path';
import test, { describe, type TestContext } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { agentInProcess } from './agents.ts';
import { bundledMaster } from './bundled.ts';
import { ADMIN_PASSWORD, assertProblem, call, node, rule, startMaster, type Running } from './helpers.ts';
import { closedPort, freePort, probe, until } from './net.ts';
import { fill, smallDisk } from './disk.ts';
import { MAX_ATTEMPTS, retryDelayMs } from '../internal/service/outbox.ts';

// Most of these tests wait on clocks and sockets: they run side by side.
describe('alerts', { concurrency: 4 }, () => {
  interface Received {
    path: string;
    headers: Record<string, string>;
    body: string;
  }

  /** An HTTP receiver on loopback: records each POST, and answers as `answer` says (null: never). */
  async function receiver(t: TestContext, answer: () => number | null = () => 204) {
    const received: Received[] = [];
    const held: ServerResponse[] = [];
    const server = createServer((req: IncomingMessage, res: ServerResponse) => {
      let body = '';
      req.setEncoding('utf8').on('data', (chunk: string) => (body += chunk));
      req.on('end', () => {
        received.push({ path: req.url ?? '', headers: req.headers as Record<string, string>, body });
        const status = answer();
        if (status === null) held.push(res);
        else res.writeHead(status).end();
      });
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    t.after(() => {
      server.closeAllConnections();
      server.close();
    });
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, received, held };
  }

  async function created(m: Running, path: string, body: unknown) {
    const answer = await call(m.url, 'POST', path, { token: m.admin, body });
    assert.equal(answer.status, 201, JSON.stringify(answer.body));
    return answer.body;
  }

  /** An alert rule telling `channelIds` at once of every rule that expires within `days`. */
  function watchExpiring(m: Running, channelIds: number[], days: number) {
    const body = {
      name: 'expiring',
      condition: 'rule_expiring',
      threshold: days,
      for_seconds: 0,
      channel_ids: channelIds,
    };
    return created(m, '/api/alert-rules', body);
  }

  /** The alerts of webhook messages verified with `secret`, in order; throws on a signature that does not verify. */
  function verified(secret: string, received: Received[]) {
    const webhook = new Webhook(secret);
    return received.map((message) => {
      const payload = webhook.verify(message.body, message.headers) as { type: string; data: { alerts: any[] } };
      return { id: message.headers['webhook-id']!, payload };
    });
  }

  test(
    "a channel's address is held as rules' targets are; its " + 'secret is shown once, redacted, and sealed',
    async (t) => {
      const m = await startMaster(t);
      const hook = await receiver(t);
      const refused = await call(m.url, 'POST', '/api/channels', {
        token: m.admin,
        body: { name: 'ops', type: 'webhook', url: hook.url },
      });
      assertProblem(refused, 422, 'validation_failed');
      assert.match(JSON.stringify(refused.body.errors), /loopback address; channels reach such addresses only with/);
      const cases: [string, Record<string, unknown>, string][] = [
        ['a link-local address', { type: 'webhook', url: 'http://169.254.169.254/latest' }, '/url'],
        ['not http', { type: 'webhook', url: 'ftp://hooks.example.com/x' }, '/url'],
        ['credentials in the URL', { type: 'webhook', url: 'https://u:p@hooks.example.com/x' }, '/url'],
        [
          'a malformed secret',
          { type: 'webhook', url: 'https://hooks.example.com/x', secret: 'whsec_' + '%'.repeat(40) },
          '/secret',
        ],
        ["another type's field", { type: 'webhook', url: 'https://hooks.example.com/x', chat_id: '1' }, '/chat_id'],
        ['a bot without its token', { type: 'telegram', chat_id: '42' }, '/bot_token'],
      ];
      for (const [what, body, pointer] of cases) {
        const answer = await call(m.url, 'POST', '/api/channels', { token: m.admin, body: { name: 'x', ...body } });
        assertProblem(answer, 422, 'validation_failed');
        assert.ok(
          answer.body.errors.some((e: { pointer: string }) => e.pointer === `#${pointer}`),
          `${what}: ${JSON.stringify(answer.body.errors)}`,
        );
      }
      const listed = await call(m.url, 'GET', '/api/channels?count=true', { token: m.admin });
      assert.equal(listed.body.total, 0, 'nothing refused was written');

      await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { allow_local_channel_targets: 1 } });
      const channel = await created(m, '/api/channels', { name: 'ops', type: 'webhook', url: hook.url });
      assert.match(channel.secret, /^whsec_[A-Za-z0-9+/]{43}=$/);
      const botToken = '123456:' + 'B'.repeat(35);
      const bot = await created(m, '/api/channels', {
        name: 'chat',
        type: 'telegram',
        chat_id: '42',
        bot_token: botToken,
      });
      assert.equal(bot.secret, null, 'a given secret is not shown back');
      for (const id of [channel.id, bot.id]) {
        const shown = await call(m.url, 'GET', `/api/channels/${id}`, { token: m.admin });
        assert.equal(shown.status, 200);
        assert.ok(!('secret' in shown.body) && !('bot_token' in shown.body), JSON.stringify(shown.body));
      }
      const audit = await call(m.url, 'GET', '/api/audit-logs?resource=channel', { token: m.admin });
      assert.doesNotMatch(JSON.stringify(audit.body), /whsec_|BBBBBBBB/);
      const test = await call(m.url, 'POST', `/api/channels/${channel.id}/test`, { token: m.admin });
      assert.equal(test.status, 200);
      assert.equal(test.body.state, 'sent');
      const [message] = verified(channel.secret, hook.received);
      assert.equal(message!.payload.type, 'channel.test');
      assert.equal(message!.id, test.body.message_id);

      await m.close();
      for (const file of readdirSync(m.dataDir)) {
        const bytes = readFileSync(join(m.dataDir, file));
        for (const secret of [channel.secret, botToken, channel.secret.slice(6, 30)])
          assert.equal(bytes.indexOf(secret), -1, `${file} holds a channel secret`);
      }
    },
  );

  test("a channel changing type takes the new type's secret, never keeps the old one; a kept one stays", async (t) => {
    const m = await startMaster(t, { localTargets: true });
    const hook = await receiver(t);
    const botToken = '123456:' + 'R'.repeat(35);
    const chat = await created(m, '/api/channels', {
      name: 'ops',
      type: 'telegram',
      chat_id: '7',
      bot_token: botToken,
    });
    const put = (body: Record<string, unknown>) =>
      call(m.url, 'PUT', `/api/channels/${chat.id}`, { token: m.admin, body: { name: 'ops', ...body } });
    const webhook = { type: 'webhook', url: hook.url };
    const refused = await put(webhook);
    assertProblem(refused, 422, 'validation_failed');
    assert.deepEqual(refused.body.errors, [{ pointer: '#/secret', detail: 'is required for a webhook channel' }]);
    const secret = 'whsec_' + Buffer.alloc(32, 9).toString('base64');
    assert.equal((await put({ ...webhook, secret })).status, 200);
    assert.equal((await put({ ...webhook, name: 'ops-2' })).status, 200, 'the same type keeps its secret');
    assertProblem(await put({ ...webhook, url: `${hook.url}?v=2` }), 422, 'validation_failed');
    const test = await call(m.url, 'POST', `/api/channels/${chat.id}/test`, { token: m.admin });
    assert.equal(test.body.state, 'sent');
    assert.equal(verified(secret, hook.received)[0]!.payload.type, 'channel.test', 'signed with the secret given');
    const mail = { type: 'email', smtp_host: 'smtp.example.com', from: 'a@example.com', to: ['b@example.com'] };
    const emailed = await put(mail);
    assert.equal(emailed.status, 200, JSON.stringify(emailed.body));
    assert.equal(emailed.body.has_secret, false, "a webhook's secret is no mail password");
  });

  const POLICY_AT_SEND =
    "a channel's address is held to the policy when each delivery is sent: allow_local_channel_targets turned off " +
    'fails a loopback channel at once, and a failing one gives up after its last attempt';

  test(POLICY_AT_SEND, async (t) => {
    const m = await startMaster(t, { localTargets: true });
    const hook = await receiver(t);
    const failing = await receiver(t, () => 503);
    // Every kind of address a channel has: a webhook's URL, a Bot API's base, a mail server.
    const locals = [
      { name: 'hook', type: 'webhook', url: hook.url },
      { name: 'bot', type: 'telegram', chat_id: '1', bot_token: '123456:' + 'P'.repeat(35), api_base: hook.url },
      { name: 'mail', type: 'email', smtp_host: '127.0.0.1', from: 'a@example.com', to: ['b@example.com'] },
    ];
    const made = [];
    for (const body of locals) made.push(await created(m, '/api/channels', body));
    const down = await created(m, '/api/channels', { name: 'down', type: 'webhook', url: failing.url });
    await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { allow_local_channel_targets: 0 } });
    for (const channel of made) {
      const refused = await call(m.url, 'POST', `/api/channels/${channel.id}/test`, { token: m.admin });
      assert.equal(refused.body.state, 'failed', channel.name);
      assert.match(refused.body.last_error, /loopback address; channels reach such addresses only with allow_local/);
    }
    assert.equal(hook.received.length, 0, 'nothing reached it');

    await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { allow_local_channel_targets: 1 } });
    const edge = await node(m, 'edge');
    // An expiry further off than the ~3.4 hours of attempts the clock is moved through.
    await rule(m, { name: 'later', node_id: edge.id, listen_port: 9000, expires_at: m.app.timestamp(20 * 86_400_000) });
    await watchExpiring(m, [down.id], 30);
    const delivery = async () =>
      (await call(m.url, 'GET', `/api/deliveries?channel_id=${down.id}`, { token: m.admin })).body.items.at(-1);
    for (let attempt = 1; attempt < MAX_ATTEMPTS; attempt++) {
      await until(`attempt ${attempt}`, async () => (await delivery())?.attempts === attempt);
      m.advance(retryDelayMs(attempt));
    }
    const last = await until('the last attempt', async () => {
      const got = await delivery();
      return got?.attempts === MAX_ATTEMPTS && got;
    });
    assert.equal(last.state, 'failed');
    assert.equal(last.last_error, 'answered 503');
    assert.equal(failing.received.length, MAX_ATTEMPTS, 'no attempt past the last');
  });

  test("a delivery's error names no address, nor what a name resolved to: for every kind of channel", async (t) => {
    const m = await startMaster(t, { localTargets: true });
    const closed = await closedPort();
    const bodies = [
      { name: 'hook', type: 'webhook', url: `http://127.0.0.1:${closed}/hook` },
      {
        name: 'bot',
        type: 'telegram',
        chat_id: '1',
        bot_token: '123456:' + 'P'.repeat(35),
        api_base: `http://127.0.0.1:${closed}`,
      },
      {
        name: 'mail',
        type: 'email',
        smtp_host: '127.0.0.1',
        smtp_port: closed,
        from: 'a@example.com',
        to: ['b@example.com'],
      },
    ];
    // A name the master cannot tell is local, resolving to itself here: refused when sent, without saying where to.
    const name = hostname();
    const itself = (await lookup(name, { all: true }).catch(() => [])).some((a) => a.address.startsWith('127.'));
    if (itself && !/localhost/i.test(name))
      bodies.push({ name: 'named', type: 'webhook', url: `http://${name}:${closed}/hook` });
    const channels = [];
    for (const body of bodies) channels.push(await created(m, '/api/channels', body));
    const errors: string[] = [];
    for (const channel of channels.slice(0, 3)) {
      const sent = await call(m.url, 'POST', `/api/channels/${channel.id}/test`, { token: m.admin });
      assert.equal(sent.body.state, 'failed', channel.name);
      errors.push(sent.body.last_error);
    }
    assert.deepEqual(errors, ['ECONNREFUSED', 'ECONNREFUSED', 'the mail server connection failed: ECONNREFUSED']);
    if (channels[3]) {
      await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { allow_local_channel_targets: 0 } });
      const named = await call(m.url, 'POST', `/api/channels/${channels[3].id}/test`, { token: m.admin });
      assert.equal(named.body.last_error, 'the address is one channels may not reach');
    } else t.diagnostic(`this machine's name (${name}) does not resolve to loopback: the named channel was not tried`);
    const log = await call(m.url, 'GET', '/api/deliveries', { token: m.admin });
    assert.doesNotMatch(JSON.stringify(log.body), /127\.0\.0\.1|resolves/);
  });

  const OFFLINE_NOTIFIED =
    'node_offline reaches a webhook once for_seconds have passed since its agent went, not before, verified, and ' +
    'resolves';

  test(OFFLINE_NOTIFIED, async (t) => {
    const m = await startMaster(t, { localTargets: true });
    const hook = await receiver(t);
    const edge = await node(m, 'edge');
    const agent = await agentInProcess(t, m.url, edge.agent_token);
    const status = async () => (await call(m.url, 'GET', `/api/nodes/${edge.id}`, { token: m.admin })).body.status;
    await until('the agent to link', async () => (await status()) === 'online');
    const channel = await created(m, '/api/channels', { name: 'ops', type: 'webhook', url: hook.url });
    const alertRule = await created(m, '/api/alert-rules', {
      name: 'edge down',
      condition: 'node_offline',
      node_ids: [edge.id],
      for_seconds: 2,
      channel_ids: [channel.id],
    });

    await agent.stop();
    await until('the node offline', async () => (await status()) === 'offline');
    // On the master's clock: a turn now finds it offline for less than for_seconds, one 2 s on finds it firing.
    await m.turn();
    const pending = await call(m.url, 'GET', '/api/alerts', { token: m.admin });
    assert.deepEqual(
      pending.body.items.map((a: { state: string }) => a.state),
      ['pending'],
    );
    m.advance(2000);
    await until('the firing notification', () => hook.received.length >= 1);
    const [firing] = verified(channel.secret, hook.received);
    assert.equal(firing!.payload.type, 'alert.notification');
    assert.deepEqual(
      firing!.payload.data.alerts.map((a) => [a.status, a.alert_rule.id, a.resource, a.resource_id, a.summary]),
      [['firing', alertRule.id, 'node', edge.id, 'node edge is offline']],
    );
    const alerts = await call(m.url, 'GET', '/api/alerts', { token: m.admin });
    assert.deepEqual(
      alerts.body.items.map((a: { state: string; resource_id: number }) => [a.state, a.resource_id]),
      [['firing', edge.id]],
    );

    await agentInProcess(t, m.url, edge.agent_token, { stateDir: agent.stateDir });
    await until('the resolved notification', () => hook.received.length >= 2, 15_000);
    const [, resolved] = verified(channel.secret, hook.received);
    assert.equal(resolved!.payload.data.alerts[0].status, 'resolved');
    assert.notEqual(resolved!.id, firing!.id);
    const events = await call(m.url, 'GET', '/api/audit-logs?resource=alert_rule', { token: m.admin });
    assert.equal(events.status, 200);
    const deliveries = await call(m.url, 'GET', `/api/deliveries?channel_id=${channel.id}`, { token: m.admin });
    assert.deepEqual(
      deliveries.body.items.map((d: { state: string; attempts: number }) => [d.state, d.attempts]),
      [
        ['sent', 1],
        ['sent', 1],
      ],
    );
    const metrics = await call(m.url, 'GET', '/api/metrics', { token: m.admin });
    assert.match(metrics.body as string, /portplane_notification_deliveries_total\{outcome="sent"\} 2/);
  });

  const RESTART_QUIET =
    "a master's restart alerts nobody: a node is taken for offline only once its agent had time to link";

  test(RESTART_QUIET, async (t) => {
    const dataDir = mkdtempSync(join(tmpdir(), 'portplane-relink-'));
    const port = await freePort();
    const first = await startMaster(t, { dataDir, port, localTargets: true });
    const hook = await receiver(t);
    const [edge, lost] = [await node(first, 'edge'), await node(first, 'lost')];
    await agentInProcess(t, first.url, edge.agent_token);
    const lostAgent = await agentInProcess(t, first.url, lost.agent_token);
    const online = async (m: Running, id: number) =>
      (await call(m.url, 'GET', `/api/nodes/${id}`, { token: m.admin })).body.status === 'online';
    for (const id of [edge.id, lost.id]) await until('the agents to link', () => online(first, id));
    const channel = await created(first, '/api/channels', { name: 'ops', type: 'webhook', url: hook.url });
    await created(first, '/api/alert-rules', {
      name: 'down',
      condition: 'node_offline',
      for_seconds: 0,
      channel_ids: [channel.id],
    });
    await first.close();
    await lostAgent.stop();

    const second = await startMaster(t, { dataDir, port });
    await until('the agent to link again', () => online(second, edge.id));
    // Turns of the clock as the next seconds take them: each evaluates the alert rules and writes what fires.
    for (let turn = 0; turn < 3; turn++) await second.turn();
    const alerts = await call(second.url, 'GET', '/api/alerts', { token: second.admin });
    assert.deepEqual(alerts.body.items, [], 'nothing fired while agents had time to link');
    assert.equal(hook.received.length, 0, 'nothing was notified');
    second.advance(36_000);
    await until('the node that stayed away notified', () => hook.received.length === 1);
    const [message] = verified(channel.secret, hook.received);
    assert.deepEqual(
      message!.payload.data.alerts.map((a) => [a.status, a.resource_id]),
      [['firing', lost.id]],
    );
  });

  test('an agent dropped three times within the damping window gives one firing and one resolved', async (t) => {
    const m = await startMaster(t, { localTargets: true });
    const hook = await receiver(t);
    const edge = await node(m, 'flappy');
    const status = async () => (await call(m.url, 'GET', `/api/nodes/${edge.id}`, { token: m.admin })).body.status;
    let agent = await agentInProcess(t, m.url, edge.agent_token);
    await until('the agent to link', async () => (await status()) === 'online');
    const channel = await created(m, '/api/channels', { name: 'ops', type: 'webhook', url: hook.url });
    await created(m, '/api/alert-rules', {
      name: 'flapping',
      condition: 'node_offline',
      for_seconds: 0,
      damping_seconds: 60,
      channel_ids: [channel.id],
    });
    for (let drop = 0; drop < 3; drop++) {
      await agent.stop();
      await until('the node offline', async () => (await status()) === 'offline');
      // The clock's turn comes now, not within the second: the clock stands still, so damping is as it was.
      await until('the alert firing', async () => {
        await m.turn();
        const alerts = await call(m.url, 'GET', '/api/alerts', { token: m.admin });
        return alerts.body.items[0]?.state === 'firing';
      });
      agent = await agentInProcess(t, m.url, edge.agent_token, { stateDir: agent.stateDir });
      await until('the node online', async () => (await status()) === 'online');
      await until('the alert clearing', async () => {
        await m.turn();
        const alerts = await call(m.url, 'GET', '/api/alerts', { token: m.admin });
        return alerts.body.items[0]?.state === 'clearing';
      });
    }
    assert.equal(hook.received.length, 1, 'only the first drop was notified');
    m.advance(61_000);
    await until('the resolved notification', () => hook.received.length >= 2);
    for (let turn = 0; turn < 3; turn++) await m.turn();
    const deliveries = await call(m.url, 'GET', '/api/deliveries', { token: m.admin });
    assert.equal(deliveries.body.items.length, 2, 'nothing more was to be sent');
    const statuses = verified(channel.secret, hook.received).map((m) => m.payload.data.alerts[0].status);
    assert.deepEqual(statuses, ['firing', 'resolved']);
  });

  test(
    'a channel that hangs or fails delays no other; it shows ' + 'since when it fails, and retries back off',
    async (t) => {
      const m = await startMaster(t, { localTargets: true });
      const hanging = await receiver(t, () => null);
      let failedAt = '';
      const failing = await receiver(t, () => {
        failedAt ||= m.app.timestamp(0);
        return 500;
      });
      const working = await receiver(t);
      const ids: number[] = [];
      for (const [name, hook] of [
        ['hanging', hanging],
        ['failing', failing],
        ['working', working],
      ] as const)
        ids.push((await created(m, '/api/channels', { name, type: 'webhook', url: hook.url })).id);
      const edge = await node(m, 'edge');
      await rule(m, { name: 'soon', node_id: edge.id, listen_port: 9000, expires_at: m.app.timestamp(3600_000) });
      const started = Date.now();
      await watchExpiring(m, ids, 1);
      await until('the working channel notified', () => working.received.length === 1);
      assert.ok(Date.now() - started < 3000, `the working channel waited ${Date.now() - started} ms`);
      assert.equal(hanging.received.length, 1, 'the hanging one was asked too, and is still waiting');
      await until('the failing channel marked', async () => {
        const shown = await call(m.url, 'GET', `/api/channels/${ids[1]}`, { token: m.admin });
        return shown.body.failing_since !== null && shown.body;
      });
      const shown = await call(m.url, 'GET', `/api/channels/${ids[1]}`, { token: m.admin });
      assert.equal(shown.body.last_error, 'answered 500');
      const [delivery] = (await call(m.url, 'GET', `/api/deliveries?channel_id=${ids[1]}`, { token: m.admin })).body
        .items;
      assert.equal(delivery.state, 'pending');
      assert.equal(delivery.attempts, 1);
      // The next attempt 5 s after the first, which the master's clock stamped once the 500 came back: in whole
      // seconds, the same second as the answer's or the next.
      const backoff = Date.parse(delivery.next_attempt_at) - Date.parse(failedAt);
      assert.ok(backoff === 5000 || backoff === 6000, `the next attempt ${backoff} ms after the first failed`);
      m.advance(5000);
      await until('the second attempt', () => failing.received.length === 2);
      assert.equal(failing.received[1]!.headers['webhook-id'], failing.received[0]!.headers['webhook-id']);
    },
  );

  test('a silence mutes what it matches, by tag: shown muted, not notified, and notified once it ends', async (t) => {
    const m = await startMaster(t, { localTargets: true });
    const hook = await receiver(t);
    const channel = await created(m, '/api/channels', { name: 'ops', type: 'webhook', url: hook.url });
    const edge = await node(m, 'edge');
    const soon = m.app.timestamp(3600_000);
    const [quiet, loud] = [
      (await rule(m, { name: 'quiet', node_id: edge.id, listen_port: 9001, tags: ['maint'], expires_at: soon })).body,
      (await rule(m, { name: 'loud', node_id: edge.id, listen_port: 9002, expires_at: soon })).body,
    ];
    const silence = await created(m, '/api/silences', {
      comment: 'moving the quiet service',
      tags: ['maint'],
      ends_at: m.app.timestamp(7200_000),
    });
    await watchExpiring(m, [channel.id], 1);
    await until('the first notification', () => hook.received.length === 1);
    const told = (index: number) =>
      verified(channel.secret, hook.received)[index]!.payload.data.alerts.map((a) => [a.status, a.resource_id]);
    assert.deepEqual(told(0), [['firing', loud.id]]);
    const alerts = (await call(m.url, 'GET', '/api/alerts', { token: m.admin })).body.items;
    assert.deepEqual(
      alerts.map((a: { resource_id: number; muted: boolean; tags: string[] }) => [a.resource_id, a.muted, a.tags]),
      [
        [quiet.id, true, ['maint']],
        [loud.id, false, []],
      ],
    );
    const ended = await call(m.url, 'DELETE', `/api/silences/${silence.id}`, { token: m.admin });
    assert.equal(ended.status, 204);
    await until('the muted alert told', () => hook.received.length === 2);
    assert.deepEqual(told(1), [['firing', quiet.id]]);
    const audit = await call(m.url, 'GET', '/api/audit-logs?resource=silence', { token: m.admin });
    assert.deepEqual(
      audit.body.items.map((e: { action: string }) => e.action),
      ['silence.delete', 'silence.create'],
    );
  });

  /** Exim (Debian's exim4) as the mail server: STARTTLS with its own certificate, AUTH PLAIN, mail kept in a file. */
  async function mailServer(t: TestContext) {
    const dir = mkdtempSync(join(tmpdir(), 'portplane-exim-'));
    const port = await freePort();
    for (const sub of ['spool', 'log']) mkdirSync(join(dir, sub));
    execFileSync(
      'openssl',
      [
        ...['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2'],
        ...['-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1'],
        ...['-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem')],
      ],
      { stdio: 'ignore' },
    );
    const config = `primary_hostname = mail.test
spool_directory = ${dir}/spool
log_file_path = ${dir}/log/%slog
pid_file_path = ${dir}/exim.pid
local_interfaces = 127.0.0.1
tls_advertise_hosts = *
tls_certificate = ${dir}/cert.pem
tls_privatekey = ${dir}/key.pem
auth_advertise_hosts = \${if eq{$tls_in_cipher}{}{}{*}}
exim_user = nobody
exim_group = nogroup
acl_smtp_rcpt = acl_rcpt
begin acl
acl_rcpt:
  accept authenticated = *
  deny message = authentication required
begin routers
everything:
  driver = accept
  transport = to_file
begin transports
to_file:
  driver = appendfile
  file = ${dir}/mail
  user = nobody
  group = nogroup
  mode = 0666
begin authenticators
plain:
  driver = plaintext
  public_name = PLAIN
  server_prompts = :
  server_condition = \${if and {{eq{$auth2}{alerts}}{eq{$auth3}{smtp-pass}}}}
  server_set_id = $auth2
`;
    writeFileSync(join(dir, 'exim.conf'), config);
    chmodSync(dir, 0o755);
    for (const file of ['key.pem', 'cert.pem']) chmodSync(join(dir, file), 0o644);
    execFileSync('chown', ['-R', 'nobody:nogroup', join(dir, 'spool'), join(dir, 'log')]);
    chmodSync(dir, 0o777);
    const exim = spawn('exim4', ['-C', join(dir, 'exim.conf'), '-bdf', '-oX', String(port)], { stdio: 'ignore' });
    t.after(() => void exim.kill('SIGKILL'));
    await until('exim to listen', () => probe(port).then((state) => state === 'open'));
    return { port, ca: readFileSync(join(dir, 'cert.pem'), 'utf8'), mail: () => readIfThere(join(dir, 'mail')) };
  }

  function readIfThere(path: string): string {
    try {
      return readFileSync(path, 'utf8');
    } catch {
      return '';
    }
  }

  const EXIM_MISSING =
    process.getuid?.() !== 0
      ? 'needs root: exim runs its own configuration only for root'
      : spawnSync('sh', ['-c', 'command -v exim4']).status !== 0
        ? "needs Debian's exim4-daemon-light (.ci/run installs it)"
        : false;

  test(
    'email: an alert reaches a real mail server (exim) over STARTTLS with a login',
    { skip: EXIM_MISSING },
    async (t) => {
      const m = await startMaster(t, { localTargets: true });
      const server = await mailServer(t);
      const email = {
        type: 'email',
        smtp_host: '127.0.0.1',
        smtp_port: server.port,
        smtp_username: 'alerts',
        smtp_ca: server.ca,
        from: 'portplane@example.com',
        to: ['ops@example.com', 'oncall@example.com'],
      };
      const wrong = await created(m, '/api/channels', { name: 'wrong', ...email, smtp_password: 'not-it' });
      const failed = await call(m.url, 'POST', `/api/channels/${wrong.id}/test`, { token: m.admin });
      assert.equal(failed.body.state, 'failed');
      assert.match(failed.body.last_error, /^the mail server refused the login: 535/);
      const untrusted = await created(m, '/api/channels', {
        name: 'untrusted',
        ...email,
        smtp_ca: null,
        smtp_password: 'smtp-pass',
      });
      const unverified = await call(m.url, 'POST', `/api/channels/${untrusted.id}/test`, { token: m.admin });
      assert.match(unverified.body.last_error, /^TLS with the mail server failed: .*certificate/);

      const mail = await created(m, '/api/channels', { name: 'mail', ...email, smtp_password: 'smtp-pass' });
      const shown = await call(m.url, 'GET', `/api/channels/${mail.id}`, { token: m.admin });
      assert.ok(!('smtp_password' in shown.body));
      const edge = await node(m, 'edge');
      await rule(m, { name: 'soon', node_id: edge.id, listen_port: 9000, expires_at: m.app.timestamp(3600_000) });
      await watchExpiring(m, [mail.id], 1);
      await until('the mail delivered', () => server.mail().includes('rule soon expires at'));
      const text = server.mail();
      assert.match(text, /with esmtpsa .*TLS1\.3/, 'over TLS, logged in');
      assert.match(text, /^To: ops@example\.com, oncall@example\.com$/m);
      assert.match(text, /Subject: =\?UTF-8\?B\?/);
      assert.match(text, /Message-ID: <msg_[0-9a-f-]+@portplane>/);
      assert.match(
        text,
        /^FIRING: rule soon expires at .*\n  alert rule: expiring \(rule_expiring\)\n  node: edge\n  since /m,
      );
      const [delivery] = (await call(m.url, 'GET', `/api/deliveries?channel_id=${mail.id}`, { token: m.admin })).body
        .items;
      assert.equal(delivery.state, 'sent');
    },
  );

  const TRANSFERRED =
    'alert channels and rules go through export and import by name, never with a secret; a webhook gets a new one';

  test(TRANSFERRED, async (t) => {
    const source = await startMaster(t);
    const edge = await node(source, 'edge');
    const exit = await node(source, 'exit');
    const web = (await rule(source, { name: 'web', node_id: edge.id, listen_port: 8080 })).body;
    const tunnel = await created(source, '/api/tunnels', {
      name: 'e-x',
      entry_node_id: edge.id,
      exit_node_id: exit.id,
    });
    const botToken = '123456:' + 'S'.repeat(35);
    const hook = await created(source, '/api/channels', {
      name: 'hook',
      type: 'webhook',
      url: 'https://hooks.example.com/a',
    });
    const chat = await created(source, '/api/channels', {
      name: 'chat',
      type: 'telegram',
      chat_id: '7',
      bot_token: botToken,
    });
    const mail = await created(source, '/api/channels', {
      name: 'mail',
      type: 'email',
      smtp_host: 'smtp.example.com',
      smtp_username: 'alerts',
      smtp_password: 'mail-secret-1',
      from: 'portplane@example.com',
      to: ['ops@example.com'],
    });
    const watching = [
      { name: 'edge down', condition: 'node_offline', node_ids: [edge.id], channel_ids: [hook.id, chat.id] },
      { name: 'web failed', condition: 'rule_sync_failed', resource_ids: [web.id], channel_ids: [mail.id] },
      { name: 'tunnel down', condition: 'tunnel_down', resource_ids: [tunnel.id], tags: [], channel_ids: [hook.id] },
    ];
    for (const body of watching) await created(source, '/api/alert-rules', { ...body, for_seconds: 30 });
    const doc = (await call(source.url, 'GET', '/api/export', { token: source.admin })).body;
    const text = JSON.stringify(doc);
    for (const secret of [hook.secret, botToken, 'mail-secret-1'])
      assert.ok(!text.includes(secret), 'no secret exported');
    assert.deepEqual(
      doc.alert_rules.map((r: { name: string; nodes: string[]; resources: string[]; channels: string[] }) => [
        r.name,
        r.nodes,
        r.resources,
        r.channels,
      ]),
      [
        ['edge down', ['edge'], [], ['hook', 'chat']],
        ['web failed', [], ['edge/tcp/8080'], ['mail']],
        ['tunnel down', [], ['e-x'], ['hook']],
      ],
    );

    const target = await startMaster(t);
    const imported = await call(target.url, 'POST', '/api/import', { token: target.admin, body: doc });
    assert.equal(imported.status, 200, JSON.stringify(imported.body));
    assert.match(imported.body.channels[0].secret, /^whsec_/);
    assert.notEqual(imported.body.channels[0].secret, hook.secret);
    assert.deepEqual(
      imported.body.channels.map((c: { outcome: string; secret?: string }) => [c.outcome, 'secret' in c]),
      [
        ['created', true],
        ['created', false],
        ['created', false],
      ],
    );
    const channels = (await call(target.url, 'GET', '/api/channels', { token: target.admin })).body.items;
    assert.deepEqual(
      channels.map((c: { name: string; has_secret: boolean }) => [c.name, c.has_secret]),
      [
        ['hook', true],
        ['chat', false],
        ['mail', false],
      ],
    );
    const again = (await call(target.url, 'GET', '/api/export', { token: target.admin })).body;
    assert.deepEqual({ ...again, exported_at: null }, { ...doc, exported_at: null });
    const repeat = await call(target.url, 'POST', '/api/import', { token: target.admin, body: doc });
    assert.deepEqual(
      [...repeat.body.channels, ...repeat.body.alert_rules].map((r: { outcome: string }) => r.outcome),
      Array(6).fill('exists'),
    );
  });

  const REFUSED_TOLD =
    'a master whose disk is full tells writes_refused straight to its channels (the outbox cannot be written), and ' +
    'the resolution through the outbox once writes go through';

  test(REFUSED_TOLD, async (t) => {
    const dataDir = smallDisk(t, 16);
    if (!dataDir) return t.skip('cannot mount a tmpfs here (needs root)');
    const m = await startMaster(t, { dataDir, localTargets: true });
    const hook = await receiver(t);
    const channel = await created(m, '/api/channels', { name: 'ops', type: 'webhook', url: hook.url });
    await created(m, '/api/alert-rules', {
      name: 'disk',
      condition: 'writes_refused',
      for_seconds: 0,
      channel_ids: [channel.id],
    });
    const edge = await node(m, 'edge');
    const free = fill(dataDir);
    let port = 9000;
    await until(
      'a write refused',
      async () => (await rule(m, { node_id: edge.id, listen_port: port++ })).status === 507,
    );
    await until('the refusal told', () => hook.received.length === 1);
    const [firing] = verified(channel.secret, hook.received);
    assert.deepEqual(
      firing!.payload.data.alerts.map((a) => [a.status, a.condition, a.summary]),
      [['firing', 'writes_refused', 'the master refuses writes: the disk is full']],
    );
    free();
    await until(
      'writes to go through',
      async () => (await rule(m, { name: 'y', node_id: edge.id, listen_port: 9100 })).status === 201,
    );
    await until('the resolution told', () => hook.received.length === 2);
    assert.equal(verified(channel.secret, hook.received)[1]!.payload.data.alerts[0].status, 'resolved');
  });

  test("Telegram: a bot's message reaches the Bot API stand-in with its chat and the alert's text", async (t) => {
    const m = await startMaster(t, { localTargets: true });
    const api = await receiver(t, () => 200);
    const token = '987654:' + 'T'.repeat(35);
    const bot = await created(m, '/api/channels', {
      name: 'chat',
      type: 'telegram',
      chat_id: '-100123',
      bot_token: token,
      api_base: api.url.replace(/\/hook$/, ''),
    });
    const test = await call(m.url, 'POST', `/api/channels/${bot.id}/test`, { token: m.admin });
    assert.equal(test.body.state, 'sent', JSON.stringify(test.body));
    const edge = await node(m, 'edge');
    await rule(m, { name: 'soon', node_id: edge.id, listen_port: 9000, expires_at: m.app.timestamp(3600_000) });
    await watchExpiring(m, [bot.id], 2);
    await until('the alert sent', () => api.received.length === 2);
    for (const message of api.received) assert.equal(message.path, `/bot${token}/sendMessage`);
    const sent = JSON.parse(api.received[1]!.body);
    assert.equal(sent.chat_id, '-100123');
    assert.match(sent.text, /^portplane alerts at .* UTC:\n\nFIRING: rule soon expires at .*\n  alert rule: expiring/);
  });

  const OUTBOX_SURVIVES =
    'a master killed with -9 while deliveries are pending sends them all after it starts, repeats with one id';

  test(OUTBOX_SURVIVES, async (t) => {
    const dataDir = mkdtempSync(join(tmpdir(), 'portplane-outbox-'));
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    let answering = false;
    const hook = await receiver(t, () => (answering ? 204 : null));
    const ready = () =>
      until(
        'the master to serve',
        async () => (await call(base, 'GET', '/api/health').catch(() => null))?.status === 200,
      );
    const login = async () =>
      (await call(base, 'POST', '/api/auth/login', { body: { username: 'admin', password: ADMIN_PASSWORD } })).body
        .token as string;
    const first = bundledMaster(t, dataDir, port);
    await ready();
    const token = await login();
    const as = (path: string, body: unknown) => call(base, 'POST', path, { token, body });
    await call(base, 'PATCH', '/api/settings', { token, body: { allow_local_channel_targets: 1 } });
    const channel = (await as('/api/channels', { name: 'ops', type: 'webhook', url: hook.url })).body;
    const edge = (await as('/api/nodes', { name: 'edge', host: 'edge.example.net' })).body;
    const soon = new Date(Date.now() + 3600_000).toISOString();
    const expiring = { node_id: edge.id, protocol: 'tcp', targets: ['10.0.0.1:80'], expires_at: soon };
    assert.equal((await as('/api/rules', { name: 'soon', listen_port: 9000, ...expiring })).status, 201);
    // Three notifications, one after another (one turn's alerts to a channel are one notification): the receiver holds
    // the first, the others wait behind it.
    for (const days of [1, 2, 3]) {
      const made = await as('/api/alert-rules', {
        name: `expiring within ${days}`,
        condition: 'rule_expiring',
        threshold: days,
        for_seconds: 0,
        channel_ids: [channel.id],
      });
      assert.equal(made.status, 201);
      await until('its notification written', async () => {
        const log = await call(base, 'GET', '/api/deliveries', { token });
        return log.body.items.length === days;
      });
    }
    await until('the first delivery in flight', () => hook.received.length === 1);
    first.kill('SIGKILL');
    await once(first, 'exit');
    answering = true;
    for (const res of hook.held) res.destroy();

    bundledMaster(t, dataDir, port);
    await ready();
    const again = await login();
    await until(
      'every delivery sent',
      async () => {
        const log = await call(base, 'GET', '/api/deliveries', { token: again });
        return log.body.items.every((d: { state: string }) => d.state === 'sent') && log.body.items.length === 3;
      },
      20_000,
    );
    const ids = hook.received.map((message) => message.headers['webhook-id']);
    assert.equal(new Set(ids).size, 3, `three notifications, each under one id: ${ids.join(', ')}`);
    assert.ok(ids.length <= 4, 'only the one in flight at the kill was sent again');
    assert.equal(ids[0], ids[1], 'the one in flight came again first, under its id');
    verified(channel.secret, hook.received);
  });
});
