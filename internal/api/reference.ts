// Renders docs/api.md: the hand-written conventions (docs/api.intro.md) followed by tables
// generated from the OpenAPI document, the scope vocabulary, the error codes and the
// settings, so the readable reference says what the code does.

import { scopes } from '../auth/scopes.ts';
import { errorCodes, meaningOf, statusOf, titleOf } from '../http/problem.ts';
import type { JsonSchema } from '../schema/schema.ts';
import { definitions, settingKeys } from '../settings/settings.ts';
import { openApiDocument } from './openapi.ts';
import type { Route } from './route.ts';

function typeOf(schema: JsonSchema): string {
  const name = schemaName(schema);
  if (name) return `[${name}](#${name.toLowerCase()})`;
  if (Array.isArray(schema.enum)) return (schema.enum as string[]).map((v) => `\`${v}\``).join(' | ');
  const types = ([] as unknown[]).concat(schema.type ?? 'any') as string[];
  return types
    .map((type) =>
      type === 'array'
        ? `array of ${typeOf((schema.items as JsonSchema) ?? {})}`
        : type === 'string' && schema.format
          ? `string (${schema.format})`
          : type,
    )
    .join(' or ');
}

function constraints(schema: JsonSchema): string {
  const parts: string[] = [];
  const numberRange = schema.minimum !== undefined && schema.maximum !== undefined;
  if (numberRange) parts.push(`${schema.minimum}..${schema.maximum}`);
  if (schema.minLength !== undefined && schema.maxLength !== undefined && (schema.minLength as number) > 0)
    parts.push(`${schema.minLength}..${schema.maxLength} chars`);
  else if (schema.maxLength !== undefined) parts.push(`max ${schema.maxLength} chars`);
  if (schema.maxItems !== undefined) parts.push(`${schema.minItems ?? 0}..${schema.maxItems} items`);
  if (schema.pattern) parts.push(`pattern \`${schema.pattern}\``);
  if (schema.default !== undefined) parts.push(`default \`${JSON.stringify(schema.default)}\``);
  return parts.join(', ');
}

function cell(text: unknown): string {
  return String(text ?? '')
    .replace(/\|/g, '\\|')
    .replace(/\n+/g, ' ');
}

function fieldTable(schema: JsonSchema): string[] {
  const properties = (schema.properties ?? {}) as Record<string, JsonSchema>;
  const required = new Set((schema.required ?? []) as string[]);
  const lines = ['| Field | Type | Required | Constraints | Meaning |', '|---|---|---|---|---|'];
  for (const [name, property] of Object.entries(properties)) {
    lines.push(
      `| \`${name}\` | ${cell(typeOf(property))} | ${required.has(name) ? 'yes' : 'no'} | ` +
        `${cell(constraints(property))} | ${cell(property.description)} |`,
    );
  }
  return lines;
}

interface ResponseObject {
  description: string;
  content?: Record<string, { schema: JsonSchema }>;
}

/** The body of a response as a link to its schema below (or a type), or null when it has none. */
function bodyOf(response: ResponseObject): string | null {
  const [media, content] = Object.entries(response.content ?? {})[0] ?? [];
  if (!media || !content) return null;
  const name = schemaName(content.schema);
  return name ? `[\`${name}\`](#${name.toLowerCase()}) (${media})` : `${typeOf(content.schema)} (${media})`;
}

function schemaName(schema: JsonSchema): string | null {
  const ref = typeof schema.$ref === 'string' ? schema.$ref : null;
  return ref ? ref.slice(ref.lastIndexOf('/') + 1) : null;
}

function anchor(method: string, path: string): string {
  return `${method} ${path}`
    .toLowerCase()
    .replace(/[^a-z0-9 -]/g, '')
    .replace(/ /g, '-');
}

function accessOf(r: Route): string {
  if (r.scope === 'public') return 'public';
  if (r.scope === 'session') return 'a login session';
  return r.scope === 'authenticated' ? 'any valid token' : `\`${r.scope}\``;
}

