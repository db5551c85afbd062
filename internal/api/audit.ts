// The audit log, newest first, filtered by plain query parameters.

import { decodeCursor, pageJson } from '../http/cursor.ts';
import { intParam, listQuery, textParam, timeParam, type QueryOf } from '../schema/query.ts';
import { DEFAULT_LIMIT, pageSchema, record, timestamp } from './common.ts';
import { type Ctx, okJson, operation, operations } from './route.ts';
import { ID_RANGE } from '../schema/ids.ts';

export const auditEntrySchema = record('AuditEntry', {
  id: { type: 'integer' },
  at: timestamp,
  actor_type: {
    type: 'string',
    enum: ['user', 'token', 'agent', 'system', 'anonymous'],
    description: 'user: a login session; token: an API token (actor_id is the token id).',
  },
  actor_id: { type: ['integer', 'null'] },
  actor_name: { type: 'string', description: 'The username (for a failed login: the name that was tried).' },
  ip: { type: ['string', 'null'] },
  action: { type: 'string', description: 'resource.verb, e.g. token.create.' },
  resource: { type: 'string' },
  resource_id: { type: ['integer', 'null'] },
  status: { type: 'string', enum: ['success', 'denied', 'failed'] },
  request_id: { type: ['string', 'null'] },
  changes: { description: 'What changed ({before, after}); secrets are [redacted].' },
});

const auditQuery = {
  ...listQuery,
  action: textParam({ max: 64, description: 'Exact action, e.g. rule.create.' }),
  resource: textParam({ max: 64, description: 'Exact resource type, e.g. rule.' }),
  resource_id: intParam(ID_RANGE),
  actor: textParam({ max: 64, description: 'Exact actor name (username).' }),
  actor_type: textParam({ max: 16, values: ['user', 'token', 'agent', 'system', 'anonymous'] }),
  status: textParam({ max: 16, values: ['success', 'denied', 'failed'] }),
  since: timeParam('Entries at or after this time.'),
  until: timeParam('Entries before this time.'),
};

function listAudit(ctx: Ctx<undefined, QueryOf<typeof auditQuery>>) {
  const { query } = ctx;
  const page = ctx.app.store.audit.page({
    beforeId: query.cursor === undefined ? Number.MAX_SAFE_INTEGER : decodeCursor(query.cursor),
    limit: query.limit ?? DEFAULT_LIMIT,
    count: query.count ?? false,
    owner: ctx.caller.role === 'tenant' ? { id: ctx.caller.userId, username: ctx.caller.username } : null,
    action: query.action ?? null,
    resource: query.resource ?? null,
    resource_id: query.resource_id ?? null,
    actor: query.actor ?? null,
    actor_type: query.actor_type ?? null,
    status: query.status ?? null,
    since: query.since ?? null,
    until: query.until ?? null,
  });
  return okJson(pageJson(page));
}

export const auditOperations = operations({
  listAuditLogs: operation({
    summary: 'Read the audit log, newest first',
    tenants: true,
    description:
      'Every write and every denied write attempt, recorded in the same transaction as the change. Entries older ' +
      'than audit_retention_days are pruned. A tenant reads the entries about their own resources and account, and ' +
      'their own refused attempts; where a request came from (ip, request_id) only for what they did themselves.',
    query: auditQuery,
    responses: { 200: { description: 'A page of entries', schema: pageSchema(auditEntrySchema) } },
    handler: listAudit,
  }),
});
