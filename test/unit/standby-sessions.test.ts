import assert from 'node:assert/strict';
import test from 'node:test';
import {
  MAX_STANDBY_SESSIONS,
  MAX_STANDBY_SESSIONS_PER_USER,
  StandbySessions,
} from '../../internal/auth/standby-sessions.ts';

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

test("one user signing in again and again ends their own oldest session on a standby, never another's", () => {
  const sessions = new StandbySessions();
  const other = sessions.open(1, 'hash', 1e15);
  const mine = Array.from({ length: MAX_STANDBY_SESSIONS * 2 }, () => sessions.open(2, 'hash', 1e15));
  assert.ok(sessions.find(other.secret), 'the other user stays signed in');
  assert.equal(sessions.find(mine.at(-MAX_STANDBY_SESSIONS_PER_USER - 1)!.secret), undefined);
  assert.ok(mine.slice(-MAX_STANDBY_SESSIONS_PER_USER).every(({ secret }) => sessions.find(secret)));
});
