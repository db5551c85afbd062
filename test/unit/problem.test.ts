import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DomainError, validationFailed } from '../../internal/errors/errors.ts';
import { problemOf } from '../../internal/http/problem.ts';

test('a problem document names its code, title, status and request, and carries the facts as members', () => {
  const error = new DomainError('conflict', 'node 3 still has 2 rule(s)', { data: { rule_ids: [4, 5] } });
  const { status, body } = problemOf(error, 'req-1');
  assert.equal(status, 409);
  assert.deepEqual(
    { ...body, title: typeof body.title },
    {
      type: 'urn:portplane:problem:conflict',
      title: 'string',
      status: 409,
      detail: 'node 3 still has 2 rule(s)',
      code: 'conflict',
      request_id: 'req-1',
      rule_ids: [4, 5],
    },
  );
});

test('a missing scope is 403 with the scope named in the body and in WWW-Authenticate', () => {
  const { status, headers, body } = problemOf(
    new DomainError('insufficient_scope', 'needs rules:write', { requiredScope: 'rules:write' }),
    null,
  );
  assert.equal(status, 403);
  assert.equal(body.required_scope, 'rules:write');
  assert.equal(headers['WWW-Authenticate'], 'Bearer error="insufficient_scope", scope="rules:write"');
});

test('an unknown token and no token are told apart in WWW-Authenticate', () => {
  const unknown = problemOf(new DomainError('unauthorized', 'revoked', { invalidToken: true }), null);
  const none = problemOf(new DomainError('unauthorized', 'send a token'), null);
  assert.equal(unknown.headers['WWW-Authenticate'], 'Bearer realm="portplane", error="invalid_token"');
  assert.equal(none.headers['WWW-Authenticate'], 'Bearer realm="portplane"');
});

test('Retry-After is whole seconds, at least one', () => {
  const after = (seconds: number) =>
    problemOf(new DomainError('rate_limited', 'slow down', { retryAfterSeconds: seconds }), null).headers[
      'Retry-After'
    ];
  assert.deepEqual([after(0), after(0.2), after(1.5), after(30)], ['1', '1', '2', '30']);
});

test('a taken port names the rule or the tunnel that holds it', () => {
  const held = (ruleId: number | null, tunnelId: number | null) =>
    problemOf(
      new DomainError('conflict', 'taken', {
        conflict: { kind: 'port', nodeId: 1, protocol: 'tcp', port: 80, ruleId, tunnelId },
      }),
      null,
    ).body;
  assert.equal(held(7, null).conflicting_rule_id, 7);
  assert.equal(held(null, 2).conflicting_tunnel_id, 2);
});

test('field errors, a stale version and the methods allowed are each in their own place', () => {
  const invalid = problemOf(validationFailed([{ pointer: '#/name', detail: 'is required' }]), null);
  assert.equal(invalid.status, 422);
  assert.deepEqual(invalid.body.errors, [{ pointer: '#/name', detail: 'is required' }]);
  const stale = problemOf(new DomainError('precondition_failed', 'changed', { etag: '"4"' }), null);
  assert.equal(stale.headers.ETag, '"4"');
  const method = problemOf(new DomainError('method_not_allowed', 'no', { allow: ['GET', 'PUT'] }), null);
  assert.equal(method.headers.Allow, 'GET, PUT');
});
