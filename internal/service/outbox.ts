// The outbox at work: notifications written by the alerts' evaluation (or a channel's test) are sent from here, each
// at least once under its message id, until they go through or their attempts run out. Each channel has one delivery
// in flight at a time (its notifications arrive in order) and all channels at most MAX_IN_FLIGHT together, so a
// channel that hangs or fails holds up only itself. A failed attempt waits twice as long as the one before, from 5 s
// to an hour, and the channel shows since when it has failed. Pending deliveries outlive the master: the next one
// sends them.

import { randomUUID } from 'node:crypto';
import { payloadSubject, payloadText, testPayload, type NotificationPayload } from '../domain/alerts.ts';
import type { TargetPolicy } from '../domain/rules.ts';
import type { SecretBox } from '../crypto/box.ts';
import type { Logger } from '../log/log.ts';
import { discordMessage, ntfyMessage, ntfyTopic, slackMessage, teamsMessage } from '../notify/chat.ts';
import { failureOf, NotSent, postJson } from '../notify/post.ts';
import { sendMail, type MailServer, type SmtpSecurity } from '../notify/smtp.ts';
import { sendTelegram } from '../notify/telegram.ts';
import { webhookHeaders } from '../notify/webhook.ts';
import { formatTime } from '../schema/schema.ts';
import type { Channel, Delivery, DueDelivery } from '../store/alerts.ts';
import type { Store } from '../store/store.ts';
import { ADDRESS_SECRET_TYPES, type SealedAddress } from './channels.ts';

/** How many attempts a delivery gets: the last about 3.4 hours after the first. */
export const MAX_ATTEMPTS = 12;
const FIRST_RETRY_MS = 5_000;
const LONGEST_WAIT_MS = 60 * 60 * 1000;
/** Deliveries in flight at once, over every channel. */
const MAX_IN_FLIGHT = 16;

/** How long a delivery waits after its `attempts`-th attempt failed. */
export function retryDelayMs(attempts: number): number {
  return Math.min(FIRST_RETRY_MS * 2 ** (attempts - 1), LONGEST_WAIT_MS);
}

export interface OutboxDeps {
  store: Store;
  box: SecretBox;
  log: Logger;
  clock: { now(): number };
  channelPolicy(): TargetPolicy;
}

/** Counts what became of each attempt (the metrics' deliveries by outcome). */
export type DeliveryOutcome = 'sent' | 'retry' | 'failed';

export class Outbox {
  /** Channels with a delivery in flight. */
  private readonly busy = new Set<number>();
  private closed = false;
  private readonly settled = new Set<Promise<void>>();
  /** Ends what is in flight when the master stops: it stays pending, and the next start sends it again. */
  private readonly stopping = new AbortController();

  constructor(
    private readonly deps: OutboxDeps,
    private readonly counted: (outcome: DeliveryOutcome) => void = () => undefined,
  ) {}

  /** Starts what is due and fits; cheap when nothing is (one indexed read). */
  kick(): void {
    if (this.closed || this.busy.size >= MAX_IN_FLIGHT) return;
    const at = formatTime(this.deps.clock.now());
    const due = this.deps.store.deliveries.due(at, MAX_IN_FLIGHT * 4);
    for (const delivery of due) {
      if (this.busy.size >= MAX_IN_FLIGHT) break;
      if (this.busy.has(delivery.channel_id)) continue;
      this.busy.add(delivery.channel_id);
      let recorded = false;
      // Whatever one delivery throws ends that delivery's attempt (it stays due), never the master.
      const sending: Promise<void> = this.send(delivery)
        .then((outcome) => void (recorded = outcome))
        .catch((error: Error) =>
          this.deps.log.error('a delivery failed', { delivery: delivery.id, error: error.message }),
        )
        .finally(() => {
          this.busy.delete(delivery.channel_id);
          this.settled.delete(sending);
          // The channel's next one goes now rather than at the clock's next turn: a backlog drains at the channel's
          // pace. Only after an attempt was recorded: one that could not be stays due, and waits for the turn.
          if (recorded) this.kick();
        });
      this.settled.add(sending);
    }
  }

  /** Stops starting deliveries and ends those in flight, unrecorded: they stay due for the next start. */
  async close(): Promise<void> {
    this.closed = true;
    this.stopping.abort();
    await Promise.all([...this.settled]);
  }

  /**
   * Sends `channel` a test notification now, once, and records it in the delivery log as sent or failed (no retry:
   * its caller is waiting to know).
   */
  async test(channel: Channel): Promise<Delivery> {
    const at = formatTime(this.deps.clock.now());
    const messageId = `msg_${randomUUID()}`;
    const payload = testPayload({ id: channel.id, name: channel.name }, at);
    let error: string | null = null;
    try {
      await this.post(channel, messageId, JSON.stringify(payload));
    } catch (thrown) {
      error = (thrown as Error).message;
    }
    const { store } = this.deps;
    // In its turn: behind an import or a batch being written, as every write (then committed).
    const delivery = await store.db.writeInTurn(() => {
      store.channels.recordOutcome(channel.id, error, at);
      return store.deliveries.recordFinished(messageId, channel.id, payload, error, at);
    });
    this.counted(error === null ? 'sent' : 'failed');
    return delivery;
  }

