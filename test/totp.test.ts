// A second factor, TOTP, through the API: enrolled with a code Debian's oathtool computes from the secret the master
// gave (an implementation independent of ours), then asked at every login, each code and recovery code once; turned
// off with the password, or by an operator. Skips, saying why, without oathtool.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { call, holdingWrites, login, mintToken, startMaster, ADMIN_PASSWORD } from './helpers.ts';

function oathtoolMissing(): string | null {
  return spawnSync('oathtool', ['--version'], { stdio: 'ignore' }).error
    ? 'oathtool is not installed (Debian package oathtool)'
    : null;
}

/** The code oathtool gives for base32 `secret`, `offsetSeconds` from now. */
function oathtool(secret: string, offsetSeconds = 0): string {
  const at = new Date(Date.now() + offsetSeconds * 1000).toISOString().replace('T', ' ').slice(0, 19);
  const out = spawnSync('oathtool', ['--totp', '--base32', '--now', `${at} UTC`, secret], { encoding: 'utf8' });
  assert.equal(out.status, 0, out.stderr);
  return out.stdout.trim();
}

test(
  'TOTP: enrolled with a code of oathtool, then asked at each login; a code or recovery code is taken once; off with ' +
    'the password or by an operator',
  async (t) => {
    const missing = oathtoolMissing();
    if (missing) return t.skip(missing);
    const m = await startMaster(t);
    const logIn = (totp?: string) =>
      call(m.url, 'POST', '/api/auth/login', {
        body: { username: 'admin', password: ADMIN_PASSWORD, ...(totp === undefined ? {} : { totp }) },
      });

    // An API token is no session: it cannot turn a second factor on for its owner.
    const script = await mintToken(m, ['nodes:read']);
    assert.equal((await call(m.url, 'POST', '/api/auth/totp', { token: script })).status, 403);

    const begun = await call(m.url, 'POST', '/api/auth/totp', { token: m.admin });
    assert.equal(begun.status, 200, JSON.stringify(begun.body));
    const { secret, otpauth_uri } = begun.body as { secret: string; otpauth_uri: string };
    assert.match(secret, /^[A-Z2-7]{32}$/);
    assert.equal(new URL(otpauth_uri).searchParams.get('secret'), secret);
    // Enrolling changes nothing at login yet.
    assert.equal((await logIn()).status, 200);
    const me = async () => (await call(m.url, 'GET', '/api/auth/me', { token: m.admin })).body.second_factor;
    assert.deepEqual(await me(), { totp: 'enrolling', recovery_codes_left: null });

    const wrong = await call(m.url, 'POST', '/api/auth/totp/confirm', { token: m.admin, body: { code: '000000' } });
    assert.equal(wrong.status, 422);
    assert.equal(wrong.body.errors[0].pointer, '#/code');
    const confirmed = await call(m.url, 'POST', '/api/auth/totp/confirm', {
      token: m.admin,
      body: { code: oathtool(secret) },
    });
    assert.equal(confirmed.status, 200, JSON.stringify(confirmed.body));
    const recovery = confirmed.body.recovery_codes as string[];
    assert.equal(recovery.length, 10);
    assert.deepEqual(await me(), { totp: 'on', recovery_codes_left: 10 });
    assert.equal((await call(m.url, 'POST', '/api/auth/totp', { token: m.admin })).status, 409, 'on already');

    // The password alone: asked for the second factor, not counted as a failure.
    const asked = await logIn();
    assert.equal(asked.status, 401);
    assert.equal(asked.body.second_factor, 'totp');
    assert.equal((await logIn('123456')).status, 401);
    // The code of the next step (a phone's clock a little ahead) is taken; then this step's is earlier: refused.
    const ahead = oathtool(secret, 30);
    const signedIn = await logIn(ahead);
    assert.equal(signedIn.status, 200, JSON.stringify(signedIn.body));
    assert.equal((await logIn(ahead)).status, 401, 'a code is taken once');
    assert.equal((await logIn(oathtool(secret, 90))).status, 401, 'three steps ahead is no code');
    // A recovery code stands in for a code, once, in any case and with or without its dashes.
    const [first] = recovery;
    assert.equal((await logIn(first!.toUpperCase().replaceAll('-', ''))).status, 200);
    assert.equal((await logIn(first)).status, 401, 'a recovery code is taken once');
    assert.deepEqual(await me(), { totp: 'on', recovery_codes_left: 9 });
    const audit = await call(m.url, 'GET', '/api/audit-logs?resource=session&status=failed', { token: m.admin });
    assert.ok(audit.body.items.length >= 3, 'wrong and used codes are audited failures');

    // Off with the password only.
    const session = (await logIn(recovery[1])).body.token as string;
    const refused = await call(m.url, 'POST', '/api/auth/totp/disable', {
      token: session,
      body: { password: 'not the password' },
    });
    assert.equal(refused.status, 422);
    const off = await call(m.url, 'POST', '/api/auth/totp/disable', {
      token: session,
      body: { password: ADMIN_PASSWORD },
    });
    assert.equal(off.status, 204);
    assert.equal((await logIn()).status, 200, 'the password alone again');

    // An operator turns off another user's, as for a lost device; a user who has none is 404.
    const user = await call(m.url, 'POST', '/api/users', {
      token: m.admin,
      body: { username: 'ops', password: 'ops-password-1', role: 'operator', scopes: ['nodes:read'] },
    });
    assert.equal(user.status, 201, JSON.stringify(user.body));
    const theirs = await login(m.url, 'ops', 'ops-password-1');
    const enrol = (await call(m.url, 'POST', '/api/auth/totp', { token: theirs })).body.secret as string;
    await call(m.url, 'POST', '/api/auth/totp/confirm', { token: theirs, body: { code: oathtool(enrol) } });
    const needs = await call(m.url, 'POST', '/api/auth/login', {
      body: { username: 'ops', password: 'ops-password-1' },
    });
    assert.equal(needs.body.second_factor, 'totp');
    assert.equal((await call(m.url, 'DELETE', `/api/users/${user.body.id}/totp`, { token: m.admin })).status, 204);
    assert.equal((await call(m.url, 'DELETE', `/api/users/${user.body.id}/totp`, { token: m.admin })).status, 404);
    assert.equal((await login(m.url, 'ops', 'ops-password-1')).length > 0, true);
    // Guessing the password to turn it off is throttled as logins are: a stolen session gains no faster guesses.
    const guesses = [];
    for (let i = 0; i < 7; i++)
      guesses.push(
        (await call(m.url, 'POST', '/api/auth/totp/disable', { token: theirs, body: { password: `guess-${i}` } }))
          .status,
      );
    assert.deepEqual(guesses.slice(0, 5), [422, 422, 422, 422, 422]);
    assert.equal(guesses.at(-1), 429, JSON.stringify(guesses));
  },
);

