// A small validation vocabulary: each schema both checks untrusted input and describes
// itself as JSON Schema, so the validators and the OpenAPI document cannot disagree.

import { MAX_LISTED_ERRORS, type FieldError } from '../errors/errors.ts';

export type { FieldError };

export type JsonSchema = { [key: string]: unknown };

/** A `FieldError` as JSON Schema: what every 422 (and a failed batch item) lists in `errors`. */
export const fieldErrorSchema: JsonSchema = {
  title: 'FieldError',
  type: 'object',
  required: ['pointer', 'detail'],
  properties: {
    pointer: {
      type: 'string',
      description:
        "Where: a JSON Pointer into the body (#/targets/1), ?name for a query parameter, or a header's name " +
        '(Idempotency-Key).',
    },
    detail: { type: 'string', description: 'What is wrong with it, in words.' },
  },
  additionalProperties: false,
};

export interface Schema<T> {
  readonly json: JsonSchema;
  /** Returns the checked (and normalised) value; problems are pushed onto `errors`. */
  check(value: unknown, pointer: string, errors: FieldError[]): T;
}

export type Infer<S> = S extends Schema<infer T> ? T : never;

interface Common {
  description?: string;
  example?: unknown;
  /** The value is a secret (a password, a key, a bearer token): see `secret`. */
  secret?: boolean;
}

/**
 * The mark of a value that is a secret, in its JSON Schema (and so in the OpenAPI document). Whatever is kept of a
 * request or an answer (an Idempotency-Key's replay, an audit entry) has such fields redacted: `secretFields` reads
 * the mark, so a field marked here is redacted everywhere with nothing else to list.
 */
export const SECRET = 'x-secret';

/** `json` marked as a secret's schema. */
export function secret(json: JsonSchema): JsonSchema {
  return { ...json, [SECRET]: true };
}

function annotate(json: JsonSchema, common: Common): JsonSchema {
  if (common.description !== undefined) json.description = common.description;
  if (common.example !== undefined) json.examples = [common.example];
  if (common.secret) json[SECRET] = true;
  return json;
}

function typeName(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return `a ${typeof value}`;
}

export function pointerChild(pointer: string, key: string | number): string {
  return `${pointer}/${escapeKey(key)}`;
}

function escapeKey(key: string | number): string {
  return typeof key === 'number' ? String(key) : key.replace(/~/g, '~0').replace(/\//g, '~1');
}

/**
 * The length of `value` in code points, as callers count characters. UTF-16 length bounds it
 * (between half of it and all of it), so the count is only made when the bounds cannot decide.
 */
function lengthWithin(value: string, min: number, max: number): -1 | 0 | 1 {
  if (value.length <= max && value.length >= 2 * min) return 0;
  const length = [...value].length;
  return length < min ? -1 : length > max ? 1 : 0;
}

export interface StringOptions extends Common {
  min?: number;
  max: number;
  pattern?: RegExp;
  /** Said to the caller when `pattern` does not match. */
  patternHint?: string;
  format?: string;
  /** Extra check beyond the pattern; returns a problem or null. */
  refine?: (value: string) => string | null;
  /** What the document says `refine` checks, where a format or pattern can say it (JSON Schema keywords). */
  documented?: JsonSchema;
}

export function string(options: StringOptions): Schema<string> {
  const min = options.min ?? 0;
  const json: JsonSchema = { type: 'string', minLength: min, maxLength: options.max };
  if (options.pattern) json.pattern = options.pattern.source;
  if (options.format) json.format = options.format;
  Object.assign(json, options.documented);
  return {
    json: annotate(json, options),
    check(value, pointer, errors) {
      if (typeof value !== 'string') {
        errors.push({ pointer, detail: `must be a string, not ${typeName(value)}` });
        return '';
      }
      const length = lengthWithin(value, min, options.max);
      if (length < 0) {
        errors.push({ pointer, detail: min === 1 ? 'must not be empty' : `must be at least ${min} characters` });
      } else if (length > 0) {
        errors.push({ pointer, detail: `must be at most ${options.max} characters` });
      } else if (options.pattern && !options.pattern.test(value)) {
        errors.push({ pointer, detail: options.patternHint ?? `must match ${options.pattern.source}` });
      } else if (options.refine) {
        const problem = options.refine(value);
        if (problem) errors.push({ pointer, detail: problem });
      }
      return value;
    },
  };
}

type Bounds = Common & { min: number; max: number };

/** A JSON number of `type` between `min` and `max`: an integer, or any finite number. */
function bounded(type: 'integer' | 'number', options: Bounds): Schema<number> {
  const accepts = type === 'integer' ? Number.isInteger : Number.isFinite;
  return {
    json: annotate({ type, minimum: options.min, maximum: options.max }, options),
    check(value, pointer, errors) {
      if (typeof value !== 'number' || !accepts(value)) {
        errors.push({
          pointer,
          detail: `must be ${type === 'integer' ? 'an integer' : 'a number'}, not ${typeName(value)}`,
        });
        return 0;
      }
      if (value < options.min || value > options.max) {
        errors.push({ pointer, detail: `must be between ${options.min} and ${options.max}` });
      }
      return value;
    },
  };
}

export function integer(options: Bounds): Schema<number> {
  return bounded('integer', options);
}

/** A finite number between `min` and `max`, fractions allowed. */
export function number(options: Bounds): Schema<number> {
  return bounded('number', options);
}

export function boolean(common: Common = {}): Schema<boolean> {
  return {
    json: annotate({ type: 'boolean' }, common),
    check(value, pointer, errors) {
      if (typeof value !== 'boolean') errors.push({ pointer, detail: `must be true or false, not ${typeName(value)}` });
      return value === true;
    },
  };
}

export function oneOf<const V extends string>(values: readonly V[], common: Common = {}): Schema<V> {
  return {
    json: annotate({ type: 'string', enum: [...values] }, common),
    check(value, pointer, errors) {
      if (typeof value !== 'string' || !(values as readonly string[]).includes(value)) {
        errors.push({ pointer, detail: `must be one of ${values.join(', ')}` });
      }
      return value as V;
    },
  };
}

const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-](\d{2}):(\d{2}))$/i;

