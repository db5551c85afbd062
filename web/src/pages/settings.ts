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

type Values = Record<string, unknown>;
type Control = HTMLInputElement | HTMLTextAreaElement;

/**
 * How a setting is edited: a number or text as itself; a list as JSON; a secret (`<key>_set` in what GET shows)
 * written only, its field empty unless a new one is typed.
 */
interface Editor {
  control: Control;
  show(values: Values): void;
  /** The value to send when it differs from `values`; undefined when it does not. */
  change(values: Values): unknown;
}

function editorOf(key: string, schema: PropertySchema): [string, Editor] {
  const secret = key.endsWith('_set') && schema.type === 'boolean';
  if (secret) {
    const name = key.slice(0, -'_set'.length);
    const control = input(name, { type: 'password', autocomplete: 'off', spellcheck: 'false' });
    return [
      name,
      {
        control,
        show(values) {
          control.value = '';
          control.placeholder = values[key] ? 'set (type a new one to replace it)' : 'not set';
        },
        change: () => (control.value === '' ? undefined : control.value),
      },
    ];
  }
  if (schema.type === 'array') {
    const control = h('textarea', { name: key, rows: 3, spellcheck: 'false' });
    return [
      key,
      {
        control,
        show(values) {
          control.value = JSON.stringify(values[key] ?? []);
        },
        change(values) {
          if (control.value === JSON.stringify(values[key] ?? [])) return undefined;
          try {
            return JSON.parse(control.value);
          } catch {
            return control.value;
          }
        },
      },
    ];
  }
  const control =
    schema.type === 'integer'
      ? input(key, { type: 'number', step: 1, min: schema.minimum, max: schema.maximum })
      : input(key, { maxlength: schema.maxLength, pattern: schema.pattern, spellcheck: 'false' });
  return [
    key,
    {
      control,
      show(values) {
        control.value = String(values[key] ?? '');
      },
      change(values) {
        const value = control.type === 'number' && control.value !== '' ? Number(control.value) : control.value;
        return value === values[key] ? undefined : value;
      },
    },
  ];
}

export async function settingsPage(ctx: PageCtx): Promise<void> {
  const [openapi, current] = await Promise.all([
    get<{ components: { schemas: { Settings: { properties: Record<string, PropertySchema> } } } }>('/api/openapi.json'),
    api<Values>('GET', '/api/settings'),
  ]);
  let values = current.data;
  let etag = current.etag;
  const editors = new Map<string, Editor>();
  const fields = Object.entries(openapi.components.schemas.Settings.properties).map(([key, schema]) => {
    const [name, editor] = editorOf(key, schema);
    editors.set(name, editor);
    const range = schema.type === 'integer' ? ` (${schema.minimum} to ${schema.maximum})` : '';
    return field(name.replaceAll('_', ' '), editor.control, `${schema.description ?? ''}${range}`);
  });
  const fill = () => {
    for (const editor of editors.values()) editor.show(values);
  };
  fill();
  const reload = h('button', { type: 'button', hidden: true }, 'Load the current settings');
  reload.addEventListener('click', async () => {
    const fresh = await api<Values>('GET', '/api/settings');
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
      const patch: Values = {};
      for (const [key, editor] of editors) {
        const value = editor.change(values);
        if (value !== undefined) patch[key] = value;
      }
      if (Object.keys(patch).length === 0) return ctx.say('Nothing changed');
      try {
        const saved = await api<Values>('PATCH', '/api/settings', {
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
  if (!editable) for (const editor of editors.values()) editor.control.readOnly = true;
  ctx.main.append(settings);
}
