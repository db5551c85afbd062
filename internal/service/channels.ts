// Alert channels' operations: where notifications go (a webhook, a Telegram chat, mail, Slack, Discord, Teams, ntfy).
// A channel's secret (the webhook's signing secret, the bot's token, the mail server's password, a chat's or a topic's
// address) is sealed at rest and never shown again once written, nor sent anywhere but where it was given for (see
// CHANNEL_SECRETS); a webhook given none gets one the master makes, shown in the creation answer only. A channel's
// addresses are held to what rules' targets are (no loopback, link-local or master address without
// allow_local_channel_targets), as named here and as resolved when sent.

import { DomainError, notFound, validationFailed } from '../errors/errors.ts';
import { checkIfMatch } from './etag.ts';
import { localReason, type TargetPolicy } from '../domain/rules.ts';
import { ntfyTopic } from '../notify/chat.ts';
import { hostRefusal, urlRefusal } from '../notify/post.ts';
import type { SmtpSecurity } from '../notify/smtp.ts';
import { TELEGRAM_API } from '../notify/telegram.ts';
import { newWebhookSecret, webhookSecretProblem } from '../notify/webhook.ts';
import type { FieldError } from '../schema/schema.ts';
import { type Channel, type ChannelConfig, type ChannelFields } from '../store/alerts.ts';
import { holdSecretInPlace, type SecretBinding } from './bound-secrets.ts';
import { diff, type Change, type WriteDeps } from './write.ts';
import { channelTypes, type ChannelType } from '../domain/alerts.ts';

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
  smtp_host?: string | null;
  smtp_port?: number | null;
  smtp_security?: SmtpSecurity | null;
  smtp_username?: string | null;
  smtp_password?: string;
  smtp_ca?: string | null;
  from?: string | null;
  to?: string[] | null;
  webhook_url?: string;
  topic_url?: string;
  access_token?: string;
}

/** The fields given, without those null (a GET's fields of other types). */
type Given = { [K in keyof ChannelInput]?: Exclude<ChannelInput[K], null> };

/** Each type's fields besides its secret. */
const FIELDS: Record<ChannelType, readonly (keyof ChannelInput)[]> = {
  webhook: ['url'],
  telegram: ['chat_id', 'api_base'],
  email: ['smtp_host', 'smtp_port', 'smtp_security', 'smtp_username', 'smtp_ca', 'from', 'to'],
  slack: [],
  discord: [],
  teams: [],
  ntfy: [],
};

/** The types whose address is their secret (whoever knows a chat's webhook or a topic's address posts there). */
export const ADDRESS_SECRET_TYPES: ReadonlySet<ChannelType> = new Set(['slack', 'discord', 'teams', 'ntfy']);

/** What a channel whose address is its secret seals: the address, and the topic's access token for ntfy. */
export interface SealedAddress {
  url: string;
  token: string | null;
}

/**
 * Each type's secret, and what it is bound to: a webhook's signing secret to its url, a bot's token to the API it is
 * sent to and the chat that reads what it sends, a mail login to the server it is sent to, how, and as whom.
 */
export const CHANNEL_SECRETS: Record<ChannelType, SecretBinding> = {
  webhook: { label: 'signing secret', given: ['secret'], bound: ['url'] },
  telegram: { label: "bot's token", given: ['bot_token'], bound: ['api_base', 'chat_id'] },
  email: {
    label: 'mail password',
    given: ['smtp_password'],
    bound: ['smtp_host', 'smtp_port', 'smtp_security', 'smtp_ca', 'smtp_username'],
  },
  // The address is the secret: nothing else decides where it goes.
  slack: { label: 'webhook address', given: ['webhook_url'], bound: [] },
  discord: { label: 'webhook address', given: ['webhook_url'], bound: [] },
  teams: { label: 'webhook address', given: ['webhook_url'], bound: [] },
  ntfy: { label: "topic's address", given: ['topic_url', 'access_token'], bound: [] },
};
const TYPED_FIELDS = [
  ...new Set(channelTypes.flatMap((type) => [...FIELDS[type], ...CHANNEL_SECRETS[type].given])),
] as (keyof ChannelInput)[];

