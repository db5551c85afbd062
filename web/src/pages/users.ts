// Users: who may sign in and with which scopes; create, enable or disable, delete.

import { scopes } from '../../../internal/auth/scopes.ts';
import { api, get, type Page } from '../api.ts';
import { badge, checkboxes, checkedValues, field, form, h, input, when } from '../dom.ts';
import type { PageCtx } from '../main.ts';
import { LiveTable, Pager } from '../table.ts';

interface User {
  id: number;
  username: string;
  scopes: string[];
  disabled: boolean;
  version: number;
  created_at: string;
}

export async function usersPage(ctx: PageCtx): Promise<void> {
  const canWrite = ctx.can('users:write');
  const pager = new Pager(() => load());
  const act = async (label: string, run: () => Promise<unknown>) => {
    try {
      await run();
      ctx.say(label);
    } catch (error) {
      ctx.say((error as Error).message, 'error');
    }
    await load();
  };
  const table = new LiveTable<User>(
    'Users',
    ['Username', 'Scopes', 'State', 'Created', canWrite ? 'Actions' : ''],
    (u) =>
      h(
        'tr',
        {},
        h('th', { scope: 'row' }, u.username),
        h('td', {}, u.scopes.join(' ') || '—'),
        h('td', {}, badge(u.disabled ? 'disabled' : 'active')),
        h('td', {}, when(u.created_at)),
        h(
          'td',
          { class: 'actions' },
          canWrite &&
            u.id !== ctx.me.user.id && [
              h(
                'button',
                {
                  type: 'button',
                  onclick: () =>
                    act(`${u.disabled ? 'Enabled' : 'Disabled'} ${u.username}`, () =>
                      api('PUT', `/api/users/${u.id}`, {
                        body: { username: u.username, scopes: u.scopes, disabled: !u.disabled },
                        ifMatch: `"${u.version}"`,
                      }),
                    ),
                },
                u.disabled ? 'Enable' : 'Disable',
              ),
              h(
                'button',
                {
                  type: 'button',
                  class: 'danger',
                  onclick: () =>
                    confirm(`Delete user ${u.username}?`) &&
                    act(`Deleted ${u.username}`, () => api('DELETE', `/api/users/${u.id}`)),
                },
                'Delete',
              ),
            ],
        ),
      ),
    'No users.',
  );

  async function load(): Promise<void> {
    const page = await get<Page<User>>(`/api/users?limit=100${pager.cursor ? `&cursor=${pager.cursor}` : ''}`);
    table.update(page.items);
    pager.set(page.next_cursor);
  }

  const username = input('username', { required: true, autocomplete: 'off' });
  const password = input('password', { type: 'password', autocomplete: 'new-password', required: true });
  const create = form(
    { 'aria-label': 'Add a user' },
    [
      field('Username', username),
      field('Password', password, 'At least 10 characters'),
      checkboxes(
        'Scopes',
        'scopes',
        scopes.filter((scope) => ctx.can(scope)),
      ),
      h('button', { type: 'submit' }, 'Add user'),
    ],
    async (el) => {
      await api('POST', '/api/users', {
        body: { username: username.value, password: password.value, scopes: checkedValues(el, 'scopes') },
      });
      ctx.say(`Added ${username.value}`);
      el.reset();
      await load();
    },
  );
  ctx.main.append(
    canWrite ? h('details', { class: 'create' }, h('summary', {}, 'Add a user'), create) : '',
    h('div', { class: 'scroll' }, table.el),
    pager.el,
  );
  await load();
}
