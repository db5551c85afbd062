// The console's shell: sign-in, the navigation a user's scopes allow, and one page at a time
// chosen by the URL's hash (#/rules), so the master serves a single document.

import { grants, type Scope } from '../../internal/auth/scopes.ts';
import { api, ApiError, session, SIGNED_OUT, type Schema } from './api.ts';
import { changes } from './events.ts';
import { button, field, form, h, input } from './dom.ts';
import { passkeySignIn } from './passkeys.ts';
import { accountPage } from './pages/account.ts';
import { alertsPage } from './pages/alerts.ts';
import { rolloutsPage } from './pages/rollouts.ts';
import { auditPage } from './pages/audit.ts';
import { dashboardPage } from './pages/dashboard.ts';
import { importPage } from './pages/import.ts';
import { mapPage } from './pages/map.ts';
import { nodesPage } from './pages/nodes.ts';
import { rulesPage } from './pages/rules.ts';
import { settingsPage } from './pages/settings.ts';
import { replicationPage } from './pages/replication.ts';
import { tokensPage } from './pages/tokens.ts';
import { tunnelsPage } from './pages/tunnels.ts';
import { plansPage } from './pages/plans.ts';
import { usersPage } from './pages/users.ts';
import { readOnlyMaster, watchRole } from './role.ts';

export type Me = Schema<'WhoAmI'>;

export type Plan = Schema<'Plan'>;

export type Usage = NonNullable<Me['usage']>;

export interface PageCtx {
  /** Where the page puts what it shows, under its heading. */
  main: HTMLElement;
  me: Me;
  /** The page's query in the URL (#/rules?node_id=2): its filters, shareable and kept over a reload. */
  params: URLSearchParams;
  /** Puts `params` in the URL, in place of the page's query (not a new history entry). */
  setParams(params: Record<string, string | null | undefined>): void;
  can(scope: Scope): boolean;
  /**
   * Shows what `load` reads, and keeps it current: again after every action, and when the master's event stream tells
   * of a change to one of `resources` (`*`: any). While the stream is down it polls instead, every `ms` (if given)
   * while this page is shown and the tab visible.
   */
  live(load: () => Promise<void>, resources: readonly string[], ms?: number): Promise<void>;
  /** Reads the page's data again (what `live` was given). */
  reload(): Promise<void>;
  /** Runs what the person asked for (after `question`, if any, is confirmed), says how it went, and reloads. */
  act(done: string, run: () => Promise<unknown>, question?: string): Promise<void>;
  /** Says something to the person (and to screen readers) at the top of the page. */
  say(message: string, kind?: 'ok' | 'error'): void;
}

interface Page {
  path: string;
  title: string;
  /** What the page needs; null: any signed-in user (their own account). */
  scope: Scope | null;
  /** Whether a tenant sees it (its reads follow ownership); other pages are the operators'. */
  tenants?: true;
  render(ctx: PageCtx): Promise<void>;
}

const pages: Page[] = [
  { path: '/', title: 'Dashboard', scope: 'dashboard:read', tenants: true, render: dashboardPage },
  { path: '/nodes', title: 'Nodes', scope: 'nodes:read', tenants: true, render: nodesPage },
  { path: '/map', title: 'Map', scope: 'nodes:read', tenants: true, render: mapPage },
  { path: '/rules', title: 'Rules', scope: 'rules:read', tenants: true, render: rulesPage },
  { path: '/tunnels', title: 'Tunnels', scope: 'tunnels:read', tenants: true, render: tunnelsPage },
  { path: '/rollouts', title: 'Rollouts', scope: 'nodes:read', render: rolloutsPage },
  { path: '/alerts', title: 'Alerts', scope: 'alerts:read', render: alertsPage },
  { path: '/tokens', title: 'Tokens', scope: 'tokens:read', tenants: true, render: tokensPage },
  { path: '/users', title: 'Users', scope: 'users:read', render: usersPage },
  { path: '/plans', title: 'Plans', scope: 'users:read', render: plansPage },
  { path: '/import', title: 'Import', scope: '*', render: importPage },
  { path: '/settings', title: 'Settings', scope: 'settings:read', render: settingsPage },
  { path: '/replication', title: 'Replication', scope: 'settings:read', render: replicationPage },
  { path: '/audit', title: 'Audit log', scope: 'audit:read', tenants: true, render: auditPage },
  { path: '/account', title: 'Account', scope: null, tenants: true, render: accountPage },
];

const allowedTo = (page: Page, me: Me) =>
  (me.user.role !== 'tenant' || page.tenants === true) && (page.scope === null || grants(me.token.scopes, page.scope));

const main = document.getElementById('main')!;
const header = document.querySelector<HTMLElement>('header.top')!;