test(
  'required of holders of *, a second factor not enrolled yet gives a session good only for enrolling it; once ' +
    'enrolled, the next login asks for a code; a user without * is not held to it',
  async (t) => {
    const missing = oathtoolMissing();
    if (missing) return t.skip(missing);
    const m = await startMaster(t);
    const ops = await call(m.url, 'POST', '/api/users', {
      token: m.admin,
      body: { username: 'reader', password: 'reader-password', role: 'operator', scopes: ['nodes:read'] },
    });
    assert.equal(ops.status, 201, JSON.stringify(ops.body));
    const set = await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { totp_required: 1 } });
    assert.equal(set.status, 200, JSON.stringify(set.body));

    const limited = await call(m.url, 'POST', '/api/auth/login', {
      body: { username: 'admin', password: ADMIN_PASSWORD },
    });
    assert.equal(limited.status, 200, JSON.stringify(limited.body));
    const session = limited.body.token as string;
    assert.deepEqual((await call(m.url, 'GET', '/api/auth/me', { token: session })).body.token.scopes, []);
    assert.equal((await call(m.url, 'GET', '/api/nodes', { token: session })).status, 403, 'good for nothing else');
    const secret = (await call(m.url, 'POST', '/api/auth/totp', { token: session })).body.secret as string;
    const on = await call(m.url, 'POST', '/api/auth/totp/confirm', {
      token: session,
      body: { code: oathtool(secret) },
    });
    assert.equal(on.status, 200, JSON.stringify(on.body));
    const asked = await call(m.url, 'POST', '/api/auth/login', {
      body: { username: 'admin', password: ADMIN_PASSWORD },
    });
    assert.equal(asked.body.second_factor, 'totp');
    const full = await call(m.url, 'POST', '/api/auth/login', {
      body: { username: 'admin', password: ADMIN_PASSWORD, totp: on.body.recovery_codes[0] },
    });
    assert.equal(full.status, 200);
    assert.equal((await call(m.url, 'GET', '/api/nodes', { token: full.body.token })).status, 200);
    // Without *, the setting's 1 does not hold them to it.
    const reader = await login(m.url, 'reader', 'reader-password');
    assert.equal((await call(m.url, 'GET', '/api/nodes', { token: reader })).status, 200);
  },
);

test('a login with a code or a recovery code while an import holds writes waits its turn and signs in', async (t) => {
  const missing = oathtoolMissing();
  if (missing) return t.skip(missing);
  const m = await startMaster(t);
  const secret = (await call(m.url, 'POST', '/api/auth/totp', { token: m.admin })).body.secret as string;
  const on = await call(m.url, 'POST', '/api/auth/totp/confirm', { token: m.admin, body: { code: oathtool(secret) } });
  assert.equal(on.status, 200, JSON.stringify(on.body));
  for (const totp of [oathtool(secret, 30), on.body.recovery_codes[0] as string]) {
    const hold = await holdingWrites(m);
    const answer = call(m.url, 'POST', '/api/auth/login', {
      body: { username: 'admin', password: ADMIN_PASSWORD, totp },
    });
    setTimeout(hold.release, 300);
    const signedIn = await answer;
    await hold.ended;
    assert.equal(signedIn.status, 200, JSON.stringify(signedIn.body));
    const again = await call(m.url, 'POST', '/api/auth/login', {
      body: { username: 'admin', password: ADMIN_PASSWORD, totp },
    });
    assert.equal(again.status, 401, 'taken once, the hold notwithstanding');
  }
});
