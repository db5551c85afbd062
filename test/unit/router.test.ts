import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Router } from '../../internal/http/router.ts';

function router(): Router<string> {
  const r = new Router<string>();
  r.add('GET', '/api/nodes', 'list');
  r.add('POST', '/api/nodes', 'create');
  r.add('GET', '/api/nodes/{id}', 'get');
  r.add('PUT', '/api/nodes/{id}', 'put');
  r.add('POST', '/api/nodes/batch-delete', 'batch');
  r.add('POST', '/api/nodes/{id}/install-ssh', 'install');
  return r;
}

test('lookup picks the most specific route and extracts parameters', () => {
  const cases = [
    { method: 'GET', path: '/api/nodes', want: { route: 'list', params: {} } },
    { method: 'POST', path: '/api/nodes', want: { route: 'create', params: {} } },
    { method: 'GET', path: '/api/nodes/7', want: { route: 'get', params: { id: '7' } } },
    { method: 'HEAD', path: '/api/nodes/7', want: { route: 'get', params: { id: '7' } } },
    { method: 'POST', path: '/api/nodes/batch-delete', want: { route: 'batch', params: {} } },
    { method: 'POST', path: '/api/nodes/3/install-ssh', want: { route: 'install', params: { id: '3' } } },
    { method: 'GET', path: '/api/nodes/a%20b', want: { route: 'get', params: { id: 'a b' } } },
  ];
  const r = router();
  for (const { method, path, want } of cases) {
    assert.deepEqual(r.lookup(method, path), { found: want }, `${method} ${path}`);
  }
});

test('a known path with a wrong method lists the allowed methods; an unknown path is null', () => {
  const r = router();
  assert.deepEqual(r.lookup('DELETE', '/api/nodes'), { allowed: ['GET', 'HEAD', 'POST'] });
  // The most specific pattern decides: a POST-only path is never taken for /api/nodes/{id}.
  for (const method of ['GET', 'PUT', 'DELETE'])
    assert.deepEqual(r.lookup(method, '/api/nodes/batch-delete'), { allowed: ['POST'] }, method);
  assert.deepEqual(r.lookup('DELETE', '/api/nodes/7'), { allowed: ['GET', 'HEAD', 'PUT'] });
  for (const path of ['/api', '/api/nodes/', '/api/nodes/1/2', '/api/rules', '/api/nodes/%E0%A4%A']) {
    assert.equal(r.lookup('GET', path), null, path);
  }
});

test('conflicting or malformed patterns fail when the table is built', () => {
  const cases: [string, string][] = [
    ['GET', '/api/nodes'],
    ['GET', '/api/nodes/{node_id}'],
    ['GET', '/api/{a}/{a}'],
    ['GET', 'api/x'],
    ['GET', '/api/x{id}'],
  ];
  for (const [method, pattern] of cases) {
    assert.throws(() => router().add(method, pattern, 'dup'), Error, pattern);
  }
});