/**
 * The time an RFC 3339 date-time names, in ms since the epoch; NaN for anything else, a date that is on no calendar
 * included: JavaScript's Date.parse takes 2026-02-30 as March 2, and 24:00 as the next day.
 */
export function parseDateTime(text: string): number {
  const match = RFC3339.exec(text);
  if (!match) return NaN;
  const [year, month, day, hour, minute, second] = match.slice(1, 7).map(Number) as [number, ...number[]];
  const daysInMonth = new Date(Date.UTC(year, month!, 0)).getUTCDate();
  const offsetOk = match[9] === undefined || (Number(match[9]) <= 23 && Number(match[10]) <= 59);
  if (month! < 1 || month! > 12 || day! < 1 || day! > daysInMonth || hour! > 23 || minute! > 59 || second! > 59)
    return NaN;
  return offsetOk ? Date.parse(text) : NaN;
}

/** An RFC 3339 date-time; returned normalised to UTC with second precision. */
export function dateTime(common: Common = {}): Schema<string> {
  return {
    json: annotate({ type: 'string', format: 'date-time' }, common),
    check(value, pointer, errors) {
      const ms = typeof value === 'string' ? parseDateTime(value) : NaN;
      if (Number.isNaN(ms)) {
        errors.push({
          pointer,
          detail: 'must be an RFC 3339 date-time of a real calendar date such as 2026-11-21T10:00:00Z',
        });
        return '';
      }
      return formatTime(ms);
    },
  };
}

// Writes stamp many rows within one second (an import, 100,000): the text of the last second is kept.
let lastSecond = NaN;
let lastText = '';

export function formatTime(ms: number): string {
  const second = Math.floor(ms / 1000);
  if (second !== lastSecond) {
    lastText = new Date(second * 1000).toISOString().replace('.000Z', 'Z');
    lastSecond = second;
  }
  return lastText;
}

export function array<T>(
  item: Schema<T>,
  options: Common & { min?: number; max: number; unique?: boolean },
): Schema<T[]> {
  const min = options.min ?? 0;
  const json: JsonSchema = { type: 'array', items: item.json, minItems: min, maxItems: options.max };
  if (options.unique) json.uniqueItems = true;
  return {
    json: annotate(json, options),
    check(value, pointer, errors) {
      if (!Array.isArray(value)) {
        errors.push({ pointer, detail: `must be an array, not ${typeName(value)}` });
        return [];
      }
      if (value.length < min) errors.push({ pointer, detail: `must have at least ${min} item${min === 1 ? '' : 's'}` });
      if (value.length > options.max) {
        errors.push({ pointer, detail: `must have at most ${options.max} items` });
        return [];
      }
      const out: T[] = [];
      for (const [index, element] of value.entries()) {
        // Past what a 422 lists, the value is refused anyway: the rest need not be looked at.
        if (errors.length > MAX_LISTED_ERRORS) break;
        out.push(item.check(element, `${pointer}/${index}`, errors));
      }
      if (options.unique && out.length > 1) {
        const seen = new Set<unknown>();
        out.forEach((element, index) => {
          const key = typeof element === 'object' ? JSON.stringify(element) : element;
          if (seen.has(key)) errors.push({ pointer: pointerChild(pointer, index), detail: 'is a duplicate' });
          seen.add(key);
        });
      }
      return out;
    },
  };
}

export function nullable<T>(inner: Schema<T>): Schema<T | null> {
  return {
    json: { ...inner.json, type: [inner.json.type, 'null'] },
    check(value, pointer, errors) {
      return value === null ? null : inner.check(value, pointer, errors);
    },
  };
}

/** Marks an object property as optional; `fallback` is used when it is absent. */
export interface Optional<T, D> {
  readonly optional: true;
  readonly schema: Schema<T>;
  readonly fallback: D;
}

export function optional<T>(schema: Schema<T>): Optional<T, undefined>;
export function optional<T, D extends T>(schema: Schema<T>, fallback: D): Optional<T, T>;
export function optional<T, D>(schema: Schema<T>, fallback?: D): Optional<T, D | undefined> {
  return { optional: true, schema, fallback };
}

