// The open GET /api/events streams. A stream never queues events in memory: it reads the journal from its own cursor
// while what it wrote is below BUFFER_BYTES, pauses until the client drains it, and is dropped if it stays full for
// `stallMs`. Each event's resource is rendered by the route that GETs it, for the stream's caller, when it is sent;
// the caller is checked again before anything is sent to it once credentials changed or its token expired.

import type { ServerResponse } from 'node:http';
import { grants } from '../auth/scopes.ts';
import { DomainError } from '../errors/errors.ts';
import { eventFrame, HEARTBEAT, retryFrame } from '../http/sse.ts';
import type { Logger } from '../log/log.ts';
import type { Clock } from '../runtime/clock.ts';
import type { EventRow } from '../store/events.ts';
import type { Store } from '../store/store.ts';
import type { SyncHub } from '../sync/hub.ts';
import type { App } from './app.ts';
import type { Principal } from '../auth/principal.ts';
import {
  BUFFER_BYTES,
  KEPT_FOR_ADMINS,
  LIVE_TYPES,
  MAX_STREAMS,
  MAX_STREAMS_PER_USER,
  PAGE,
  READERS,
  RESOURCES,
  type EventsQuery,
  type Resource,
} from './events.ts';
import type { Ctx, Reply, Route } from './route.ts';
import { envelopeOf, lastEventId, renderFor } from './event-data.ts';
import { newStream, wants, type Stream } from './stream.ts';
import { ownedTicks, tickJson, TrafficTicks, type NodeTick, type RuleCounts } from './ticks.ts';
import { refusalOf } from './refusal.ts';

/** What the streams are built from: the journal's store, the agents' reports, the log, the clock, the routes. */
export interface StreamDeps {
  store: Store;
  sync: SyncHub;
  log: Logger;
  clock: Clock;
  /** The route table, whose GETs render the events. */
  routes: readonly Route[];
}

export class EventStreams {
  private readonly streams = new Set<Stream>();
  /** Streams, open and answered but not yet started, of each user. */
  private readonly perUser = new Map<number, number>();
  /** Streams answered but not yet started (see `open`). */
  private opening = 0;
  private readonly readers = new Map<Resource, Route>();
  private readonly ticks = new TrafficTicks();
  private timer: NodeJS.Timeout | null = null;
  private beats = 0;
  /** The journal's head when the streams were last woken. */
  private head = 0;
  /** Streams open at once, at most (tests lower it). */
  maxStreams = MAX_STREAMS;
  /** How long a full stream may stay full before it is dropped (tests shorten it). */
  stallMs = 30_000;
  heartbeatMs = 15_000;
  tickMs = 2_000;
  /** The credentials' generation every stream's caller was last checked at (see checkCallers). */
  private credentialsChecked = -1;

  private readonly store: Store;
  private readonly log: Logger;
  private readonly clock: Clock;

  /** Streams of the journal of `store`, whose events `routes` render, and of the reports `sync` passes on. */
  constructor({ store, sync, log, clock, routes }: StreamDeps) {
    this.store = store;
    this.log = log;
    this.clock = clock;
    for (const resource of RESOURCES) {
      const reader = routes.find((r) => r.method === 'GET' && r.path === READERS[resource]);
      if (!reader) throw new Error(`no GET ${READERS[resource]} to render ${resource} events with`);
      this.readers.set(resource, reader);
    }
    // A credential revoked, narrowed or its user disabled ends its streams at that commit, not within the second.
    store.db.onCommitted(() => (this.wake(), this.checkCallers(true)));
    store.db.onWrittenElsewhere(() => this.wake());
    // Bytes counted, or what a node's rules carry changed (a connection opened, not a byte moved: a tick of none).
    const tick = (node: number, rules: readonly RuleCounts[] = []) => this.streams.size && this.ticks.add(node, rules);
    sync.reports.on('traffic', tick).on('live', (nodeId: number) => tick(nodeId));
    sync.reports.on('vitals', (nodeId: number, vitals: unknown) => this.live('node.vitals', nodeId, vitals));
  }

  /** How many streams are open, and what they hold unsent: for the metrics. */
  gauges(): { streams: number; bufferedBytes: number } {
    let bufferedBytes = 0;
    for (const stream of this.streams) bufferedBytes += stream.res.writableLength;
    return { streams: this.streams.size, bufferedBytes };
  }

