// Query parameters: each arrives as a string, so these schemas parse strings into typed
// values. Unknown or repeated parameters are refused, so a typo in a filter is caught.

import { DomainError } from '../errors/errors.ts';
import { formatTime, parseDateTime, type FieldError, type Schema } from './schema.ts';

type Parsed<T> = { value: T } | { error: string };

function param<T>(json: Record<string, unknown>, parse: (raw: string) => Parsed<T>, fallback: T): Schema<T> {
  return {
    json,
    check(value, pointer, errors) {
      const parsed = parse(String(value));
      if ('error' in parsed) {
        errors.push({ pointer, detail: parsed.error });
        return fallback;
      }
      return parsed.value;
    },
  };
}

export function intParam(options: {
  min: number;
  max: number;
  multipleOf?: number;
  description?: string;
}): Schema<number> {
  const json = {
    type: 'integer',
    minimum: options.min,
    maximum: options.max,
    ...(options.multipleOf ? { multipleOf: options.multipleOf } : {}),
    description: options.description,
  };
  return param<number>(
    json,
    (raw) => {
      if (!/^-?\d{1,16}$/.test(raw)) return { error: 'must be an integer' };
      const n = Number(raw);
      if (n < options.min || n > options.max) return { error: `must be between ${options.min} and ${options.max}` };
      if (options.multipleOf && n % options.multipleOf !== 0)
        return { error: `must be a multiple of ${options.multipleOf}` };
      return { value: n };
    },
    0,
  );
}

export function boolParam(description?: string): Schema<boolean> {
  return param<boolean>(
    { type: 'boolean', description },
    (raw) =>
      raw === 'true' ? { value: true } : raw === 'false' ? { value: false } : { error: 'must be true or false' },
    false,
  );
}

export function timeParam(description?: string): Schema<string> {
  return param<string>(
    { type: 'string', format: 'date-time', description },
    (raw) => {
      const ms = parseDateTime(raw);
      return Number.isNaN(ms)
        ? { error: 'must be an RFC 3339 date-time of a real calendar date such as 2026-11-21T10:00:00Z' }
        : { value: formatTime(ms) };
    },
    '',
  );
}

export function textParam(options: { max: number; values?: readonly string[]; description?: string }): Schema<string> {
  const json: Record<string, unknown> = { type: 'string', maxLength: options.max, description: options.description };
  if (options.values) json.enum = [...options.values];
  return param<string>(
    json,
    (raw) => {
      if (raw.length > options.max) return { error: `must be at most ${options.max} characters` };
      if (options.values && !options.values.includes(raw))
        return { error: `must be one of ${options.values.join(', ')}` };
      return { value: raw };
    },
    '',
  );
}

/** A comma-separated list of distinct values out of `values` (at least one). */
export function listParam(options: { values: readonly string[]; description?: string }): Schema<string[]> {
  const json = {
    type: 'string',
    description: `${options.description ?? ''} Comma-separated, each one of: ${options.values.join(', ')}.`.trim(),
  };
  return param<string[]>(
    json,
    (raw) => {
      const items = raw.split(',');
      const unknown = items.find((item) => !options.values.includes(item));
      if (unknown !== undefined)
        return {
          error: `holds ${JSON.stringify(unknown.slice(0, 40))}; each must be one of ${options.values.join(', ')}`,
        };
      if (new Set(items).size !== items.length) return { error: 'names a value twice' };
      return { value: items };
    },
    [],
  );
}

export type QuerySpec = Record<string, Schema<unknown>>;
export type QueryOf<Q extends QuerySpec> = { [K in keyof Q]?: Q[K] extends Schema<infer T> ? T : never };

/**
 * Parses `search` against `spec` (a parameter it does not name is an error, unless `othersIgnored`). Throws
 * `invalid_query` listing every bad parameter.
 */
export function parseQuery<Q extends QuerySpec>(spec: Q, search: URLSearchParams, othersIgnored = false): QueryOf<Q> {
  const errors: FieldError[] = [];
  const out: Record<string, unknown> = {};
  const seen = new Set<string>();
  for (const [name, raw] of search) {
    const pointer = `?${name}`;
    if (!Object.hasOwn(spec, name)) {
      if (othersIgnored) continue;
      errors.push({ pointer, detail: 'is not a known query parameter' });
    } else if (seen.has(name)) {
      errors.push({ pointer, detail: 'is given more than once' });
    } else {
      out[name] = spec[name]!.check(raw, pointer, errors);
    }
    seen.add(name);
  }
  if (errors.length > 0) {
    const first = errors[0]!;
    throw new DomainError(
      'invalid_query',
      errors.length === 1
        ? `${first.pointer.slice(1)} ${first.detail}`
        : `${errors.length} query parameters are invalid`,
      { errors },
    );
  }
  return out as QueryOf<Q>;
}

/** `limit` and `cursor`, shared by every list. */
export const listQuery = {
  limit: intParam({ min: 1, max: 1000, description: 'Items per page (default 50).' }),
  cursor: textParam({ max: 200, description: 'The next_cursor of the previous page.' }),
  count: boolParam('Also answer `total`: how many items match in all (a count of every match: slower on long lists).'),
};
