// The signed-in user's own account: who they are, their password (changed with the current one), their second factor
// (a TOTP secret enrolled with a code of it, its recovery codes shown once; off with the password), and their other
// sessions (where and how each signed in; one ended, or all but this one, for a lost laptop or a shared screen).

import { api, get, type Schema } from '../api.ts';
import { button, field, form, h, input } from '../dom.ts';
import type { PageCtx } from '../main.ts';
import { addPasskey } from '../passkeys.ts';
import { planSummary } from './tenant.ts';

export async function accountPage(ctx: PageCtx): Promise<void> {
  const { user } = ctx.me;
  const current = input('current_password', { type: 'password', autocomplete: 'current-password', required: true });
  const next = input('new_password', { type: 'password', autocomplete: 'new-password', required: true });
  const again = input('again', { type: 'password', autocomplete: 'new-password', required: true });
  const password = form(
    { 'aria-label': 'Change your password' },
    [
      h('h2', {}, 'Change your password'),
      field('Current password', current),
      field('New password', next, 'At least 10 characters'),
      field('New password again', again),
      h('button', { type: 'submit' }, 'Change password'),
    ],
    async (el) => {
      if (next.value !== again.value) throw new Error('The new password and its repetition differ.');
      const { data } = await api<{ sessions_ended: number }>('POST', '/api/auth/password', {
        body: { current_password: current.value, new_password: next.value },
      });
      el.reset();
      const ended = data.sessions_ended;
      ctx.say(`Password changed${ended > 0 ? `; ${ended} other ${ended === 1 ? 'session' : 'sessions'} ended` : ''}`);
    },
  );
  // Read again after each act and whenever the event stream (re)opens: what a refresh redraws is what it read (the
  // sessions, the passkeys, the second factor's state when it changed), never a field being typed in or a step under
  // way (a set-up, recovery codes shown once), which would be lost.
  const factor = secondFactor(ctx);
  const passkeys = passkeysOf(ctx);
  const sessions = h('section', { 'aria-label': 'Your sessions' });
  ctx.main.replaceChildren(
    h('p', {}, `Signed in as ${user.username}, with ${user.scopes.join(' ') || 'no scopes'}.`),
    user.role === 'tenant' ? planSummary(ctx.me) : '',
    password,
    factor.section,
    passkeys.section,
    sessions,
  );
  await ctx.live(async () => {
    const [{ items }, me, methods] = await Promise.all([
      get<Schema<'LoginSessions'>>('/api/auth/sessions'),
      get<Schema<'WhoAmI'>>('/api/auth/me'),
      get<Schema<'SignInMethods'>>('/api/auth/methods'),
    ]);
    const keys = methods.passkeys ? (await get<Schema<'Passkeys'>>('/api/auth/passkeys')).items : null;
    factor.show(me.second_factor);
    passkeys.show(keys);
    sessions.replaceChildren(...sessionsOf(ctx, items));
  }, []);
}

/** The user's passkeys (where the master offers them): one of this device added (named), each removed. */
function passkeysOf(ctx: PageCtx): { section: HTMLElement; show(keys: Schema<'Passkeys'>['items'] | null): void } {
  const name = input('passkey_name', { required: true, maxlength: 64, value: 'this device' });
  const add = form(
    { 'aria-label': 'Add a passkey' },
    [field('Name', name), h('button', { type: 'submit' }, 'Add a passkey')],
    async () => {
      const added = await addPasskey(name.value.trim());
      ctx.say(`Passkey ${added.name} added: sign in with it instead of a password`);
      await ctx.reload();
    },
  );
  const list = h('div');
  const section = h('section', { 'aria-label': 'Passkeys', hidden: true }, h('h2', {}, 'Passkeys'), list, add);
  const show = (keys: Schema<'Passkeys'>['items'] | null) => {
    section.hidden = keys === null;
    list.replaceChildren(
      !keys || keys.length === 0
        ? h('p', {}, 'None yet.')
        : h(
            'ul',
            {},
            ...keys.map((key) =>
              h(
                'li',
                {},
                `${key.name} (added ${when(key.created_at)}` +
                  `${key.last_used_at ? `, last used ${when(key.last_used_at)}` : ''}) `,
                button('Remove', () =>
                  ctx.act(
                    `Passkey ${key.name} removed`,
                    () => api('DELETE', `/api/auth/passkeys/${key.id}`),
                    `Remove ${key.name}?`,
                  ),
                ),
              ),
            ),
          ),
    );
  };
  return { section, show };
}

