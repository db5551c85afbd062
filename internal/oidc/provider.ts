// One OpenID provider as the master uses it: its discovery document and key set (cached; the keys fetched again when a
// token names one not seen yet, the provider having rotated), the address a sign-in starts at (authorization code
// with PKCE, S256), and its token endpoint: a code redeemed, a refresh token used to ask whether the user still
// may sign in.

import { ALGORITHMS, JwsRefused, UnknownKey, verifyJws, type Jwk } from '../auth/jws.ts';
import { askProvider, ProviderUnreachable, providerUrlProblem, type Answer } from './fetch.ts';
import { idTokenProblem, type Identity } from './id-token.ts';

/** How long a discovery document is trusted before it is read again. */
const METADATA_TTL_MS = 3600_000;
/** The least time between two reads of the key set: tokens naming unknown keys cannot make the master hammer it. */
const KEYS_REFETCH_MS = 10_000;
const MAX_KEYS = 50;

export interface ProviderConfig {
  issuer: string;
  clientId: string;
  /** Null: a public client, PKCE alone. */
  clientSecret: string | null;
  scopes: string;
}

interface Metadata {
  authorization: string;
  token: string;
  jwks: string;
  algorithms: string[];
  /** client_secret_basic unless the provider takes only client_secret_post. */
  secretInForm: boolean;
}

/** The provider said no (an OAuth error to a code or refresh token): the sign-in, or the session, ends. */
export class ProviderRefused extends Error {}

/** What a code or refresh token is redeemed for. */
export interface Grant {
  identity: Identity | null;
  refreshToken: string | null;
  accessToken: string | null;
  /** When the access token expires, in ms since the epoch; null if the provider did not say. */
  accessExpiresAt: number | null;
}

function endpoint(document: Record<string, unknown>, name: string, required: boolean): string | undefined {
  const value = document[name];
  if (value === undefined && !required) return undefined;
  if (typeof value !== 'string') throw new ProviderUnreachable(`its discovery document has no ${name}`);
  const problem = providerUrlProblem(value);
  if (problem) throw new ProviderUnreachable(`its ${name} ${problem}`);
  return value;
}

function textList(value: unknown): string[] | null {
  return Array.isArray(value) && value.every((item) => typeof item === 'string') ? value : null;
}

/** The OAuth error of a refusing answer, in words: its `error` code (and description, cut short). */
function refusalOf(answer: Answer): string {
  const body = (answer.body ?? {}) as Record<string, unknown>;
  const code = typeof body.error === 'string' ? body.error.slice(0, 64) : `status ${answer.status}`;
  const said = typeof body.error_description === 'string' ? `: ${body.error_description.slice(0, 160)}` : '';
  return `${code}${said}`.replace(/[^\x20-\x7e]/g, '?');
}

export class OidcProvider {
  private metadata: { value: Metadata; readAt: number } | null = null;
  private keys: { value: Jwk[]; readAt: number } | null = null;

  constructor(
    readonly config: ProviderConfig,
    private readonly now: () => number = Date.now,
  ) {}

  /** Where a browser signs in: the provider's authorization endpoint with this sign-in's state, nonce and challenge. */
  async authorizationUrl(signIn: { state: string; nonce: string; challenge: string; redirectUri: string }) {
    const metadata = await this.discovered();
    const url = new URL(metadata.authorization);
    const scopes = this.config.scopes.split(/\s+/).filter(Boolean);
    const params: Record<string, string> = {
      response_type: 'code',
      client_id: this.config.clientId,
      redirect_uri: signIn.redirectUri,
      scope: scopes.join(' '),
      state: signIn.state,
      nonce: signIn.nonce,
      code_challenge: signIn.challenge,
      code_challenge_method: 'S256',
    };
    // OpenID Connect Core 11: offline access is asked with consent.
    if (scopes.includes('offline_access')) params.prompt = 'consent';
    for (const [name, value] of Object.entries(params)) url.searchParams.set(name, value);
    return url.toString();
  }

  /** Redeems a sign-in's code: its ID token verified (signature, issuer, audience, dates, `nonce`). */
  async redeem(
    code: string,
    verifier: string,
    redirectUri: string,
    nonce: string,
  ): Promise<Grant & { identity: Identity }> {
    const form = new URLSearchParams({ grant_type: 'authorization_code', code, redirect_uri: redirectUri });
    form.set('code_verifier', verifier);
    const grant = await this.tokenRequest(form, nonce);
    if (!grant.identity) throw new ProviderRefused('its answer carried no ID token');
    return grant as Grant & { identity: Identity };
  }

  /** Uses a refresh token: the user may still sign in (else `ProviderRefused`); a new ID token is checked as one. */
  refresh(refreshToken: string): Promise<Grant> {
    return this.tokenRequest(new URLSearchParams({ grant_type: 'refresh_token', refresh_token: refreshToken }), null);
  }

