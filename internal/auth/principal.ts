// Who is calling: a token or a login session, as its user stands now.

import type { Scope } from './scopes.ts';

/** Operators manage the fleet as their scopes allow; tenants only what they own, as their plan grants. */
export const roles = ['operator', 'tenant'] as const;
export type Role = (typeof roles)[number];

/** An API token, or a login session's. */
export type TokenKind = 'api' | 'session';

export interface Principal {
  tokenId: number;
  kind: TokenKind;
  tokenName: string;
  userId: number;
  username: string;
  /** The user's: a tenant reaches only routes that follow ownership (see `tenants` on an operation). */
  role: Role;
  /** A tenant's plan (null: none, which grants nothing). */
  planId: number | null;
  /** The token's scopes as far as its owner still holds them. */
  scopes: Scope[];
  expiresAt: string | null;
}

/** A token as the API shows it: without its kind (the API shows API tokens only). */
export function shownToken<T extends { kind: TokenKind }>({ kind: _, ...token }: T): Omit<T, 'kind'> {
  return token;
}
