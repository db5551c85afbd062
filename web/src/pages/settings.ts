// Settings: a form typed from the API's own schema of them (integers with their range, strings
// with their pattern), saving only what changed, with If-Match so two admins cannot overwrite
// each other unseen.

import { api, ApiError, get } from '../api.ts';
import { field, form, h, input } from '../dom.ts';
import type { PageCtx } from '../main.ts';

interface PropertySchema {
  type: string;
  minimum?: number;
  maximum?: number;
  maxLength?: number;
  pattern?: string;
  description?: string;
}

export async function settingsPage(ctx: PageCtx): Promise<void> {
  const [openapi, current] = await Promise.all([
    get<{ components: { schemas: { Settings: { properties: Record<string, PropertySchema> } } } }>('/api/openapi.json'),
    api<Record<string, string | number>>('GET', '/api/settings'),
  ]);
  let values = current.data;
  let etag = current.etag;
  const properties = Object.entries(openapi.components.schemas.Settings.properties);
  const controls = new Map<string, HTMLInputElement>();
  const fields = properties.map(([key, schema]) => {
    const control =
      schema.type === 'integer'
        ? input(key, { type: 'number', step: 1, min: schema.minimum, max: schema.maximum })
        : input(key, { maxlength: schema.maxLength, pattern: schema.pattern, spellcheck: 'false' });
    controls.set(key, control);
    const range = schema.type === 'integer' ? ` (${schema.minimum} to ${schema.maximum})` : '';
    return field(key.replaceAll('_', ' '), control, `${schema.description ?? ''}${range}`);
  });
  const fill = () => {
    for (const [key, control] of controls) control.value = String(values[key] ?? '');
  };
  fill();
  const reload = h('button', { type: 'button', hidden: true }, 'Load the current settings');
  reload.addEventListener('click', async () => {
    const fresh = await api<Record<string, string | number>>('GET', '/api/settings');
    values = fresh.data;
    etag = fresh.etag;
    fill();
    reload.hidden = true;
    ctx.say('Loaded the current settings');
  });
  const editable = ctx.can('settings:write');
  const settings = form(
    { 'aria-label': 'Settings', class: 'settings' },
    [reload, ...fields, editable ? h('button', { type: 'submit' }, 'Save changes') : ''],
    async () => {
      const patch: Record<string, string | number> = {};
      for (const [key, control] of controls) {
        const value = control.type === 'number' && control.value !== '' ? Number(control.value) : control.value;
        if (value !== values[key]) patch[key] = value;
      }
      if (Object.keys(patch).length === 0) return ctx.say('Nothing changed');
      try {
        const saved = await api<Record<string, string | number>>('PATCH', '/api/settings', {
          body: patch,
          ifMatch: etag,
        });
        values = saved.data;
        etag = saved.etag;
      } catch (error) {
        if (error instanceof ApiError && error.status === 412) {
          reload.hidden = false;
          throw new ApiError({
            ...error.problem,
            detail: 'The settings changed since you opened them; nothing was saved.',
          });
        }
        throw error;
      }
      fill();
      ctx.say(`Saved ${Object.keys(patch).join(', ')}`);
    },
  );
  if (!editable) for (const control of controls.values()) control.readOnly = true;
  ctx.main.append(settings);
}
