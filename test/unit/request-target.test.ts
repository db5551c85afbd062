// The request target as the router sees it: split where it stands for a path of visible ASCII, which must give what
// the WHATWG URL parser gives (path and query alike), and through that parser otherwise.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { requestTarget } from '../../internal/api/request.ts';
import { DomainError } from '../../internal/errors/errors.ts';

test('a target split where it stands reads as the URL parser reads it', () => {
  for (const target of [
    '/',
    '/api/nodes/1',
    '/api/nodes/1/',
    '/api/rules?limit=100&cursor=aWQ6NQ',
    '/api/rules?q=a+b&q=%20c&tag=%E2%9C%93',
    '/api/rules?',
    '/api/rules?x',
    '/api/rules?a=1#fragment?b=2',
    '/api/nodes/1#x',
    '/api/nodes/%31',
    '/api/nodes/%zz',
    '/api/nodes/a;b,c=d',
    "/api/nodes/!$&'()*+:@~",
    '/api/rules?q=%&r=%zz',
    '/api/users//1',
    '/api/nodes/1?a=1&&b=&=c',
    'http://elsewhere.example/api/nodes/2?limit=1',
    '/api/nodes/ünicode?x=ü',
    '/api/nodes/"quoted"<>{}`',
    '/api/rules?q=ü"<>`{}&r=Ã¼',
  ]) {
    const url = new URL(target, 'http://localhost');
    const got = requestTarget(target);
    assert.equal(got.pathname, url.pathname, target);
    assert.deepEqual([...got.searchParams], [...url.searchParams], target);
  }
});

test('what a URL parser would resolve rather than route is refused, whichever way the target is read', () => {
  for (const target of [
    '/api/nodes/../users',
    '/api/./nodes',
    '/api/nodes/%2e%2e/users',
    '//evil/api',
    '/a%2fb',
    '/a\\b',
  ]) {
    assert.throws(
      () => requestTarget(target),
      (error: unknown) => error instanceof DomainError && error.code === 'bad_request',
      target,
    );
  }
});
