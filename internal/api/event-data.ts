// An event as a stream sends it: the journal row's envelope, with its resource rendered by the route that GETs it,
// for the stream's caller, when it is sent.

import { DomainError } from '../errors/errors.ts';
import type { EventRow } from '../store/events.ts';
import type { App } from './app.ts';
import type { Principal } from '../auth/principal.ts';
import type { Ctx, Reply, Route } from './route.ts';

/** The event's JSON: its row's facts, its detail, and `data` (JSON text: the resource, or null). */
export function envelopeOf(row: EventRow, data: string): string {
  const nodeIds = [row.node_id, row.other_node_id].filter((id) => id !== null);
  const head = JSON.stringify({
    id: row.id,
    type: row.type,
    at: row.at,
    resource: row.resource,
    resource_id: row.resource_id,
    node_ids: nodeIds,
  });
  return `${head.slice(0, -1)},"detail":${row.detail ?? 'null'},"data":${data}}`;
}

/** The resource of `row` as `reader` (its GET route) answers `caller` now, as JSON text; null when it is gone. */
export function renderFor(reader: Route, app: App, caller: Principal, row: EventRow): string {
  const ctx: Ctx<undefined, {}> = {
    app,
    requestId: `event-${row.id}`,
    ip: '',
    params: row.resource_id === null ? {} : { id: String(row.resource_id) },
    query: {},
    body: undefined,
    rawBody: Buffer.alloc(0),
    headers: {},
    caller,
    get actor(): never {
      throw new Error('a route that reads records nothing');
    },
  };
  let reply: Reply;
  try {
    const answer = reader.handler(ctx);
    if (answer instanceof Promise) throw new Error(`GET ${reader.path} answers later; events need it at once`);
    reply = answer;
  } catch (error) {
    if (error instanceof DomainError && error.code === 'not_found') return 'null';
    throw error;
  }
  if (reply.json !== undefined) return typeof reply.json === 'string' ? reply.json : reply.json.toString('utf8');
  return JSON.stringify(reply.body ?? null);
}

/** The Last-Event-ID header as a resume point (null when absent). Throws `validation_failed` for one we never sent. */
export function lastEventId(header: string | string[] | undefined): number | null {
  if (header === undefined) return null;
  const value = Array.isArray(header) ? header[0]! : header;
  if (!/^\d{1,16}$/.test(value) || !Number.isSafeInteger(Number(value)))
    throw new DomainError('validation_failed', 'Last-Event-ID must be an event id this stream sent', {
      errors: [{ pointer: 'Last-Event-ID', detail: 'must be a whole number, an event id' }],
    });
  return Number(value);
}
