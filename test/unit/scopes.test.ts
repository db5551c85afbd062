import assert from 'node:assert/strict';
import { test } from 'node:test';
import { grants, intersect, isScope } from '../../internal/auth/scopes.ts';

test('grants: exact scope, write implies read of the same resource, * grants all', () => {
  const cases = [
    { held: ['nodes:read'], wanted: 'nodes:read', want: true },
    { held: ['nodes:write'], wanted: 'nodes:read', want: true },
    { held: ['nodes:read'], wanted: 'nodes:write', want: false },
    { held: ['rules:write'], wanted: 'nodes:read', want: false },
    { held: ['*'], wanted: 'users:write', want: true },
    { held: [], wanted: 'audit:read', want: false },
    { held: ['audit:read'], wanted: 'license:read', want: false },
  ] as const;
  for (const { held, wanted, want } of cases) assert.equal(grants(held, wanted), want, `${held} -> ${wanted}`);
});

test('intersect keeps only the scopes the holder still grants', () => {
  assert.deepEqual(intersect(['nodes:write'], ['nodes:read', 'nodes:write', 'rules:read']), [
    'nodes:read',
    'nodes:write',
  ]);
  assert.deepEqual(intersect(['*'], ['*']), ['*']);
  assert.deepEqual(intersect(['nodes:read'], ['*']), []);
});

test('isScope accepts the vocabulary and nothing else', () => {
  for (const s of ['nodes:read', 'tokens:write', 'dashboard:read', '*']) assert.ok(isScope(s), s);
  for (const s of ['nodes', 'nodes:delete', 'audit:write', '', '**']) assert.ok(!isScope(s), s);
});
