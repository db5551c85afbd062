// The OpenAPI 3.1 document, generated from the route table and the schemas the validators
// use, so the reference cannot drift from what the server does.

import { MAX_BODY_BYTES } from '../http/body.ts';
import { errorCodes, statusOf, titleOf } from '../http/problem.ts';
import type { JsonSchema } from '../schema/schema.ts';
import { VERSION } from '../version.ts';
import { IDEMPOTENCY_KEY, type Route } from './route.ts';

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
    conflicting_id: { type: 'integer', description: '409 for a name taken: the id of the resource that has it.' },
    conflicting_rule_id: { type: 'integer', description: '409 for a port taken: the rule that holds it.' },
    conflicting_tunnel_id: { type: 'integer', description: '409 for a port taken: the tunnel that holds it.' },
    rule_ids: {
      type: 'array',
      items: { type: 'integer' },
      description: '409 for a delete that rules still block (or a tunnel move they pin): those rules.',
    },
    tunnel_ids: {
      type: 'array',
      items: { type: 'integer' },
      description: '409 for a node delete that tunnels still block: those tunnels.',
    },
    required_scope: { type: 'string', description: '403 insufficient_scope: the scope the call needs.' },
    results: {
      type: ['array', 'object'],
      description:
        'A batch (an array) or an import (an object of arrays per resource) refused as a whole: what would have ' +
        'happened to each item.',
    },
    rule: { type: 'object', description: "502 from a sync: the rule as it stands, with the node's error." },
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

const header = (name: string) => ({ $ref: `#/components/headers/${name}` });

/** Response headers, each described once. */
const headers = {
  ETag: {
    description: 'The version of the resource; send it back as If-Match to write it.',
    schema: { type: 'string' },
  },
  Location: { description: 'Where the resource is.', schema: { type: 'string' } },
  RateLimit: {
    description: 'What is left of the caller\'s write budget: `"writes";r=<remaining>;t=<seconds to reset>`.',
    schema: { type: 'string' },
  },
  'RateLimit-Policy': {
    description: 'The write budget: `"writes";q=<writes>;w=<window seconds>` (absent when the budget is off).',
    schema: { type: 'string' },
  },
  'Retry-After': { description: 'Seconds to wait before trying again.', schema: { type: 'integer', minimum: 1 } },
  'Idempotent-Replayed': {
    description: 'true when this is the stored answer to an earlier request with the same Idempotency-Key.',
    schema: { type: 'string', enum: ['true'] },
  },
};

function problem(description: string, withHeaders: (keyof typeof headers)[] = []) {
  return {
    description,
    ...(withHeaders.length > 0 ? { headers: Object.fromEntries(withHeaders.map((name) => [name, header(name)])) } : {}),
    content: { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } },
  };
}

/** The headers a success of `route` with `status` carries (see the handlers: they set ETag and Location). */
function successHeaders(route: Route, status: number): (keyof typeof headers)[] {
  const names: (keyof typeof headers)[] = [];
  const single = route.path.endsWith('}') || route.path.endsWith('/sync') || route.path === '/api/settings';
  if (status === 201 || (single && (status === 200 || (status === 202 && route.path.endsWith('/sync')))))
    names.push('ETag');
  if (status === 201 || (status === 202 && /\/(install-ssh|reinstall)$/.test(route.path))) names.push('Location');
  if (route.method === 'POST' && route.scope !== 'public') names.push('Idempotent-Replayed');
  return names;
}

