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
  // Drawn again after each act (a session ended, the second factor turned off): what changed is read afresh.
  await ctx.live(async () => {
    const [{ items }, me, methods] = await Promise.all([
      get<Schema<'LoginSessions'>>('/api/auth/sessions'),
      get<Schema<'WhoAmI'>>('/api/auth/me'),
      get<Schema<'SignInMethods'>>('/api/auth/methods'),
    ]);
    const keys = methods.passkeys ? (await get<Schema<'Passkeys'>>('/api/auth/passkeys')).items : null;
    ctx.main.replaceChildren(
      h('p', {}, `Signed in as ${user.username}, with ${user.scopes.join(' ') || 'no scopes'}.`),
      user.role === 'tenant' ? planSummary(ctx.me) : '',
      password,
      secondFactor(ctx, me.second_factor),
      keys ? passkeysOf(ctx, keys) : '',
      sessionsOf(ctx, items),
    );
  }, []);
}

/** The user's passkeys: one of this device added (named), each removed. */
function passkeysOf(ctx: PageCtx, keys: Schema<'Passkeys'>['items']): HTMLElement {
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
  return h(
    'section',
    { 'aria-label': 'Passkeys' },
    h('h2', {}, 'Passkeys'),
    keys.length === 0
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
    add,
  );
}

/** Where the user is signed in, each session ended on its own, or all but this one. */
function sessionsOf(ctx: PageCtx, open: Schema<'LoginSessions'>['items']): HTMLElement {
  return h(
    'section',
    { 'aria-label': 'Your sessions' },
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
  );
}

/** The second factor: set up (the secret, then a code of it), its recovery codes shown once, or turned off. */
function secondFactor(ctx: PageCtx, state: Schema<'WhoAmI'>['second_factor']): HTMLElement {
  const section = h('section', { 'aria-label': 'Second factor' }, h('h2', {}, 'Second factor'));
  const { totp, recovery_codes_left } = state;
  if (totp === 'on') {
    const password = input('password', { type: 'password', autocomplete: 'current-password', required: true });
    section.append(
      h('p', {}, `On: signing in asks for a code. ${recovery_codes_left} recovery codes left.`),
      form(
        { 'aria-label': 'Turn the second factor off' },
        [field('Password', password), h('button', { type: 'submit', class: 'danger' }, 'Turn off')],
        async () => {
          await api('POST', '/api/auth/totp/disable', { body: { password: password.value } });
          ctx.say('Second factor off');
          await ctx.reload();
        },
      ),
    );
    return section;
  }
  section.append(
    h(
      'p',
      {},
      'Off: signing in needs your password alone. A code from an authenticator app makes a stolen password not enough.',
    ),
    button('Set up an authenticator app', () => void setUp().catch((error: Error) => ctx.say(error.message, 'error'))),
  );
  return section;

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