// Whether what the pages show follows the master as it changes, or is read again every few seconds: the stream can be
// refused on the way (a proxy), and the person should know which.
const updates = document.getElementById('updates')!;
changes.onConnection((connected) => {
  updates.textContent = connected ? 'Live' : 'Polling';
  updates.dataset.state = connected ? 'live' : 'polling';
  updates.title = connected
    ? 'Changes show as they happen (the event stream is open)'
    : 'The event stream is not open: pages read again every few seconds';
});
let me: Me | null = null;
let timers: number[] = [];
let unsubscribe: (() => void)[] = [];
let shown = 0;

function stopTimers(): void {
  for (const timer of timers) clearInterval(timer);
  timers = [];
  for (const stop of unsubscribe) stop();
  unsubscribe = [];
}

/**
 * `load`, run at most once at a time and soon after it is asked for: a burst of events (a batch of 1,000 rules) is one
 * reload, and a change told while one runs gets another after it.
 */
function coalesced(load: () => Promise<void>): () => void {
  let timer: number | null = null;
  let running = false;
  let again = false;
  const run = async (): Promise<void> => {
    timer = null;
    if (running) return void (again = true);
    running = true;
    try {
      await load();
    } catch {
      // The page says what failed when it is next read by hand; a background reload has no one to tell.
    } finally {
      running = false;
    }
    if (again) {
      again = false;
      schedule();
    }
  };
  const schedule = () => {
    timer ??= window.setTimeout(() => void run(), 500);
  };
  return schedule;
}

type SignInMethods = Schema<'SignInMethods'>;

/** `why`: a sign-in by the provider that failed, said above the form. */
function signIn(why?: string): void {
  stopTimers();
  changes.stop();
  me = null;
  header.hidden = true;
  document.title = 'Sign in · portplane';
  const username = input('username', { autocomplete: 'username', required: true });
  const password = input('password', { type: 'password', autocomplete: 'current-password', required: true });
  const code = input('totp', { autocomplete: 'one-time-code', inputmode: 'numeric' });
  // Shown once the master asks for it: the user signs in with a second factor.
  const second = field('Code', code, 'From your authenticator app, or one of your recovery codes');
  second.hidden = true;
  const failed = h('p', { class: 'status error', role: 'alert' }, why ?? '');
  failed.hidden = !why;
  // Filled once the master says how one may sign in: a provider's button, if it has one.
  const others = h('div', { class: 'sign-in-others' });
  const passwordForm = form(
    { 'aria-label': 'Sign in' },
    [field('Username', username), field('Password', password), second, h('button', { type: 'submit' }, 'Sign in')],
    async () => {
      const totp = code.value.trim();
      try {
        const { data } = await api<{ token: string }>('POST', '/api/auth/login', {
          body: { username: username.value, password: password.value, ...(totp ? { totp } : {}) },
        });
        session.start(data.token);
      } catch (error) {
        if (error instanceof ApiError && error.problem.second_factor === 'totp' && second.hidden) {
          second.hidden = false;
          code.focus();
          return;
        }
        throw error;
      }
      await enter();
    },
  );
  main.replaceChildren(
    h('section', { class: 'sign-in' }, h('h1', {}, 'Sign in to portplane'), failed, passwordForm, others),
  );
  username.focus();
  api<SignInMethods>('GET', '/api/auth/methods')
    .then(({ data }) => {
      if (data.provider)
        others.replaceChildren(
          h('a', { class: 'button', href: data.provider.login_url }, `Sign in with ${data.provider.name}`),
        );
      if (data.passkeys)
        others.append(
          button('Sign in with a passkey', async () => {
            try {
              session.start(await passkeySignIn());
            } catch (error) {
              failed.textContent = error instanceof Error ? error.message : String(error);
              failed.hidden = false;
              return;
            }
            await enter();
          }),
        );
      if (data.password === 'nobody') passwordForm.hidden = true;
    })
    .catch(() => {
      // The password form stands alone: the page says nothing of ways it could not learn of.
    });
}

/**
 * A sign-in by the provider came back: the one-time code in the fragment (it never reaches a server's log) taken for
 * the session, or why it failed.
 */
async function returnedFromProvider(fragment: URLSearchParams): Promise<void> {
  history.replaceState(null, '', location.pathname);
  const failed = fragment.get('oidc_error');
  if (failed !== null) return signIn(failed);
  try {
    const { data } = await api<{ token: string }>('POST', '/api/auth/oidc/session', {
      body: { code: fragment.get('oidc') },
    });
    session.start(data.token);
  } catch (error) {
    return signIn(error instanceof Error ? error.message : String(error));
  }
  await enter();
}