function commonErrors(route: Route): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  out[400] = problem(
    route.method === 'GET'
      ? 'A query parameter is unknown or invalid (invalid_query), or the request target is malformed (bad_request).'
      : 'The body is not JSON (invalid_json), a query parameter is unknown or invalid (invalid_query), or the ' +
          'request target is malformed (bad_request).',
  );
  if (route.scope !== 'public') {
    out[401] = problem('No valid bearer token (unauthorized).');
    if (route.scope !== 'authenticated')
      out[403] = problem(`The token lacks the scope ${route.scope} (insufficient_scope).`);
  }
  if (route.path.includes('{')) out[404] = problem('No such resource (not_found); ids are whole numbers from 1.');
  if (route.method === 'PUT' || route.method === 'PATCH' || route.method === 'DELETE')
    out[412] = problem('If-Match does not match the current ETag (precondition_failed); ETag has the current one.', [
      'ETag',
    ]);
  if (route.method !== 'GET') {
    const limit = `${(route.maxBodyBytes ?? MAX_BODY_BYTES) / (1024 * 1024)} MiB`;
    out[413] = problem(
      route.decodesBody
        ? `The body is over ${limit}, or decoding it needs more memory than this call may use (payload_too_large).`
        : `The body is over ${limit} (payload_too_large).`,
    );
    out[415] = problem('The body is not application/json (unsupported_media_type).');
    out[422] = problem('Fields are missing or invalid (validation_failed); errors lists each one, up to 1,000.');
    if (route.scope !== 'public')
      out[429] = problem("The caller's write budget is spent (rate_limited).", ['Retry-After']);
  }
  out[503] = problem(
    route.method === 'GET'
      ? 'The master is starting or shutting down, or its database does not answer (unavailable).'
      : 'The master is starting or shutting down, or an import or batch held writes for longer than this write ' +
          'waits in line (write_wait_seconds); nothing was changed (unavailable).',
    ['Retry-After'],
  );
  return out;
}

/** From a create's answer to the operations that take the new id, for clients and stateful fuzzers. */
function linksOf(route: Route, routes: readonly Route[]): Record<string, unknown> | undefined {
  if (route.method !== 'POST') return undefined;
  const targets = routes.filter((other) => other.path.startsWith(`${route.path}/{id}`));
  if (targets.length === 0) return undefined;
  return Object.fromEntries(
    targets.map((other) => [
      other.operationId,
      { operationId: other.operationId, parameters: { id: '$response.body#/id' } },
    ]),
  );
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
        schema: { type: 'string', pattern: IDEMPOTENCY_KEY.source },
        description:
          'Makes a retry return the stored answer instead of acting twice (kept 24 h): 1 to 255 visible ASCII ' +
          'characters, per token. Only 2xx answers are kept.',
      });
    }
    const responses: Record<string, unknown> = {};
    for (const [status, doc] of Object.entries(route.responses)) {
      const code = Number(status);
      if (code >= 400) {
        const answer = problem(doc.description, code === 429 || code === 503 ? ['Retry-After'] : []);
        // A route may answer an error status with a document of its own too (health, while the master starts).
        if (doc.schema) Object.assign(answer.content, { 'application/json': { schema: doc.schema.json } });
        responses[status] = answer;
        continue;
      }
      const names = successHeaders(route, code);
      const links = code === 201 ? linksOf(route, routes) : undefined;
      responses[status] = {
        description: doc.description,
        ...(names.length > 0 ? { headers: Object.fromEntries(names.map((name) => [name, header(name)])) } : {}),
        ...(doc.schema ? { content: { [doc.mediaType ?? 'application/json']: { schema: doc.schema.json } } } : {}),
        ...(links ? { links } : {}),
      };
    }
    for (const [status, response] of Object.entries(commonErrors(route))) responses[status] ??= response;
    // Every answer to a known caller says what is left of its write budget.
    if (route.scope !== 'public') {
      for (const [status, response] of Object.entries(responses) as [string, { headers?: object }][]) {
        if (status === '401') continue;
        response.headers = {
          ...response.headers,
          RateLimit: header('RateLimit'),
          'RateLimit-Policy': header('RateLimit-Policy'),
        };
      }
    }
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
        ? {
            requestBody: {
              required: true,
              content: Object.fromEntries(
                (route.method === 'PATCH'
                  ? ['application/merge-patch+json', 'application/json']
                  : ['application/json']
                ).map((media) => [media, { schema: route.body!.json }]),
              ),
            },
          }
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
      license: { name: 'Proprietary', identifier: 'LicenseRef-portplane-proprietary' },
      description:
        'Administer nodes, forwarding rules, tunnels, users, settings, API tokens, the audit log, the license ' +
        'and the dashboard. See docs/api.md for the conventions.',
    },
    servers: [{ url: '/' }],
    paths: hoisted,
    components: {
      headers,
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
