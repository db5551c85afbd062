// Webhooks as the Standard Webhooks specification (standardwebhooks.com) has them, so that receivers verify them
// with its libraries in any language: a `whsec_` secret (base64 of 24 to 64 random bytes), and each message sent
// with `webhook-id` (the same for every attempt), `webhook-timestamp` (the attempt's, in seconds) and
// `webhook-signature` (`v1,` and the base64 HMAC-SHA256 of `id.timestamp.body` under the secret's bytes).

import { createHmac, randomBytes } from 'node:crypto';

const PREFIX = 'whsec_';
const SECRET_BYTES = { min: 24, max: 64, made: 32 };

/** A new secret, as the master makes one when a webhook channel is given none. */
export function newWebhookSecret(): string {
  return PREFIX + randomBytes(SECRET_BYTES.made).toString('base64');
}

/** Why `secret` is no webhook secret, or null when it is one. */
export function webhookSecretProblem(secret: string): string | null {
  if (!secret.startsWith(PREFIX)) return `must start with ${PREFIX}`;
  const encoded = secret.slice(PREFIX.length);
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(encoded) || encoded.length % 4 !== 0) return `must be ${PREFIX} and base64`;
  const bytes = Buffer.from(encoded, 'base64').length;
  if (bytes < SECRET_BYTES.min || bytes > SECRET_BYTES.max)
    return `must hold ${SECRET_BYTES.min} to ${SECRET_BYTES.max} bytes after ${PREFIX} (it holds ${bytes})`;
  return null;
}

/** The headers that sign `body` as message `id` sent at `seconds` (Unix time). */
export function webhookHeaders(secret: string, id: string, seconds: number, body: string): Record<string, string> {
  const key = Buffer.from(secret.slice(PREFIX.length), 'base64');
  const signature = createHmac('sha256', key).update(`${id}.${seconds}.${body}`).digest('base64');
  return { 'webhook-id': id, 'webhook-timestamp': String(seconds), 'webhook-signature': `v1,${signature}` };
}
