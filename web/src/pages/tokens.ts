// API tokens: issue one with scopes chosen among those this session holds and an optional
// expiry, see its secret once (with a copy button), revoke.

import { scopes } from '../../../internal/auth/scopes.ts';
import { api, get, type Page, type Schema } from '../api.ts';
import { button, checkboxes, checkedValues, copyButton, field, form, h, input, utcFromLocal, when } from '../dom.ts';
import type { PageCtx } from '../main.ts';
import { urlFilters } from '../filters.ts';
import { PagedTable } from '../table.ts';

type Token = Schema<'Token'>;

export async function tokensPage(ctx: PageCtx): Promise<void> {
  const canWrite = ctx.can('tokens:write');
  const secret = h('div');
  // Tokens by owner: the users to choose from, where the caller may read them.
  const users = ctx.can('users:read')
    ? await get<Page<{ id: number; username: string }>>('/api/users?limit=1000')
    : { items: [] };
  const url = urlFilters(
    ctx,
    'tokens',
    users.items.length > 0
      ? [{ name: 'user_id', label: 'Owner', choices: users.items.map((u) => [String(u.id), u.username] as const) }]
      : [],
    () => list.first(),
  );
  const list = new PagedTable<Token>({
    caption: 'API tokens',
    headings: ['Name', 'Scopes', 'Expires', 'Last used', 'Created by', canWrite ? 'Actions' : ''],
    path: '/api/tokens',
    query: url.values,
    sortKeys: ['name', null, null, null, null, null],
    sort: url.sort,
    sorted: url.sorted,
    empty: 'No API tokens yet.',
    row: (t) =>
      h(
        'tr',
        {},
        h('th', { scope: 'row' }, t.name),
        h('td', {}, t.scopes.join(' ')),
        h('td', {}, t.expires_at ? when(t.expires_at) : 'never'),
        h('td', {}, when(t.last_used_at)),
        h('td', {}, t.created_by?.username ?? '—'),
        h(
          'td',
          { class: 'actions' },
          canWrite &&
            button(
              'Revoke',
              () =>
                ctx.act(
                  `Revoked ${t.name}`,
                  () => api('DELETE', `/api/tokens/${t.id}`),
                  `Revoke token ${t.name}? Scripts using it stop working at once.`,
                ),
              { class: 'danger' },
            ),
        ),
      ),
  });

  const held = scopes.filter((scope) => ctx.can(scope));
  const name = input('name', { required: true, autocomplete: 'off' });
  const expires = input('expires_at', { type: 'datetime-local' });
  const create = form(
    { 'aria-label': 'Issue a token' },
    [
      field('Name', name, 'What the token is for'),
      checkboxes('Scopes', 'scopes', held),
      field('Expires', expires, 'Optional; empty: never'),
      h('button', { type: 'submit' }, 'Issue token'),
    ],
    async (el) => {
      const { data } = await api<Token & { token: string }>('POST', '/api/tokens', {
        body: { name: name.value, scopes: checkedValues(el, 'scopes'), expires_at: utcFromLocal(expires.value) },
      });
      const box = h('input', { id: 'token-secret', readonly: true, value: data.token, class: 'secret' });
      secret.replaceChildren(
        h(
          'section',
          { class: 'once', 'aria-label': `Token ${data.name} issued` },
          h('h2', {}, `Token ${data.name} issued`),
          h('label', { for: box.id }, 'Secret'),
          box,
          h(
            'p',
            { class: 'hint' },
            'Shown only now: the master keeps only its hash. Copy it into your script or vault.',
          ),
          copyButton('Copy secret', () => data.token),
        ),
      );
      el.reset();
      box.focus();
      box.select();
      await ctx.reload();
    },
  );
  ctx.main.append(
    canWrite ? h('details', { class: 'create', open: true }, h('summary', {}, 'Issue a token'), create) : '',
    secret,
    users.items.length > 0 ? url.form : '',
    list.el,
  );
  await ctx.live(() => list.load(), ['token']);
}