  /** Sends a live event about one node (its vitals) to the streams that are caught up and may read it. */
  private live(type: 'node.vitals', nodeId: number, data: unknown): void {
    const json = JSON.stringify({ type, at: this.clock.timestamp(), node_ids: [nodeId], data });
    // A node's vitals are its machine's: a tenant sees the nodes granted them, never those.
    for (const stream of this.streams)
      if (stream.owner === null && wants(stream, LIVE_TYPES[type], type, [nodeId], nodeId) && this.authorized(stream))
        this.deliver(stream, eventFrame(type, json));
  }

  /** Opens a stream for `ctx`'s caller. Throws `invalid_query`, `validation_failed`, `rate_limited`. */
  open(ctx: Ctx<undefined, EventsQuery>): Reply {
    const { caller: principal, query } = ctx;
    const resumeAt = query.after ?? lastEventId(ctx.headers['last-event-id']);
    // Counted from here, not once the stream starts: answers wait for a commit in between, and a burst of requests
    // would all pass a count of the streams started.
    const room = grants(principal.scopes, '*') ? this.maxStreams : this.maxStreams - KEPT_FOR_ADMINS;
    if (this.streams.size + this.opening >= room)
      throw new DomainError('rate_limited', `${room} event streams are open on this master`, {
        retryAfterSeconds: 30,
      });
    if ((this.perUser.get(principal.userId) ?? 0) >= MAX_STREAMS_PER_USER)
      throw new DomainError('rate_limited', `this user has ${MAX_STREAMS_PER_USER} event streams open; close one`, {
        retryAfterSeconds: 30,
      });
    // What the caller's GETs would answer: a tenant's refusals included (a tenant reads no user, license or setting).
    const readable = RESOURCES.filter((resource) => refusalOf(this.readers.get(resource)!, principal) === null);
    this.opening++;
    this.perUser.set(principal.userId, (this.perUser.get(principal.userId) ?? 0) + 1);
    return {
      status: 200,
      stream: (res) => {
        this.opening--;
        if (res) this.attach(res, ctx.app, principal, query, readable, resumeAt);
        else this.release(principal.userId);
      },
    };
  }

