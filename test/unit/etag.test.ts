import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DomainError } from '../../internal/errors/errors.ts';
import { checkIfMatch, etagOf } from '../../internal/service/etag.ts';

const refused = (error: unknown) =>
  error instanceof DomainError && error.code === 'precondition_failed' && error.facts.etag === '"3"';

test('a write without If-Match, or with *, goes ahead whatever the version', () => {
  assert.doesNotThrow(() => checkIfMatch(undefined, 3));
  assert.doesNotThrow(() => checkIfMatch('*', 3));
});

test('If-Match passes when one of its tags is the current version', () => {
  assert.doesNotThrow(() => checkIfMatch(etagOf(3), 3));
  assert.doesNotThrow(() => checkIfMatch('"1", "3"', 3));
});

test('a stale version is refused with the current ETag', () => {
  assert.throws(() => checkIfMatch('"2"', 3), refused);
});

test('a weak tag never matches: the comparison is strong', () => {
  assert.throws(() => checkIfMatch('W/"3"', 3), refused);
});
