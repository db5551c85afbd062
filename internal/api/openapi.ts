// The OpenAPI 3.1 document, generated from the route table and the schemas the validators
// use, so the reference cannot drift from what the server does.

import { MAX_BODY_BYTES } from '../http/body.ts';
import { errorCodes, statusOf, titleOf } from '../http/problem.ts';
import type { JsonSchema } from '../schema/schema.ts';
import { VERSION } from '../version.ts';
import { header, headerMap, headers, problemSchema, type HeaderName } from './openapi-parts.ts';
import { IDEMPOTENCY_KEY, type Route } from './route.ts';

const PROBLEM = { $ref: '#/components/schemas/Problem' };

/** Problem documents that list the fields at fault: `errors` is always there. */
const withFieldErrors = { allOf: [{ $ref: '#/components/schemas/Problem' }], required: ['errors'] };

function problem(description: string, withHeaders: HeaderName[] = [], schema: unknown = PROBLEM) {
  return {
    description,
    headers: headerMap(withHeaders),
    content: { 'application/problem+json': { schema } },
  };
}

/** The headers a success of `route` with `status` carries (see the handlers: they set ETag and Location). */
function successHeaders(route: Route, status: number): HeaderName[] {
  const names: HeaderName[] = [];
  const single = route.path.endsWith('}') || route.path.endsWith('/sync') || route.path === '/api/settings';
  // A batch creates many: its 201 names none of them.
  const creates = status === 201 && !route.path.includes('/batch-');
  if (creates || (single && (status === 200 || (status === 202 && route.path.endsWith('/sync'))))) names.push('ETag');
  if (creates || (status === 202 && /\/(install-ssh|reinstall)$/.test(route.path))) names.push('Location');
  if (route.method === 'POST' && route.scope !== 'public') names.push('Idempotent-Replayed');
  return names;
}

/** The headers an error answer with `status` carries. */
function errorHeaders(route: Route, status: number): HeaderName[] {
  if (status === 401) return ['WWW-Authenticate'];
  if (status === 403) return ['WWW-Authenticate-Scope'];
  if (status === 412) return ['ETag'];
  if (status === 429 || status === 503 || status === 507) return ['Retry-After'];
  return [];
}

function commonErrors(route: Route): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const error = (status: number, description: string, schema: unknown = PROBLEM) =>
    (out[status] = problem(description, errorHeaders(route, status), schema));
  error(
    400,
    route.method === 'GET'
      ? 'A query parameter is unknown or invalid (invalid_query), or the request target is malformed (bad_request).'
      : 'The body is not JSON (invalid_json), a query parameter is unknown or invalid (invalid_query), or the ' +
          'request target is malformed (bad_request).',
  );
  if (route.scope !== 'public') {
    error(401, 'No valid bearer token (unauthorized).');
    const refusals: string[] = [];
    if (route.scope === 'session')
      refusals.push('An API token cannot do this: it needs a login session (insufficient_scope)');
    else if (route.scope !== 'authenticated')
      refusals.push(`The token lacks the scope ${route.scope} (insufficient_scope)`);
    if (!route.tenants) refusals.push('a tenant cannot call it (operators_only)');
    if (refusals.length > 0) {
      const [first, ...rest] = refusals;
      error(403, `${first![0]!.toUpperCase()}${first!.slice(1)}${rest.map((r) => `; ${r}`).join('')}.`);
    }
  }
  if (route.path.includes('{')) error(404, 'No such resource (not_found); ids are whole numbers from 1.');
  if (route.method === 'POST' && route.scope !== 'public') error(409, IN_FLIGHT);
  if (route.method === 'PUT' || route.method === 'PATCH' || route.method === 'DELETE')
    error(412, 'If-Match does not match the current ETag (precondition_failed); ETag has the current one.');
  if (route.method !== 'GET') {
    const limit = `${(route.maxBodyBytes ?? MAX_BODY_BYTES) / (1024 * 1024)} MiB`;
    error(
      413,
      route.decodesBody
        ? `The body is over ${limit}, or decoding it needs more memory than this call may use (payload_too_large).`
        : `The body is over ${limit} (payload_too_large).`,
    );
    error(415, 'The body is not application/json (unsupported_media_type).');
    error(
      422,
      'Fields are missing or invalid (validation_failed), or an Idempotency-Key is malformed or was used for ' +
        'another request (idempotency_key_reused); errors lists each one, up to 1,000.',
      withFieldErrors,
    );
    if (route.scope !== 'public') error(429, "The caller's write budget is spent (rate_limited).");
  }
  error(500, "Something failed that is not the request's fault (internal); the request id is in the server log.");
  error(
    503,
    route.method === 'GET'
      ? 'The master is starting or shutting down, or its database does not answer (unavailable).'
      : 'The master is starting or shutting down, or an import or batch held writes for longer than this write ' +
          'waits in line (write_wait_seconds); nothing was changed (unavailable).',
  );
  if (route.method !== 'GET')
    error(507, "The master's disk is full (insufficient_storage); nothing was changed; reads go on.");
  return out;
}

/** What every write with an Idempotency-Key may meet: its key still busy, or its answer lost. */
const IN_FLIGHT =
  'A request with this Idempotency-Key is still being answered, or was carried out but its answer could not be ' +
  'kept (conflict).';

