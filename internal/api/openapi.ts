// The OpenAPI 3.1 document, generated from the route table and the schemas the validators
// use, so the reference cannot drift from what the server does.

import { errorCodes, statusOf, titleOf } from '../http/problem.ts';
import type { JsonSchema } from '../schema/schema.ts';
import { VERSION } from '../version.ts';
import type { Route } from './route.ts';

const problemSchema: JsonSchema = {
  type: 'object',
  description: 'RFC 9457 problem details.',
  required: ['type', 'title', 'status', 'detail', 'code', 'request_id'],
  properties: {
    type: { type: 'string' },
    title: { type: 'string' },
    status: { type: 'integer' },
    detail: { type: 'string' },
    code: { type: 'string', enum: errorCodes },
    request_id: { type: 'string' },
    errors: {
      type: 'array',
      items: {
        type: 'object',
        required: ['pointer', 'detail'],
        properties: {
          pointer: {
            type: 'string',
            description: 'JSON Pointer into the body (#/field), or ?name for a query parameter.',
          },
          detail: { type: 'string' },
        },
      },
    },
  },
};

function problem(description: string) {
  return { description, content: { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } } };
}

function commonErrors(route: Route): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (route.query)
    out[400] = problem(
      'A query parameter is unknown or invalid (invalid_query), or the body is not JSON (invalid_json).',
    );
  if (route.scope !== 'public') {
    out[401] = problem('No valid bearer token (unauthorized).');
    if (route.scope !== 'authenticated')
      out[403] = problem(`The token lacks the scope ${route.scope} (insufficient_scope).`);
  }
  if (route.path.includes('{')) out[404] = problem('No such resource (not_found).');
  if (route.method === 'PUT' || route.method === 'PATCH' || route.method === 'DELETE')
    out[412] = problem('If-Match does not match the current ETag (precondition_failed).');
  if (route.method !== 'GET') {
    out[413] = problem('The body is over 1 MiB (payload_too_large).');
    out[415] = problem('The body is not application/json (unsupported_media_type).');
    out[422] = problem('Fields are missing or invalid (validation_failed); errors lists each one.');
    if (route.scope !== 'public')
      out[429] = problem("The token's write budget is spent (rate_limited); see Retry-After.");
  }
  return out;
}

/**
 * Moves every schema with a title into `components.schemas`, leaving a `$ref` where it was,
 * so generated clients get a named type per resource and input. A title used for two
 * different schemas is a programming error.
 */
function hoist(value: unknown, components: Record<string, JsonSchema>): unknown {
  if (Array.isArray(value)) return value.map((item) => hoist(item, components));
  if (typeof value !== 'object' || value === null) return value;
  const out = Object.fromEntries(Object.entries(value).map(([key, inner]) => [key, hoist(inner, components)]));
  if (typeof out.title !== 'string' || out.type !== 'object') return out;
  const { default: fallback, ...schema } = out;
  const name = out.title;
  const known = components[name];
  if (known && JSON.stringify(known) !== JSON.stringify(schema))
    throw new Error(`two different schemas are both named ${name}`);
  components[name] = schema;
  return { $ref: `#/components/schemas/${name}`, ...(fallback === undefined ? {} : { default: fallback }) };
}

export function openApiDocument(routes: readonly Route[]): JsonSchema {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const route of routes) {
    const parameters: unknown[] = [...route.path.matchAll(/\{([a-z_]+)\}/g)].map((m) => ({
      name: m[1],
      in: 'path',
      required: true,
      schema: { type: 'integer', minimum: 1 },
    }));
    for (const [name, schema] of Object.entries(route.query ?? {})) {
      const { description, ...rest } = schema.json;
      parameters.push({ name, in: 'query', required: false, schema: rest, ...(description ? { description } : {}) });
    }
    if (route.method === 'PUT' || route.method === 'PATCH' || route.method === 'DELETE') {
      parameters.push({
        name: 'If-Match',
        in: 'header',
        required: false,
        schema: { type: 'string' },
        description: 'The ETag last read; a mismatch is 412.',
      });
    }
    if (route.method === 'POST' && route.scope !== 'public') {
      parameters.push({
        name: 'Idempotency-Key',
        in: 'header',
        required: false,
        schema: { type: 'string', maxLength: 255 },
        description: 'Makes a retry return the stored response instead of acting twice (kept 24 h).',
      });
    }
    const responses: Record<string, unknown> = {};
    for (const [status, doc] of Object.entries(route.responses)) {
      responses[status] =
        Number(status) >= 400
          ? problem(doc.description)
          : doc.schema
            ? {
                description: doc.description,
                content: { [doc.mediaType ?? 'application/json']: { schema: doc.schema.json } },
              }
            : { description: doc.description };
    }
    for (const [status, response] of Object.entries(commonErrors(route))) responses[status] ??= response;
    const scopeLine =
      route.scope === 'public'
        ? 'Public: no token needed.'
        : route.scope === 'authenticated'
          ? 'Any valid token.'
          : `Scope: \`${route.scope}\`.`;
    (paths[route.path] ??= {})[route.method.toLowerCase()] = {
      operationId: route.operationId,
      summary: route.summary,
      description: [route.description, scopeLine, route.action ? `Audit action: \`${route.action}\`.` : undefined]
        .filter(Boolean)
        .join('\n\n'),
      tags: [route.path.split('/')[2]],
      security: route.scope === 'public' ? [] : [{ bearer: [] }],
      'x-scope': route.scope,
      ...(route.action ? { 'x-audit-action': route.action } : {}),
      ...(parameters.length > 0 ? { parameters } : {}),
      ...(route.body
        ? { requestBody: { required: true, content: { 'application/json': { schema: route.body.json } } } }
        : {}),
      responses,
    };
  }
  const schemas: Record<string, JsonSchema> = { Problem: problemSchema };
  const hoisted = hoist(paths, schemas);
  return {
    openapi: '3.1.0',
    info: {
      title: 'portplane master admin API',
      version: VERSION,
      description:
        'Administer nodes, forwarding rules, tunnels, users, settings, API tokens, the audit log, the license ' +
        'and the dashboard. See docs/api.md for the conventions.',
    },
    servers: [{ url: '/' }],
    paths: hoisted,
    components: {
      securitySchemes: {
        bearer: {
          type: 'http',
          scheme: 'bearer',
          description: 'An API token (mst_...) or a login session token (mss_...).',
        },
      },
      schemas: Object.fromEntries(Object.entries(schemas).sort(([a], [b]) => a.localeCompare(b))),
    },
    'x-error-codes': Object.fromEntries(
      errorCodes.map((code) => [code, { status: statusOf(code), title: titleOf(code) }]),
    ),
  };
}
