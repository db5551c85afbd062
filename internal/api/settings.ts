// Settings: one typed resource, read whole and changed by JSON merge patch.

import { checkIfMatchTag } from '../http/etag.ts';
import type { Infer } from '../schema/schema.ts';
import { grants } from '../auth/scopes.ts';
import { agentKeys, guardedKeys, settingsPatchSchema, settingsSchema } from '../settings/settings.ts';
import { missingScope, transact } from '../service/write.ts';
import { type Ctx, ok, operation, operations } from './route.ts';

function getSettings(ctx: Ctx<undefined, {}>) {
  return ok(ctx.app.settings.values, { ETag: ctx.app.settings.etag() });
}

async function patchSettings(ctx: Ctx<Infer<typeof settingsPatchSchema>, {}>) {
  const { app } = ctx;
  try {
    await transact(app, ctx, (change) => {
      checkIfMatchTag(ctx.headers['if-match'], app.settings.etag());
      const changes = app.settings.apply(ctx.body);
      const guarded = guardedKeys.filter((key) => key in changes.after);
      if (guarded.length > 0 && !grants(ctx.caller.scopes, '*'))
        throw missingScope('*', `changing ${guarded.join(', ')}`);
      if (agentKeys.some((key) => key in changes.after))
        app.store.db.afterCommit(() => app.sync.configChangedEverywhere());
      if (Object.keys(changes.after).length > 0) {
        change.audit({ resource: 'settings', resource_id: null, changes });
      }
      // In effect from the commit on (agents get them then); a failed commit reloads them again.
      app.settings.reload();
    });
  } finally {
    app.settings.reload();
  }
  return ok(app.settings.values, { ETag: app.settings.etag() });
}

/** Changing these settings needs `*` besides settings:write. */
export const GUARDED_SETTINGS = [{ scope: '*', when: `changing ${guardedKeys.join(', ')}` }] as const;

export const settingsOperations = operations({
  getSettings: operation({
    summary: 'Show every setting',
    responses: { 200: { description: 'The settings', schema: settingsSchema } },
    handler: getSettings,
  }),
  updateSettings: operation({
    action: 'settings.update',
    summary: 'Change settings with a JSON merge patch',
    description:
      'Send only the keys to change (application/json or application/merge-patch+json); null resets a key to its ' +
      'default. Unknown keys or bad values: 422 and nothing changes. Keys that redirect installs or weaken a ' +
      'protection need * to change (403 and nothing changes); sending them with their current value needs no ' +
      'more than settings:write.',
    body: settingsPatchSchema,
    responses: { 200: { description: 'The settings after the change', schema: settingsSchema } },
    handler: patchSettings,
  }),
});
