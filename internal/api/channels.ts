// Alert channels on the wire (where notifications go; operations in service/channels.ts, sending in
// service/outbox.ts), and the delivery log.

import { decodeCursor, pageOf } from '../http/cursor.ts';
import { etagOf } from '../service/etag.ts';
import { notFound } from '../errors/errors.ts';
import { intParam, listQuery, type QueryOf } from '../schema/query.ts';
import { array, integer, nullable, object, oneOf, optional, string, type Infer } from '../schema/schema.ts';
import { smtpSecurities } from '../notify/smtp.ts';
import { insertChannel, removeChannel, updateChannel } from '../service/channels.ts';
import { MAX_ATTEMPTS } from '../service/outbox.ts';
import { transact } from '../service/write.ts';
import { type Channel } from '../store/alerts.ts';
import { ID_RANGE } from '../schema/ids.ts';
import { ALERTING_NAME, idPage, nullableTimestamp, pageSchema, pagingQuery, record, timestamp } from './common.ts';
import { created, type Ctx, idParam, noContent, ok, operation, operations } from './route.ts';
import { channelTypes, deliveryStates } from '../domain/alerts.ts';

/** A mail address, as a channel's sender or recipient: one line, no brackets. */
const MAILBOX = {
  min: 3,
  max: 254,
  pattern: /^[^\s@<>,;"]+@[^\s@<>,;"]+$/,
  patternHint: 'must be a mail address (name@domain)',
};

export const channelInput = object(
  {
    name: string(ALERTING_NAME),
    type: oneOf(channelTypes, {
      description:
        'webhook: a signed POST of JSON; telegram: a message from a bot; email: a mail over SMTP; slack: an ' +
        'incoming webhook (mrkdwn text); discord: a webhook (embeds, no mention parsed); teams: a Workflows webhook ' +
        '(an Adaptive Card); ntfy: a topic (JSON publishing).',
    }),
    url: optional(
      nullable(
        string({
          min: 8,
          max: 2048,
          description: 'webhook: where notifications are POSTed (http: or https:).',
        }),
      ),
    ),
    secret: optional(
      string({
        min: 38,
        max: 100,
        secret: true,
        description:
          'webhook: the signing secret (whsec_ and the base64 of 24 to 64 bytes, as Standard Webhooks has it). ' +
          'Absent on create: the master makes one and shows it in the answer, once; absent on update: kept, unless ' +
          'url changes.',
      }),
    ),
    chat_id: optional(nullable(string({ min: 1, max: 64, description: 'telegram: the chat the bot writes to.' }))),
    bot_token: optional(
      string({
        min: 20,
        max: 100,
        pattern: /^[0-9]+:[A-Za-z0-9_-]+$/,
        patternHint: 'must be a bot token as BotFather gives it (digits, a colon, letters, digits, _ and -)',
        secret: true,
        description:
          'telegram: the bot token. Required on create; absent on update: kept, unless api_base or chat_id changes.',
      }),
    ),
    api_base: optional(
      nullable(
        string({
          min: 8,
          max: 2048,
          description: 'telegram: the Bot API address (default https://api.telegram.org), e.g. a local Bot API server.',
        }),
      ),
    ),
    smtp_host: optional(
      nullable(
        string({
          min: 1,
          max: 253,
          pattern: /^[A-Za-z0-9.:-]+$/,
          patternHint: 'must be a host name or an address',
          description: 'email: the mail server (a submission server: STARTTLS on 587, or TLS on 465).',
        }),
      ),
    ),
    smtp_port: optional(
      nullable(integer({ min: 1, max: 65535, description: 'email: default 587 (starttls), 465 (tls).' })),
    ),
    smtp_security: optional(
      nullable(
        oneOf(smtpSecurities, {
          description: 'email: starttls (default; refused if the server does not offer it) or tls from the start.',
        }),
      ),
    ),
    smtp_username: optional(
      nullable(
        string({
          min: 1,
          max: 254,
          pattern: /^[^\r\n\0]+$/,
          patternHint: 'must be one line',
          description: 'email: the login, if the server wants one.',
        }),
      ),
    ),
    smtp_password: optional(
      string({
        min: 1,
        max: 256,
        pattern: /^[^\0]+$/,
        patternHint: 'must not hold a NUL',
        secret: true,
        description:
          "email: the login's password. Required with smtp_username on create; absent on update: kept, unless " +
          'smtp_host, smtp_port, smtp_security, smtp_ca or smtp_username changes (and dropped without smtp_username).',
      }),
    ),
    smtp_ca: optional(
      nullable(
        string({
          min: 1,
          max: 16_384,
          pattern: /-----BEGIN CERTIFICATE-----/,
          patternHint: 'must be PEM certificates',
          description: "email: the CA (PEM) to verify the server with instead of the system's, for a private server.",
        }),
      ),
    ),
    from: optional(nullable(string({ ...MAILBOX, description: 'email: the sender.' }))),
    to: optional(
      nullable(array(string(MAILBOX), { min: 1, max: 10, unique: true, description: 'email: the recipients.' })),
    ),
    webhook_url: optional(
      string({
        min: 12,
        max: 2048,
        secret: true,
        description:
          'slack, discord, teams: the webhook address the service gave, which is its credential: sealed, never ' +
          'shown (host shows its host). https: (http: only to a local address). Required on create; absent on ' +
          'update: kept.',
      }),
    ),
    topic_url: optional(
      string({
        min: 12,
        max: 2048,
        secret: true,
        description:
          'ntfy: the server and topic (https://ntfy.sh/TOPIC): whoever knows it reads and writes the topic, so it is ' +
          'sealed as a credential. Required on create; absent on update: kept (with its access_token).',
      }),
    ),
    access_token: optional(
      string({
        min: 1,
        max: 256,
        pattern: /^[\x21-\x7e]+$/,
        patternHint: 'must be printable ASCII without spaces',
        secret: true,
        description: 'ntfy: the access token (tk_...) for a protected topic, sent as a Bearer; given with topic_url.',
      }),
    ),
  },
  {
    name: 'ChannelInput',
    ignore: ['id', 'has_secret', 'host', 'failing_since', 'last_error', 'version', 'created_at', 'updated_at'],
  },
);

