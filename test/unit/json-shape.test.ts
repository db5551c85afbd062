// The look at JSON text before it is parsed: depth and the arrays and objects opened, counted outside strings only.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { shapeProblem, withinDepth } from '../../internal/schema/json.ts';

test('a text nested past the depth, or opening past the count, is named; brackets in strings do not count', () => {
  const cases: [string, number, number, ReturnType<typeof shapeProblem>][] = [
    ['[{},{}]', 2, 3, null],
    ['[{},{}]', 2, 2, 'too_many'],
    ['[[[]]]', 2, 10, 'too_deep'],
    ['[[[]]]', 3, 10, null],
    ['{"a":"[[[[{{{{"}', 1, 1, null],
    ['{"a":"\\"[[[["}', 1, 1, null],
    ['"}}}}[["', 0, 0, null],
  ];
  for (const [text, depth, opened, problem] of cases)
    assert.equal(shapeProblem(text, depth, opened), problem, `${text} within depth ${depth}, ${opened} opened`);
  assert.equal(withinDepth('[[[]]]', 3), true);
  assert.equal(withinDepth('[[[]]]', 2), false);
});
