// The request pipeline: route, authenticate, check scope, pace writes, replay idempotent
// POSTs, read and validate input, run the handler, and turn every outcome into one
// response. This is the only code that writes error bodies.

import { createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { rateLimitHeaders, type BudgetState } from '../auth/budget.ts';
import { grants } from '../auth/scopes.ts';
import { PasswordWorkBusy } from '../auth/secrets.ts';
import { parseJson, readBody } from '../http/body.ts';
import { ApiError, problemBody, validationFailed } from '../http/problem.ts';
import { requestIdFrom } from '../http/request-id.ts';
import { Router } from '../http/router.ts';
import { parseQuery } from '../schema/query.ts';
import { validate } from '../schema/schema.ts';
import { redact } from '../store/audit.ts';
import type { StoredResponse } from '../store/idempotency.ts';
import { actorOf, type App, type Principal } from './app.ts';
import type { Ctx, Reply, Route } from './route.ts';

interface Outgoing {
  status: number;
  headers: Record<string, string>;
  body: Buffer | null;
}

const IDEMPOTENCY_TTL_MS = 24 * 60 * 60 * 1000;
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;
/** The largest response kept for replay. */
const MAX_REPLAY_BYTES = 256 * 1024;
// Headers a replayed response repeats; pacing headers are computed fresh each time.
const REPLAYED_HEADERS = ['content-type', 'location', 'etag'];

/**
 * What a retry with the same Idempotency-Key gets: the response with every secret in it
 * redacted (a secret is shown once, and never stored), or, for a response too large to keep,
 * a 409 saying the request was carried out.
 */
function replayOf(out: Outgoing, requestId: string): Pick<StoredResponse, 'status' | 'headers' | 'body'> {
  if ((out.body?.length ?? 0) > MAX_REPLAY_BYTES) {
    const detail = `a request with this Idempotency-Key was carried out (status ${out.status}); its response was too large to keep, so read the resources it changed`;
    return replayOf(fromError(new ApiError('conflict', detail), requestId), requestId);
  }
  const headers = Object.fromEntries(Object.entries(out.headers).filter(([name]) => REPLAYED_HEADERS.includes(name.toLowerCase())));
  const body = out.body ?? Buffer.alloc(0);
  const type = Object.entries(headers).find(([name]) => name.toLowerCase() === 'content-type')?.[1] ?? '';
  if (body.length === 0 || !/json/.test(type)) return { status: out.status, headers, body };
  return { status: out.status, headers, body: Buffer.from(JSON.stringify(redact(JSON.parse(body.toString('utf8'))))) };
}

function json(status: number, body: unknown, headers: Record<string, string> = {}): Outgoing {
  return {
    status,
    headers: { 'Content-Type': 'application/json', ...headers },
    body: Buffer.from(JSON.stringify(body)),
  };
}

function fromReply(reply: Reply): Outgoing {
  if (reply.json !== undefined) return { status: reply.status, headers: { 'Content-Type': 'application/json', ...reply.headers }, body: Buffer.from(reply.json) };
  if (reply.body === undefined) return { status: reply.status, headers: reply.headers ?? {}, body: null };
  return json(reply.status, reply.body, reply.headers);
}

function fromError(error: ApiError, requestId: string): Outgoing {
  const out = json(error.status, problemBody(error, requestId), error.options.headers);
  out.headers['Content-Type'] = 'application/problem+json';
  if (error.code === 'unauthorized') out.headers['WWW-Authenticate'] = 'Bearer realm="portplane"';
  return out;
}

function write(res: ServerResponse, out: Outgoing): void {
  for (const [name, value] of Object.entries(out.headers)) res.setHeader(name, value);
  res.statusCode = out.status;
  if (out.body) res.setHeader('Content-Length', out.body.length);
  res.end(out.body ?? undefined);
}

/** Errors from below the API that have a meaning for the caller, as that meaning; anything else as it is. */
function asApiError(error: unknown): unknown {
  if (error instanceof PasswordWorkBusy) return new ApiError('rate_limited', 'the server is checking too many passwords at once; retry shortly', { headers: { 'Retry-After': '1' } });
  return error;
}

/** The request target as a URL. Throws `bad_request` for one no URL parser accepts. */
function requestUrl(target: string | undefined): URL {
  try {
    return new URL(target ?? '/', 'http://localhost');
  } catch {
    throw new ApiError('bad_request', 'the request target is not a valid path');
  }
}

export function buildRouter(routes: readonly Route[]): Router<Route> {
  const router = new Router<Route>();
  for (const r of routes) router.add(r.method, r.path, r);
  return router;
}

export function createDispatcher(app: App, routes: readonly Route[]) {
  const router = buildRouter(routes);

  /** Answers one request; whatever it holds, the worst it can do is end its own connection. */
  return async function dispatch(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      await respond(req, res);
    } catch (error) {
      app.log.error('request failed', { error: (error as Error)?.stack ?? String(error) });
      res.destroy();
    }
  };

  async function respond(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const started = performance.now();
    const requestId = requestIdFrom(req.headers['x-request-id']);
    const ip = req.socket.remoteAddress ?? 'unknown';
    let principal: Principal | null = null;
    res.setHeader('X-Request-Id', requestId);
    res.on('finish', () => {
      app.log.info('request', {
        method: req.method,
        path: (req.url ?? '').split('?')[0],
        status: res.statusCode,
        duration_ms: Math.round((performance.now() - started) * 10) / 10,
        request_id: requestId,
        ip,
        user: principal?.username ?? null,
      });
    });

    let out: Outgoing;
    try {
      out = await answer(req, requestId, ip, (p) => (principal = p));
    } catch (thrown) {
      const error = asApiError(thrown);
      if (error instanceof ApiError) {
        out = fromError(error, requestId);
      } else {
        app.log.error('unhandled error', { request_id: requestId, error: (error as Error)?.stack ?? String(error) });
        out = fromError(new ApiError('internal', 'an internal error occurred; the request id is in the server log'), requestId);
      }
    }
    // Nothing leaves before the writes it may have seen are durable (group commit).
    try {
      await app.store.committed();
    } catch (error) {
      app.log.error('commit failed', { request_id: requestId, error: (error as Error).message });
      out = fromError(new ApiError('internal', 'the change could not be saved; nothing was changed'), requestId);
    }
    if (out.status === 413 || app.draining) out.headers.Connection = 'close';
    write(res, out);
  }

  async function answer(
    req: IncomingMessage,
    requestId: string,
    ip: string,
    identify: (principal: Principal) => void,
  ): Promise<Outgoing> {
    if (app.draining) throw new ApiError('unavailable', 'the server is shutting down', { headers: { 'Retry-After': '5' } });
    const method = req.method ?? 'GET';
    const url = requestUrl(req.url);
    const found = router.lookup(method, url.pathname);
    if (found === null) throw new ApiError('not_found', `no route for ${url.pathname}`);
    if ('allowed' in found) {
      throw new ApiError('method_not_allowed', `${method} is not allowed here; use ${found.allowed.join(', ')}`, {
        headers: { Allow: found.allowed.join(', ') },
      });
    }
    const { route, params } = found.found;
    const isWrite = route.method !== 'GET';

    let principal: Principal | null = null;
    let pacing: Record<string, string> = {};
    if (route.scope !== 'public') {
      principal = app.authenticate(req.headers.authorization);
      identify(principal);
      pacing = rateLimitHeaders(peekBudget(principal));
      if (route.scope !== 'authenticated' && !grants(principal.scopes, route.scope)) {
        if (isWrite) {
          // A denied write spends budget too, so a weak token cannot grow the audit log without bound.
          const budget = spendBudget(principal);
          pacing = rateLimitHeaders(budget);
          if (!budget.allowed) throw overBudget(budget, pacing);
          recordDenied(route, params, actorOf(principal, ip, requestId), { required_scope: route.scope });
        }
        throw new ApiError('insufficient_scope', `this call needs the scope ${route.scope}`, {
          headers: { ...pacing, 'WWW-Authenticate': `Bearer error="insufficient_scope", scope="${route.scope}"` },
        });
      }
    }

    const query = parseQuery(route.query ?? {}, url.searchParams);
    const raw = isWrite ? await readBody(req, route.maxBodyBytes) : Buffer.alloc(0);

    const key = req.headers['idempotency-key'];
    const idempotent = route.method === 'POST' && principal !== null && key !== undefined;
    if (idempotent && (typeof key !== 'string' || !IDEMPOTENCY_KEY.test(key))) {
      throw new ApiError('validation_failed', 'Idempotency-Key must be 1 to 255 visible ASCII characters');
    }
    let slot: string | null = null;
    let fingerprint = '';
    if (idempotent && principal) {
      fingerprint = createHash('sha256').update(`${route.method} ${req.url}\n`).update(raw).digest('base64url');
      slot = `${principal.tokenId}:${key}`;
      if (app.idempotencyInFlight.has(slot)) {
        throw new ApiError('conflict', 'a request with this Idempotency-Key is still being answered; retry shortly');
      }
      const stored = app.store.idempotency.find(principal.tokenId, key as string, app.timestamp(-IDEMPOTENCY_TTL_MS));
      if (stored) {
        if (stored.fingerprint !== fingerprint) {
          throw new ApiError('idempotency_key_reused', 'this Idempotency-Key was used for a different request');
        }
        return { status: stored.status, headers: { ...stored.headers, ...pacing, 'Idempotent-Replayed': 'true' }, body: stored.body };
      }
    }

    if (isWrite && principal) {
      const budget = spendBudget(principal);
      pacing = rateLimitHeaders(budget);
      if (!budget.allowed) throw overBudget(budget, pacing);
    }

    if (slot) app.idempotencyInFlight.add(slot);
    try {
      let out: Outgoing;
      try {
        const body = checkBody(route, raw);
        const ctx = makeCtx(route, req, requestId, ip, params, query, body, principal);
        out = fromReply(await route.handler(ctx));
      } catch (thrown) {
        const error = asApiError(thrown);
        if (!(error instanceof ApiError)) throw error;
        // A write refused for a scope it needs beyond the route's (a cascade, a scope to grant) is a denied write too.
        if (error.code === 'insufficient_scope' && isWrite && principal) {
          recordDenied(route, params, actorOf(principal, ip, requestId), { required_scope: error.options.extra?.required_scope ?? null, reason: error.detail });
        }
        out = fromError(error, requestId);
      }
      Object.assign(out.headers, pacing);
      // Only what changed something is kept (a refusal changed nothing, so its retry may simply run again).
      if (slot && principal && out.status >= 200 && out.status < 300) {
        app.store.idempotency.save(principal.tokenId, key as string, { fingerprint, ...replayOf(out, requestId) }, app.timestamp());
      }
      return out;
    } finally {
      if (slot) app.idempotencyInFlight.delete(slot);
    }
  }

  function checkBody(route: Route, raw: Buffer): unknown {
    const parsed = parseJson(raw);
    if (!route.body) {
      const empty = parsed === undefined || (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed) && Object.keys(parsed).length === 0);
      if (!empty) throw validationFailed([{ pointer: '#', detail: 'this call takes no body' }]);
      return undefined;
    }
    // An empty body is an empty object: routes whose fields are all optional need none.
    const { value, errors } = validate(route.body, parsed ?? {});
    if (errors.length > 0) throw validationFailed(errors);
    return value;
  }

  function makeCtx(
    route: Route,
    req: IncomingMessage,
    requestId: string,
    ip: string,
    params: Record<string, string>,
    query: unknown,
    body: unknown,
    principal: Principal | null,
  ): Ctx<unknown, any> {
    return {
      app,
      requestId,
      ip,
      params,
      query,
      body,
      headers: req.headers,
      actor: actorOf(principal, ip, requestId),
      get caller(): Principal {
        if (!principal) throw new Error(`${route.method} ${route.path} is public and has no caller`);
        return principal;
      },
    };
  }

  function peekBudget(principal: Principal): BudgetState {
    return app.budget.peek(principal.userId, app.settings.get('write_budget_per_minute'), 60);
  }

  function spendBudget(principal: Principal): BudgetState {
    return app.budget.spend(principal.userId, app.settings.get('write_budget_per_minute'), 60);
  }

  function overBudget(budget: BudgetState, pacing: Record<string, string>): ApiError {
    return new ApiError('rate_limited', `this user's write budget of ${budget.limit} per minute is spent`, {
      headers: { ...pacing, 'Retry-After': String(budget.resetSeconds) },
    });
  }

  function recordDenied(route: Route, params: Record<string, string>, actor: ReturnType<typeof actorOf>, changes: Record<string, unknown>): void {
    const action = route.action ?? `${route.method} ${route.path}`;
    const id = params.id !== undefined && /^[1-9][0-9]{0,15}$/.test(params.id) ? Number(params.id) : null;
    app.store.write(() => app.store.audit.record(actor, { action, resource: action.split('.')[0]!, resource_id: id, status: 'denied', changes }, app.timestamp()));
  }
}
