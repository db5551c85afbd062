// Users' operations. A caller manages only users whose scopes it holds itself, and gives only scopes it holds; the
// last enabled holder of * stays one. Disabling a user ends its sessions and revokes its API tokens; a new password
// ends its sessions.

import { grantsAll, tenantScopes, type Scope } from '../auth/scopes.ts';
import { hashPassword, NO_PASSWORD } from '../auth/secrets.ts';
import { DomainError, notFound, validationFailed } from '../errors/errors.ts';
import { checkIfMatch } from './etag.ts';
import type { FieldError } from '../schema/schema.ts';
import type { Role } from '../auth/principal.ts';
import type { User } from '../store/users.ts';
import { holdToStanding } from './standing.ts';
import { diff, transact, type Change, type Committer, type Requester, type WriteDeps } from './write.ts';

/** A user as written: `password` absent on an update keeps the current one. */
export interface UserInput {
  username: string;
  password?: string;
  role: Role;
  plan_id: number | null;
  scopes: Scope[];
  disabled: boolean;
  /** When a tenant's account ends; null: never. */
  expires_at: string | null;
}

/** Throws `validation_failed` for scopes a tenant may not hold, or a plan that is not there or not for this role. */
function checkRole(app: WriteDeps, input: UserInput): void {
  const errors: FieldError[] = [];
  if (input.role === 'tenant')
    input.scopes.forEach((scope, index) => {
      if (!tenantScopes.includes(scope))
        errors.push({
          pointer: `#/scopes/${index}`,
          detail: `a tenant may hold only ${tenantScopes.join(', ')}: what they own is all they reach`,
        });
    });
  if (input.expires_at !== null && input.role !== 'tenant')
    errors.push({ pointer: '#/expires_at', detail: "an account expiry is a tenant's: an operator's would lock out" });
  if (input.plan_id !== null) {
    if (input.role !== 'tenant') errors.push({ pointer: '#/plan_id', detail: 'a plan holds tenants only' });
    else if (!app.store.plans.find(input.plan_id))
      errors.push({ pointer: '#/plan_id', detail: `plan ${input.plan_id} does not exist` });
  }
  if (errors.length > 0) throw validationFailed(errors);
}

/** Throws `insufficient_scope` (`what` says for what) unless `caller` holds every one of `scopes`. */
export function requireHolds(caller: { scopes: readonly Scope[] }, scopes: readonly Scope[], what: string): void {
  if (!grantsAll(caller.scopes, scopes))
    throw new DomainError('insufficient_scope', `${what}: you can only grant or manage scopes you hold yourself`);
}

/** Throws `conflict` for a change that would leave no enabled user holding `*` (`remains`: `user` still would). */
function keepASuperuser(app: WriteDeps, user: User, remains: boolean): void {
  if (user.scopes.includes('*') && !user.disabled && !remains && app.store.users.otherSuperusers(user.id) === 0) {
    throw new DomainError(
      'conflict',
      `${user.username} is the last enabled user holding *; give * to another user first`,
    );
  }
}

/** Creates a user with a password. Throws `insufficient_scope`, `conflict` (the username). */
export async function createUser(
  app: Committer,
  requester: Requester,
  input: UserInput & { password: string },
): Promise<User> {
  requireHolds(requester.caller, input.scopes, 'cannot create this user');
  const passwordHash = await hashPassword(input.password);
  return transact(app, requester, (change) => {
    checkRole(app, input);
    const inserted = app.store.users.insert({ ...input, password_hash: passwordHash }, app.timestamp());
    holdToStanding(app, change, inserted.id);
    change.audit({
      resource: 'user',
      resource_id: inserted.id,
      changes: { after: { ...inserted, password: input.password } },
    });
    return app.store.users.find(inserted.id)!;
  });
}

/**
 * Inside a write: a user the provider signed in and the operators' oidc_provisioning creates, as it says, without a
 * password (they sign in by the provider). Throws `validation_failed` for a role or plan that no longer fits.
 */
export function provisionUser(app: WriteDeps, change: Change, input: Omit<UserInput, 'password'>): User {
  checkRole(app, input);
  const inserted = app.store.users.insert({ ...input, password_hash: NO_PASSWORD }, app.timestamp());
  holdToStanding(app, change, inserted.id);
  change.audit({ resource: 'user', resource_id: inserted.id, changes: { after: inserted } });
  return app.store.users.find(inserted.id)!;
}

/**
 * Replaces user `id`. Throws `not_found`, `precondition_failed`, `insufficient_scope` (its scopes or the new ones),
 * `conflict` (the username, or the last holder of *).
 */
export async function updateUser(
  app: Committer,
  requester: Requester,
  id: number,
  input: UserInput,
  ifMatch?: string,
): Promise<User> {
  requireHolds(requester.caller, input.scopes, 'cannot give these scopes');
  // Hashing is slow and async, so it happens before the (synchronous) transaction.
  const passwordHash = input.password === undefined ? null : await hashPassword(input.password);
  return transact(app, requester, (change) => {
    const current = app.store.users.find(id);
    if (!current) throw notFound('user', id);
    checkIfMatch(ifMatch, current.version);
    requireHolds(requester.caller, current.scopes, `cannot change ${current.username}`);
    keepASuperuser(app, current, input.scopes.includes('*') && !input.disabled);
    checkRole(app, input);
    const updated = app.store.users.update(id, { ...input, password_hash: passwordHash }, app.timestamp());
    if (updated.disabled && !current.disabled) app.store.tokens.deleteForUser(id, ['api', 'session']);
    else if (passwordHash !== null) app.store.tokens.deleteForUser(id, ['session']);
    holdToStanding(app, change, id);
    // What a rule may reach follows its owner's role (see ownerPolicy): their nodes get configs saying so.
    if (updated.role !== current.role) for (const nodeId of app.store.rules.carriersOf(id)) change.touchNode(nodeId);
    const changes = diff(current, updated, ['username', 'role', 'plan_id', 'scopes', 'disabled', 'expires_at']);
    if (passwordHash !== null) Object.assign(changes.after, { password: input.password });
    change.audit({ resource: 'user', resource_id: id, changes });
    // As holding to the standing left it (the allowance's period set or cleared).
    return app.store.users.find(id)!;
  });
}

/**
 * Deletes user `id` with its sessions and tokens. Throws `not_found`, `precondition_failed`, `insufficient_scope`,
 * `conflict` (the last holder of *, or a user who owns rules or tunnels: what they own is not to go with them
 * unnoticed, nor to fall to someone no one chose).
 */
export async function removeUser(app: Committer, requester: Requester, id: number, ifMatch?: string): Promise<void> {
  await transact(app, requester, (change) => {
    const current = app.store.users.find(id);
    if (!current) throw notFound('user', id);
    checkIfMatch(ifMatch, current.version);
    requireHolds(requester.caller, current.scopes, `cannot delete ${current.username}`);
    keepASuperuser(app, current, false);
    const owned = app.store.users.owned(id);
    if (owned.rules > 0 || owned.tunnels > 0)
      throw new DomainError(
        'conflict',
        `${current.username} owns ${owned.rules} rule(s) and ${owned.tunnels} tunnel(s): give them to another user ` +
          `first (POST /api/rules/batch-update with filter {"owner_id": ${id}} and changes {"owner_id": ...}, and ` +
          `each tunnel's owner_id), or delete them`,
        { data: owned },
      );
    app.store.users.delete(id);
    change.audit({ resource: 'user', resource_id: id, changes: { before: current } });
  });
}