  /** Ends every stream, telling each that the master is stopping (with where to resume). */
  close(): void {
    for (const stream of this.streams) {
      this.send(stream, eventFrame('shutdown', JSON.stringify({ type: 'shutdown', resume_after: stream.cursor })));
      this.end(stream);
    }
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  private attach(
    res: ServerResponse,
    app: App,
    principal: Principal,
    query: EventsQuery,
    readable: Resource[],
    resumeAt: number | null,
  ): void {
    const stream = newStream(res, app, principal, query, readable);
    this.streams.add(stream);
    res.socket?.setNoDelay(true);
    res.once('close', () => this.forget(stream));
    // A client gone before its answer was written has closed already: nothing would tell of it again.
    if (res.destroyed) return this.forget(stream);
    if (query.timeout_seconds !== undefined)
      stream.timers.push(setTimeout(() => this.end(stream), query.timeout_seconds * 1000));
    this.timer ??= setInterval(() => this.everySecond(), 1000);
    res.write(retryFrame(2000));
    this.whenCommitted(() => this.start(stream, resumeAt));
  }

  /** Runs `fn` when what this connection reads is committed: at once, or after the write open now. */
  private whenCommitted(fn: () => void): void {
    const { db } = this.store;
    if (db.settled || db.writesHeld) fn();
    else db.afterCommit(fn);
  }

  /** Places the stream in the journal (its resume point, or now) and sends what follows. */
  private start(stream: Stream, resumeAt: number | null): void {
    if (!this.authorized(stream)) return;
    const head = this.store.events.head();
    stream.cursor = resumeAt ?? head;
    const first = this.store.events.first();
    const pruned = stream.cursor < head && stream.cursor < (first ?? head + 1) - 1;
    if (pruned || stream.cursor > head) {
      const detail = pruned
        ? `events after ${stream.cursor} were pruned (they are kept for audit_retention_days); list what you show ` +
          'again, then follow this stream'
        : `no event ${stream.cursor} was ever written here (a restored backup?); list what you show again, then ` +
          'follow this stream';
      this.send(stream, eventFrame('reset', JSON.stringify({ type: 'reset', detail, resume_after: head }), head));
      stream.cursor = head;
    }
    this.send(
      stream,
      eventFrame('ready', JSON.stringify({ type: 'ready', resume_after: stream.cursor }), stream.cursor),
    );
    stream.started = true;
    this.pump(stream);
  }

  /** After a commit (here or elsewhere): streams behind the journal's head read on. */
  private wake(): void {
    if (this.streams.size === 0) return;
    const { db, events } = this.store;
    if (!db.settled && !db.writesHeld) return void db.afterCommit(() => this.wake());
    const head = events.head();
    if (head === this.head) return;
    this.head = head;
    for (const stream of this.streams) if (stream.started && stream.cursor < head) this.pump(stream);
  }

  /**
   * Sends `stream` what the journal holds past its cursor, a page at a time, while its client keeps up. Reads only
   * what is committed: while a write is open on this connection it waits for the commit.
   */
  private pump(stream: Stream): void {
    // It runs from timers, drains and commits, where nothing above would catch a throw: a failure ends its stream.
    try {
      this.readOn(stream);
    } catch (error) {
      this.log.error('an event stream failed and was ended', { error: (error as Error)?.stack ?? String(error) });
      stream.busy = false;
      this.end(stream);
    }
  }

  private readOn(stream: Stream): void {
    if (stream.busy || stream.paused || stream.ended || !stream.started) return;
    const { db, events } = this.store;
    if (!db.settled && !db.writesHeld) return void db.afterCommit(() => this.pump(stream));
    const head = events.head();
    if (stream.cursor >= head || !this.authorized(stream)) return;
    stream.busy = true;
    try {
      const rows = events.page({
        after: stream.cursor,
        limit: PAGE,
        resources: stream.resources,
        types: stream.typesJson,
        node_id: stream.nodeId,
        resource_id: stream.resourceId,
        owner_id: stream.owner,
      });
      for (const row of rows) {
        stream.cursor = row.id;
        const data = this.dataOf(stream, row);
        if (data === undefined) continue;
        this.deliver(stream, eventFrame(row.type, envelopeOf(row, data), row.id));
        if (stream.ended || stream.paused) return;
      }
      // A short page is all there is up to `head`: what the filters left out need not be read again.
      if (rows.length < PAGE) stream.cursor = Math.max(stream.cursor, head);
    } finally {
      stream.busy = false;
    }
    if (stream.cursor < events.head()) setImmediate(() => this.pump(stream));
  }

  /** Sends one of the events the client asked for: the stream ends after its `limit`th. */
  private deliver(stream: Stream, frame: string): void {
    this.send(stream, frame);
    if (--stream.left <= 0) this.end(stream);
  }

  /** Writes a frame; pauses the stream once its client is BUFFER_BYTES behind. */
  private send(stream: Stream, frame: string): void {
    if (stream.ended) return;
    stream.res.write(frame);
    if (stream.res.writableLength >= BUFFER_BYTES && !stream.paused) this.pause(stream);
  }

  private pause(stream: Stream): void {
    stream.paused = true;
    const stalled = setTimeout(() => {
      // Past the buffer, one small frame more: the client learns where to resume, if it ever reads again.
      const frame = eventFrame('dropped', JSON.stringify({ type: 'dropped', resume_after: stream.cursor }));
      stream.res.write(frame);
      this.end(stream);
      setTimeout(() => stream.res.destroy(), 5000).unref();
    }, this.stallMs);
    stream.timers.push(stalled);
    stream.res.once('drain', () => {
      clearTimeout(stalled);
      stream.paused = false;
      this.pump(stream);
    });
  }

  private end(stream: Stream): void {
    if (stream.ended) return;
    stream.ended = true;
    stream.res.end();
    this.forget(stream);
  }

  private forget(stream: Stream): void {
    stream.ended = true;
    for (const timer of stream.timers) clearTimeout(timer);
    if (!this.streams.delete(stream)) return;
    this.release(stream.principal.userId);
    if (this.streams.size === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = null;
      this.ticks.clear();
    }
  }

  /** A user's stream (or one about to be) is no more. */
  private release(userId: number): void {
    const left = (this.perUser.get(userId) ?? 1) - 1;
    if (left > 0) this.perUser.set(userId, left);
    else this.perUser.delete(userId);
  }

  /**
   * Whether `stream`'s caller still holds what it opened with; if not, it is told and ended. Looked at again only when
   * credentials changed (Store.credentials, bumped inside the write that revokes, expires, disables, deletes, logs
   * out or narrows) or its token's expiry came, so a check costs a comparison: it is made before every batch of frames
   * (a page of the journal, a live event, a tick), and nothing is sent on a credential after the write that ended it.
   * A stream shows what its scopes could read when it opened: a change of scopes or role ends it too, and
   * reconnecting shows what they read now.
   */
  private authorized(stream: Stream): boolean {
    if (stream.ended) return false;
    const generation = this.store.credentials.value;
    if (stream.checked === generation && stream.expiresAtMs > this.clock.now()) return true;
    const current = stream.app.reauthorize(stream.principal);
    if (current && current.role === stream.principal.role && current.scopes.join() === stream.principal.scopes.join()) {
      stream.checked = generation;
      return true;
    }
    const detail = current
      ? "the caller's scopes changed, or their role: reconnect to follow what they read now"
      : 'the credential was revoked or expired, or its user disabled or deleted';
    this.send(stream, eventFrame('revoked', JSON.stringify({ type: 'revoked', detail, resume_after: stream.cursor })));
    this.end(stream);
    return false;
  }

  /** Checks each stream's caller (see authorized) once what is written is committed; ifChanged: if credentials did. */
  private checkCallers(ifChanged = false): void {
    if (ifChanged && this.store.credentials.value === this.credentialsChecked) return;
    const { db } = this.store;
    if (!db.settled && !db.writesHeld) return void db.afterCommit(() => this.checkCallers());
    this.credentialsChecked = this.store.credentials.value;
    for (const stream of this.streams) {
      try {
        this.authorized(stream);
      } catch (error) {
        this.log.error("checking an event stream's caller failed; the stream was ended", { error: String(error) });
        this.end(stream);
      }
    }
  }

  /** The journal's other writers (a CLI), heartbeats, traffic ticks, and callers checked again. */
  private everySecond(): void {
    this.beats++;
    // Quiet streams too end when their caller's credential does, or its token's expiry comes.
    this.checkCallers();
    try {
      this.wake();
    } catch (error) {
      this.log.error('reading the event journal failed', { error: (error as Error)?.message ?? String(error) });
    }
    if (this.beats % Math.max(1, Math.round(this.heartbeatMs / 1000)) === 0)
      for (const stream of this.streams) if (!stream.paused && !stream.ended) stream.res.write(HEARTBEAT);
    if (this.beats % Math.max(1, Math.round(this.tickMs / 1000)) === 0) {
      // Tenants' ticks read whose each rule is: a read that fails loses that tick, not the master.
      try {
        this.flushTicks();
      } catch (error) {
        this.log.error('sending traffic ticks failed', { error: (error as Error)?.message ?? String(error) });
      }
    }
  }

  /**
   * The data of `row`'s event for `stream`: its resource as the caller reads it now ('null' when it asked for none);
   * undefined when the caller is not to hear of it at all: a node a tenant is not granted (their GET of it is 404),
   * or gone (what went with it, their rules, tells them).
   */
  private dataOf(stream: Stream, row: EventRow): string | undefined {
    const reader = this.readers.get(row.resource as Resource)!;
    const deleted = row.type.endsWith('.deleted');
    if (stream.owner !== null && row.resource === 'node') {
      const data = deleted ? 'null' : renderFor(reader, stream.app, stream.principal, row);
      return data === 'null' ? undefined : stream.data ? data : 'null';
    }
    return stream.data && !deleted ? renderFor(reader, stream.app, stream.principal, row) : 'null';
  }

  /** Sends each stream the traffic of the nodes it follows since the last tick. */
  private flushTicks(): void {
    const ticks = this.ticks.take();
    if (!ticks) return;
    const at = this.clock.timestamp();
    const owned = [...this.streams].some((stream) => stream.owner !== null) ? ownedTicks(this.store, ticks) : null;
    for (const stream of this.streams) {
      const mine = stream.owner === null ? ticks : (owned!.get(stream.owner) ?? new Map<number, NodeTick>());
      const nodes = [...mine].filter(([nodeId]) => wants(stream, 'traffic', 'traffic', [nodeId], null));
      if (nodes.length > 0 && this.authorized(stream)) this.deliver(stream, eventFrame('traffic', tickJson(nodes, at)));
    }
  }
}
