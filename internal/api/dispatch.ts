// The request pipeline: route, authenticate, check scope, pace writes, replay idempotent
// POSTs, read and validate input, run the handler, and turn every outcome into one
// response. This is the only code that writes error bodies.

import { refusalOf } from './refusal.ts';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { rateLimitHeaders, type BudgetState } from '../auth/budget.ts';
import { ClientGone, readBody } from '../http/body.ts';
import { DomainError } from '../errors/errors.ts';
import { requestIdFrom } from '../http/request-id.ts';
import { proven } from '../http/server.ts';
import { throttledBy } from '../log/log.ts';
import { sourceOf } from '../schema/net.ts';
import { Router } from '../http/router.ts';
import { parseQuery } from '../schema/query.ts';
import { actorOf, type App } from './app.ts';
import type { Principal } from '../auth/principal.ts';
import type { Reply, Route } from './route.ts';
import { resourcePath } from './events.ts';
import { asDomainError, fromError, fromReply, write, type Outgoing } from './outgoing.ts';
import { keepAnswer, keptAnswer, markedUsed, type Unanswered } from './replay.ts';
import { checkBody, RequestCtx, requestTarget, type Exchange, type Routed } from './request.ts';
import { auditDenied, type Changed } from '../service/write.ts';
import { idOf } from '../schema/ids.ts';

/** A read's body: none. */
const NO_BODY = Buffer.alloc(0);

export function buildRouter(routes: readonly Route[]): Router<Route> {
  const router = new Router<Route>();
  for (const r of routes) router.add(r.method, r.path, r);
  return router;
}

