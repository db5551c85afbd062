// The typed error every handler throws, and the one table that maps its code to an HTTP
// status and title (RFC 9457 problem details).

import type { FieldError } from '../schema/schema.ts';

const codes = {
  bad_request: [400, 'Bad request'],
  invalid_json: [400, 'Body is not valid JSON'],
  invalid_query: [400, 'Invalid query parameter'],
  validation_failed: [422, 'Validation failed'],
  idempotency_key_reused: [422, 'Idempotency key reused with a different request'],
  unauthorized: [401, 'Unauthorized'],
  insufficient_scope: [403, 'Insufficient scope'],
  license_limit: [403, 'License limit reached'],
  not_found: [404, 'Not found'],
  method_not_allowed: [405, 'Method not allowed'],
  conflict: [409, 'Conflict'],
  precondition_failed: [412, 'Precondition failed'],
  payload_too_large: [413, 'Payload too large'],
  unsupported_media_type: [415, 'Unsupported media type'],
  precondition_required: [428, 'Precondition required'],
  rate_limited: [429, 'Too many requests'],
  internal: [500, 'Internal error'],
  bad_gateway: [502, 'Bad gateway'],
  unavailable: [503, 'Service unavailable'],
} as const satisfies Record<string, readonly [number, string]>;

export type ErrorCode = keyof typeof codes;
export const errorCodes = Object.keys(codes) as ErrorCode[];

export function statusOf(code: ErrorCode): number {
  return codes[code][0];
}

export function titleOf(code: ErrorCode): string {
  return codes[code][1];
}

export interface ApiErrorOptions {
  errors?: FieldError[];
  headers?: Record<string, string>;
  /** Extra members of the problem body, e.g. the id of a conflicting resource. */
  extra?: Record<string, unknown>;
}

export class ApiError extends Error {
  readonly status: number;
  constructor(
    readonly code: ErrorCode,
    readonly detail: string,
    readonly options: ApiErrorOptions = {},
  ) {
    super(`${code}: ${detail}`);
    this.status = statusOf(code);
  }
}

export function problemBody(error: ApiError, requestId: string): Record<string, unknown> {
  const body: Record<string, unknown> = {
    type: `urn:portplane:problem:${error.code}`,
    title: titleOf(error.code),
    status: error.status,
    detail: error.detail,
    code: error.code,
    request_id: requestId,
    ...error.options.extra,
  };
  if (error.options.errors && error.options.errors.length > 0) body.errors = error.options.errors;
  return body;
}

export function validationFailed(errors: FieldError[], detail?: string): ApiError {
  const first = errors[0];
  const summary =
    detail ??
    (errors.length === 1 && first ? `${first.pointer.slice(2) || 'body'} ${first.detail}` : `${errors.length} fields are invalid`);
  return new ApiError('validation_failed', summary, { errors });
}
