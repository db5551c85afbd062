// The errors the system speaks, whoever raises them (store, domain code, API, agent link):
// a closed set of codes, the facts a caller can act on, and an optional cause that only the
// log sees. How a code becomes an HTTP status and a problem document is decided in one place,
// internal/http/problem.ts.

export const errorCodes = [
  'bad_request',
  'invalid_json',
  'invalid_query',
  'validation_failed',
  'idempotency_key_reused',
  'unauthorized',
  'auth_failed',
  'insufficient_scope',
  'operators_only',
  'not_granted',
  'license_limit',
  'not_found',
  'method_not_allowed',
  'conflict',
  'precondition_failed',
  'payload_too_large',
  'unsupported_media_type',
  'precondition_required',
  'version_mismatch',
  'rate_limited',
  'internal',
  'bad_gateway',
  'unavailable',
  'read_only',
  'insufficient_storage',
] as const;

export type ErrorCode = (typeof errorCodes)[number];

/** A problem with one field of the input, at a JSON Pointer (`#/targets/1`, `?cursor`). */
export interface FieldError {
  pointer: string;
  detail: string;
}

/** Who holds what a write wanted: a port (by a rule or a tunnel) or a unique name. */
export type Conflict =
  | { kind: 'port'; nodeId: number; protocol: string; port: number; ruleId: number | null; tunnelId: number | null }
  | { kind: 'name'; id: number | null };

export interface Facts {
  /** Every bad field. */
  errors?: FieldError[];
  conflict?: Conflict;
  /** A bearer token was sent, but it is unknown, revoked or expired (RFC 6750 `invalid_token`). */
  invalidToken?: boolean;
  /** A scope the caller lacks for this request (or part of it). */
  requiredScope?: string;
  /** When a refused request may be tried again. */
  retryAfterSeconds?: number;
  /** The resource's current version, after a stale If-Match. */
  etag?: string;
  /** The methods a path allows. */
  allow?: string[];
  /** More members for the problem document (the rules still referring to a node, per-item results, ...). */
  data?: Record<string, unknown>;
}

export class DomainError extends Error {
  constructor(
    readonly code: ErrorCode,
    /** Said to the caller. */
    readonly detail: string,
    readonly facts: Facts = {},
    /** What went wrong underneath, for the log only. */
    cause?: unknown,
  ) {
    super(`${code}: ${detail}`, cause === undefined ? undefined : { cause });
  }
}

/**
 * The most problems a 422 lists. A hostile body can hold millions (every unknown key of an
 * object is one): listing them all cost the master gigabytes and tens of seconds. Checks
 * stop looking past it (see schema.ts).
 */
export const MAX_LISTED_ERRORS = 1000;

/** `validation_failed` listing every bad field, up to MAX_LISTED_ERRORS; the detail names the one, or counts them. */
export function validationFailed(errors: FieldError[], detail?: string): DomainError {
  const first = errors[0];
  if (errors.length > MAX_LISTED_ERRORS) {
    const summary = detail ?? `more than ${MAX_LISTED_ERRORS} fields are invalid`;
    return new DomainError('validation_failed', `${summary}; the first ${MAX_LISTED_ERRORS} are listed`, {
      errors: errors.slice(0, MAX_LISTED_ERRORS),
    });
  }
  const summary =
    detail ??
    (errors.length === 1 && first
      ? `${first.pointer.slice(2) || 'body'} ${first.detail}`
      : `${errors.length} fields are invalid`);
  return new DomainError('validation_failed', summary, { errors });
}

/** The 404 for `what` (a resource's name) `id`, which does not exist. */
export function notFound(what: string, id: number | string): DomainError {
  return new DomainError('not_found', `${what} ${id} does not exist`);
}