/** Where the user is signed in, each session ended on its own, or all but this one. */
function sessionsOf(ctx: PageCtx, open: Schema<'LoginSessions'>['items']): HTMLElement[] {
  return [
    h('h2', {}, 'Your sessions'),
    h(
      'div',
      { class: 'scroll' },
      h(
        'table',
        {},
        h('caption', {}, 'Where you are signed in'),
        h(
          'tr',
          {},
          ['Signed in', 'Last used', 'From', 'With', 'How', ''].map((heading) => h('th', { scope: 'col' }, heading)),
        ),
        open.map((one) =>
          h(
            'tr',
            {},
            h('td', {}, when(one.created_at)),
            h('td', {}, one.last_used_at ? when(one.last_used_at) : '—'),
            h('td', {}, one.ip ?? '—'),
            h('td', {}, one.user_agent ?? '—'),
            h('td', {}, one.signed_in_with ?? '—'),
            h(
              'td',
              { class: 'actions' },
              one.current
                ? 'this one'
                : button('End', () => ctx.act('Session ended', () => api('DELETE', `/api/auth/sessions/${one.id}`))),
            ),
          ),
        ),
      ),
    ),
    h('p', {}, 'Signed in elsewhere and should not be? End every session of yours but this one.'),
    button('Sign out everywhere else', () =>
      ctx.act('Signed out everywhere else', () => api('POST', '/api/auth/logout-others')),
    ),
  ];
}

/**
 * The second factor: set up (the secret, then a code of it), its recovery codes shown once, or turned off. `show`
 * draws the state read when it changed, but not over a set-up under way or recovery codes not yet put away.
 */
function secondFactor(ctx: PageCtx): { section: HTMLElement; show(state: Schema<'WhoAmI'>['second_factor']): void } {
  const section = h('section', { 'aria-label': 'Second factor' });
  let drawn = '';
  let stepUnderWay = false;
  const password = input('password', { type: 'password', autocomplete: 'current-password', required: true });
  const off = form(
    { 'aria-label': 'Turn the second factor off' },
    [field('Password', password), h('button', { type: 'submit', class: 'danger' }, 'Turn off')],
    async (el) => {
      await api('POST', '/api/auth/totp/disable', { body: { password: password.value } });
      el.reset();
      ctx.say('Second factor off');
      await ctx.reload();
    },
  );
  const show = (state: Schema<'WhoAmI'>['second_factor']) => {
    const key = JSON.stringify(state);
    if (stepUnderWay || key === drawn) return;
    drawn = key;
    if (state.totp === 'on') {
      const left = h('p', {}, `On: signing in asks for a code. ${state.recovery_codes_left} recovery codes left.`);
      return section.replaceChildren(h('h2', {}, 'Second factor'), left, off);
    }
    section.replaceChildren(
      h('h2', {}, 'Second factor'),
      h(
        'p',
        {},
        'Off: signing in needs your password alone. A code from an authenticator app makes a stolen password not ' +
          'enough.',
      ),
      button('Set up an authenticator app', () => {
        stepUnderWay = true;
        setUp().catch((error: Error) => {
          stepUnderWay = false;
          ctx.say(error.message, 'error');
        });
      }),
    );
  };
  return { section, show };

  async function setUp(): Promise<void> {
    const { data } = await api<{ secret: string; otpauth_uri: string }>('POST', '/api/auth/totp');
    const code = input('code', { autocomplete: 'one-time-code', inputmode: 'numeric', required: true });
    section.replaceChildren(
      h('h2', {}, 'Second factor'),
      h('p', {}, 'Add this key to your authenticator app (or open the link on the phone that has it):'),
      h('p', {}, h('code', { 'aria-label': 'Secret key' }, data.secret)),
      h('p', {}, h('a', { href: data.otpauth_uri }, 'Open in an authenticator app')),
      form(
        { 'aria-label': 'Confirm the second factor' },
        [field('Code', code, 'The 6 digits the app shows now'), h('button', { type: 'submit' }, 'Turn on')],
        async () => {
          const confirmed = await api<{ recovery_codes: string[] }>('POST', '/api/auth/totp/confirm', {
            body: { code: code.value.trim() },
          });
          section.replaceChildren(
            h('h2', {}, 'Second factor'),
            h(
              'p',
              {},
              'On. Keep these recovery codes somewhere safe: each signs you in once without the app, and they are ' +
                'shown only now.',
            ),
            h(
              'ul',
              { 'aria-label': 'Recovery codes' },
              confirmed.data.recovery_codes.map((one) => h('li', {}, h('code', {}, one))),
            ),
            button('I have kept them', () => {
              stepUnderWay = false;
              void ctx.reload();
            }),
          );
          ctx.say('Second factor on');
        },
      ),
    );
    code.focus();
  }
}

function when(at: string): string {
  return new Date(at).toLocaleString();
}