const channelProperties = {
  id: { type: 'integer' },
  name: { type: 'string' },
  type: { type: 'string', enum: [...channelTypes] },
  url: { type: ['string', 'null'], description: 'webhook: where notifications are POSTed.' },
  chat_id: { type: ['string', 'null'] },
  api_base: { type: ['string', 'null'] },
  smtp_host: { type: ['string', 'null'] },
  smtp_port: { type: ['integer', 'null'] },
  smtp_security: { type: ['string', 'null'], enum: [...smtpSecurities, null] },
  smtp_username: { type: ['string', 'null'] },
  smtp_ca: { type: ['string', 'null'] },
  from: { type: ['string', 'null'] },
  to: { type: ['array', 'null'], items: { type: 'string' } },
  host: {
    type: ['string', 'null'],
    description: 'slack, discord, teams, ntfy: the host of its sealed address (the address itself is never shown).',
  },
  has_secret: { type: 'boolean', description: 'Whether its secret is set (an imported bot or login has none yet).' },
  failing_since: { ...nullableTimestamp, description: 'Since when its deliveries fail; null while they go through.' },
  last_error: { type: ['string', 'null'], description: 'Why its last delivery failed; null after a success.' },
  version: { type: 'integer' },
  created_at: timestamp,
  updated_at: timestamp,
};
const channelSchema = record('Channel', channelProperties, 'A channel; its secret is never shown again.');
const channelCreatedSchema = record('ChannelCreated', {
  ...channelProperties,
  secret: {
    type: ['string', 'null'],
    'x-secret': true,
    description: 'The webhook secret the master made, in this answer only; null when one was given.',
  },
});

/** A channel as the API shows it: its type's fields flat, and never its secret. */
function shownChannel(channel: Channel) {
  const { config, ...rest } = channel;
  return {
    id: rest.id,
    name: rest.name,
    type: rest.type,
    url: (config.url as string | undefined) ?? null,
    chat_id: (config.chat_id as string | undefined) ?? null,
    api_base: (config.api_base as string | undefined) ?? null,
    smtp_host: (config.smtp_host as string | undefined) ?? null,
    smtp_port: (config.smtp_port as number | undefined) ?? null,
    smtp_security: (config.smtp_security as string | undefined) ?? null,
    smtp_username: (config.smtp_username as string | undefined) ?? null,
    smtp_ca: (config.smtp_ca as string | undefined) ?? null,
    from: (config.from as string | undefined) ?? null,
    to: (config.to as string[] | undefined) ?? null,
    host: (config.host as string | undefined) ?? null,
    has_secret: rest.has_secret,
    failing_since: rest.failing_since,
    last_error: rest.last_error,
    version: rest.version,
    created_at: rest.created_at,
    updated_at: rest.updated_at,
  };
}

const deliverySchema = record('Delivery', {
  id: { type: 'integer' },
  message_id: { type: 'string', description: "The same for every attempt (a webhook's webhook-id)." },
  channel_id: { type: 'integer' },
  state: { type: 'string', enum: [...deliveryStates] },
  attempts: { type: 'integer', description: `At most ${MAX_ATTEMPTS}.` },
  next_attempt_at: nullableTimestamp,
  last_error: { type: ['string', 'null'] },
  created_at: timestamp,
  finished_at: nullableTimestamp,
});

const deliveriesQuery = {
  limit: listQuery.limit,
  cursor: listQuery.cursor,
  channel_id: intParam({ ...ID_RANGE, description: "Only this channel's deliveries." }),
};

