// The names of the fields that carry a secret in any request or answer of the API, each marked `secret` in its schema
// (test/unit/schema.test.ts holds the schemas and this list to each other): what the store redacts in whatever it
// keeps of what it was given without the schema at hand, the audit log's changes and an Idempotency-Key's replay.

export const SECRET_FIELDS: ReadonlySet<string> = new Set([
  'agent_command',
  'agent_token',
  'bot_token',
  'current_password',
  'new_password',
  'password',
  'secret',
  'smtp_password',
  'ssh_password',
  'ssh_private_key',
  'token',
]);
