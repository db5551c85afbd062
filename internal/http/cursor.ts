// Opaque list cursors: the caller sees a token, the store sees the last key it returned.

import { DomainError } from '../errors/errors.ts';

export function encodeCursor(lastId: number): string {
  return Buffer.from(`id:${lastId}`).toString('base64url');
}

/** Returns the id encoded in `cursor`. Throws `invalid_query` for anything we did not issue. */
export function decodeCursor(cursor: string): number {
  const match = /^id:([1-9][0-9]{0,15})$/.exec(Buffer.from(cursor, 'base64url').toString('utf8'));
  if (!match)
    throw new DomainError('invalid_query', 'cursor is not one this server issued', {
      errors: [{ pointer: '?cursor', detail: 'is not valid' }],
    });
  return Number(match[1]);
}

export interface Page<T> {
  items: T[];
  next_cursor: string | null;
}

/** Builds a page from `limit + 1` fetched rows: the extra row only says another page exists. */
export function pageOf<T extends { id: number }>(rows: T[], limit: number): Page<T> {
  const items = rows.slice(0, limit);
  const last = items[items.length - 1];
  return { items, next_cursor: rows.length > limit && last ? encodeCursor(last.id) : null };
}

/**
 * The `{items, next_cursor}` body of a page whose items are JSON text already (with the last id when another page
 * follows).
 */
export function pageJson(page: { items: string; lastId: number | null; total?: number }): string {
  const next = page.lastId === null ? 'null' : JSON.stringify(encodeCursor(page.lastId));
  const total = page.total === undefined ? '' : `,"total":${page.total}`;
  return `{"items":${page.items},"next_cursor":${next}${total}}`;
}