/**
 * The tag of each path's first segment after /api/, with what docs/api.md says of it. Every operation has one
 * (a route under a segment missing here fails the document's generation).
 */
const ALERTS = {
  name: 'alerts',
  description:
    'Alert rules over nodes, rules and tunnels; the channels (webhook, Telegram, email) that hear them; silences.',
};

const TAGS: Record<string, { name: string; description: string }> = {
  auth: { name: 'auth', description: 'Logging in and out, and what the calling token is and may do.' },
  tokens: { name: 'tokens', description: 'API tokens with resource:action scopes; a secret is shown once.' },
  users: { name: 'users', description: 'Users, their passwords and the scopes their tokens may carry.' },
  plans: {
    name: 'plans',
    description: 'Named sets of grants tenants are held to: nodes, ports, how many rules, their limits, traffic.',
  },
  settings: { name: 'settings', description: 'Run-time settings; those marked in docs/api.md need the * scope.' },
  'audit-logs': { name: 'audit', description: 'Every write, allowed or denied, with who, when and what changed.' },
  events: { name: 'events', description: 'Every change as it happens, as server-sent events, resumable by id.' },
  license: { name: 'license', description: 'The license in force (read-only; replaced by a file on the master).' },
  nodes: { name: 'nodes', description: 'Servers that run an agent: adding, installing over SSH, reinstalling.' },
  'agent-bundles': {
    name: 'rollouts',
    description: 'Signed agent bundles, and rollouts that take one to nodes in gated waves.',
  },
  rollouts: {
    name: 'rollouts',
    description: 'Signed agent bundles, and rollouts that take one to nodes in gated waves.',
  },
  rules: {
    name: 'rules',
    description: 'Forwarding rules, pushed to their node and acknowledged per rule (sync), one by one or in batches.',
  },
  tunnels: { name: 'tunnels', description: "Encrypted links from an entry node to an exit node for rules' traffic." },
  channels: ALERTS,
  'alert-rules': ALERTS,
  alerts: ALERTS,
  deliveries: ALERTS,
  silences: ALERTS,
  dashboard: { name: 'dashboard', description: 'Counts by state, license use and traffic over time.' },
  live: { name: 'dashboard', description: 'Counts by state, license use and traffic over time.' },
  replication: {
    name: 'replication',
    description: 'What a standby master follows: a copy of the database, then every change to it.',
  },
  export: { name: 'transfer', description: 'Backups, and the whole configuration as one document.' },
  import: { name: 'transfer', description: 'Backups, and the whole configuration as one document.' },
  backup: { name: 'transfer', description: 'Backups, and the whole configuration as one document.' },
  health: { name: 'service', description: 'The master itself: health, metrics and this document.' },
  metrics: { name: 'service', description: 'The master itself: health, metrics and this document.' },
  'openapi.json': { name: 'service', description: 'The master itself: health, metrics and this document.' },
};

function tagOf(route: Route): { name: string; description: string } {
  const tag = TAGS[route.path.split('/')[2]!];
  if (!tag) throw new Error(`no tag for ${route.path}: add its first segment to TAGS`);
  return tag;
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
    const common = commonErrors(route);
    for (const [status, doc] of Object.entries(route.responses)) {
      const code = Number(status);
      if (code >= 400) {
        const description =
          code === 409 && route.method === 'POST' && route.scope !== 'public'
            ? `${doc.description}. Also: ${IN_FLIGHT}`
            : doc.description;
        const answer = problem(description, errorHeaders(route, code), code === 422 ? withFieldErrors : PROBLEM);
        // A route may answer an error status with a document of its own too (health, while the master starts).
        if (doc.schema) Object.assign(answer.content, { 'application/json': { schema: doc.schema.json } });
        responses[status] = answer;
        continue;
      }
      const names = successHeaders(route, code);
      const links = code === 201 ? linksOf(route, routes) : undefined;
      responses[status] = {
        description: doc.description,
        headers: { ...headerMap(names), ...doc.headers },
        ...(doc.schema ? { content: { [doc.mediaType ?? 'application/json']: { schema: doc.schema.json } } } : {}),
        ...(links ? { links } : {}),
      };
    }
    for (const [status, response] of Object.entries(common)) responses[status] ??= response;
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
          : route.scope === 'session'
            ? 'A login session (an API token is refused).'
            : `Scope: \`${route.scope}\`.`;
    (paths[route.path] ??= {})[route.method.toLowerCase()] = {
      operationId: route.operationId,
      summary: route.summary,
      description: [route.description, scopeLine, route.action ? `Audit action: \`${route.action}\`.` : undefined]
        .filter(Boolean)
        .join('\n\n'),
      tags: [tagOf(route).name],
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
      contact: { name: 'portplane: see README.md and docs/api.md beside the master you run' },
      version: VERSION,
      license: { name: 'Proprietary', identifier: 'LicenseRef-portplane-proprietary' },
      description:
        'Administer nodes, forwarding rules, tunnels, users, settings, API tokens, the audit log, the license ' +
        'and the dashboard. See docs/api.md for the conventions.',
    },
    servers: [{ url: '/' }],
    tags: [...new Map(routes.map((route) => [tagOf(route).name, tagOf(route)])).values()],
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
      errorCodes.map((code) => [
        code,
        { status: statusOf(code), title: titleOf(code), docs: `docs/api.md#problem-${code}` },
      ]),
    ),
  };
}
