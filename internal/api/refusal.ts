// Whether a caller may call a route at all: its scope, a login session where the route needs one, and a tenant only
// where the route follows ownership. Asked at each request, and when a retried request reads what it made.

import { grants } from '../auth/scopes.ts';
import { DomainError } from '../errors/errors.ts';
import type { Principal } from '../auth/principal.ts';
import type { Route } from './route.ts';

/** Why `principal` may not call `route`: the error to answer and what the denial's audit entry says; else null. */
export function refusalOf(
  route: Pick<Route, 'method' | 'path' | 'scope' | 'tenants'>,
  principal: Pick<Principal, 'role' | 'kind' | 'scopes'>,
): { error: DomainError; audited: Record<string, unknown> } | null {
  if (route.scope === 'public') return null;
  if (principal.role === 'tenant' && !route.tenants)
    return {
      error: new DomainError('operators_only', `${route.method} ${route.path} is for operators`),
      audited: { operators_only: true },
    };
  if (route.scope === 'authenticated') return null;
  if (route.scope === 'session') {
    if (principal.kind === 'session') return null;
    const detail = 'this call needs a login session (POST /api/auth/login), not an API token';
    return { error: new DomainError('insufficient_scope', detail), audited: { required_scope: route.scope } };
  }
  if (grants(principal.scopes, route.scope)) return null;
  return {
    error: new DomainError('insufficient_scope', `this call needs the scope ${route.scope}`, {
      requiredScope: route.scope,
    }),
    audited: { required_scope: route.scope },
  };
}
