import assert from 'node:assert/strict';
import test from 'node:test';
import { MAX_STANDBY_SESSIONS, StandbySessions } from '../../internal/auth/standby-sessions.ts';

const BOUNDED = "a standby's sessions: negative ids, found by their secret, at most 1,000, the oldest ending first";

test(BOUNDED, () => {
  const sessions = new StandbySessions();
  const opened = Array.from({ length: MAX_STANDBY_SESSIONS + 1 }, (_, i) => sessions.open(i + 1, 'hash', 1e15));
  assert.equal(sessions.find(opened[0]!.secret), undefined, 'the oldest ended');
  const last = opened.at(-1)!;
  assert.equal(sessions.find(last.secret)?.userId, MAX_STANDBY_SESSIONS + 1);
  assert.ok(opened.every(({ session }) => session.id < 0));
  assert.equal(sessions.find(last.secret.slice(0, -1) + 'x'), undefined);
  sessions.close(last.session.id);
  assert.equal(sessions.find(last.secret), undefined);
  assert.ok(sessions.get(opened[1]!.session.id));
  sessions.clear();
  assert.equal(sessions.get(opened[1]!.session.id), undefined);
});
