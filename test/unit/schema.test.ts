import assert from 'node:assert/strict';
import { test } from 'node:test';
import { routes } from '../../internal/api/routes.ts';
import { SECRET_FIELDS } from '../../internal/domain/secret-fields.ts';
import {
  array,
  dateTime,
  describe,
  integer,
  nullable,
  object,
  oneOf,
  optional,
  parseDateTime,
  secret,
  secretFields,
  string,
  validate,
} from '../../internal/schema/schema.ts';
import { redactSecrets } from '../../internal/domain/secret-fields.ts';

const input = object(
  {
    name: string({ min: 1, max: 5 }),
    port: integer({ min: 1, max: 65535 }),
    mode: optional(oneOf(['a', 'b']), 'a'),
    tags: optional(array(string({ min: 1, max: 10 }), { max: 2, unique: true }), []),
    at: optional(nullable(dateTime()), null),
  },
  { ignore: ['id'] },
);

test('object checks report every bad field with a JSON pointer', () => {
  const cases = [
    { value: { name: 'ok', port: 80 }, errors: [], out: { name: 'ok', port: 80, mode: 'a', tags: [], at: null } },
    {
      value: { name: 'ok', port: 80, id: 9 },
      errors: [],
      out: { name: 'ok', port: 80, mode: 'a', tags: [], at: null },
    },
    {
      value: { name: 'ok', port: 80, at: '2026-11-21T11:00:00.5+01:00' },
      errors: [],
      out: { name: 'ok', port: 80, mode: 'a', tags: [], at: '2026-11-21T10:00:00Z' },
    },
    { value: {}, errors: ['#/name is required', '#/port is required'] },
    { value: { name: '', port: 0 }, errors: ['#/name must not be empty', '#/port must be between 1 and 65535'] },
    {
      value: { name: 'toolong', port: 1.5 },
      errors: ['#/name must be at most 5 characters', '#/port must be an integer, not a number'],
    },
    {
      value: { name: 'x', port: 1, mode: 'c', extra: true },
      errors: ['#/extra is not a known field', '#/mode must be one of a, b'],
    },
    { value: { name: 'x', port: 1, tags: ['a', 'a', ''] }, errors: ['#/tags must have at most 2 items'] },
    { value: { name: 'x', port: 1, tags: ['a', 'a'] }, errors: ['#/tags/1 is a duplicate'] },
    {
      value: { name: 'x', port: 1, at: 'tomorrow' },
      errors: ['#/at must be an RFC 3339 date-time of a real calendar date such as 2026-11-21T10:00:00Z'],
    },
    { value: { 'a/b': 1, name: 'x', port: 1 }, errors: ['#/a~1b is not a known field'] },
    { value: null, errors: ['# must be an object, not null'] },
  ];
  for (const c of cases) {
    const { value, errors } = validate(input, c.value);
    assert.deepEqual(
      errors.map((e) => `${e.pointer} ${e.detail}`),
      c.errors,
      JSON.stringify(c.value),
    );
    if (c.out) assert.deepEqual(value, c.out);
  }
});

test('a date-time names a real calendar date and time, in the body and in the query, or is refused', () => {
  const real = ['2028-02-29T00:00:00Z', '2026-12-31T23:59:59Z', '2026-11-21T10:00:00.5-23:59', '2026-11-21t10:00:00z'];
  const unreal = [
    '2026-02-29T00:00:00Z',
    '2026-02-30T00:00:00Z',
    '2026-04-31T00:00:00Z',
    '2026-13-01T00:00:00Z',
    '2026-00-10T00:00:00Z',
    '2026-01-00T00:00:00Z',
    '2026-01-01T24:00:00Z',
    '2026-01-01T10:60:00Z',
    '2026-01-01T10:00:60Z',
    '2026-01-01T10:00:00+24:00',
    '2026-01-01T10:00:00+01:60',
  ];
  for (const at of real) assert.deepEqual(validate(input, { name: 'x', port: 1, at }).errors, [], at);
  for (const at of unreal) {
    assert.equal(validate(input, { name: 'x', port: 1, at }).errors.length, 1, at);
    assert.equal(Number.isNaN(parseDateTime(at)), true, at);
  }
});

test('schemas describe themselves as JSON Schema with required fields and defaults', () => {
  assert.deepEqual(input.json.required, ['name', 'port']);
  const properties = input.json.properties as Record<string, Record<string, unknown>>;
  assert.deepEqual(properties.mode, { type: 'string', enum: ['a', 'b'], default: 'a' });
  assert.deepEqual(properties.port, { type: 'integer', minimum: 1, maximum: 65535 });
  assert.deepEqual(properties.at!.type, ['string', 'null']);
  assert.equal(input.json.additionalProperties, false);
});

test('string lengths count characters (code points), not UTF-16 units', () => {
  const pair = string({ min: 2, max: 3 });
  const cases: [string, string[]][] = [
    ['ab', []],
    ['😀😀😀', []],
    ['é😀', []],
    ['😀', ['# must be at least 2 characters']],
    ['😀😀😀😀', ['# must be at most 3 characters']],
    ['abcd', ['# must be at most 3 characters']],
    ['', ['# must be at least 2 characters']],
  ];
  for (const [value, errors] of cases)
    assert.deepEqual(
      validate(pair, value).errors.map((e) => `${e.pointer} ${e.detail}`),
      errors,
      value,
    );
});

test('a field marked secret is found at any depth, and its value redacted wherever that name is kept', () => {
  const input = object({
    name: string({ max: 10 }),
    credential: optional(nullable(string({ max: 10, secret: true }))),
    nested: array(object({ passphrase: string({ max: 10, secret: true }) }), { max: 2 }),
  });
  const answer = describe({
    type: 'object',
    properties: { issued: secret({ type: 'string' }), name: { type: 'string' } },
  });
  const names = secretFields([input.json, answer.json]);
  assert.deepEqual([...names].sort(), ['credential', 'issued', 'passphrase']);
  assert.equal((input.json.properties as Record<string, Record<string, unknown>>).credential!['x-secret'], true);
  const kept = redactSecrets(
    { name: 'n', credential: 'c1', nested: [{ passphrase: 'p1' }], after: { issued: 'i1', credential: null } },
    names,
  );
  assert.deepEqual(kept, {
    name: 'n',
    credential: '[redacted]',
    nested: [{ passphrase: '[redacted]' }],
    after: { issued: '[redacted]', credential: null },
  });
  const plain = { name: 'n' };
  assert.equal(redactSecrets(plain, names), plain, 'nothing secret: not copied');
});

test('the API marks every secret it takes or shows: the names audit entries and replays are redacted by', () => {
  const marked = secretFields(
    routes.flatMap((r) => [r.body?.json ?? {}, ...Object.values(r.responses).map((doc) => doc.schema?.json ?? {})]),
  );
  assert.deepEqual([...marked].sort(), [...SECRET_FIELDS].sort(), 'what the schemas mark is what the store redacts');
});