  /**
   * Checks an ID token: signed by one of the provider's keys and meant for us. One naming a key or algorithm not known
   * yet has the provider's keys and discovery document read again (at most every KEYS_REFETCH_MS): it may have rotated.
   */
  async verifyIdToken(token: string, nonce: string | null): Promise<Identity> {
    let claims: Record<string, unknown>;
    try {
      claims = verifyJws(token, await this.keySet(false), (await this.discovered()).algorithms);
    } catch (error) {
      if (!(error instanceof UnknownKey) || (this.keys && this.now() - this.keys.readAt < KEYS_REFETCH_MS)) throw error;
      this.metadata = null;
      const algorithms = (await this.discovered()).algorithms;
      claims = verifyJws(token, await this.keySet(true), algorithms);
    }
    const problem = idTokenProblem(claims, {
      issuer: this.config.issuer,
      clientId: this.config.clientId,
      nonce,
      nowMs: this.now(),
    });
    if (problem) throw new JwsRefused(problem);
    return { subject: claims.sub as string, claims };
  }

  private async tokenRequest(form: URLSearchParams, nonce: string | null): Promise<Grant> {
    const metadata = await this.discovered();
    const headers: Record<string, string> = {};
    form.set('client_id', this.config.clientId);
    if (this.config.clientSecret !== null && metadata.secretInForm) form.set('client_secret', this.config.clientSecret);
    else if (this.config.clientSecret !== null) {
      // RFC 6749 2.3.1: each form-encoded before they are joined.
      const pair = `${encodeURIComponent(this.config.clientId)}:${encodeURIComponent(this.config.clientSecret)}`;
      headers.Authorization = `Basic ${Buffer.from(pair).toString('base64')}`;
    }
    const answer = await askProvider(metadata.token, { form, headers });
    if (answer.status >= 500) throw new ProviderUnreachable(`its token endpoint answered ${answer.status}`);
    if (answer.status !== 200) throw new ProviderRefused(refusalOf(answer));
    const body = (answer.body ?? {}) as Record<string, unknown>;
    const text = (name: string) =>
      typeof body[name] === 'string' && body[name] !== '' ? (body[name] as string) : null;
    const idToken = text('id_token');
    const expiresIn = typeof body.expires_in === 'number' && body.expires_in > 0 ? body.expires_in : null;
    return {
      identity: idToken === null ? null : await this.verifyIdToken(idToken, nonce),
      refreshToken: text('refresh_token'),
      accessToken: text('access_token'),
      accessExpiresAt: expiresIn === null ? null : this.now() + expiresIn * 1000,
    };
  }

  private async discovered(): Promise<Metadata> {
    if (this.metadata && this.now() - this.metadata.readAt < METADATA_TTL_MS) return this.metadata.value;
    const url = `${this.config.issuer.replace(/\/$/, '')}/.well-known/openid-configuration`;
    const answer = await askProvider(url);
    if (answer.status !== 200) throw new ProviderUnreachable(`its discovery document answered ${answer.status}`);
    const document = answer.body as Record<string, unknown>;
    if (document === null || typeof document !== 'object') throw new ProviderUnreachable('its discovery is no object');
    if (document.issuer !== this.config.issuer)
      throw new ProviderUnreachable('its discovery document names another issuer than oidc_issuer');
    const challenges = textList(document.code_challenge_methods_supported);
    if (challenges && !challenges.includes('S256')) throw new ProviderUnreachable('it does not take PKCE with S256');
    const offered = textList(document.id_token_signing_alg_values_supported) ?? ['RS256'];
    const algorithms = offered.filter((alg) => alg in ALGORITHMS);
    if (algorithms.length === 0) throw new ProviderUnreachable('it signs ID tokens with none of RS256, ES256, EdDSA');
    const methods = textList(document.token_endpoint_auth_methods_supported) ?? ['client_secret_basic'];
    const value: Metadata = {
      authorization: endpoint(document, 'authorization_endpoint', true)!,
      token: endpoint(document, 'token_endpoint', true)!,
      jwks: endpoint(document, 'jwks_uri', true)!,
      algorithms,
      secretInForm: !methods.includes('client_secret_basic') && methods.includes('client_secret_post'),
    };
    this.metadata = { value, readAt: this.now() };
    return value;
  }

  /** The provider's keys: cached, unless `fresh` is asked. */
  private async keySet(fresh: boolean): Promise<Jwk[]> {
    if (this.keys && !fresh) return this.keys.value;
    const answer = await askProvider((await this.discovered()).jwks);
    const keys = (answer.body as { keys?: unknown } | null)?.keys;
    if (answer.status !== 200 || !Array.isArray(keys)) throw new ProviderUnreachable('its key set is not one');
    const value = keys.filter((key): key is Jwk => key !== null && typeof key === 'object').slice(0, MAX_KEYS);
    this.keys = { value, readAt: this.now() };
    return value;
  }
}
