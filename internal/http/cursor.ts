// Opaque list cursors: the caller sees a token, the store sees the last key it returned.

import { DomainError } from '../errors/errors.ts';
import { ID_DIGITS } from '../schema/ids.ts';

const CURSOR = new RegExp(`^id:(${ID_DIGITS})$`);

export function encodeCursor(lastId: number): string {
  return Buffer.from(`id:${lastId}`).toString('base64url');
}

/** Returns the id encoded in `cursor`. Throws `invalid_query` for anything we did not issue. */
export function decodeCursor(cursor: string): number {
  const match = CURSOR.exec(Buffer.from(cursor, 'base64url').toString('utf8'));
  if (!match)
    throw new DomainError('invalid_query', 'cursor is not one this server issued', {
      errors: [{ pointer: '?cursor', detail: 'is not valid' }],
    });
  return Number(match[1]);
}

/** A list's sort: a key it names, ascending or (`-key`) descending. */
export interface Sort {
  name: string;
  descending: boolean;
}

export function sortOf(param: string): Sort {
  return param.startsWith('-') ? { name: param.slice(1), descending: true } : { name: param, descending: false };
}

/** A cursor in a sorted list: the sort it belongs to, and its last row's key and id. */
export function encodeSortedCursor(sort: string, key: unknown, id: number): string {
  return Buffer.from(JSON.stringify({ s: sort, k: key, i: id })).toString('base64url');
}

/** The position `cursor` names in a list sorted by `sort`. Throws `invalid_query` for one issued for another. */
export function decodeSortedCursor(cursor: string, sort: string): { key: string | number; id: number } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch {
    parsed = null;
  }
  const { s, k, i } = (parsed ?? {}) as { s?: unknown; k?: unknown; i?: unknown };
  const keyOk = typeof k === 'string' ? k.length <= 1024 : typeof k === 'number' && Number.isFinite(k);
  if (s !== sort || !keyOk || typeof i !== 'number' || !Number.isSafeInteger(i) || i < 1)
    throw new DomainError('invalid_query', 'cursor is not one this server issued for this sort', {
      errors: [{ pointer: '?cursor', detail: `is not valid for sort=${sort}` }],
    });
  return { key: k as string | number, id: i };
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
export function pageJson(
  page: { items: string; lastId: number | null; lastKey?: unknown; total?: number },
  sort?: string,
): string {
  const cursor = (id: number) => (sort === undefined ? encodeCursor(id) : encodeSortedCursor(sort, page.lastKey, id));
  const next = page.lastId === null ? 'null' : JSON.stringify(cursor(page.lastId));
  const total = page.total === undefined ? '' : `,"total":${page.total}`;
  return `{"items":${page.items},"next_cursor":${next}${total}}`;
}
