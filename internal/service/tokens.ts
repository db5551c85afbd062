// API tokens' operations. A token is issued with scopes its owner holds (and that narrow with the owner's), shown
// once, and never changes after: revoking is all there is to do with it.

import { reaches } from './grants.ts';
import { grants, type Scope } from '../auth/scopes.ts';
import { hashSecret, newSecret } from '../auth/secrets.ts';
import { DomainError, notFound, validationFailed } from '../errors/errors.ts';
import { checkIfMatch } from './etag.ts';
import type { Token } from '../store/tokens.ts';
import { requireHolds } from './users.ts';
import { transact, type Committer, type Requester } from './write.ts';
import { shownToken } from '../auth/principal.ts';

/** A token's version, as its ETag shows it: a token never changes. */
export const TOKEN_VERSION = 1;

export interface TokenInput {
  name: string;
  scopes: Scope[];
  expires_at: string | null;
}

/**
 * Issues an API token of the user `ownerId` (the caller's), with scopes the caller holds. Returns it with its secret,
 * which nothing keeps. Throws `insufficient_scope`, `validation_failed` (an expiry past).
 */
export async function issueToken(
  app: Committer,
  requester: Requester,
  ownerId: number,
  input: TokenInput,
): Promise<{ token: Token; secret: string }> {
  const ungrantable = input.scopes.filter((scope) => !grants(requester.caller.scopes, scope));
  if (ungrantable.length > 0)
    throw new DomainError('insufficient_scope', `you cannot grant scopes you do not hold: ${ungrantable.join(', ')}`);
  if (input.expires_at !== null && input.expires_at <= app.timestamp())
    throw validationFailed([{ pointer: '#/expires_at', detail: 'must be in the future' }]);
  const secret = newSecret('api');
  const token = await transact(app, requester, (change) => {
    const inserted = app.store.tokens.insert(
      {
        kind: 'api',
        name: input.name,
        user_id: ownerId,
        scopes: input.scopes,
        secret_hash: hashSecret(secret),
        expires_at: input.expires_at,
      },
      app.timestamp(),
    );
    change.audit({ resource: 'token', resource_id: inserted.id, changes: { after: shownToken(inserted) } });
    return inserted;
  });
  return { token, secret };
}

/**
 * Revokes token `id`. A token may always revoke itself (`ownTokenId`, the caller's); any other only a caller holding
 * every scope of its owner; a tenant only their own. Throws `not_found`, `precondition_failed`, `insufficient_scope`.
 */
export async function revokeToken(
  app: Committer,
  requester: Requester,
  ownTokenId: number,
  id: number,
  ifMatch?: string,
): Promise<void> {
  await transact(app, requester, (change) => {
    const token = app.store.tokens.find(id);
    if (!token || !reaches(requester.caller, token.created_by.id)) throw notFound('token', id);
    checkIfMatch(ifMatch, TOKEN_VERSION);
    if (id !== ownTokenId)
      requireHolds(
        requester.caller,
        app.store.users.find(token.created_by.id)?.scopes ?? [],
        `cannot revoke a token of ${token.created_by.username}`,
      );
    app.store.tokens.delete(id);
    change.audit({ resource: 'token', resource_id: id, changes: { before: shownToken(token) } });
  });
}
