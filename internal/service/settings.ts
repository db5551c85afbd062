// Settings' one operation: a merge patch. Some keys need `*` to change; those agents read reach every node once the
// change commits.

import { grants } from '../auth/scopes.ts';
import { checkIfMatchTag } from './etag.ts';
import { agentKeys, guardedKeys, type Settings } from '../settings/settings.ts';
import { missingScope, transact, type Committer, type Requester } from './write.ts';

/**
 * Applies `patch` (null resets a key) and audits what changed; in effect from the commit on. Throws
 * `precondition_failed`, `validation_failed`, `insufficient_scope` (a guarded key without `*`).
 */
export async function patchSettings(
  app: Committer,
  requester: Requester,
  patch: Parameters<Settings['apply']>[0],
  ifMatch?: string,
): Promise<void> {
  try {
    await transact(app, requester, (change) => {
      checkIfMatchTag(ifMatch, app.settings.etag());
      const { changed, ...changes } = app.settings.apply(patch);
      const guarded = guardedKeys.filter((key) => changed.includes(key));
      if (guarded.length > 0 && !grants(requester.caller.scopes, '*'))
        throw missingScope('*', `changing ${guarded.join(', ')}`);
      if (agentKeys.some((key) => changed.includes(key)))
        app.store.db.afterCommit(() => app.sync.configChangedEverywhere());
      if (changed.length > 0) change.audit({ resource: 'settings', resource_id: null, changes });
      // In effect from the commit on (agents get them then); a failed commit reloads them again.
      app.settings.reload();
    });
  } finally {
    app.settings.reload();
  }
}
