// The names of the fields that carry a secret in any request or answer of the API, each marked `secret` in its schema
// (test/unit/schema.test.ts holds the schemas and this list to each other): what the store redacts in whatever it
// keeps of what it was given without the schema at hand, the audit log's changes and an Idempotency-Key's replay.

export const SECRET_FIELDS: ReadonlySet<string> = new Set([
  'access_token',
  'agent_command',
  'agent_token',
  'bot_token',
  'current_password',
  'new_password',
  'oidc_client_secret',
  'otpauth_uri',
  'password',
  'recovery_codes',
  'secret',
  'smtp_password',
  'ssh_password',
  'ssh_private_key',
  'token',
  'topic_url',
  'totp',
  'webhook_url',
]);

/** What a secret's value is kept as. */
export const REDACTED = '[redacted]';

/**
 * `value` with the value of every field named in `secretFields` (at any depth, unless null) replaced by REDACTED: for
 * whatever is kept of what a request gave or an answer showed. Most values hold no secret: finding that out copies
 * nothing.
 */
export function redactSecrets(value: unknown, secretFields: ReadonlySet<string>): unknown {
  const holds = (inner: unknown): boolean => {
    if (Array.isArray(inner)) return inner.some(holds);
    if (inner && typeof inner === 'object') {
      for (const [key, field] of Object.entries(inner))
        if ((secretFields.has(key) && field != null) || holds(field)) return true;
    }
    return false;
  };
  const redacted = (inner: unknown): unknown => {
    if (Array.isArray(inner)) return inner.map(redacted);
    if (inner && typeof inner === 'object')
      return Object.fromEntries(
        Object.entries(inner).map(([key, field]) => [
          key,
          secretFields.has(key) && field != null ? REDACTED : redacted(field),
        ]),
      );
    return inner;
  };
  return holds(value) ? redacted(value) : value;
}
