// A JSON Schema (2020-12) checker for the subset our OpenAPI document uses, for tests that
// hold real responses against the published schemas. Returns a list of problems.

type Schema = Record<string, any>;

function typeMatches(type: string, value: unknown): boolean {
  switch (type) {
    case 'null':
      return value === null;
    case 'integer':
      return Number.isInteger(value);
    case 'number':
      return typeof value === 'number';
    case 'array':
      return Array.isArray(value);
    case 'object':
      return typeof value === 'object' && value !== null && !Array.isArray(value);
    default:
      return typeof value === type;
  }
}

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

export function check(schema: Schema, value: unknown, at = '#'): string[] {
  const problems: string[] = [];
  if (schema.type !== undefined) {
    const types: string[] = [].concat(schema.type);
    if (!types.some((t) => typeMatches(t, value))) return [`${at}: ${JSON.stringify(value)} is not ${types.join('|')}`];
  }
  if (schema.enum && !schema.enum.includes(value))
    problems.push(`${at}: ${JSON.stringify(value)} not in ${schema.enum.join(',')}`);
  if (typeof value === 'number') {
    if (schema.minimum !== undefined && value < schema.minimum) problems.push(`${at}: below ${schema.minimum}`);
    if (schema.maximum !== undefined && value > schema.maximum) problems.push(`${at}: above ${schema.maximum}`);
  }
  if (typeof value === 'string') {
    if (schema.maxLength !== undefined && [...value].length > schema.maxLength)
      problems.push(`${at}: longer than ${schema.maxLength}`);
    if (schema.minLength !== undefined && [...value].length < schema.minLength)
      problems.push(`${at}: shorter than ${schema.minLength}`);
    if (schema.pattern && !new RegExp(schema.pattern, 'u').test(value))
      problems.push(`${at}: does not match ${schema.pattern}`);
    if (schema.format === 'date-time' && !/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/.test(value))
      problems.push(`${at}: not a date-time: ${value}`);
  }
  if (Array.isArray(value) && schema.items)
    value.forEach((item, i) => problems.push(...check(schema.items, item, `${at}/${i}`)));
  if (typeMatches('object', value)) {
    const object = value as Record<string, unknown>;
    for (const key of schema.required ?? []) if (!(key in object)) problems.push(`${at}: missing ${key}`);
    for (const [key, inner] of Object.entries(object)) {
      const sub = schema.properties?.[key];
      if (sub) problems.push(...check(sub, inner, `${at}/${key}`));
      else if (schema.additionalProperties === false) problems.push(`${at}: unexpected ${key}`);
    }
  }
  return problems;
}
