// A real OpenID provider for tests (the npm package oidc-provider, on loopback): its accounts with their groups, a
// client for the master, keys the test can rotate (a restart at the same address with others), and a hook that
// rewrites the ID tokens its token endpoint answers, to forge, age or misaddress one.

import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { TestContext } from 'node:test';
import Provider from 'oidc-provider';
import type { SigningKey } from './signing-keys.ts';

export { claimsOf, signedToken, signingKey, type SigningKey } from './signing-keys.ts';

export interface Account {
  email: string;
  groups: string[];
  disabled?: boolean;
  /** Whether the provider vouches for the email (default: it does). */
  emailVerified?: boolean;
}

export const CLIENT_ID = 'portplane';
export const CLIENT_SECRET = 'a-client-secret-for-tests';

/** The settings that make the master a client of `provider`, its console at `publicUrl`. */
export function clientSettings(provider: { issuer: string }, publicUrl: string) {
  return {
    public_url: publicUrl,
    oidc_issuer: provider.issuer,
    oidc_client_id: CLIENT_ID,
    oidc_client_secret: CLIENT_SECRET,
  };
}

export interface TestProvider {
  issuer: string;
  accounts: Map<string, Account>;
  /** Rewrites each ID token the token endpoint answers, while set. */
  tamper: ((idToken: string) => string) | null;
  /** Starts again at the same address signing with `keys` (the first signs): a rotation. */
  restart(keys: SigningKey[]): Promise<void>;
  /** How many times the master read the key set. */
  keyReads: number;
}

export async function startProvider(
  t: TestContext,
  redirectUri: string,
  keys: SigningKey[],
  accounts: Record<string, Account>,
): Promise<TestProvider> {
  let server: Server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as AddressInfo).port;
  const issuer = `http://127.0.0.1:${port}`;
  const state: TestProvider = {
    issuer,
    accounts: new Map(Object.entries(accounts)),
    tamper: null,
    keyReads: 0,
    restart: async () => {},
  };
  const serve = (signing: SigningKey[]) => {
    const provider = new Provider(issuer, {
      clients: [
        {
          client_id: CLIENT_ID,
          client_secret: CLIENT_SECRET,
          redirect_uris: [redirectUri],
          grant_types: ['authorization_code', 'refresh_token'],
          response_types: ['code'],
          id_token_signed_response_alg: signing[0]!.alg,
        },
      ],
      jwks: { keys: signing.map((key) => ({ ...key.private, kid: key.kid, alg: key.alg, use: 'sig' })) },
      async findAccount(_ctx, id) {
        const account = state.accounts.get(id);
        if (!account || account.disabled) return undefined;
        return {
          accountId: id,
          claims: () => ({
            sub: id,
            email: account.email,
            email_verified: account.emailVerified ?? true,
            groups: account.groups,
          }),
        };
      },
      claims: { openid: ['sub'], email: ['email', 'email_verified'], groups: ['groups'] },
      scopes: ['openid', 'offline_access', 'email', 'groups'],
      conformIdTokenClaims: false,
      features: { devInteractions: { enabled: true } },
      cookies: { keys: ['cookie-key-for-tests'] },
      enabledJWA: { idTokenSigningAlgValues: ['RS256', 'ES256', 'EdDSA'] },
    });
    provider.use(async (ctx, next) => {
      if (ctx.path === '/jwks') state.keyReads++;
      await next();
      const body = ctx.body as { id_token?: string } | undefined;
      if (ctx.path === '/token' && state.tamper && body?.id_token)
        ctx.body = { ...body, id_token: state.tamper(body.id_token) };
    });
    server.removeAllListeners('request');
    server.on('request', provider.callback());
  };
  serve(keys);
  state.restart = async (signing) => {
    server.closeAllConnections();
    server.close();
    server = createServer();
    server.listen(port, '127.0.0.1');
    await once(server, 'listening');
    serve(signing);
  };
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  return state;
}

/** Cookies as a browser keeps them for one site: by name, the last value set. */
class Jar {
  private readonly cookies = new Map<string, string>();

  take(answer: Response): void {
    for (const line of answer.headers.getSetCookie()) {
      const [pair = ''] = line.split(';');
      const at = pair.indexOf('=');
      this.cookies.set(pair.slice(0, at).trim(), pair.slice(at + 1).trim());
    }
  }

  header(): string {
    return [...this.cookies].map(([name, value]) => `${name}=${value}`).join('; ');
  }
}

/**
 * What a browser does to sign `login` in by the provider, without one: the master's /login, the provider's sign-in and
 * consent pages (their forms posted), back to the master's callback. Returns where the callback sent the browser
 * (the console, with #oidc=<code> or #oidc_error=<why>).
 */
export async function signInHeadless(masterUrl: string, login: string): Promise<URL> {
  const jar = new Jar();
  let answer = await fetch(`${masterUrl}/api/auth/oidc/login`, { redirect: 'manual' });
  let location = answer.headers.get('location');
  for (let hop = 0; hop < 20 && location; hop++) {
    const url = new URL(location, answer.url);
    if (url.origin === new URL(masterUrl).origin && url.pathname === '/api/auth/oidc/callback') {
      const back = await fetch(url, { redirect: 'manual' });
      return new URL(back.headers.get('location')!);
    }
    answer = await fetch(url, { redirect: 'manual', headers: { cookie: jar.header() } });
    jar.take(answer);
    location = answer.headers.get('location');
    if (location || answer.status !== 200) continue;
    // A page of the provider's: sign in as `login`, or consent.
    const page = await answer.text();
    const action = /action="([^"]+)"/.exec(page)?.[1];
    if (!action) throw new Error(`the provider's page has no form: ${page.slice(0, 200)}`);
    const prompt = page.includes('name="login"') ? 'login' : 'consent';
    const form = new URLSearchParams(prompt === 'login' ? { prompt, login, password: 'anything' } : { prompt });
    answer = await fetch(new URL(action, url), {
      method: 'POST',
      redirect: 'manual',
      headers: { cookie: jar.header(), 'content-type': 'application/x-www-form-urlencoded' },
      body: form,
    });
    jar.take(answer);
    location = answer.headers.get('location');
  }
  throw new Error(`the sign-in went nowhere (last answer ${answer.status} from ${answer.url})`);
}
