// A request on its way through the pipeline: its target, what the route stage found, and what a handler gets.

import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import { DomainError } from '../errors/errors.ts';
import type { Actor } from '../store/audit.ts';
import type { IdempotencySlot } from '../store/idempotency.ts';
import { actorOf, type App } from './app.ts';
import type { Principal } from '../auth/principal.ts';
import { decodeBody, type Ctx, type Route } from './route.ts';
import { parseJson } from '../http/body.ts';
import { validationFailed } from '../errors/errors.ts';

/**
 * What a URL parser would resolve rather than route: a dot segment (`..`, `.`, also percent-encoded: `%2e%2e`), an
 * encoded slash or backslash, or a path starting with `//` (read as a host). The path is routed as sent or not at all,
 * so `/api/nodes/%2e%2e/users` never reaches `/api/users`.
 */
const UNROUTABLE_PATH = /^\/\/|(?:^|\/)(?:\.|%2e){1,2}(?:\/|$)|%2f|%5c|\\/i;

/** A request's path, as routed, and its query. */
export interface RequestTarget {
  pathname: string;
  searchParams: URLSearchParams;
}

/**
 * The request target's path and query. Throws `bad_request` for one no URL parser accepts, or one it would rewrite. A
 * path as clients send it (origin-form, from `/`) is split where it stands, as the WHATWG parser would read it
 * (test/unit/request-target.test.ts), without its tenth of a request's time. Anything else (absolute-form) goes
 * through that parser.
 */
export function requestTarget(target: string | undefined): RequestTarget {
  const raw = target ?? '/';
  const end = raw.search(/[?#]/);
  const path = end < 0 ? raw : raw.slice(0, end);
  if (UNROUTABLE_PATH.test(path))
    throw new DomainError(
      'bad_request',
      'the path holds a dot segment, an encoded slash or a leading //, which are not resolved here; send the path ' +
        'itself',
    );
  // Visible ASCII but for what the parser would percent-encode in a path.
  if (raw.startsWith('/') && !/[^\x21-\x7e]|["<>`{}]/.test(path)) {
    const hash = raw.indexOf('#');
    const query = end < 0 || raw[end] === '#' ? '' : raw.slice(end + 1, hash < 0 ? undefined : hash);
    return { pathname: path, searchParams: new URLSearchParams(query) };
  }
  try {
    return new URL(raw, 'http://localhost');
  } catch {
    throw new DomainError('bad_request', 'the request target is not a valid path');
  }
}

/** What a handler gets. A class, so that its getters are not made anew for every request. */
export class RequestCtx implements Ctx<unknown, any> {
  private actorOnce: Actor | undefined;

  constructor(
    readonly app: App,
    private readonly route: Route,
    private readonly principal: Principal | null,
    readonly requestId: string,
    readonly ip: string,
    readonly params: Record<string, string>,
    readonly query: any,
    readonly body: unknown,
    readonly rawBody: Buffer,
    readonly headers: IncomingHttpHeaders,
    readonly idempotency: IdempotencySlot | undefined,
  ) {}

  get action(): string | undefined {
    return this.route.action;
  }

  get actor(): Actor {
    return (this.actorOnce ??= actorOf(this.principal, this.ip, this.requestId));
  }

  get caller(): Principal {
    if (!this.principal) throw new Error(`${this.route.method} ${this.route.path} is public and has no caller`);
    return this.principal;
  }
}

/** The body a route takes, decoded and checked; a route that takes none gets none. Throws `validation_failed`. */
export function checkBody(route: Route, raw: Buffer): unknown {
  if (route.body) return route.decodesBody ? undefined : decodeBody(route.body, raw);
  const parsed = parseJson(raw);
  const empty =
    parsed === undefined ||
    (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed) && Object.keys(parsed).length === 0);
  if (!empty) throw validationFailed([{ pointer: '#', detail: 'this call takes no body' }]);
  return undefined;
}

/** One request on its way through the pipeline: who asks, and the pacing headers every answer to them carries. */
export interface Exchange {
  req: IncomingMessage;
  /** The route, once found: what metrics count the request under. */
  route?: Route;
  requestId: string;
  ip: string;
  principal: Principal | null;
  pacing: Record<string, string>;
}

/** What the route stage found: the route, its path parameters and the request's target. */
export interface Routed {
  route: Route;
  params: Record<string, string>;
  url: RequestTarget;
}
