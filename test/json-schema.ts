// Holds real responses against the published schemas with a strict validator nobody here wrote (Ajv, JSON Schema
// 2020-12 as OpenAPI 3.1 uses it, formats on).

import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';

const addFormats = addFormatsModule as unknown as typeof addFormatsModule.default;

/** `value` with every local `$ref` (#/components/...) replaced by what it points at, as a checker reads it. */
export function inlineRefs(value: any, root: any = value): any {
  if (Array.isArray(value)) return value.map((item) => inlineRefs(item, root));
  if (typeof value !== 'object' || value === null) return value;
  if (typeof value.$ref === 'string') {
    const { $ref, ...rest } = value;
    const target = $ref
      .slice(2)
      .split('/')
      .reduce((node: any, key: string) => node[key], root);
    return { ...inlineRefs(target, root), ...rest };
  }
  return Object.fromEntries(Object.entries(value).map(([key, inner]) => [key, inlineRefs(inner, root)]));
}

const ajv = new Ajv2020({ allErrors: true, strict: true, strictTypes: false, strictRequired: false });
addFormats(ajv);
// The document's own marks: a secret field (see internal/schema/schema.ts).
ajv.addKeyword('x-secret');
const compiled = new Map<string, ValidateFunction>();

/**
 * The ways `value` breaks `schema` (JSON Schema 2020-12, as OpenAPI 3.1 uses it, with formats checked), as
 * readable lines; none when it holds. `schema` has its references inlined (see `inlineRefs`).
 */
export function check(schema: object, value: unknown): string[] {
  const key = JSON.stringify(schema);
  let validate = compiled.get(key);
  if (!validate) compiled.set(key, (validate = ajv.compile(schema)));
  if (validate(value)) return [];
  return (validate.errors ?? []).map(
    (e) => `${e.instancePath || '#'} ${e.message} ${JSON.stringify(e.params)}: ${JSON.stringify(value).slice(0, 300)}`,
  );
}
