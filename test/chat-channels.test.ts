// Channels of the chat services (Slack, Discord, Teams Workflows, ntfy), each against a receiver that checks what its
// service documents of a message (and answers as the service does), and their addresses kept as the credentials they
// are: sealed, never shown, audited, exported or written in the clear.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { readdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import { assertProblem, call, node, rule, startMaster, type Running } from './helpers.ts';
import { until } from './net.ts';

const PUBLIC_URL = 'https://console.example.com';

/** What a service requires of a message: a problem in words, or null when it would take it. */
type Checker = (body: any, headers: Record<string, string | undefined>) => string | null;

const text = (value: unknown, max: number) => typeof value === 'string' && value.length > 0 && value.length <= max;

/** The receivers, each checking what its service's documentation says of a message, answering as it answers. */
const SERVICES: Record<string, { status: number; answer: string; check: Checker; path: string }> = {
  // api.slack.com/messaging/webhooks: JSON with `text` (mrkdwn), `&<>` escaped but in links; 200 "ok".
  slack: {
    status: 200,
    answer: 'ok',
    path: '/services/T000/B000/XXXX',
    check: (body) => {
      if (!text(body.text, 40_000)) return 'text missing or too long';
      const bare = body.text.replace(/<https?:[^|<>\s]+\|[^<>]+>/g, '');
      return /[<>]/.test(bare) ? `an unescaped < or > outside a link: ${body.text}` : null;
    },
  },
  // discord.com/developers/docs/resources/webhook: embeds (<= 10; title <= 256, description <= 4096, color an
  // integer, timestamp ISO 8601, url a URL), 6,000 characters in all; 204.
  discord: {
    status: 204,
    answer: '',
    path: '/api/webhooks/1234/abcd',
    check: (body) => {
      if (!Array.isArray(body.allowed_mentions?.parse) || body.allowed_mentions.parse.length > 0)
        return 'mentions would be parsed';
      if (!Array.isArray(body.embeds) || body.embeds.length < 1 || body.embeds.length > 10) return 'embeds: 1 to 10';
      let total = 0;
      for (const embed of body.embeds) {
        if (!text(embed.title, 256)) return 'an embed title missing or past 256';
        if (embed.description !== undefined && !text(embed.description, 4096)) return 'a description past 4096';
        if (!Number.isInteger(embed.color) || embed.color < 0 || embed.color > 0xffffff) return 'a bad color';
        if (Number.isNaN(Date.parse(embed.timestamp))) return 'a timestamp that is no time';
        if (embed.url !== undefined && !/^https?:\/\//.test(embed.url)) return 'a url that is no URL';
        total += embed.title.length + (embed.description?.length ?? 0);
      }
      return total > 6000 ? `${total} characters, past 6,000` : null;
    },
  },
  // learn.microsoft.com, Workflows "Post to a channel when a webhook request is received": a message with one
  // attachment of an Adaptive Card; 202.
  teams: {
    status: 202,
    answer: '',
    path: '/workflows/abc/triggers/manual/paths/invoke',
    check: (body) => {
      if (body.type !== 'message' || body.attachments?.length !== 1) return 'not a message with one attachment';
      const [attachment] = body.attachments;
      if (attachment.contentType !== 'application/vnd.microsoft.card.adaptive') return 'not an Adaptive Card';
      const card = attachment.content;
      if (card.type !== 'AdaptiveCard' || !/^1\.[0-6]$/.test(card.version)) return 'a card of no known version';
      for (const element of card.body) {
        if (element.type === 'TextBlock' && text(element.text, 10_000)) continue;
        if (element.type === 'FactSet' && element.facts.every((f: any) => text(f.title, 200) && text(f.value, 2000)))
          continue;
        return `an element the card does not know: ${JSON.stringify(element)}`;
      }
      for (const action of card.actions ?? [])
        if (action.type !== 'Action.OpenUrl' || !/^https:\/\//.test(action.url)) return 'an action that is no link';
      return null;
    },
  },
  // docs.ntfy.sh/publish/#publish-as-json: POST to the server's root, topic and message, priority 1-5, tags, click;
  // an access token as a Bearer; 200 with the message as JSON.
  ntfy: {
    status: 200,
    answer: '{"id":"x","event":"message"}',
    path: '/portplane-ops',
    check: (body, headers) => {
      if (headers.authorization !== 'Bearer tk_secret_token_of_the_topic') return 'no access token';
      if (body.topic !== 'portplane-ops') return `the topic is ${body.topic}`;
      if (!text(body.message, 4096) || !text(body.title, 250)) return 'message or title missing or too long';
      if (!Number.isInteger(body.priority) || body.priority < 1 || body.priority > 5) return 'a bad priority';
      if (!Array.isArray(body.tags)) return 'tags are no list';
      return body.click !== undefined && !/^https:\/\//.test(body.click) ? 'click is no link' : null;
    },
  },
};

interface Arrival {
  service: string;
  path: string;
  body: any;
}

/** One receiver for every service, told apart by path; a message its service would refuse is answered 400. */
async function receivers(t: TestContext) {
  const arrived: Arrival[] = [];
  const server = createServer((req, res) => {
    let raw = '';
    req.setEncoding('utf8').on('data', (chunk: string) => (raw += chunk));
    req.on('end', () => {
      const [name, service] =
        Object.entries(SERVICES).find(
          ([, s]) => req.url === s.path || (s.path === '/portplane-ops' && req.url === '/'),
        ) ?? [];
      let body: any;
      try {
        body = JSON.parse(raw);
      } catch {
        return res.writeHead(400).end('not JSON');
      }
      const problem = !service
        ? `no service at ${req.url}`
        : req.headers['content-type'] !== 'application/json'
          ? 'not JSON'
          : service.check(body, req.headers as Record<string, string>);
      if (problem) return res.writeHead(400).end(problem);
      arrived.push({ service: name!, path: req.url!, body });
      res.writeHead(service!.status).end(service!.answer);
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  return { base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, arrived };
}

async function made(m: Running, body: Record<string, unknown>) {
  const answer = await call(m.url, 'POST', '/api/channels', { token: m.admin, body });
  assert.equal(answer.status, 201, JSON.stringify(answer.body));
  return answer.body;
}

describe('chat channels', () => {
  test('each service takes its messages: a test, and an alert with its time, node and link', async (t) => {
    const m = await startMaster(t);
    const hooks = await receivers(t);
    const settings = { allow_local_channel_targets: 1, public_url: PUBLIC_URL };
    assert.equal((await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: settings })).status, 200);
    const channels = [];
    for (const type of ['slack', 'discord', 'teams'])
      channels.push(await made(m, { name: type, type, webhook_url: hooks.base + SERVICES[type]!.path }));
    const token = 'tk_secret_token_of_the_topic';
    channels.push(
      await made(m, { name: 'ntfy', type: 'ntfy', topic_url: hooks.base + '/portplane-ops', access_token: token }),
    );
    for (const channel of channels) {
      assert.equal(channel.host, '127.0.0.1');
      assert.equal(channel.secret, null);
      const tested = await call(m.url, 'POST', `/api/channels/${channel.id}/test`, { token: m.admin });
      assert.equal(tested.body.state, 'sent', `${channel.type}: ${tested.body.last_error}`);
    }
    assert.deepEqual(
      hooks.arrived.map((a) => a.service),
      ['slack', 'discord', 'teams', 'ntfy'],
    );

    const edge = await node(m, 'edge-1');
    await rule(m, { name: 'later', node_id: edge.id, listen_port: 9000, expires_at: m.app.timestamp(5 * 86_400_000) });
    const alertRule = { name: 'expiring', condition: 'rule_expiring', threshold: 30, for_seconds: 0 };
    const created = await call(m.url, 'POST', '/api/alert-rules', {
      token: m.admin,
      body: { ...alertRule, channel_ids: channels.map((c) => c.id) },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    await until('every service told', () => hooks.arrived.length === 8);
    const told = Object.fromEntries(hooks.arrived.slice(4).map((a) => [a.service, a.body]));
    const link = `${PUBLIC_URL}/#/rules?node_id=${edge.id}&q=later`;
    assert.match(told.slack.text, /^\*FIRING\*: rule later expires/);
    assert.match(told.slack.text, /alert rule expiring, node edge-1\n/);
    assert.match(told.slack.text, /since \d{4}-\d\d-\d\d \d\d:\d\d UTC, for \d+ s/);
    assert.ok(told.slack.text.includes(`<${link}|Open in portplane>`), told.slack.text);
    assert.equal(told.discord.embeds[0].url, link);
    assert.match(told.discord.embeds[0].description, /node edge-1\nsince .* UTC, for \d+ s/);
    const card = told.teams.attachments[0].content;
    assert.deepEqual(
      card.body[2].facts.map((f: { title: string }) => f.title),
      ['Alert rule', 'Node', 'When'],
    );
    assert.equal(card.actions[0].url, link);
    assert.equal(told.ntfy.click, link);
    assert.equal(told.ntfy.priority, 4);
    assert.match(told.ntfy.message, /^FIRING: rule later expires.*\nexpiring on edge-1, since/);
  });

  test('a chat address is a credential: sealed, never shown, audited, logged or exported, and https', async (t) => {
    const m = await startMaster(t);
    const secretPath = '/services/T0SECRET/B0SECRET/SECRETSECRETSECRET';
    const refusals: [Record<string, unknown>, string, RegExp][] = [
      [{ type: 'slack' }, '#/webhook_url', /is required for a slack channel/],
      [{ type: 'discord', webhook_url: `http://hooks.example.com${secretPath}` }, '#/webhook_url', /must be https:/],
      [{ type: 'teams', webhook_url: `https://127.0.0.1${secretPath}` }, '#/webhook_url', /loopback address/],
      [{ type: 'ntfy', topic_url: 'https://ntfy.example.com/a/b' }, '#/topic_url', /one topic/],
      [{ type: 'ntfy', topic_url: 'https://ntfy.example.com/t?x=1' }, '#/topic_url', /one topic/],
      [
        { type: 'slack', webhook_url: `https://hooks.example.com${secretPath}`, url: 'https://x.example' },
        '#/url',
        /not a field/,
      ],
    ];
    for (const [body, pointer, detail] of refusals) {
      const answer = await call(m.url, 'POST', '/api/channels', { token: m.admin, body: { name: 'x', ...body } });
      assertProblem(answer, 422, 'validation_failed');
      const error = answer.body.errors.find((e: { pointer: string }) => e.pointer === pointer);
      assert.match(error?.detail ?? JSON.stringify(answer.body.errors), detail);
    }
    const slack = await made(m, { name: 'ops', type: 'slack', webhook_url: `https://hooks.example.com${secretPath}` });
    const ntfy = await made(m, {
      name: 'phones',
      type: 'ntfy',
      topic_url: 'https://ntfy.example.com/SECRETTOPIC',
      access_token: 'tk_SECRETTOKEN',
    });
    const renamed = await call(m.url, 'PUT', `/api/channels/${ntfy.id}`, {
      token: m.admin,
      body: { name: 'pagers', type: 'ntfy' },
    });
    assert.equal(renamed.status, 200, 'the address is kept when absent');
    assert.equal(renamed.body.host, 'ntfy.example.com');
    const tokenAlone = await call(m.url, 'PUT', `/api/channels/${ntfy.id}`, {
      token: m.admin,
      body: { name: 'pagers', type: 'ntfy', access_token: 'tk_other' },
    });
    assertProblem(tokenAlone, 422, 'validation_failed');
    const retyped = await call(m.url, 'PUT', `/api/channels/${slack.id}`, {
      token: m.admin,
      body: { name: 'ops', type: 'discord' },
    });
    assertProblem(retyped, 422, 'validation_failed');

    const seen = [
      await call(m.url, 'GET', '/api/channels', { token: m.admin }),
      await call(m.url, 'GET', `/api/channels/${slack.id}`, { token: m.admin }),
      await call(m.url, 'GET', '/api/audit-logs?resource=channel', { token: m.admin }),
      await call(m.url, 'GET', '/api/export', { token: m.admin }),
    ];
    for (const answer of seen) {
      assert.equal(answer.status, 200);
      assert.doesNotMatch(JSON.stringify(answer.body), /SECRET/, answer.body);
    }
    const other = await startMaster(t);
    const imported = await call(other.url, 'POST', '/api/import', { token: other.admin, body: seen[3]!.body });
    assert.equal(imported.status, 200, JSON.stringify(imported.body));
    const arrived = await call(other.url, 'GET', '/api/channels', { token: other.admin });
    assert.deepEqual(
      arrived.body.items.map((c: { type: string; has_secret: boolean }) => [c.type, c.has_secret]),
      [
        ['slack', false],
        ['ntfy', false],
      ],
      'an imported chat channel waits for its address',
    );
    await m.close();
    for (const file of readdirSync(m.dataDir)) {
      const bytes = readFileSync(join(m.dataDir, file));
      for (const secret of ['T0SECRET', 'SECRETTOPIC', 'tk_SECRETTOKEN'])
        assert.equal(bytes.indexOf(secret), -1, `${file} holds a channel's address`);
    }
  });
});
