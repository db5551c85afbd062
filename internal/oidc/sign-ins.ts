// Sign-ins by the provider in flight, held in memory briefly and bounded: each started one (keyed by its `state`,
// with its nonce and PKCE verifier) until the browser comes back, and each finished one's session until the console
// takes it with a one-time code (so no token ever rides in a URL). The provider itself is kept while its settings stay.

import { createHash, randomBytes } from 'node:crypto';
import { OidcProvider, type ProviderConfig } from './provider.ts';

/** How long a browser has at the provider to sign in. */
export const SIGN_IN_TTL_MS = 10 * 60_000;
/** How long the console has to take a finished sign-in's session. */
export const HANDOFF_TTL_MS = 60_000;
/** The most sign-ins in flight: past it, the oldest is dropped (anyone may start one; none costs more than this). */
const MAX_IN_FLIGHT = 1000;

export interface Started {
  nonce: string;
  verifier: string;
  /** The provider's settings when it started: a sign-in finishes with the provider it began at. */
  provider: OidcProvider;
  redirectUri: string;
  atMs: number;
}

function random(): string {
  return randomBytes(32).toString('base64url');
}

/** Entries of `map` older than `ttlMs` gone, and the oldest past `MAX_IN_FLIGHT`. */
function prune<V extends { atMs: number }>(map: Map<string, V>, nowMs: number, ttlMs: number): void {
  for (const [key, value] of map) {
    if (nowMs - value.atMs < ttlMs && map.size < MAX_IN_FLIGHT) break;
    map.delete(key);
  }
}

/** A key kept of a one-time code: a hash, so that a memory dump holds nothing to use. */
function keyOf(code: string): string {
  return createHash('sha256').update(code).digest('base64url');
}

export class ProviderSignIns<Session> {
  private readonly started = new Map<string, Started>();
  private readonly finished = new Map<string, { session: Session; atMs: number }>();
  private provider: OidcProvider | null = null;
  private checking = false;

  constructor(private readonly now: () => number = Date.now) {}

  /** The provider for `config`: the one kept while its settings are the same (its discovery and keys cached). */
  providerFor(config: ProviderConfig): OidcProvider {
    const same = this.provider && JSON.stringify(this.provider.config) === JSON.stringify(config);
    if (!same) this.provider = new OidcProvider(config, this.now);
    return this.provider!;
  }

  /** Whether this caller may ask the provider about its sessions now (one at a time); endChecks() after. */
  beginChecks(): boolean {
    if (this.checking) return false;
    this.checking = true;
    return true;
  }

  endChecks(): void {
    this.checking = false;
  }

  /** A new sign-in: its state, nonce, and PKCE challenge of its verifier. */
  start(provider: OidcProvider, redirectUri: string): { state: string; nonce: string; challenge: string } {
    const nowMs = this.now();
    prune(this.started, nowMs, SIGN_IN_TTL_MS);
    const state = random();
    const started: Started = { nonce: random(), verifier: random(), provider, redirectUri, atMs: nowMs };
    this.started.set(state, started);
    const challenge = createHash('sha256').update(started.verifier).digest('base64url');
    return { state, nonce: started.nonce, challenge };
  }

  /** The sign-in `state` names, taken (each state once); undefined for none, or one too old. */
  take(state: string): Started | undefined {
    const started = this.started.get(state);
    this.started.delete(state);
    return started && this.now() - started.atMs < SIGN_IN_TTL_MS ? started : undefined;
  }

  /** Holds a finished sign-in's session for the console: the one-time code it takes it with. */
  handOff(session: Session): string {
    const nowMs = this.now();
    prune(this.finished, nowMs, HANDOFF_TTL_MS);
    const code = random();
    this.finished.set(keyOf(code), { session, atMs: nowMs });
    return code;
  }

  /** The session `code` was handed off with, taken (each code once); undefined for none, or one too old. */
  takeHandOff(code: string): Session | undefined {
    const key = keyOf(code);
    const finished = this.finished.get(key);
    this.finished.delete(key);
    return finished && this.now() - finished.atMs < HANDOFF_TTL_MS ? finished.session : undefined;
  }
}
