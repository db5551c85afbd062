// The signed-in user's own account: who they are, their password (changed with the current one), and their other
// sessions (ended at once, for a lost laptop or a shared screen).

import { api } from '../api.ts';
import { button, field, form, h, input } from '../dom.ts';
import type { PageCtx } from '../main.ts';
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
  const sessions = h(
    'section',
    { 'aria-label': 'Your sessions' },
    h('h2', {}, 'Your sessions'),
    h('p', {}, 'Signed in elsewhere and should not be? End every session of yours but this one.'),
    button('Sign out everywhere else', () =>
      ctx.act('Signed out everywhere else', () => api('POST', '/api/auth/logout-others')),
    ),
  );
  ctx.main.append(
    h('p', {}, `Signed in as ${user.username}, with ${user.scopes.join(' ') || 'no scopes'}.`),
    user.role === 'tenant' ? planSummary(ctx.me) : '',
    password,
    sessions,
  );
}
