// The write path's bookkeeping, without a database: what an update audits, how an import names the ids it made, how
// an item's error is placed under its pointer.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DomainError, validationFailed } from '../../internal/errors/errors.ts';
import { diff, fieldErrorsUnder, spansOf } from '../../internal/service/write.ts';

test('an update is audited with the fields that changed, before and after, and no other', () => {
  const before = { name: 'web', port: 80, tags: ['a'], targets: ['10.0.0.1:80'] };
  const after = { name: 'web', port: 8080, tags: ['a', 'b'], targets: ['10.0.0.1:80'] };
  assert.deepEqual(diff(before, after, ['name', 'port', 'tags', 'targets']), {
    before: { port: 80, tags: ['a'] },
    after: { port: 8080, tags: ['a', 'b'] },
  });
  assert.deepEqual(diff(before, before, ['name', 'port']), { before: {}, after: {} });
});

test('ids made in order are named as spans of consecutive ids', () => {
  assert.deepEqual(spansOf([]), []);
  assert.deepEqual(spansOf([5]), [[5, 5]]);
  assert.deepEqual(spansOf([1, 2, 3, 7, 8, 10]), [
    [1, 3],
    [7, 8],
    [10, 10],
  ]);
});

test("an item's field errors are re-rooted under its pointer", () => {
  const error = validationFailed([
    { pointer: '#/listen_port', detail: 'must be at most 65535' },
    { pointer: '#/targets/0', detail: 'is not host:port' },
  ]);
  assert.deepEqual(fieldErrorsUnder('#/rules/3', error), [
    { pointer: '#/rules/3/listen_port', detail: 'must be at most 65535' },
    { pointer: '#/rules/3/targets/0', detail: 'is not host:port' },
  ]);
});

test('a conflict is placed on the field that collided: the port, the name, or the item as a whole', () => {
  const port = new DomainError('conflict', 'port 80/tcp on node 1 is taken by rule 2', {
    conflict: { kind: 'port', nodeId: 1, protocol: 'tcp', port: 80, ruleId: 2, tunnelId: null },
  });
  const name = new DomainError('conflict', 'the name is taken', { conflict: { kind: 'name', id: 4 } });
  const other = new DomainError('license_limit', 'the free license allows 5 nodes');
  assert.deepEqual(fieldErrorsUnder('#/rules/0', port), [{ pointer: '#/rules/0/listen_port', detail: port.detail }]);
  assert.deepEqual(fieldErrorsUnder('#/nodes/1', name), [{ pointer: '#/nodes/1/name', detail: name.detail }]);
  assert.deepEqual(fieldErrorsUnder('#/nodes/2', other), [{ pointer: '#/nodes/2', detail: other.detail }]);
});
