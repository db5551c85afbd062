// Login sessions a user can see and end: where and how each signed in, their own from their own session, any user's by
// an operator with users:write; what a tenant cannot reach of anyone else's.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { call, login, mintToken, startMaster, ADMIN_PASSWORD } from './helpers.ts';
import { totpCode } from './totp-codes.ts';

test(
  "a user lists their login sessions (where, what, how each signed in) and ends one; another's is not found; an " +
    "operator lists and ends a user's",
  async (t) => {
    const m = await startMaster(t);
    const signIn = async (agent: string, totp?: string) => {
      const answer = await call(m.url, 'POST', '/api/auth/login', {
        body: { username: 'admin', password: ADMIN_PASSWORD, ...(totp ? { totp } : {}) },
        headers: { 'user-agent': agent },
      });
      assert.equal(answer.status, 200, JSON.stringify(answer.body));
      return answer.body.token as string;
    };
    const laptop = await signIn('laptop-browser/1.0');
    const phone = await signIn('phon\u00e9-browser/2.0');
    const listed = await call(m.url, 'GET', '/api/auth/sessions', { token: laptop });
    assert.equal(listed.status, 200, JSON.stringify(listed.body));
    const [newest, second] = listed.body.items;
    assert.deepEqual(
      [newest.user_agent, newest.signed_in_with, newest.current, second.user_agent, second.current],
      ['phon?-browser/2.0', 'password', false, 'laptop-browser/1.0', true],
    );
    assert.match(newest.ip, /127\.0\.0\.1/);
    assert.equal((await call(m.url, 'DELETE', `/api/auth/sessions/${newest.id}`, { token: laptop })).status, 204);
    assert.equal((await call(m.url, 'GET', '/api/auth/me', { token: phone })).status, 401, 'that session ended');
    assert.equal((await call(m.url, 'DELETE', `/api/auth/sessions/${newest.id}`, { token: laptop })).status, 404);

    // An API token is no session: it sees none.
    const script = await mintToken(m, ['nodes:read']);
    assert.equal((await call(m.url, 'GET', '/api/auth/sessions', { token: script })).status, 403);

    // With a second factor, the session says so.
    const secret = (await call(m.url, 'POST', '/api/auth/totp', { token: laptop })).body.secret as string;
    await call(m.url, 'POST', '/api/auth/totp/confirm', { token: laptop, body: { code: totpCode(secret) } });
    const coded = await signIn('tablet/3.0', totpCode(secret, 30));
    const mine = (await call(m.url, 'GET', '/api/auth/sessions', { token: coded })).body.items[0];
    assert.deepEqual([mine.user_agent, mine.signed_in_with, mine.current], ['tablet/3.0', 'password+totp', true]);

    // Another user's session is not theirs to end; an operator with users:write lists and ends them all.
    const made = await call(m.url, 'POST', '/api/users', {
      token: m.admin,
      body: { username: 'reader', password: 'reader-password', role: 'operator', scopes: ['nodes:read'] },
    });
    const reader = await login(m.url, 'reader', 'reader-password');
    const theirs = (await call(m.url, 'GET', '/api/auth/sessions', { token: reader })).body.items[0].id as number;
    assert.equal((await call(m.url, 'DELETE', `/api/auth/sessions/${theirs}`, { token: laptop })).status, 404);
    assert.equal((await call(m.url, 'GET', '/api/auth/me', { token: reader })).status, 200);
    const seen = await call(m.url, 'GET', `/api/users/${made.body.id}/sessions`, { token: laptop });
    assert.deepEqual(
      seen.body.items.map((session: { id: number }) => session.id),
      [theirs],
    );
    assert.equal((await call(m.url, 'GET', `/api/users/${made.body.id}/sessions`, { token: reader })).status, 403);
    const ended = await call(m.url, 'DELETE', `/api/users/${made.body.id}/sessions`, { token: laptop });
    assert.deepEqual(ended.body, { sessions_ended: 1 });
    assert.equal((await call(m.url, 'GET', '/api/auth/me', { token: reader })).status, 401);
    assert.equal((await call(m.url, 'GET', '/api/users/999999/sessions', { token: laptop })).status, 404);
  },
);