async function putChannel(ctx: Ctx<Infer<typeof channelInput>, {}>) {
  const channel = await transact(ctx.app, ctx, (change) =>
    updateChannel(ctx.app, change, idParam(ctx), ctx.body, ctx.headers['if-match']),
  );
  return ok(shownChannel(channel), { ETag: etagOf(channel.version) });
}

export const channelOperations = operations({
  listChannels: operation({
    summary: 'List alert channels (never their secrets)',
    query: pagingQuery,
    responses: { 200: { description: 'A page of channels', schema: pageSchema(channelSchema) } },
    handler: (ctx: Ctx<undefined, QueryOf<typeof pagingQuery>>) => {
      const limit = ctx.query.limit ?? 50;
      const after = ctx.query.cursor === undefined ? 0 : decodeCursor(ctx.query.cursor);
      const page = idPage(
        ctx.app.store.channels.page(after, limit),
        limit,
        ctx.query.count === true && (() => ctx.app.store.channels.count()),
      );
      return ok({ ...page, items: page.items.map(shownChannel) });
    },
  }),
  createChannel: operation({
    action: 'channel.create',
    summary: 'Create an alert channel',
    description:
      "A channel's address is held to what rules' targets are: loopback, link-local and the master's own addresses " +
      'only with the setting allow_local_channel_targets (needs *), checked as named here and as resolved at each ' +
      'delivery. ' +
      'Its secret is sealed at rest and never shown again; a webhook given none gets one, shown in this answer only.',
    body: channelInput,
    responses: { 201: { description: 'Created', schema: channelCreatedSchema }, 409: { description: 'Name taken' } },
    handler: async (ctx: Ctx<Infer<typeof channelInput>, {}>) => {
      const { channel, madeSecret } = await transact(ctx.app, ctx, (change) =>
        insertChannel(ctx.app, change, ctx.body),
      );
      return created(
        { ...shownChannel(channel), secret: madeSecret },
        { Location: `/api/channels/${channel.id}`, ETag: etagOf(channel.version) },
      );
    },
  }),
  getChannel: operation({
    summary: 'Show an alert channel',
    responses: { 200: { description: 'The channel', schema: channelSchema } },
    handler: (ctx: Ctx<undefined, {}>) => {
      const channel = ctx.app.store.channels.find(idParam(ctx));
      if (!channel) throw notFound('channel', ctx.params.id!);
      return ok(shownChannel(channel), { ETag: etagOf(channel.version) });
    },
  }),
  replaceChannel: operation({
    action: 'channel.update',
    summary: 'Replace an alert channel',
    description:
      'An absent secret (secret, bot_token, smtp_password, webhook_url, topic_url) keeps the current one, unless a ' +
      'field that decides where it goes changes (422 naming the secret to give again); a change of type needs the ' +
      'new one.',
    body: channelInput,
    responses: { 200: { description: 'Updated', schema: channelSchema }, 409: { description: 'Name taken' } },
    handler: putChannel,
  }),
  deleteChannel: operation({
    action: 'channel.delete',
    summary: 'Delete an alert channel',
    description: 'Alert rules that notify it stop naming it (each audited); its pending deliveries are dropped.',
    responses: { 204: { description: 'Deleted' } },
    handler: async (ctx: Ctx<undefined, {}>) => {
      await transact(ctx.app, ctx, (change) => removeChannel(ctx.app, change, idParam(ctx), ctx.headers['if-match']));
      return noContent();
    },
  }),
  testChannel: operation({
    action: 'channel.test',
    summary: 'Send an alert channel a test notification now',
    description:
      'Sent once, at once (no retry), and recorded in the delivery log; the answer is that delivery, sent or ' +
      "failed with the reason. The channel shows the outcome as any delivery's.",
    responses: { 200: { description: 'The delivery', schema: deliverySchema } },
    handler: async (ctx: Ctx<undefined, {}>) => {
      const channel = ctx.app.store.channels.find(idParam(ctx));
      if (!channel) throw notFound('channel', ctx.params.id!);
      const delivery = await ctx.app.outbox.test(channel);
      await transact(ctx.app, ctx, (change) =>
        change.audit({
          resource: 'channel',
          resource_id: channel.id,
          changes: { after: { delivery_id: delivery.id, state: delivery.state } },
        }),
      );
      return ok(delivery);
    },
  }),
  listDeliveries: operation({
    summary: 'The delivery log: each notification to a channel, newest first',
    description: 'Kept as long as the audit log (audit_retention_days); a pending one stays until it is done.',
    query: deliveriesQuery,
    responses: { 200: { description: 'A page of deliveries', schema: pageSchema(deliverySchema) } },
    handler: (ctx: Ctx<undefined, QueryOf<typeof deliveriesQuery>>) => {
      const limit = ctx.query.limit ?? 50;
      const before = ctx.query.cursor === undefined ? Number.MAX_SAFE_INTEGER : decodeCursor(ctx.query.cursor);
      return ok(pageOf(ctx.app.store.deliveries.page(before, limit, ctx.query.channel_id ?? null), limit));
    },
  }),
});
