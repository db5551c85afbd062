// Notifications as chat services take them: Slack's incoming webhooks (mrkdwn text), Discord's webhooks (embeds),
// Microsoft Teams' Workflows webhooks (an Adaptive Card in a message) and ntfy (its JSON publishing). Each says what
// a mail says (each alert, when, for how long, its node and its link), within the limits each service documents, and
// none lets an alert's text do more than be read: no mention pings anyone, no markup turns into a link.

import {
  durationOf,
  markOf,
  payloadSubject,
  readableTime,
  type AlertNotice,
  type NotificationPayload,
} from '../domain/alerts.ts';

/** A message as JSON to POST, and the headers it needs besides the content type. */
interface ChatMessage {
  body: unknown;
  headers: Record<string, string>;
}

const alertsOf = (payload: NotificationPayload): AlertNotice[] | null =>
  'alerts' in payload.data ? payload.data.alerts : null;

/** `text` cut to `max` characters, saying it was. */
function cut(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

/** Slack's mrkdwn with every character Slack reads as markup (a link, a mention) escaped, as its docs ask. */
function slackEscaped(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/** Slack (and what speaks its incoming webhooks): one mrkdwn text, an alert a paragraph. */
export function slackMessage(payload: NotificationPayload): ChatMessage {
  const alerts = alertsOf(payload);
  if (!alerts) return { body: { text: slackEscaped(payloadSubject(payload)) }, headers: {} };
  const blocks = alerts.map((notice) => {
    const lines = [
      `*${markOf(notice)}*: ${slackEscaped(notice.summary)}`,
      slackEscaped(`alert rule ${notice.alert_rule.name}${notice.node ? `, node ${notice.node.name}` : ''}`),
      durationOf(notice, payload.timestamp),
    ];
    if (notice.link) lines.push(`<${encodeURI(notice.link)}|Open in portplane>`);
    return lines.join('\n');
  });
  // Slack truncates a message's text past 40,000 characters; an alert's paragraph is well under 1,000.
  return { body: { text: cut(blocks.join('\n\n'), 39_000) }, headers: {} };
}

const DISCORD = { embeds: 10, title: 256, description: 4096, total: 6000 };
const COLOURS = { firing: 0xd93f0b, resolved: 0x2e7d32, test: 0x546e7a };

/** Discord: an embed per alert (at most ten, the last saying how many more), and no mention parsed. */
export function discordMessage(payload: NotificationPayload): ChatMessage {
  const alerts = alertsOf(payload);
  const base = { allowed_mentions: { parse: [] as string[] }, username: 'portplane' };
  if (!alerts)
    return {
      body: {
        ...base,
        embeds: [{ title: payloadSubject(payload), color: COLOURS.test, timestamp: payload.timestamp }],
      },
      headers: {},
    };
  const shown = alerts.slice(0, DISCORD.embeds);
  // Every embed's text counts toward Discord's 6,000 characters a message: each gets its share.
  const share = Math.floor(DISCORD.total / shown.length) - 16;
  const embeds = shown.map((notice, i) => {
    const more = i === DISCORD.embeds - 1 && alerts.length > DISCORD.embeds ? alerts.length - i - 1 : 0;
    const title = cut(`${markOf(notice)}: ${notice.summary}`, Math.min(DISCORD.title, share / 2));
    const description = [
      `Alert rule ${notice.alert_rule.name}${notice.node ? `, node ${notice.node.name}` : ''}`,
      durationOf(notice, payload.timestamp),
      ...(more > 0 ? [`and ${more} more alerts`] : []),
    ].join('\n');
    return {
      title,
      description: cut(description, Math.min(DISCORD.description, share - title.length)),
      color: notice.status === 'resolved' ? COLOURS.resolved : COLOURS.firing,
      timestamp: notice.status === 'resolved' ? (notice.resolved_at ?? payload.timestamp) : notice.since,
      ...(notice.link ? { url: notice.link } : {}),
    };
  });
  return { body: { ...base, embeds }, headers: {} };
}

/** Microsoft Teams through a Workflows webhook: a message carrying one Adaptive Card (schema 1.4). */
export function teamsMessage(payload: NotificationPayload): ChatMessage {
  const alerts = alertsOf(payload);
  const text = (value: string, more: object = {}) => ({ type: 'TextBlock', text: value, wrap: true, ...more });
  const body: object[] = [text(alerts ? `portplane alerts at ${readableTime(payload.timestamp)}` : 'portplane')];
  const actions: object[] = [];
  if (!alerts) body.push(text(payloadSubject(payload)));
  for (const notice of alerts ?? []) {
    body.push(
      text(`${markOf(notice)}: ${notice.summary}`, {
        weight: 'Bolder',
        color: notice.status === 'resolved' ? 'Good' : 'Attention',
        separator: true,
      }),
      {
        type: 'FactSet',
        facts: [
          { title: 'Alert rule', value: notice.alert_rule.name },
          ...(notice.node ? [{ title: 'Node', value: notice.node.name }] : []),
          { title: 'When', value: durationOf(notice, payload.timestamp) },
        ],
      },
    );
    // The card's actions are buttons: one to the first alert's page is what a reader follows.
    if (notice.link && actions.length === 0) actions.push({ type: 'Action.OpenUrl', title: 'Open', url: notice.link });
  }
  const card = {
    $schema: 'http://adaptivecards.io/schemas/adaptive-card.json',
    type: 'AdaptiveCard',
    version: '1.4',
    body,
    ...(actions.length > 0 ? { actions } : {}),
  };
  return {
    body: {
      type: 'message',
      attachments: [{ contentType: 'application/vnd.microsoft.card.adaptive', contentUrl: null, content: card }],
    },
    headers: {},
  };
}

/** A topic's address as ntfy publishes it: its server, and the topic (the path's one segment). */
export function ntfyTopic(url: string): { server: string; topic: string } | null {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return null;
  }
  const topic = /^\/([-_A-Za-z0-9]{1,64})\/?$/.exec(parsed.pathname)?.[1];
  if (!topic || parsed.search || parsed.hash) return null;
  return { server: parsed.origin, topic };
}

/** ntfy: JSON published to the server's root, the topic in it; the message text as a mail's, a click to the link. */
export function ntfyMessage(payload: NotificationPayload, topic: string, token: string | null): ChatMessage {
  const alerts = alertsOf(payload);
  const first = alerts?.[0];
  const firing = alerts?.some((notice) => notice.status === 'firing') ?? false;
  const message = alerts
    ? alerts
        .map((notice) =>
          [
            `${markOf(notice)}: ${notice.summary}`,
            `${notice.alert_rule.name}${notice.node ? ` on ${notice.node.name}` : ''}, ` +
              durationOf(notice, payload.timestamp),
          ].join('\n'),
        )
        .join('\n\n')
    : payloadSubject(payload);
  const body = {
    topic,
    title: cut(payloadSubject(payload), 250),
    // ntfy keeps a message of up to 4,096 bytes as text; past it, it makes the message an attachment.
    message: cut(message, 3_000),
    priority: firing ? 4 : 3,
    tags: [firing ? 'rotating_light' : alerts ? 'white_check_mark' : 'information_source'],
    ...(first?.link ? { click: first.link } : {}),
  };
  return { body, headers: token ? { Authorization: `Bearer ${token}` } : {} };
}