/** What a type's fields make: the config to store, the secret to seal (null: none, or the one kept), and whether the
 * master made it. */
interface Parsed {
  config: ChannelConfig;
  secret: string | null;
  made: boolean;
}

/**
 * `creating`: a new channel (a webhook given none gets a secret made, shown in the creation answer); `secretNeeded`:
 * one must be given (a channel changing type: the old type's secret is no secret of the new; not on an import).
 */
type TypeParser = (
  body: Given,
  creating: boolean,
  secretNeeded: boolean,
  policy: TargetPolicy,
  errors: FieldError[],
) => Parsed;

const required = (errors: FieldError[], type: string, field: string) =>
  errors.push({ pointer: `#/${field}`, detail: `is required for a ${type} channel` });

/**
 * Why a secret address may not be used: as any channel's (see urlRefusal), and over https only (it is a credential,
 * and plain http crosses the network readable), but to a local address, which the policy allows or refuses.
 */
function secretUrlRefusal(url: string, policy: TargetPolicy): string | null {
  const refused = urlRefusal(url, policy);
  if (refused) return refused;
  const { protocol, hostname } = new URL(url);
  const local = localReason(hostname.replace(/^\[|\]$/g, ''), null, { allowLocal: false, masterHosts: [] }) !== null;
  return protocol === 'https:' || local ? null : 'must be https: (the address is a credential)';
}

/** A channel whose address is its secret: the host alone is kept in the clear (what a reader may see of it). */
function addressParser(type: ChannelType, field: 'webhook_url' | 'topic_url'): TypeParser {
  return (body, _creating, secretNeeded, policy, errors): Parsed => {
    const url = body[field];
    if (url === undefined) {
      if (secretNeeded) required(errors, type, field);
      if (body.access_token !== undefined)
        errors.push({ pointer: '#/access_token', detail: 'is sealed with the topic: give topic_url too' });
      return { config: {}, secret: null, made: false };
    }
    const refused = secretUrlRefusal(url, policy);
    if (refused) errors.push({ pointer: `#/${field}`, detail: refused });
    else if (type === 'ntfy' && !ntfyTopic(url))
      errors.push({ pointer: '#/topic_url', detail: 'must be a server and one topic: https://ntfy.sh/TOPIC' });
    if (errors.length > 0) return { config: {}, secret: null, made: false };
    const sealed: SealedAddress = { url, token: body.access_token ?? null };
    return { config: { host: new URL(url).hostname }, secret: JSON.stringify(sealed), made: false };
  };
}

const parsers: Record<ChannelType, TypeParser> = {
  slack: addressParser('slack', 'webhook_url'),
  discord: addressParser('discord', 'webhook_url'),
  teams: addressParser('teams', 'webhook_url'),
  ntfy: addressParser('ntfy', 'topic_url'),
  webhook(body, creating, secretNeeded, policy, errors) {
    const config: ChannelConfig = {};
    if (body.url === undefined) required(errors, 'webhook', 'url');
    else {
      const refused = urlRefusal(body.url, policy);
      if (refused) errors.push({ pointer: '#/url', detail: refused });
      config.url = body.url;
    }
    if (body.secret !== undefined) {
      const problem = webhookSecretProblem(body.secret);
      if (problem) errors.push({ pointer: '#/secret', detail: problem });
      return { config, secret: body.secret, made: false };
    }
    if (creating) return { config, secret: newWebhookSecret(), made: true };
    if (secretNeeded) required(errors, 'webhook', 'secret');
    return { config, secret: null, made: false };
  },
  telegram(body, _creating, secretNeeded, policy, errors) {
    if (body.chat_id === undefined) required(errors, 'telegram', 'chat_id');
    if (body.bot_token === undefined && secretNeeded) required(errors, 'telegram', 'bot_token');
    const base = body.api_base ?? TELEGRAM_API;
    const refused = urlRefusal(base, policy);
    if (refused) errors.push({ pointer: '#/api_base', detail: refused });
    return { config: { chat_id: body.chat_id ?? null, api_base: base }, secret: body.bot_token ?? null, made: false };
  },
  email(body, _creating, secretNeeded, policy, errors) {
    for (const field of ['smtp_host', 'from', 'to'] as const)
      if (body[field] === undefined) required(errors, 'email', field);
    const refused = body.smtp_host === undefined ? null : hostRefusal(body.smtp_host, policy);
    if (refused) errors.push({ pointer: '#/smtp_host', detail: refused });
    const username = body.smtp_username ?? null;
    if (username === null && body.smtp_password !== undefined)
      errors.push({ pointer: '#/smtp_password', detail: 'is for a login: give smtp_username too' });
    if (username !== null && body.smtp_password === undefined && secretNeeded)
      required(errors, 'email', 'smtp_password');
    const security = body.smtp_security ?? 'starttls';
    const config: ChannelConfig = {
      smtp_host: body.smtp_host ?? null,
      smtp_port: body.smtp_port ?? (security === 'tls' ? 465 : 587),
      smtp_security: security,
      smtp_username: username,
      smtp_ca: body.smtp_ca ?? null,
      from: body.from ?? null,
      to: body.to ?? [],
    };
    return { config, secret: body.smtp_password ?? null, made: false };
  },
};