  /**
   * Sends `payload` to `channel` now, once, recording nothing: for what cannot be written, the database refusing
   * writes. Resolves with whether it went through.
   */
  async direct(channel: Channel, messageId: string, payload: unknown): Promise<boolean> {
    try {
      await this.post(channel, messageId, JSON.stringify(payload));
      this.counted('sent');
      return true;
    } catch (error) {
      this.counted('retry');
      this.deps.log.warn('a notification was not delivered', { channel: channel.id, error: (error as Error).message });
      return false;
    }
  }

  /** Makes one attempt at `delivery`; whether its outcome was recorded. */
  private async send(delivery: DueDelivery): Promise<boolean> {
    const { store, log } = this.deps;
    const channel = store.channels.find(delivery.channel_id);
    if (!channel) return false;
    let error: NotSent | null = null;
    try {
      await this.post(channel, delivery.message_id, delivery.payload);
    } catch (thrown) {
      error = thrown instanceof NotSent ? thrown : new NotSent(failureOf(thrown));
    }
    if (this.stopping.signal.aborted) return false;
    const at = formatTime(this.deps.clock.now());
    const attempts = delivery.attempts + 1;
    const outcome: DeliveryOutcome =
      error === null ? 'sent' : !error.retryable || attempts >= MAX_ATTEMPTS ? 'failed' : 'retry';
    try {
      await store.db.writeInTurn(() => {
        if (outcome === 'sent') store.deliveries.sent(delivery.id, at);
        else if (outcome === 'failed') store.deliveries.failed(delivery.id, error!.message, at);
        else
          store.deliveries.retry(
            delivery.id,
            error!.message,
            formatTime(this.deps.clock.now() + retryDelayMs(attempts)),
          );
        store.channels.recordOutcome(channel.id, error?.message ?? null, at);
      });
    } catch (thrown) {
      // Not recorded: it stays due, and is sent again (a repeat under the same message id).
      log.error('recording a delivery failed', { delivery: delivery.id, error: (thrown as Error).message });
      return false;
    }
    this.counted(outcome);
    if (error)
      log.warn('a notification was not delivered', { channel: channel.id, attempts, outcome, error: error.message });
    return true;
  }

  private post(channel: Channel, messageId: string, payload: string): Promise<void> {
    const sealed = this.deps.store.channels.sealedSecret(channel.id);
    const secret = sealed ? this.deps.box.open(sealed) : null;
    const policy = this.deps.channelPolicy();
    const { config } = channel;
    const signal = this.stopping.signal;
    if (channel.type === 'email') {
      const notification = JSON.parse(payload) as NotificationPayload;
      const server: MailServer = {
        host: String(config.smtp_host),
        port: Number(config.smtp_port),
        security: config.smtp_security as SmtpSecurity,
        username: (config.smtp_username as string | null) ?? null,
        ca: (config.smtp_ca as string | null) ?? null,
      };
      const mail = {
        from: String(config.from),
        to: config.to as string[],
        subject: payloadSubject(notification),
        text: payloadText(notification),
        id: messageId,
        date: new Date(this.deps.clock.now()),
      };
      return sendMail(server, secret, mail, policy, signal);
    }
    if (secret === null) throw new NotSent('the channel has no secret', false);
    if (ADDRESS_SECRET_TYPES.has(channel.type)) {
      const notification = JSON.parse(payload) as NotificationPayload;
      const { url, token } = JSON.parse(secret) as SealedAddress;
      const topic = ntfyTopic(url);
      const message =
        channel.type === 'slack'
          ? slackMessage(notification)
          : channel.type === 'discord'
            ? discordMessage(notification)
            : channel.type === 'teams'
              ? teamsMessage(notification)
              : ntfyMessage(notification, topic!.topic, token);
      const to = channel.type === 'ntfy' ? topic!.server : url;
      return postJson(to, JSON.stringify(message.body), message.headers, policy, signal);
    }
    if (channel.type === 'webhook') {
      const seconds = Math.floor(this.deps.clock.now() / 1000);
      const headers = webhookHeaders(secret, messageId, seconds, payload);
      return postJson(String(config.url), payload, headers, policy, signal);
    }
    const text = payloadText(JSON.parse(payload) as NotificationPayload);
    return sendTelegram(String(config.api_base), secret, String(config.chat_id), text, policy, signal);
  }
}
