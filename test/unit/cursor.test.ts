import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DomainError } from '../../internal/errors/errors.ts';
import { decodeCursor, decodeSortedCursor, encodeCursor, encodeSortedCursor } from '../../internal/http/cursor.ts';

const invalidQuery = (error: unknown) => error instanceof DomainError && error.code === 'invalid_query';

test('a cursor gives back the id it was made of', () => {
  assert.equal(decodeCursor(encodeCursor(1)), 1);
  assert.equal(decodeCursor(encodeCursor(Number.MAX_SAFE_INTEGER)), Number.MAX_SAFE_INTEGER);
});

test('a cursor this server did not issue is invalid_query, whatever it holds', () => {
  for (const forged of [
    '',
    'abc',
    Buffer.from('id:0').toString('base64url'),
    Buffer.from('id:1 ').toString('base64url'),
  ])
    assert.throws(() => decodeCursor(forged), invalidQuery, forged);
});

test('a sorted cursor names its sort, and is refused for another', () => {
  const cursor = encodeSortedCursor('name', 'edge-7', 12);
  assert.deepEqual(decodeSortedCursor(cursor, 'name'), { key: 'edge-7', id: 12 });
  assert.throws(() => decodeSortedCursor(cursor, '-name'), invalidQuery);
  assert.throws(() => decodeSortedCursor(encodeSortedCursor('name', { x: 1 }, 12), 'name'), invalidQuery);
  assert.throws(() => decodeSortedCursor(encodeSortedCursor('name', 'a', 0), 'name'), invalidQuery);
});
