// What a route is: method, path pattern, required scope, audit action, schemas and the
// handler. The route table, the router, the scope check and the API reference share it.

import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import type { Scope } from '../auth/scopes.ts';
import { notFound, validationFailed } from '../errors/errors.ts';
import { parseJson } from '../http/body.ts';
import type { QueryOf, QuerySpec } from '../schema/query.ts';
import { validate, type JsonSchema, type Schema } from '../schema/schema.ts';
import type { Actor } from '../store/audit.ts';
import type { IdempotencySlot } from '../store/idempotency.ts';
import type { App } from './app.ts';
import type { Principal } from '../auth/principal.ts';
import { idOf } from '../schema/ids.ts';

export type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/** An Idempotency-Key: 1 to 255 visible ASCII characters. */
export const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;

/**
 * `public`: no token; `authenticated`: any valid token; `session`: a login session, not an API token (what a person
 * does to their own account: a leaked script's token must not lock or sign out its owner); otherwise the scope it
 * must grant.
 */
export type Access = Scope | 'public' | 'authenticated' | 'session';

export interface Reply {
  status: number;
  body?: unknown;
  /** A body that is JSON text already (built by SQLite, or its UTF-8 bytes), sent as is. */
  json?: string | Buffer;
  /** A body that is not JSON; `headers` gives its Content-Type. Chunks go one after another, never copied into one. */
  raw?: string | Buffer | readonly Buffer[];
  headers?: Record<string, string>;
  /**
   * A body that goes on (server-sent events): called once, with the response once its headers are sent, or with null
   * when another answer replaced this one (a failed commit).
   */
  stream?: (res: ServerResponse | null) => void;
}

export function ok(body: unknown, headers?: Record<string, string>): Reply {
  return { status: 200, body, headers };
}

/** 200 with a body that is already JSON text. */
export function okJson(json: string, headers?: Record<string, string>): Reply {
  return { status: 200, json, headers };
}

export function created(body: unknown, headers?: Record<string, string>): Reply {
  return { status: 201, body, headers };
}

export function noContent(): Reply {
  return { status: 204 };
}

export interface Ctx<B, Q> {
  app: App;
  requestId: string;
  ip: string;
  params: Record<string, string>;
  query: Q;
  body: B;
  /** The body as it came, for a route that decodes it itself (`decodesBody`). */
  rawBody: Buffer;
  headers: IncomingHttpHeaders;
  /** The authenticated caller; reading it on a public route is a programming error. */
  caller: Principal;
  /** Who to record in the audit log for this request. */
  actor: Actor;
  /** The route's audit action, which its writes record unless they name another. */
  action?: string;
  /** A POST's Idempotency-Key not yet answered: its change marks it used (see `transact`). */
  idempotency?: IdempotencySlot;
}

export interface SideEffect {
  scope: Scope;
  when: string;
}

export interface ResponseDoc {
  description: string;
  schema?: Schema<unknown>;
  /** The body's media type when it is not application/json. */
  mediaType?: string;
  /** Headers this answer sends besides those every answer (or every answer of its kind) sends. */
  headers?: Record<string, { description: string; schema: JsonSchema }>;
}

/**
 * What a route does: documented, with its schemas, audit action and handler. Where it lives and who may call it is in
 * routes.ts.
 */
export interface OperationSpec<B, Q extends QuerySpec> {
  /** Its OpenAPI operationId (verbNoun): the key it has in its module's `operations({...})`. */
  operationId?: string;
  /** Audit action (`resource.verb`); every route that writes has one. */
  action?: string;
  summary: string;
  description?: string;
  query?: Q;
  /** Query parameters `query` does not name are ignored, not refused: what another party adds (a provider's). */
  othersIgnored?: boolean;
  body?: Schema<B>;
  /**
   * The handler decodes `rawBody` against `body` itself (`decodeBody`), where it chooses: an
   * import does so in a worker thread, as parsing a large document would hold every request.
   */
  decodesBody?: boolean;
  /** Overrides the 1 MiB body limit, for routes that take whole documents. */
  maxBodyBytes?: number;
  /**
   * Answers tenants: what it reads and writes follows ownership (their own, as their plan grants). Every other route
   * refuses a tenant (403 operators_only), whatever scopes they hold.
   */
  tenants?: boolean;
  /** Called while the master starts (health, which says so), where every other route answers 503 `starting`. */
  answersWhileStarting?: boolean;
  /**
   * A write answered without waiting, in sync mode, for a standby to hold it: the promotion, after which this master
   * has no standby yet (its next writes wait, and lapse, as a primary's do).
   */
  unheld?: boolean;
  /**
   * What a standby does with it, when not the default (GETs answered from its copy, writes refused naming its
   * primary): `serves` a write all the same (its own sessions, its promotion), `refuses` a read (what standbys follow).
   */
  standby?: 'serves' | 'refuses';
  responses: Record<number, ResponseDoc>;
  handler: (ctx: Ctx<B, QueryOf<Q>>) => Reply | Promise<Reply>;
}

export type Operation = OperationSpec<any, QuerySpec>;

/** Names each operation after its key, which becomes its OpenAPI operationId. */
export function operations<T extends Record<string, Operation>>(ops: T): T {
  for (const [id, op] of Object.entries(ops)) op.operationId = id;
  return ops;
}

/** Types an operation's handler against its own schemas, then erases them for the table. */
export function operation<B = undefined, Q extends QuerySpec = {}>(spec: OperationSpec<B, Q>): Operation {
  return spec as unknown as Operation;
}

export interface Route extends Operation {
  method: Method;
  path: string;
  scope: Access;
  /**
   * Scopes the route needs beyond `scope` for some of what it may do (a cascade, a sensitive
   * setting), checked when it does it: 403 and nothing changed otherwise.
   */
  alsoNeeds?: readonly SideEffect[];
}

/** A line of the route table. */
export function route(
  method: Method,
  path: string,
  scope: Access,
  op: Operation,
  alsoNeeds?: readonly SideEffect[],
): Route {
  return { method, path, scope, ...(alsoNeeds && alsoNeeds.length > 0 ? { alsoNeeds } : {}), ...op };
}

/**
 * A request body checked against its route's schema: no body at all is an empty object
 * (routes whose fields are all optional need none); JSON null, an array, a string or a
 * number is not an object and fails. Throws `invalid_json`, `validation_failed`.
 */
export function decodeBody<T>(schema: Schema<T>, raw: Buffer, maxOpened?: number): T {
  const parsed = parseJson(raw, maxOpened);
  const { value, errors } = validate(schema, parsed === undefined ? {} : parsed);
  if (errors.length > 0) throw validationFailed(errors);
  return value;
}

/** The positive integer id in the path, or `not_found`. */
export function idParam(ctx: { params: Record<string, string> }, name = 'id'): number {
  const raw = ctx.params[name] ?? '';
  const id = idOf(raw);
  if (id === null) throw notFound(name === 'id' ? 'resource' : name, raw);
  return id;
}
