// API tokens: issue one with scopes chosen among those this session holds and an optional
// expiry, see its secret once (with a copy button), revoke.

import { scopes } from '../../../internal/auth/scopes.ts';
import { api, get, type Page } from '../api.ts';
import { checkboxes, checkedValues, copyButton, field, form, h, input, utcFromLocal, when } from '../dom.ts';
import type { PageCtx } from '../main.ts';
import { LiveTable, Pager } from '../table.ts';

interface Token {
  id: number;
  name: string;
  scopes: string[];
  expires_at: string | null;
  last_used_at: string | null;
  created_by: { username?: string } | null;
}

export async function tokensPage(ctx: PageCtx): Promise<void> {
  const canWrite = ctx.can('tokens:write');
  const pager = new Pager(() => load());
  const secret = h('div');
  const table = new LiveTable<Token>(
    'API tokens',
    ['Name', 'Scopes', 'Expires', 'Last used', 'Created by', canWrite ? 'Actions' : ''],
    (t) =>
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
            h(
              'button',
              {
                type: 'button',
                class: 'danger',
                onclick: async () => {
                  if (!confirm(`Revoke token ${t.name}? Scripts using it stop working at once.`)) return;
                  try {
                    await api('DELETE', `/api/tokens/${t.id}`);
                    ctx.say(`Revoked ${t.name}`);
                  } catch (error) {
                    ctx.say((error as Error).message, 'error');
                  }
                  await load();
                },
              },
              'Revoke',
            ),
        ),
      ),
    'No API tokens yet.',
  );

  async function load(): Promise<void> {
    const page = await get<Page<Token>>(`/api/tokens?limit=100${pager.cursor ? `&cursor=${pager.cursor}` : ''}`);
    table.update(page.items);
    pager.set(page.next_cursor);
  }

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
      await load();
    },
  );
  ctx.main.append(
    canWrite ? h('details', { class: 'create', open: true }, h('summary', {}, 'Issue a token'), create) : '',
    secret,
    h('div', { class: 'scroll' }, table.el),
    pager.el,
  );
  await load();
}
