// Users: who may sign in and with which scopes; create, enable or disable, delete.

import { scopes } from '../../../internal/auth/scopes.ts';
import { api, type Schema } from '../api.ts';
import {
  badge,
  button,
  bytes,
  checkboxes,
  checkedValues,
  field,
  form,
  h,
  input,
  localFromUtc,
  select,
  utcFromLocal,
  when,
} from '../dom.ts';
import type { PageCtx } from '../main.ts';
import { urlFilters } from '../filters.ts';
import { PagedTable } from '../table.ts';

type User = Schema<'User'>;

/** What a PUT of `u` takes to change only `changes`: everything else as it is. */
function replaced(u: User, changes: Partial<User>) {
  const { username, role, plan_id, scopes, disabled, expires_at } = { ...u, ...changes };
  return { username, role, plan_id, scopes, disabled, expires_at };
}

function usageText(u: User): string {
  if (u.role !== 'tenant') return '—';
  const traffic = u.usage.traffic;
  const used = traffic ? `, ${bytes(traffic.used_bytes)} this period${traffic.spent ? ' (spent)' : ''}` : '';
  return `${u.usage.rules} ${u.usage.rules === 1 ? 'rule' : 'rules'}${used}`;
}

export async function usersPage(ctx: PageCtx): Promise<void> {
  const canWrite = ctx.can('users:write');
  const dialog = h('dialog', { class: 'edit', 'aria-labelledby': 'user-dialog-title' });
  /** A user's scopes and state, changed in a form (only scopes the caller holds can be given). */
  const edit = (u: User) => {
    const disabled = h('input', { type: 'checkbox', name: 'disabled', checked: u.disabled });
    const role = select('role', ['operator', 'tenant'], u.role);
    const plan = input('plan_id', { type: 'number', min: 1, value: u.plan_id ?? '' });
    const expires = input('expires_at', { type: 'datetime-local', value: localFromUtc(u.expires_at) });
    const editor = form(
      { 'aria-label': `Edit ${u.username}` },
      [
        checkboxes(
          'Scopes',
          'scopes',
          scopes.filter((scope) => ctx.can(scope) || u.scopes.includes(scope)),
          u.scopes,
        ),
        field('Disabled', disabled, 'A disabled user cannot sign in; their sessions and tokens end'),
        field('Role', role, 'A tenant reaches only what they own, as their plan grants'),
        field('Plan', plan, "A tenant's plan, by id (see Plans)"),
        field('Account ends', expires, "A tenant's; empty: never"),
        h(
          'div',
          { class: 'buttons' },
          h('button', { type: 'submit' }, 'Save'),
          h('button', { type: 'button', onclick: () => dialog.close() }, 'Cancel'),
        ),
      ],
      async (el) => {
        await api('PUT', `/api/users/${u.id}`, {
          body: replaced(u, {
            scopes: checkedValues(el, 'scopes') as User['scopes'],
            disabled: disabled.checked,
            role: role.value as User['role'],
            plan_id: plan.value === '' ? null : Number(plan.value),
            expires_at: utcFromLocal(expires.value),
          }),
          ifMatch: `"${u.version}"`,
        });
        dialog.close();
        ctx.say(`Saved ${u.username}`);
        await ctx.reload();
      },
    );
    dialog.replaceChildren(h('h2', { id: 'user-dialog-title' }, `Edit ${u.username}`), editor);
    dialog.showModal();
  };
  const actions = (u: User) => [
    button('Edit', () => edit(u)),
    button(u.disabled ? 'Enable' : 'Disable', () =>
      ctx.act(`${u.disabled ? 'Enabled' : 'Disabled'} ${u.username}`, () =>
        api('PUT', `/api/users/${u.id}`, {
          body: replaced(u, { disabled: !u.disabled }),
          ifMatch: `"${u.version}"`,
        }),
      ),
    ),
    button(
      'Delete',
      () => ctx.act(`Deleted ${u.username}`, () => api('DELETE', `/api/users/${u.id}`), `Delete user ${u.username}?`),
      { class: 'danger' },
    ),
  ];
  const url = urlFilters(
    ctx,
    'users',
    [
      { name: 'q', label: 'Username contains' },
      {
        name: 'disabled',
        label: 'State',
        choices: [
          ['false', 'active'],
          ['true', 'disabled'],
        ],
      },
    ],
    () => list.first(),
  );
  const list = new PagedTable<User>({
    caption: 'Users',
    headings: ['Username', 'Role', 'Scopes', 'Usage', 'State', 'Created', canWrite ? 'Actions' : ''],
    path: '/api/users',
    query: url.values,
    sortKeys: ['username', null, null, null, null, 'created_at', null],
    sort: url.sort,
    sorted: url.sorted,
    empty: 'No users.',
    row: (u) =>
      h(
        'tr',
        {},
        h('th', { scope: 'row' }, u.username),
        h('td', {}, u.role, u.plan_id === null ? '' : h('span', { class: 'tags' }, `plan #${u.plan_id}`)),
        h('td', {}, u.scopes.join(' ') || '—'),
        h('td', {}, usageText(u)),
        h('td', {}, badge(u.disabled ? 'disabled' : u.expired ? 'expired' : 'active')),
        h('td', {}, when(u.created_at)),
        h('td', { class: 'actions' }, canWrite && u.id !== ctx.me.user.id && actions(u)),
      ),
  });

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
      await ctx.reload();
    },
  );
  ctx.main.append(
    canWrite ? h('details', { class: 'create' }, h('summary', {}, 'Add a user'), create) : '',
    url.form,
    list.el,
    dialog,
  );
  await ctx.live(() => list.load(), ['user']);
}
