// Schemas and helpers shared by several resources.

import { grants, scopes } from '../auth/scopes.ts';
import { decodeCursor, decodeSortedCursor, pageOf, sortOf } from '../http/cursor.ts';
import { listQuery, textParam } from '../schema/query.ts';
import type { SortedPage } from '../store/filters.ts';
import { array, describe, oneOf, string, type JsonSchema, type Schema } from '../schema/schema.ts';
import { missingScope, type WriteJob } from '../service/write.ts';
import type { Principal } from '../auth/principal.ts';
import type { Ctx } from './route.ts';

export const DEFAULT_LIMIT = 50;

export const scopeList = array(oneOf(scopes), {
  max: scopes.length,
  unique: true,
  description: 'Scopes of the form resource:action, or * for all.',
});

/** Labels on a node or a rule, to filter and select by. */
export const tagList = array(
  string({
    min: 1,
    max: 32,
    pattern: /^[A-Za-z0-9._:-]+$/,
    patternHint: 'must contain only letters, digits and . _ : -',
  }),
  { max: 32, unique: true },
);

/** A rule's or tunnel's owner_id as it is written. */
export const OWNER_DESCRIPTION =
  'The user it belongs to. Left out or null: the caller, for what they create; its owner as it is, for a change. ' +
  'Giving it to another user (on create, anyone but the caller; on a change, anyone but its owner) needs ' +
  'users:write besides, and is audited with the change.';

/** What giving a rule or tunnel to another user needs besides the route's scope. */
export const GIVE_TO_ANOTHER = [
  { scope: 'users:write', when: 'owner_id gives it to another user (than the caller, or than its owner)' },
] as const;

/** What handing rules over in a batch update needs besides rules:write (checked before any item). */
export const HAND_OVER = [{ scope: 'users:write', when: 'changes name an owner_id' }] as const;

/**
 * The owner a list is narrowed to: the one asked for; for a tenant their own, and no one's (0, no user's id) when
 * they ask for another's.
 */
export function ownerFilter(caller: Principal, asked: number | undefined): number | null {
  if (caller.role !== 'tenant') return asked ?? null;
  return asked === undefined || asked === caller.userId ? caller.userId : 0;
}

/**
 * Refuses (403, audited as denied) a batch that would give rules to other users than the caller, or hand rules over
 * (`owners` from a batch update's changes: any), unless the caller holds users:write: the whole batch, before it runs.
 */
export function requireToGive(caller: Principal, owners: readonly (number | null)[], anyOwner = false): void {
  const given = owners.find((owner) => owner !== null && (anyOwner || owner !== caller.userId));
  if (given !== undefined && !grants(caller.scopes, 'users:write'))
    throw missingScope('users:write', `owner_id gives rules to user ${given}`);
}

export const timestamp = { type: 'string', format: 'date-time' } as const;
export const nullableTimestamp = { type: ['string', 'null'], format: 'date-time' } as const;

/** A list page of `item`: `{items, next_cursor}`, and `total` when asked for (`?count=true`). */
export function pageSchema(item: Schema<unknown>): Schema<never> {
  return describe({
    ...(typeof item.json.title === 'string' ? { title: `${item.json.title}Page` } : {}),
    type: 'object',
    required: ['items', 'next_cursor'],
    properties: {
      items: { type: 'array', items: item.json },
      next_cursor: { type: ['string', 'null'] },
      total: { type: 'integer', description: 'How many items match in all: with ?count=true only.' },
    },
    additionalProperties: false,
  });
}

/** A response-only object schema from plain JSON Schema properties; every property is required. */
export function record(name: string, properties: Record<string, JsonSchema>, description?: string): Schema<never> {
  return describe({
    title: name,
    type: 'object',
    required: Object.keys(properties),
    properties,
    additionalProperties: false,
    ...(description ? { description } : {}),
  });
}

/** The `sort` parameter of a list whose sort keys are `keys`: a key, or -key for descending. */
export function sortParam(keys: readonly string[]) {
  return textParam({
    max: 32,
    values: [...keys, ...keys.map((key) => `-${key}`)],
    description:
      'Order by this key, ascending (-key: descending), ties by id; default id. The next_cursor of a sorted page ' +
      'belongs to its sort.',
  });
}

/**
 * A sorted list's order and where its page starts (null when the list is in its default order, by id: then `paging`
 * alone says where). Throws `invalid_query` for a cursor of another sort.
 */
function sortedPaging(query: { cursor?: string; sort?: string }): SortedPage | undefined {
  if (query.sort === undefined || query.sort === 'id') return undefined;
  return {
    sort: sortOf(query.sort),
    position: query.cursor === undefined ? null : decodeSortedCursor(query.cursor, query.sort),
  };
}

/** The paging window a list query asks for, and whether it wants every match counted. */
export function paging(query: { limit?: number; cursor?: string; count?: boolean; sort?: string }): {
  limit: number;
  after: number;
  count: boolean;
  sorted?: SortedPage;
} {
  const sorted = sortedPaging(query);
  return {
    limit: query.limit ?? DEFAULT_LIMIT,
    after: query.cursor === undefined || sorted ? 0 : decodeCursor(query.cursor),
    count: query.count ?? false,
    ...(sorted ? { sorted } : {}),
  };
}

/** The request's part of a `WriteJob`, for a handler that hands its write to another connection (a worker's). */
export function writeJobOf(ctx: Ctx<unknown, unknown>, dryRun: boolean): WriteJob {
  return {
    requester: { actor: ctx.actor, action: ctx.action, caller: ctx.caller, idempotency: ctx.idempotency },
    dryRun,
    timestamp: ctx.app.timestamp(),
    license: ctx.app.licenseView(),
    targets: ctx.app.targetPolicy(),
    channels: ctx.app.channelPolicy(),
  };
}

/** The name of an alert rule or channel. */
export const ALERTING_NAME = {
  min: 1,
  max: 64,
  pattern: /^[A-Za-z0-9][A-Za-z0-9 ._-]*$/,
  patternHint: 'must start with a letter or digit and contain only letters, digits, spaces and . _ -',
};

/** The query of a list in id order with no filter. */
export const pagingQuery = { limit: listQuery.limit, cursor: listQuery.cursor, count: listQuery.count };

/** A page in id order of `rows` (fetched one past the limit), with the count when asked. */
export function idPage<T extends { id: number }>(rows: T[], limit: number, total: (() => number) | false) {
  return { ...pageOf(rows, limit), ...(total ? { total: total() } : {}) };
}
