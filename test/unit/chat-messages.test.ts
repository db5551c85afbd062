import assert from 'node:assert/strict';
import { test } from 'node:test';
import { alertPayload, payloadText, spoken, type AlertNotice } from '../../internal/domain/alerts.ts';
import { discordMessage, ntfyMessage, ntfyTopic, slackMessage, teamsMessage } from '../../internal/notify/chat.ts';

/** What an agent may put in a reason, which an alert's summary carries. */
const HOSTILE = '<!channel> @everyone <https://evil.example|click> &amp; **bold**';

function notice(over: Partial<AlertNotice> = {}): AlertNotice {
  return {
    status: 'firing',
    alert_rule: { id: 1, name: 'sync' },
    condition: 'rule_sync_failed',
    resource: 'rule',
    resource_id: 7,
    summary: `rule web failed to apply on node nyc-1: ${HOSTILE}`,
    since: '2026-12-07T07:00:00Z',
    repeat: false,
    resolved_at: null,
    node: { id: 2, name: 'nyc-1' },
    link: 'https://console.example.com/#/rules?node_id=2&q=web',
    ...over,
  };
}

const AT = '2026-12-07T07:12:30Z';

test('a mail says each alert with its rule, node, since when and how long, and its link', () => {
  const resolved = notice({ status: 'resolved', resolved_at: '2026-12-07T09:05:00Z' });
  assert.equal(
    payloadText(alertPayload([notice(), resolved], AT)),
    [
      'portplane alerts at 2026-12-07 07:12 UTC:',
      '',
      `FIRING: rule web failed to apply on node nyc-1: ${HOSTILE}`,
      '  alert rule: sync (rule_sync_failed)',
      '  node: nyc-1',
      '  since 2026-12-07 07:00 UTC, for 12 min 30 s',
      '  open: https://console.example.com/#/rules?node_id=2&q=web',
      '',
      `RESOLVED: rule web failed to apply on node nyc-1: ${HOSTILE}`,
      '  alert rule: sync (rule_sync_failed)',
      '  node: nyc-1',
      '  from 2026-12-07 07:00 UTC to 2026-12-07 09:05 UTC (2 h 5 min)',
      '  open: https://console.example.com/#/rules?node_id=2&q=web',
    ].join('\n'),
  );
});

test('durations are said in at most two units', () => {
  const cases: [number, string][] = [
    [0, '0 s'],
    [45_000, '45 s'],
    [60_000, '1 min'],
    [750_000, '12 min 30 s'],
    [3_600_000, '1 h'],
    [7_500_000, '2 h 5 min'],
    [187_200_000, '2 d 4 h'],
  ];
  for (const [ms, said] of cases) assert.equal(spoken(ms), said, String(ms));
});

test("no alert's text is markup in Slack: every < > & escaped but the master's own link", () => {
  const { text } = slackMessage(alertPayload([notice()], AT)).body as { text: string };
  assert.ok(text.includes('&lt;!channel&gt; @everyone &lt;https://evil.example|click&gt; &amp;amp;'), text);
  const links = [...text.matchAll(/<([^>]*)>/g)].map((m) => m[1]);
  assert.deepEqual(links, ['https://console.example.com/#/rules?node_id=2&q=web|Open in portplane']);
});

test('Discord parses no mention, and many alerts keep within ten embeds and 6,000 characters', () => {
  const many = Array.from({ length: 25 }, (_, i) => notice({ resource_id: i, summary: `${'x'.repeat(900)} ${i}` }));
  const body = discordMessage(alertPayload(many, AT)).body as {
    allowed_mentions: { parse: string[] };
    embeds: { title: string; description: string }[];
  };
  assert.deepEqual(body.allowed_mentions.parse, []);
  assert.equal(body.embeds.length, 10);
  const total = body.embeds.reduce((sum, e) => sum + e.title.length + e.description.length, 0);
  assert.ok(total <= 6000, `${total} characters`);
  assert.match(body.embeds[9]!.description, /and 15 more alerts$/);
});

test('Teams gets one Adaptive Card whose texts are plain TextBlocks and facts', () => {
  const body = teamsMessage(alertPayload([notice()], AT)).body as any;
  const card = body.attachments[0].content;
  assert.equal(card.version, '1.4');
  assert.deepEqual(
    card.body.map((e: { type: string }) => e.type),
    ['TextBlock', 'TextBlock', 'FactSet'],
  );
  assert.deepEqual(card.actions, [
    { type: 'Action.OpenUrl', title: 'Open', url: 'https://console.example.com/#/rules?node_id=2&q=web' },
  ]);
});

test('ntfy publishes to the server root with the topic, a token as Bearer, and a click to the link', () => {
  assert.deepEqual(ntfyTopic('https://ntfy.sh/ops-alerts'), { server: 'https://ntfy.sh', topic: 'ops-alerts' });
  for (const refused of ['https://ntfy.sh/', 'https://ntfy.sh/a/b', 'https://ntfy.sh/a?x=1', 'https://ntfy.sh/a b'])
    assert.equal(ntfyTopic(refused), null, refused);
  const message = ntfyMessage(alertPayload([notice({ status: 'resolved' })], AT), 'ops', 'tk_1');
  assert.deepEqual(message.headers, { Authorization: 'Bearer tk_1' });
  assert.deepEqual((message.body as { priority: number; tags: string[] }).priority, 3);
  assert.deepEqual((message.body as { tags: string[] }).tags, ['white_check_mark']);
  assert.deepEqual(ntfyMessage(alertPayload([notice()], AT), 'ops', null).headers, {});
});
