// Settings: one typed resource, read whole and changed by JSON merge patch.

import type { Infer } from '../schema/schema.ts';
import { patchSettings } from '../service/settings.ts';
import { guardedKeys, settingsPatchSchema, settingsSchema } from '../settings/settings.ts';
import { type Ctx, ok, operation, operations } from './route.ts';

async function patchSettingsAnswer(ctx: Ctx<Infer<typeof settingsPatchSchema>, {}>) {
  await patchSettings(ctx.app, ctx, ctx.body, ctx.headers['if-match']);
  return ok(ctx.app.settings.values, { ETag: ctx.app.settings.etag() });
}

/** Changing these settings needs `*` besides settings:write. */
export const GUARDED_SETTINGS = [{ scope: '*', when: `changing ${guardedKeys.join(', ')}` }] as const;

export const settingsOperations = operations({
  getSettings: operation({
    summary: 'Show every setting',
    responses: { 200: { description: 'The settings', schema: settingsSchema } },
    handler: (ctx: Ctx<undefined, {}>) => {
      return ok(ctx.app.settings.values, { ETag: ctx.app.settings.etag() });
    },
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
    handler: patchSettingsAnswer,
  }),
});
