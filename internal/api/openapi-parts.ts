// The parts of the OpenAPI document every operation shares: the problem document and the response headers, each
// described once.

import { errorCodes } from '../http/problem.ts';
import { fieldErrorSchema, type JsonSchema } from '../schema/schema.ts';

export const problemSchema: JsonSchema = {
  type: 'object',
  description: 'RFC 9457 problem details.',
  required: ['type', 'title', 'status', 'detail', 'code', 'request_id'],
  properties: {
    type: {
      type: 'string',
      format: 'uri',
      description:
        'urn:portplane:problem:<code>; every code, its status and what to do about it is in docs/api.md, "Error ' +
        'codes" (anchor #problem-<code>, also named in x-error-codes of this document).',
    },
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
        "happened to each item, as in the operation's 2xx answer.",
      items: { type: 'object' },
      additionalProperties: { type: 'array', items: { type: 'object' } },
    },
    rule: { type: 'object', description: "502 from a sync: the rule as it stands, with the node's error." },
    errors: { type: 'array', items: fieldErrorSchema },
  },
};

export const header = (name: string) => ({ $ref: `#/components/headers/${name}` });

/**
 * Response headers, each described once. `required` ones are on every answer that declares them; the others depend
 * on the caller or the setting named.
 */
export const headers = {
  'X-Request-Id': {
    description: "This request's id (the caller's own X-Request-Id when it sent a valid one), as in the server log.",
    required: true,
    schema: { type: 'string' },
  },
  'Cache-Control': {
    description: "Always `no-store`: every answer is its caller's, and some carry a secret shown once.",
    required: true,
    schema: { type: 'string', const: 'no-store' },
  },
  'X-Content-Type-Options': {
    description: 'Always `nosniff`.',
    required: true,
    schema: { type: 'string', const: 'nosniff' },
  },
  ETag: {
    description: 'The version of the resource; send it back as If-Match to write it.',
    required: true,
    schema: { type: 'string' },
  },
  Location: { description: 'Where the resource is.', required: true, schema: { type: 'string' } },
  RateLimit: {
    description:
      'What is left of the caller\'s write budget: `"writes";r=<remaining>;t=<seconds to reset>`. On every answer ' +
      'to a caller whose token is good (404 and 405 included), absent when the budget is off ' +
      '(write_budget_per_minute 0).',
    schema: { type: 'string' },
  },
  'RateLimit-Policy': {
    description: 'The write budget: `"writes";q=<writes>;w=<window seconds>`; present whenever RateLimit is.',
    schema: { type: 'string' },
  },
  'Retry-After': {
    description: 'Seconds to wait before trying again.',
    required: true,
    schema: { type: 'integer', minimum: 1 },
  },
  'Idempotent-Replayed': {
    description: 'true when this is the stored answer to an earlier request with the same Idempotency-Key.',
    schema: { type: 'string', enum: ['true'] },
  },
  'WWW-Authenticate': {
    description:
      'RFC 6750: `Bearer realm="portplane"` when no token was sent, with `error="invalid_token"` when the token sent ' +
      'is unknown, revoked or expired.',
    required: true,
    schema: { type: 'string' },
  },
  'WWW-Authenticate-Scope': {
    description: 'For insufficient_scope only: `Bearer error="insufficient_scope", scope="<the scope>"`.',
    schema: { type: 'string' },
  },
};

export type HeaderName = keyof typeof headers;

/** Sent with every answer, whatever its status. */
const ALWAYS: HeaderName[] = ['X-Request-Id', 'Cache-Control', 'X-Content-Type-Options'];

/** The header map of a response: each name, and the component that describes it (WWW-Authenticate has two). */
export function headerMap(names: HeaderName[]): Record<string, unknown> {
  return Object.fromEntries(
    [...ALWAYS, ...names].map((name) => [name === 'WWW-Authenticate-Scope' ? 'WWW-Authenticate' : name, header(name)]),
  );
}