async function enter(): Promise<void> {
  await roleRead;
  try {
    me = (await api<Me>('GET', '/api/auth/me')).data;
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return signIn();
    throw error;
  }
  header.hidden = false;
  document.getElementById('who')!.textContent = me.user.username;
  changes.start();
  const nav = document.getElementById('nav')!;
  nav.replaceChildren(
    ...pages
      .filter((page) => allowedTo(page, me!))
      .map((page) => h('li', {}, h('a', { href: `#${page.path}`, 'data-path': page.path }, page.title))),
  );
  await show();
}

async function show(): Promise<void> {
  if (!me) return;
  stopTimers();
  const run = ++shown;
  const [path = '/', query = ''] = (location.hash.replace(/^#/, '') || '/').split('?', 2);
  const allowed = pages.filter((p) => allowedTo(p, me!));
  const page = allowed.find((p) => p.path === path) ?? allowed[0];
  for (const link of document.querySelectorAll('#nav a'))
    if (link.getAttribute('data-path') === page?.path) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  if (!page) {
    main.replaceChildren(h('h1', {}, 'Nothing to show'), h('p', {}, 'This session holds no scope the console uses.'));
    return;
  }
  document.title = `${page.title} · portplane`;
  const status = h('div', { class: 'status', role: 'status', 'aria-live': 'polite' });
  const heading = h('h1', { tabindex: -1 }, page.title);
  // A page of its own: one left behind by a quick click elsewhere fills a detached element, not this one.
  const body = h('div');
  main.replaceChildren(heading, status, body);
  let reload = async () => {};
  const ctx: PageCtx = {
    main: body,
    me,
    params: new URLSearchParams(query),
    setParams(params) {
      const kept = new URLSearchParams();
      for (const [name, value] of Object.entries(params)) if (value) kept.set(name, value);
      ctx.params = kept;
      const text = kept.toString();
      history.replaceState(null, '', `#${page.path}${text ? `?${text}` : ''}`);
    },
    // A master that takes no write (a standby, a fenced primary) offers no control that writes.
    can: (scope) =>
      grants(me!.token.scopes, scope) && !(readOnlyMaster() && (scope === '*' || scope.endsWith(':write'))),
    async live(load, resources, ms) {
      reload = load;
      const refresh = coalesced(load);
      unsubscribe.push(
        changes.on((resource) => {
          // `*` in `resources` is every change that is written (the audit log): not traffic or vitals.
          const written = resource !== 'traffic' && resource !== 'vitals';
          const wanted = resource === '*' || (written && resources.includes('*')) || resources.includes(resource);
          if (run === shown && wanted) refresh();
        }),
      );
      if (ms)
        timers.push(
          window.setInterval(() => {
            if (!changes.connected && document.visibilityState === 'visible' && run === shown) load().catch(() => {});
          }, ms),
        );
      await load();
    },
    reload: () => reload(),
    async act(done, action, question) {
      if (question && !confirm(question)) return;
      try {
        await action();
        ctx.say(done);
      } catch (error) {
        ctx.say(error instanceof Error ? error.message : String(error), 'error');
      }
      await reload();
    },
    say(message, kind = 'ok') {
      status.className = `status ${kind}`;
      status.textContent = message;
    },
  };
  try {
    await page.render(ctx);
  } catch (error) {
    if (run === shown) ctx.say(`Could not load this page: ${(error as Error).message}`, 'error');
  }
  if (run === shown) heading.focus();
}

document.getElementById('sign-out')!.addEventListener('click', async () => {
  try {
    await api('POST', '/api/auth/logout');
  } finally {
    session.end();
    signIn();
  }
});
window.addEventListener(SIGNED_OUT, () => signIn());
window.addEventListener('hashchange', () => void show());

// On a phone the navigation is a menu: opened by its button, closed once a page is chosen.
const menu = document.getElementById('menu')!;
const navigation = document.querySelector<HTMLElement>('.top nav')!;
menu.addEventListener('click', () => {
  const open = navigation.classList.toggle('open');
  menu.setAttribute('aria-expanded', String(open));
});
navigation.addEventListener('click', (event) => {
  if (!(event.target as HTMLElement).closest('a')) return;
  navigation.classList.remove('open');
  menu.setAttribute('aria-expanded', 'false');
});

// Pages are drawn again when the master turns read-only or writable: their write controls come and go with it.
const roleRead = watchRole(document.getElementById('role')!, () => void show());
const fragment = new URLSearchParams(location.hash.replace(/^#/, ''));
if (fragment.has('oidc') || fragment.has('oidc_error')) void returnedFromProvider(fragment);
else if (session.token) enter().catch(() => signIn());
else signIn();
