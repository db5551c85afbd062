// Schemas and helpers shared by several resources.

import { scopes } from '../auth/scopes.ts';
import { decodeCursor } from '../http/cursor.ts';
import { array, describe, oneOf, type JsonSchema, type Schema } from '../schema/schema.ts';

export const DEFAULT_LIMIT = 50;

export const scopeList = array(oneOf(scopes), { max: scopes.length, unique: true, description: 'Scopes of the form resource:action, or * for all.' });

export const timestamp = { type: 'string', format: 'date-time' } as const;
export const nullableTimestamp = { type: ['string', 'null'], format: 'date-time' } as const;

/** A list page of `item`: `{items, next_cursor}`. */
export function pageSchema(item: Schema<unknown>): Schema<never> {
  return describe({
    type: 'object',
    required: ['items', 'next_cursor'],
    properties: { items: { type: 'array', items: item.json }, next_cursor: { type: ['string', 'null'] } },
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

/** The paging window a list query asks for. */
export function paging(query: { limit?: number; cursor?: string }): { limit: number; after: number } {
  return { limit: query.limit ?? DEFAULT_LIMIT, after: query.cursor === undefined ? 0 : decodeCursor(query.cursor) };
}
