import assert from 'node:assert/strict';
import { test } from 'node:test';
import { eventFrame, HEARTBEAT, retryFrame } from '../../internal/http/sse.ts';

test('an event frame carries its id (a resume point) when it has one, its type and one data line', () => {
  assert.equal(eventFrame('rule.created', '{"id":7}', 41), 'id: 41\nevent: rule.created\ndata: {"id":7}\n\n');
  assert.equal(eventFrame('traffic', '{}'), 'event: traffic\ndata: {}\n\n');
});

test('a heartbeat is a comment, and the retry frame tells clients when to come back', () => {
  assert.ok(HEARTBEAT.startsWith(':') && HEARTBEAT.endsWith('\n\n'));
  assert.equal(retryFrame(2000), 'retry: 2000\n\n');
});