export function createDispatcher(app: App, routes: readonly Route[]) {
  const router = buildRouter(routes);
  // What one client may log beyond its request lines (refusals with a cause, failures): see `throttledBy`.
  const throttled = throttledBy(app.log, app.clock.now);
  const logOf = (ip: string) => throttled(sourceOf(ip));

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
    const exchange: Exchange = {
      req,
      requestId: requestIdFrom(req.headers['x-request-id']),
      ip: req.socket.remoteAddress ?? 'unknown',
      principal: null,
      pacing: {},
    };
    res.on('finish', () => {
      app.metrics.request(
        req.method ?? '',
        exchange.route?.path ?? 'unmatched',
        res.statusCode,
        (performance.now() - started) / 1000,
      );
      app.log.info('request', {
        method: req.method,
        path: (req.url ?? '').split('?')[0],
        status: res.statusCode,
        duration_ms: Math.round((performance.now() - started) * 10) / 10,
        request_id: exchange.requestId,
        ip: exchange.ip,
        user: exchange.principal?.username ?? null,
      });
    });

    let out: Outgoing;
    try {
      // A read whose handler answers at once is answered in this turn: each await is a turn of the microtask queue.
      const answered = answer(exchange);
      out = answered instanceof Promise ? await answered : answered;
    } catch (thrown) {
      if (thrown instanceof ClientGone) {
        logOf(exchange.ip).info('request abandoned', {
          request_id: exchange.requestId,
          ip: exchange.ip,
          reason: thrown.message,
        });
        return void res.destroy();
      }
      out = fromThrown(thrown, exchange.requestId, exchange.ip);
    }
    Object.assign(out.headers, exchange.pacing);
    // Nothing leaves before the writes it may have seen are durable (group commit). A write waited for its own commit
    // already (`transact`, which answers a failed one itself): what fails here is others' work, and only a read that
    // may have shown some of it is answered otherwise.
    try {
      const pending = app.store.pendingCommit();
      if (pending) await pending;
    } catch (error) {
      app.log.error('commit failed', { request_id: exchange.requestId, error: (error as Error).message });
      if (req.method === 'GET') {
        out.stream?.(null);
        out = fromThrown(error, exchange.requestId, exchange.ip);
      }
    }
    if (out.status === 413 || app.draining) out.headers.Connection = 'close';
    write(res, out, exchange.requestId);
  }

  /** A thrown value as an answer: a domain error as its problem, anything else as a bland 500 (and a full log line). */
  function fromThrown(thrown: unknown, requestId: string, ip: string): Outgoing {
    const error = asDomainError(thrown);
    if (error instanceof DomainError) {
      // What went wrong underneath is for the operator, never the caller.
      if (error.cause !== undefined)
        logOf(ip).warn('request refused', { request_id: requestId, code: error.code, cause: String(error.cause) });
      return fromError(error, requestId);
    }
    logOf(ip).error('unhandled error', { request_id: requestId, error: (error as Error)?.stack ?? String(error) });
    return fromError(
      new DomainError('internal', 'an internal error occurred; the request id is in the server log'),
      requestId,
    );
  }

  /** The stages, in order; each throws a DomainError to end the request with it. */
  function answer(exchange: Exchange): Outgoing | Promise<Outgoing> {
    let routed: Routed;
    try {
      routed = routeOf(exchange.req);
    } catch (error) {
      paceIfKnown(exchange);
      throw error;
    }
    exchange.route = routed.route;
    authenticate(routed.route, exchange);
    authorise(routed, exchange);
    const query = parseQuery(routed.route.query ?? {}, routed.url.searchParams, routed.route.othersIgnored);
    if (routed.route.method === 'GET') return read(routed, exchange, query);
    return answerWrite(routed, exchange, query);
  }

  /** The stages of a write, from its body on. */
  async function answerWrite(routed: Routed, exchange: Exchange, query: unknown): Promise<Outgoing> {
    const raw = await readBody(exchange.req, routed.route.maxBodyBytes);
    const idempotency = idempotencyOf(routed.route, exchange, raw);
    if ('replay' in idempotency) return idempotency.replay;
    pace(routed.route, exchange);
    return run(routed, exchange, query, raw, idempotency.slot);
  }

  /** Stage: a read's handler, run. */
  function read({ route, params }: Routed, exchange: Exchange, query: unknown): Outgoing | Promise<Outgoing> {
    const refused = (thrown: unknown) => refusal(thrown, route, params, exchange);
    try {
      const reply = route.handler(makeCtx(route, exchange, params, query, NO_BODY, null));
      return reply instanceof Promise ? reply.then(fromReply, refused) : fromReply(reply);
    } catch (thrown) {
      return refused(thrown);
    }
  }

  /**
   * A handler's throw as its answer: a domain error's problem (a write refused for a scope it needs beyond the route's,
   * a cascade or a scope to grant, is audited as denied); anything else is thrown on.
   */
  function refusal(thrown: unknown, route: Route, params: Record<string, string>, exchange: Exchange): Outgoing {
    const error = asDomainError(thrown);
    if (!(error instanceof DomainError)) throw error;
    if (error.code === 'insufficient_scope' && route.method !== 'GET' && exchange.principal) {
      recordDenied(route, params, exchange, {
        required_scope: error.facts.requiredScope ?? null,
        reason: error.detail,
      });
    }
    return fromThrown(error, exchange.requestId, exchange.ip);
  }

  /**
   * Stage: the route for the method and path. Throws `unavailable`, `bad_request`, `not_found`, `method_not_allowed`.
   */
  function routeOf(req: IncomingMessage): Routed {
    if (app.draining) throw new DomainError('unavailable', 'the server is shutting down', { retryAfterSeconds: 5 });
    const method = req.method ?? 'GET';
    const url = requestTarget(req.url);
    const found = router.lookup(method, url.pathname);
    // Nothing but health is served until everything is wired (the console's files included).
    if (app.starting && !(found && 'found' in found && found.found.route.answersWhileStarting))
      throw new DomainError('unavailable', 'the master is starting; retry in a moment', { retryAfterSeconds: 1 });
    if (found === null) throw new DomainError('not_found', `no route for ${url.pathname}`);
    app.refuseOnStandby(method, 'found' in found ? found.found.route.standby : undefined);
    if ('allowed' in found)
      throw new DomainError('method_not_allowed', `${method} is not allowed here; use ${found.allowed.join(', ')}`, {
        allow: found.allowed,
      });
    // Ids are positive integers: anything else names nothing, before a token or a body is looked at.
    for (const [name, value] of Object.entries(found.found.params)) {
      if (idOf(value) === null)
        throw new DomainError(
          'not_found',
          `no ${name} ${JSON.stringify(value.slice(0, 32))}: ids are whole numbers >= 1`,
        );
    }
    return { ...found.found, url };
  }

  /** Stage: who is asking, for any route but a public one. Throws `unauthorized`. */
  function authenticate(route: Route, exchange: Exchange): void {
    if (route.scope === 'public') return;
    exchange.principal = app.authenticate(exchange.req.headers.authorization);
    // Its connection is a known caller's from now on, set apart from strangers' (see UNPROVEN_IN_TOTAL).
    proven(exchange.req.socket);
    exchange.pacing = rateLimitHeaders(peekBudget(exchange.principal));
  }

  /**
   * For a request that matched no route (404, 405, a malformed path): a caller whose token is good still learns what
   * is left of its budget, as on every other answer to it. A bad or missing token changes nothing here: the answer
   * stays the routing one.
   */
  function paceIfKnown(exchange: Exchange): void {
    if (app.starting || app.draining || exchange.req.headers.authorization === undefined) return;
    try {
      exchange.principal = app.authenticate(exchange.req.headers.authorization);
      exchange.pacing = rateLimitHeaders(peekBudget(exchange.principal));
    } catch {
      // Unknown token: answered as routed, without pacing, as any stranger is.
    }
  }

  /**
   * Stage: may they. A refused write is audited as denied and spends budget too, so a weak
   * token cannot grow the audit log without bound. Throws `insufficient_scope`, `operators_only`, `rate_limited`.
   */
  function authorise({ route, params }: Routed, exchange: Exchange): void {
    const { principal } = exchange;
    const refused = principal && refusalOf(route, principal);
    if (!refused) return;
    // A standby writes nothing of its own, a denial's record included.
    if (route.method !== 'GET' && !app.standby) {
      spend(principal, exchange);
      recordDenied(route, params, exchange, refused.audited);
    }
    throw refused.error;
  }

  /**
   * Stage: a POST with an Idempotency-Key gets the answer already given to it, or a slot for
   * the answer it is about to get. Throws as `idempotencyOf` in replay.ts does.
   */
  function idempotencyOf(
    route: Route,
    exchange: Exchange,
    raw: Buffer,
  ): { replay: Outgoing } | { slot: Unanswered | null } {
    const found = keptAnswer(app, route.method, exchange, raw);
    return 'lost' in found ? { replay: answerLost(exchange, found.lost) } : found;
  }

  /**
   * The answer to a retry of a request that committed but whose answer was not kept (the master stopped in between):
   * rebuilt from what the request changed, which its mark holds (see writes.reserveReplay). A create of one resource
   * is answered as the create was, 201 with its Location and the resource as its GET shows it now; anything else (an
   * action, a batch) is a `conflict` that names what was done, ids included, since its answer had another shape.
   * Throws `conflict`.
   */
  function answerLost(exchange: Exchange, kept: Buffer): Outgoing {
    const changed = (kept.length > 0 ? JSON.parse(kept.toString('utf8')) : []) as Changed[];
    const named = changed.map((c) => `${c.action} ${c.resource}${c.resource_id === null ? '' : ` ${c.resource_id}`}`);
    const lost = () =>
      new DomainError(
        'conflict',
        'a request with this Idempotency-Key was carried out, but its answer could not be kept' +
          (named.length > 0 ? ` (it did: ${named.join(', ')})` : '') +
          '; read the resources it changed',
      );
    const [only] = changed;
    if (changed.length !== 1 || only!.resource_id === null || !only!.action.endsWith('.create')) throw lost();
    const path = resourcePath(only!.resource, only!.resource_id);
    const found = path === null ? null : router.lookup('GET', path);
    if (!found || !('found' in found)) throw lost();
    const { route, params } = found.found;
    // The retry's caller is the one that made the change, and reads it only where it may.
    if (refusalOf(route, exchange.principal!)) throw lost();
    let reply: Reply;
    try {
      const answered = route.handler(makeCtx(route, exchange, params, {}, NO_BODY, null));
      if (answered instanceof Promise) throw lost();
      reply = answered;
    } catch (error) {
      if (error instanceof DomainError && error.code === 'not_found') throw lost();
      throw error;
    }
    const out = fromReply(reply);
    return { ...out, status: 201, headers: { ...out.headers, 'Idempotent-Replayed': 'true', Location: path! } };
  }

  /** Stage: a write spends one of its user's budget. Throws `rate_limited`. */
  function pace(route: Route, exchange: Exchange): void {
    if (route.method !== 'GET' && exchange.principal) spend(exchange.principal, exchange);
  }

  /**
   * Stage: validate the body and run a write's handler (see `refusal` for what it throws); a success is kept for an
   * Idempotency-Key's retries.
   */
  async function run(
    { route, params }: Routed,
    exchange: Exchange,
    query: unknown,
    raw: Buffer,
    idempotency: Unanswered | null,
  ): Promise<Outgoing> {
    if (idempotency) app.idempotencyInFlight.add(idempotency.inFlight);
    try {
      let out: Outgoing;
      try {
        const ctx = makeCtx(route, exchange, params, query, raw, idempotency);
        out = fromReply(await route.handler(ctx));
        // In sync mode a write is answered once a standby holds it too.
        if (route.method !== 'GET' && out.status < 400 && !route.unheld) await app.replicas.held();
      } catch (thrown) {
        out = refusal(thrown, route, params, exchange);
      }
      // Only what changed something is kept, whatever it answered (a sync the node failed is a 502): its change marked
      // the key used. What changed nothing (a refusal, a dry run) is not kept: its retry may simply run again.
      if (idempotency && markedUsed(app, idempotency)) await keepAnswer(app, idempotency, out, exchange.requestId);
      return out;
    } finally {
      if (idempotency) app.idempotencyInFlight.delete(idempotency.inFlight);
    }
  }

  function makeCtx(
    route: Route,
    exchange: Exchange,
    params: Record<string, string>,
    query: unknown,
    raw: Buffer,
    idempotency: Unanswered | null,
  ) {
    const body = checkBody(route, raw);
    return new RequestCtx(
      app,
      route,
      exchange.principal,
      exchange.requestId,
      exchange.ip,
      params,
      query,
      body,
      raw,
      exchange.req.headers,
      idempotency ?? undefined,
    );
  }

  function peekBudget(principal: Principal): BudgetState {
    return app.budget.peek(principal.userId, app.settings.get('write_budget_per_minute'));
  }

  /** Spends one write of the caller's user, updating the pacing headers. Throws `rate_limited` past the budget. */
  function spend(principal: Principal, exchange: Exchange): void {
    const budget = app.budget.spend(principal.userId, app.settings.get('write_budget_per_minute'));
    exchange.pacing = rateLimitHeaders(budget);
    if (!budget.allowed) {
      throw new DomainError('rate_limited', `this user's write budget of ${budget.limit} per minute is spent`, {
        retryAfterSeconds: budget.resetSeconds,
      });
    }
  }

  /** Audits an attempt the caller's scopes did not allow, in the next write's turn. */
  function recordDenied(
    route: Route,
    params: Record<string, string>,
    exchange: Exchange,
    changes: Record<string, unknown>,
  ): void {
    const action = route.action ?? `${route.method} ${route.path}`;
    const id = params.id === undefined ? null : idOf(params.id);
    auditDenied(app, actorOf(exchange.principal, exchange.ip, exchange.requestId), action, id, changes);
  }
}