/** The channel's fields to store and its secret to seal (null: none given), or its field errors. */
function parse(
  app: WriteDeps,
  given: ChannelInput,
  creating: boolean,
  secretNeeded = creating,
): Parsed & { fields: ChannelFields } {
  const body = Object.fromEntries(Object.entries(given).filter(([, value]) => value !== null)) as Given;
  const errors: FieldError[] = [];
  const own = [...FIELDS[given.type], ...CHANNEL_SECRETS[given.type].given];
  for (const key of TYPED_FIELDS)
    if (body[key] !== undefined && !own.includes(key))
      errors.push({ pointer: `#/${key}`, detail: `is not a field of a ${given.type} channel` });
  const parsed = parsers[given.type](body, creating, secretNeeded, app.channelPolicy(), errors);
  if (errors.length > 0) throw validationFailed(errors);
  return { ...parsed, fields: { name: given.name, type: given.type, config: parsed.config } };
}

/** How many channels the master keeps (a delivery in flight each, at most, and each evaluation may write to each). */
export const MAX_CHANNELS = 100;

/**
 * Inside a transaction. Returns the channel and the secret the master made for it, if it made one. An imported
 * channel comes without its secret (exports leave them out): a webhook gets one made, a bot or a mail login waits
 * for one to be set.
 */
export function insertChannel(
  app: WriteDeps,
  change: Change,
  body: ChannelInput,
  imported = false,
): { channel: Channel; madeSecret: string | null } {
  const { fields, secret, made } = parse(app, body, true, !imported);
  if (app.store.channels.count() >= MAX_CHANNELS)
    throw new DomainError('conflict', `the master keeps at most ${MAX_CHANNELS} channels: delete one first`);
  const channel = app.store.channels.insert(fields, secret === null ? null : app.box.seal(secret), app.timestamp());
  change.audit({ action: 'channel.create', resource: 'channel', resource_id: channel.id, changes: { after: fields } });
  return { channel, madeSecret: made ? secret : null };
}

/**
 * Inside a transaction: a channel of another type needs that type's secret given again, and so does a change of what
 * the kept secret is bound to (see CHANNEL_SECRETS).
 */
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
  const retyped = body.type !== current.type;
  const { fields, secret } = parse(app, body, false, retyped);
  // A new type's secret replaces the old one, even with none; a mail server without a login has no password to keep.
  const dropped = retyped || (fields.type === 'email' && fields.config.smtp_username === null);
  if (secret === null && !dropped && current.has_secret)
    holdSecretInPlace(CHANNEL_SECRETS[fields.type], current.config, fields.config);
  // The address kept, its host shown as before.
  if (secret === null && !dropped && ADDRESS_SECRET_TYPES.has(fields.type)) fields.config = current.config;
  const sealed = secret === null ? null : app.box.seal(secret);
  const channel = app.store.channels.update(id, fields, sealed, dropped, app.timestamp());
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
