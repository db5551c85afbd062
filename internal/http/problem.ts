// The one place where an error becomes an HTTP answer: each code's status and title, and the
// facts it carries as RFC 9457 problem members and headers.

import { DomainError, errorCodes, type ErrorCode } from '../errors/errors.ts';

const codes = {
  bad_request: [
    400,
    'Bad request',
    'The request target is malformed (a dot segment, an encoded slash); send the path itself.',
  ],
  invalid_json: [400, 'Body is not valid JSON', 'Send a JSON body (nested at most 16 deep).'],
  invalid_query: [
    400,
    'Invalid query parameter',
    'A query parameter is unknown or its value invalid; errors names it.',
  ],
  validation_failed: [
    422,
    'Validation failed',
    'Fields are missing or invalid; errors lists each with its pointer. Nothing changed.',
  ],
  idempotency_key_reused: [
    422,
    'Idempotency key reused with a different request',
    'This Idempotency-Key was used for another body or path by this token in the last 24 hours; use a new key.',
  ],
  unauthorized: [
    401,
    'Unauthorized',
    'No token, or one unknown, revoked or expired (WWW-Authenticate says which); log in again.',
  ],
  auth_failed: [401, 'Agent token refused', 'The agent link only: the agent token is unknown; reinstall the node.'],
  insufficient_scope: [403, 'Insufficient scope', 'The token lacks required_scope; the attempt is in the audit log.'],
  operators_only: [
    403,
    'For operators',
    'A tenant reaches only what they own, on routes that follow ownership; the attempt is in the audit log.',
  ],
  not_granted: [
    403,
    'Not granted',
    "Outside the tenant's plan (a node, a port, how many rules, a cap), which the detail names; nothing changed.",
  ],
  license_limit: [
    403,
    'License limit reached',
    'The license allows no more nodes (GET /api/license); nothing changed.',
  ],
  not_found: [404, 'Not found', 'No such resource, or no such route; ids are whole numbers from 1.'],
  method_not_allowed: [405, 'Method not allowed', 'The path exists; Allow lists its methods.'],
  conflict: [
    409,
    'Conflict',
    'A name or port is taken (conflicting_*), other resources still refer to this one (rule_ids, tunnel_ids), a ' +
      'rule is enabled with its quota spent, a node asked to try a target is offline, or an Idempotency-Key is ' +
      'still being answered.',
  ],
  precondition_failed: [
    412,
    'Precondition failed',
    'If-Match names an older version; ETag has the current one. Re-read and retry.',
  ],
  payload_too_large: [413, 'Payload too large', "The body is over the operation's limit; send less at once."],
  unsupported_media_type: [415, 'Unsupported media type', 'Send Content-Type: application/json.'],
  precondition_required: [428, 'Precondition required', 'This change needs If-Match; read the resource for its ETag.'],
  version_mismatch: [
    426,
    'Upgrade required',
    "The agent link only: the agent's protocol version is not this master's.",
  ],
  rate_limited: [
    429,
    'Too many requests',
    "The user's write budget (or the login throttle) is spent; wait Retry-After.",
  ],
  internal: [
    500,
    'Internal error',
    "Not the request's fault; the request id is in the server log. Nothing was changed.",
  ],
  bad_gateway: [
    502,
    'Bad gateway',
    'The node refused or failed what was asked of it; the problem says what it reported.',
  ],
  unavailable: [503, 'Service unavailable', 'Starting, shutting down or held behind an import; wait Retry-After.'],
  read_only: [
    503,
    'Read only',
    'This master is a standby: it serves reads of its copy; writes go to the primary, which `primary` names.',
  ],
  insufficient_storage: [507, 'Insufficient storage', "The master's disk is full; nothing changed; reads go on."],
} as const satisfies Record<ErrorCode, readonly [number, string, string]>;

export { errorCodes, type ErrorCode };

export function statusOf(code: ErrorCode): number {
  return codes[code][0];
}

export function titleOf(code: ErrorCode): string {
  return codes[code][1];
}

/** What a code means for the caller and what to do about it, for the reference. */
export function meaningOf(code: ErrorCode): string {
  return codes[code][2];
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
    else if (facts.conflict.tunnelId !== null) body.conflicting_tunnel_id = facts.conflict.tunnelId;
  } else if (facts.conflict?.kind === 'name' && facts.conflict.id !== null) {
    body.conflicting_id = facts.conflict.id;
  }
  if (facts.requiredScope !== undefined) {
    body.required_scope = facts.requiredScope;
    headers['WWW-Authenticate'] = `Bearer error="insufficient_scope", scope="${facts.requiredScope}"`;
  } else if (facts.invalidToken) {
    headers['WWW-Authenticate'] = 'Bearer realm="portplane", error="invalid_token"';
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