export function renderReference(routes: readonly Route[], intro: string): string {
  const doc = openApiDocument(routes) as {
    paths: Record<string, Record<string, any>>;
    components: { schemas: Record<string, JsonSchema> };
  };
  const out: string[] = [
    intro.trimEnd(),
    '',
    '<!-- Everything below is generated from the route table: npm run docs. -->',
    '',
  ];

  out.push(
    '## Scopes',
    '',
    '`write` implies `read` of the same resource; `*` grants everything.',
    '',
    '| Scope | Routes |',
    '|---|---|',
  );
  for (const scope of scopes) {
    const using = routes.filter((r) => r.scope === scope).map((r) => `\`${r.method} ${r.path}\``);
    out.push(`| \`${scope}\` | ${using.join(', ') || '—'} |`);
  }
  out.push(
    '',
    'Public: ' +
      routes
        .filter((r) => r.scope === 'public')
        .map((r) => `\`${r.method} ${r.path}\``)
        .join(', ') +
      '. Any valid token: ' +
      routes
        .filter((r) => r.scope === 'authenticated')
        .map((r) => `\`${r.method} ${r.path}\``)
        .join(', ') +
      '. A login session, not an API token: ' +
      routes
        .filter((r) => r.scope === 'session')
        .map((r) => `\`${r.method} ${r.path}\``)
        .join(', ') +
      '.',
    '',
  );
  out.push(
    'Routes that answer tenants (what they read and write follows ownership; every other route refuses a tenant, ' +
      '403 `operators_only`): ' +
      routes
        .filter((r) => r.tenants)
        .map((r) => `\`${r.method} ${r.path}\``)
        .join(', ') +
      '.',
    '',
  );
  out.push(
    'Scopes a route needs beyond its own, for some of what it may do (403 and nothing changed without them; ' +
      'audited as denied):',
    '',
    '| Route | Also needs | When |',
    '|---|---|---|',
  );
  for (const r of routes)
    for (const effect of r.alsoNeeds ?? [])
      out.push(`| \`${r.method} ${r.path}\` | \`${effect.scope}\` | ${cell(effect.when)} |`);
  out.push('');

  out.push(
    '## Error codes',
    '',
    'Every error is a problem document whose `type` is `urn:portplane:problem:<code>`.',
    '',
    '| Status | `code` | Title | Meaning |',
    '|---|---|---|---|',
  );
  for (const code of errorCodes)
    out.push(
      `| ${statusOf(code)} | <a id="problem-${code}"></a>\`${code}\` | ${titleOf(code)} | ${cell(meaningOf(code))} |`,
    );
  out.push('');

  out.push(
    '## Settings',
    '',
    'Read with `GET /api/settings`, change with `PATCH /api/settings` (merge patch; `null` resets a key).',
    '',
    '| Key | Default | Range | Meaning |',
    '|---|---|---|---|',
  );
  for (const key of settingKeys) {
    const { schema, default: fallback } = definitions[key];
    out.push(`| \`${key}\` | ${fallback} | ${constraints(schema.json)} | ${cell(schema.json.description)} |`);
  }
  out.push('');

  out.push('## Endpoints', '', '| Method | Path | Access | Summary |', '|---|---|---|---|');
  for (const r of routes)
    out.push(`| ${r.method} | [\`${r.path}\`](#${anchor(r.method, r.path)}) | \`${r.scope}\` | ${cell(r.summary)} |`);
  out.push('');

  for (const r of routes) {
    const op = doc.paths[r.path]![r.method.toLowerCase()];
    out.push(`### ${r.method} ${r.path}`, '', `${r.summary}.`, '');
    if (r.description) out.push(r.description, '');
    out.push(`Access: ${accessOf(r)}.${r.action ? ` Audit action: \`${r.action}\`.` : ''}`, '');
    for (const effect of r.alsoNeeds ?? []) out.push(`Also needs \`${effect.scope}\` when ${effect.when}.`, '');
    const query = (op.parameters ?? []).filter((p: any) => p.in === 'query');
    if (query.length > 0) {
      out.push('Query parameters:', '', '| Name | Type | Constraints | Meaning |', '|---|---|---|---|');
      for (const p of query)
        out.push(
          `| \`${p.name}\` | ${cell(typeOf(p.schema))} | ${cell(constraints(p.schema))} | ${cell(p.description)} |`,
        );
      out.push('');
    }
    if (r.body) out.push('Body:', '', ...fieldTable(r.body.json), '');
    out.push('Responses:', '');
    for (const [status, response] of Object.entries(op.responses as Record<string, ResponseObject>)) {
      const body = bodyOf(response);
      out.push(`- **${status}**${body ? ` ${body}:` : ''} ${response.description}`);
    }
    out.push('');
  }

  out.push('## Schemas', '', 'Every body above, as the OpenAPI document names it.', '');
  for (const [name, schema] of Object.entries(doc.components.schemas)) {
    out.push(`### ${name}`, '');
    if (schema.description) out.push(cell(schema.description), '');
    out.push(...fieldTable(schema), '');
  }
  return `${out.join('\n').trimEnd()}\n`;
}
