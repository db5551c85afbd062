// The scope vocabulary (`resource:action`) and the one check that decides whether a set of
// held scopes grants a wanted one. `write` implies `read` of the same resource; `*` is all.

export const resources = ['nodes', 'rules', 'tunnels', 'users', 'tokens', 'settings', 'alerts'] as const;

export const scopes = [
  ...resources.flatMap((resource) => [`${resource}:read`, `${resource}:write`] as const),
  'audit:read',
  'license:read',
  'dashboard:read',
  /** A standby master's: a copy of the whole database and every change to it (it reads all, secrets sealed). */
  'replication',
  '*',
] as const;

export type Scope = (typeof scopes)[number];

/**
 * What a tenant may hold: the scopes of what they can own or be granted. Routes answer a tenant only where they follow
 * ownership (`tenants` on the operation); every other route refuses them whatever they hold.
 */
export const tenantScopes: readonly Scope[] = [
  'rules:read',
  'rules:write',
  'tunnels:read',
  'tunnels:write',
  'nodes:read',
  'dashboard:read',
  'audit:read',
  'tokens:read',
  'tokens:write',
];

const known = new Set<string>(scopes);

export function isScope(value: string): value is Scope {
  return known.has(value);
}

export function grants(held: readonly string[], wanted: Scope): boolean {
  if (held.includes('*') || held.includes(wanted)) return true;
  if (wanted.endsWith(':read')) return held.includes(wanted.replace(/:read$/, ':write'));
  return false;
}

/** True when every scope in `wanted` is granted by `held`. */
export function grantsAll(held: readonly string[], wanted: readonly Scope[]): boolean {
  return wanted.every((scope) => grants(held, scope));
}

/** The scopes of `wanted` that `held` grants: how a token's scopes shrink with its owner's. */
export function intersect(held: readonly string[], wanted: readonly Scope[]): Scope[] {
  return wanted.filter((scope) => grants(held, scope));
}
