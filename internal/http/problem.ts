// The one place where an error becomes an HTTP answer: each code's status and title, and the
// facts it carries as RFC 9457 problem members and headers.

import { DomainError, errorCodes, type ErrorCode } from '../errors/errors.ts';

const codes = {
  bad_request: [400, 'Bad request'],
  invalid_json: [400, 'Body is not valid JSON'],
  invalid_query: [400, 'Invalid query parameter'],
  validation_failed: [422, 'Validation failed'],
  idempotency_key_reused: [422, 'Idempotency key reused with a different request'],
  unauthorized: [401, 'Unauthorized'],
  auth_failed: [401, 'Agent token refused'],
  insufficient_scope: [403, 'Insufficient scope'],
  license_limit: [403, 'License limit reached'],
  not_found: [404, 'Not found'],
  method_not_allowed: [405, 'Method not allowed'],
  conflict: [409, 'Conflict'],
  precondition_failed: [412, 'Precondition failed'],
  payload_too_large: [413, 'Payload too large'],
  unsupported_media_type: [415, 'Unsupported media type'],
  precondition_required: [428, 'Precondition required'],
  version_mismatch: [426, 'Upgrade required'],
  rate_limited: [429, 'Too many requests'],
  internal: [500, 'Internal error'],
  bad_gateway: [502, 'Bad gateway'],
  unavailable: [503, 'Service unavailable'],
  insufficient_storage: [507, 'Insufficient storage'],
} as const satisfies Record<ErrorCode, readonly [number, string]>;

export { errorCodes, type ErrorCode };

export function statusOf(code: ErrorCode): number {
  return codes[code][0];
}

export function titleOf(code: ErrorCode): string {
  return codes[code][1];
}

export interface Problem {
  status: number;
  headers: Record<string, string>;
  body: Record<string, unknown>;
}

/** The answer for `error`: its status, the headers its facts call for, and the problem document. */
export function problemOf(error: DomainError, requestId: string | null): Problem {
  const { facts } = error;
  const status = statusOf(error.code);
  const body: Record<string, unknown> = {
    type: `urn:portplane:problem:${error.code}`,
    title: titleOf(error.code),
    status,
    detail: error.detail,
    code: error.code,
    ...(requestId === null ? {} : { request_id: requestId }),
    ...facts.data,
  };
  const headers: Record<string, string> = {};
  if (facts.conflict?.kind === 'port') {
    if (facts.conflict.ruleId !== null) body.conflicting_rule_id = facts.conflict.ruleId;
    else body.conflicting_tunnel_id = facts.conflict.tunnelId;
  } else if (facts.conflict?.kind === 'name' && facts.conflict.id !== null) {
    body.conflicting_id = facts.conflict.id;
  }
  if (facts.requiredScope !== undefined) {
    body.required_scope = facts.requiredScope;
    headers['WWW-Authenticate'] = `Bearer error="insufficient_scope", scope="${facts.requiredScope}"`;
  } else if (error.code === 'unauthorized') {
    headers['WWW-Authenticate'] = 'Bearer realm="portplane"';
  }
  if (facts.retryAfterSeconds !== undefined)
    headers['Retry-After'] = String(Math.max(1, Math.ceil(facts.retryAfterSeconds)));
  if (facts.etag !== undefined) headers.ETag = facts.etag;
  if (facts.allow !== undefined) headers.Allow = facts.allow.join(', ');
  if (facts.errors && facts.errors.length > 0) body.errors = facts.errors;
  return { status, headers, body };
}
