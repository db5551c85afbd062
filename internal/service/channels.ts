// Alert channels' operations: where notifications go (a webhook, a Telegram chat). A channel's secret (the webhook's
// signing secret, the bot's token) is sealed at rest and never shown again once written; a webhook given none gets
// one the master makes, shown in the creation answer only. A channel's addresses are held to what rules' targets are
// (no loopback, link-local or master address without allow_local_targets), as named here and as resolved when sent.

import { notFound, validationFailed } from '../errors/errors.ts';
import { checkIfMatch } from '../http/etag.ts';
import { urlRefusal } from '../notify/post.ts';
import { TELEGRAM_API } from '../notify/telegram.ts';
import { newWebhookSecret, webhookSecretProblem } from '../notify/webhook.ts';
import type { FieldError } from '../schema/schema.ts';
import type { Channel, ChannelConfig, ChannelFields, ChannelType } from '../store/alerts.ts';
import { diff, type Change, type WriteDeps } from './write.ts';

/** A channel as written: the fields of its type, and its secret where it has one (absent on update: kept). */
export interface ChannelInput {
  name: string;
  type: ChannelType;
  /** null, as a GET shows the fields of other types, is absent. */
  url?: string | null;
  secret?: string;
  chat_id?: string | null;
  bot_token?: string;
  api_base?: string | null;
}

/** Each type's fields besides its secret, and the field that holds its secret. */
const TYPES: Record<ChannelType, { fields: readonly (keyof ChannelInput)[]; secret: keyof ChannelInput }> = {
  webhook: { fields: ['url'], secret: 'secret' },
  telegram: { fields: ['chat_id', 'api_base'], secret: 'bot_token' },
};
const TYPED_FIELDS = ['url', 'secret', 'chat_id', 'bot_token', 'api_base'] as const;

/** The channel's fields to store and its secret to seal (null: none given), or its field errors. */
function parse(
  app: WriteDeps,
  given: ChannelInput,
  creating: boolean,
): { fields: ChannelFields; secret: string | null; made: boolean } {
  const body = Object.fromEntries(Object.entries(given).filter(([, value]) => value !== null)) as ChannelInput & {
    url?: string;
    chat_id?: string;
    api_base?: string;
  };
  const errors: FieldError[] = [];
  const own = TYPES[body.type];
  for (const key of TYPED_FIELDS)
    if (body[key] !== undefined && key !== own.secret && !own.fields.includes(key))
      errors.push({ pointer: `#/${key}`, detail: `is not a field of a ${body.type} channel` });
  const policy = app.targetPolicy();
  const config: ChannelConfig = {};
  let secret = (body[own.secret] as string | undefined) ?? null;
  let made = false;
  if (body.type === 'webhook') {
    if (body.url === undefined) errors.push({ pointer: '#/url', detail: 'is required for a webhook channel' });
    else {
      const refused = urlRefusal(body.url, policy);
      if (refused) errors.push({ pointer: '#/url', detail: refused });
      config.url = body.url;
    }
    if (secret !== null) {
      const problem = webhookSecretProblem(secret);
      if (problem) errors.push({ pointer: '#/secret', detail: problem });
    } else if (creating) {
      secret = newWebhookSecret();
      made = true;
    }
  } else {
    if (body.chat_id === undefined) errors.push({ pointer: '#/chat_id', detail: 'is required for a telegram channel' });
    if (secret === null && creating)
      errors.push({ pointer: '#/bot_token', detail: 'is required for a telegram channel' });
    const base = body.api_base ?? TELEGRAM_API;
    const refused = urlRefusal(base, policy);
    if (refused) errors.push({ pointer: '#/api_base', detail: refused });
    config.chat_id = body.chat_id ?? null;
    config.api_base = base;
  }
  if (errors.length > 0) throw validationFailed(errors);
  return { fields: { name: body.name, type: body.type, config }, secret, made };
}

/** Inside a transaction. Returns the channel and the secret the master made for it, if it made one. */
export function insertChannel(
  app: WriteDeps,
  change: Change,
  body: ChannelInput,
): { channel: Channel; madeSecret: string | null } {
  const { fields, secret, made } = parse(app, body, true);
  const channel = app.store.channels.insert(fields, secret === null ? null : app.box.seal(secret), app.timestamp());
  change.audit({ action: 'channel.create', resource: 'channel', resource_id: channel.id, changes: { after: fields } });
  return { channel, madeSecret: made ? secret : null };
}

/** Inside a transaction: a channel of another type needs that type's secret given again. */
export function updateChannel(
  app: WriteDeps,
  change: Change,
  id: number,
  body: ChannelInput,
  ifMatch?: string,
): Channel {
  const current = app.store.channels.find(id);
  if (!current) throw notFound('channel', id);
  checkIfMatch(ifMatch, current.version);
  const { fields, secret } = parse(app, body, body.type !== current.type);
  const channel = app.store.channels.update(id, fields, secret === null ? null : app.box.seal(secret), app.timestamp());
  const changes = diff<ChannelFields>(current, fields, ['name', 'type', 'config']);
  if (secret !== null) (changes.after as Record<string, unknown>).secret = 'replaced';
  change.audit({ action: 'channel.update', resource: 'channel', resource_id: id, changes });
  return channel;
}

/** Inside a transaction: alert rules that notify the channel stop naming it (audited), its deliveries go with it. */
export function removeChannel(app: WriteDeps, change: Change, id: number, ifMatch?: string): void {
  const current = app.store.channels.find(id);
  if (!current) throw notFound('channel', id);
  checkIfMatch(ifMatch, current.version);
  for (const ruleId of app.store.alertRules.usingChannel(id)) {
    const rule = app.store.alertRules.find(ruleId)!;
    const channel_ids = rule.channel_ids.filter((channelId) => channelId !== id);
    app.store.alertRules.update(ruleId, { ...rule, channel_ids }, app.timestamp());
    change.audit({
      action: 'alert_rule.update',
      resource: 'alert_rule',
      resource_id: ruleId,
      changes: { before: { channel_ids: rule.channel_ids }, after: { channel_ids } },
    });
  }
  app.store.channels.delete(id);
  change.audit({ action: 'channel.delete', resource: 'channel', resource_id: id, changes: { before: current } });
}