type Property = Schema<any> | Optional<any, any>;
type Properties = Record<string, Property>;
type PropertyType<P> = P extends Optional<infer T, infer D> ? T | D : P extends Schema<infer T> ? T : never;
export type ObjectOf<P extends Properties> = { [K in keyof P]: PropertyType<P[K]> };

export interface ObjectOptions extends Common {
  /** Fields accepted and dropped, so `GET | jq | PUT` round-trips read-only fields. */
  ignore?: readonly string[];
  /** Name under components/schemas in the OpenAPI document. */
  name?: string;
  /** At least this many of the known fields must be given (a patch that changes nothing is a mistake). */
  minProperties?: number;
}

export interface ObjectSchema<P extends Properties> extends Schema<ObjectOf<P>> {
  readonly properties: P;
  readonly name?: string;
}

/** Splits a property into its schema and, when optional, its fallback. */
function unpack(property: Property): { schema: Schema<unknown>; optional: boolean; fallback: unknown } {
  const maybe = property as Optional<unknown, unknown>;
  return maybe.optional === true
    ? { schema: maybe.schema, optional: true, fallback: maybe.fallback }
    : { schema: property as Schema<unknown>, optional: false, fallback: undefined };
}

export function object<P extends Properties>(properties: P, options: ObjectOptions = {}): ObjectSchema<P> {
  const fields = Object.entries(properties).map(([key, property]) => ({
    key,
    escaped: escapeKey(key),
    ...unpack(property),
  }));
  const required = fields.filter((field) => !field.optional).map((field) => field.key);
  const jsonProperties: JsonSchema = {};
  for (const { key, schema, fallback } of fields) {
    jsonProperties[key] = fallback === undefined ? schema.json : { ...schema.json, default: fallback };
  }
  const json: JsonSchema = {
    ...(options.name ? { title: options.name } : {}),
    type: 'object',
    properties: jsonProperties,
    additionalProperties: false,
  };
  if (required.length > 0) json.required = required;
  if (options.minProperties !== undefined) json.minProperties = options.minProperties;
  const ignored = new Set(options.ignore ?? []);
  return {
    properties,
    name: options.name,
    json: annotate(json, options),
    check(value, pointer, errors) {
      const out: Record<string, unknown> = {};
      if (typeof value !== 'object' || value === null || Array.isArray(value)) {
        errors.push({ pointer: pointer || '#', detail: `must be an object, not ${typeName(value)}` });
        return out as ObjectOf<P>;
      }
      const input = value as Record<string, unknown>;
      for (const key of Object.keys(input)) {
        if (errors.length > MAX_LISTED_ERRORS) break;
        if (!Object.hasOwn(properties, key) && !ignored.has(key)) {
          errors.push({ pointer: pointerChild(pointer, key), detail: 'is not a known field' });
        }
      }
      if (
        options.minProperties !== undefined &&
        fields.filter(({ key }) => Object.hasOwn(input, key) && input[key] !== undefined).length < options.minProperties
      )
        errors.push({ pointer: pointer || '#', detail: `must give at least ${options.minProperties} of its fields` });
      for (const { key, escaped, schema, optional, fallback } of fields) {
        const at = `${pointer}/${escaped}`;
        if (Object.hasOwn(input, key) && input[key] !== undefined) out[key] = schema.check(input[key], at, errors);
        else if (optional) out[key] = fallback;
        else errors.push({ pointer: at, detail: 'is required' });
      }
      return out as ObjectOf<P>;
    },
  };
}

/** A schema that only documents (responses); checking with it is a programming error. */
export function describe(json: JsonSchema): Schema<never> {
  return {
    json,
    check() {
      throw new Error('a describe() schema documents a response and cannot check input');
    },
  };
}

/** Checks `value` against `schema`; returns the value and the list of problems. */
export function validate<T>(schema: Schema<T>, value: unknown): { value: T; errors: FieldError[] } {
  const errors: FieldError[] = [];
  const checked = schema.check(value, '#', errors);
  return { value: checked, errors };
}

/** The schemas directly inside `json`: of its properties (by name), its items, and the alternatives it lists. */
function inner(json: JsonSchema): { name?: string; json: JsonSchema }[] {
  const out: { name?: string; json: JsonSchema }[] = [];
  const properties = json.properties as Record<string, JsonSchema> | undefined;
  for (const [name, child] of Object.entries(properties ?? {})) out.push({ name, json: child });
  if (json.items && typeof json.items === 'object') out.push({ json: json.items as JsonSchema });
  for (const key of ['allOf', 'anyOf', 'oneOf'])
    for (const child of (json[key] as JsonSchema[] | undefined) ?? []) out.push({ json: child });
  return out;
}

/** The names of every property any of `schemas` marks secret, at any depth. */
export function secretFields(schemas: readonly JsonSchema[]): Set<string> {
  const names = new Set<string>();
  const visit = (json: JsonSchema) => {
    for (const child of inner(json)) {
      if (child.name !== undefined && child.json[SECRET] === true) names.add(child.name);
      visit(child.json);
    }
  };
  for (const json of schemas) visit(json);
  return names;
}
