import assert from 'node:assert/strict';
import { test } from 'node:test';
import { idOf } from '../../internal/schema/ids.ts';

// What spells an id, wherever one is read (a path, a cursor, an agent token, a kernel table's name).
const spellings: [string, number | null][] = [
  ['1', 1],
  ['42', 42],
  ['9007199254740991', Number.MAX_SAFE_INTEGER],
  ['9007199254740992', null],
  ['12345678901234567', null],
  ['0', null],
  ['01', null],
  ['-1', null],
  ['1e3', null],
  [' 1', null],
  ['1.0', null],
  ['', null],
];

for (const [text, id] of spellings)
  test(`${JSON.stringify(text)} is ${id === null ? 'no id' : `the id ${id}`}`, () => assert.equal(idOf(text), id));
