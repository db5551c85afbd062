// One event stream: whom it answers, what it follows, and where it stands in the journal.

import type { ServerResponse } from 'node:http';
import type { App } from './app.ts';
import type { Principal } from '../auth/principal.ts';
import { JOURNAL_TYPES, type EventsQuery, type Resource } from './events.ts';

export interface Stream {
  res: ServerResponse;
  /** The master it was opened on: what renders its events, and checks its caller again. */
  app: App;
  /** Its caller, checked again before what it is sent once credentials changed or its token expired. */
  principal: Principal;
  expiresAtMs: number;
  /** The credentials' generation (Store.credentials) its caller was last found to hold what it opened with. */
  checked: number;
  /** The resources its caller may read, as a JSON array (for the journal's query). */
  resources: string;
  readable: ReadonlySet<string>;
  types: ReadonlySet<string> | null;
  typesJson: string | null;
  nodeId: number | null;
  resourceId: number | null;
  /** A tenant's: the user whose own resources (and granted nodes) it follows; null for an operator's. */
  owner: number | null;
  data: boolean;
  /** The id of the last journal event it was sent (or skipped past). */
  cursor: number;
  left: number;
  /** Its `ready` was sent: from then on it is sent what happens. */
  started: boolean;
  busy: boolean;
  paused: boolean;
  ended: boolean;
  timers: NodeJS.Timeout[];
}

/** A stream on `res` for `principal`, following what `query` asks of the `readable` resources; not started yet. */
export function newStream(
  res: ServerResponse,
  app: App,
  principal: Principal,
  query: EventsQuery,
  readable: Resource[],
): Stream {
  const types = query.types && query.types.length > 0 ? query.types : null;
  return {
    res,
    app,
    principal,
    expiresAtMs: principal.expiresAt === null ? Infinity : Date.parse(principal.expiresAt),
    checked: -1,
    resources: JSON.stringify(readable.filter((r) => r in JOURNAL_TYPES)),
    readable: new Set(readable),
    types: types && new Set(types),
    typesJson: types && JSON.stringify(types),
    nodeId: query.node_id ?? null,
    resourceId: query.resource_id ?? null,
    owner: principal.role === 'tenant' ? principal.userId : null,
    data: query.data ?? true,
    cursor: 0,
    left: query.limit ?? Infinity,
    started: false,
    busy: false,
    paused: false,
    ended: false,
    timers: [],
  };
}

/** Whether `stream` is sent an event of `type` about `resource` (`id`), concerning `nodeIds`, now. */
export function wants(stream: Stream, resource: Resource, type: string, nodeIds: number[], id: number | null): boolean {
  return (
    stream.started &&
    !stream.paused &&
    !stream.ended &&
    stream.readable.has(resource) &&
    (stream.types === null || stream.types.has(type) || stream.types.has(resource)) &&
    (stream.nodeId === null || nodeIds.includes(stream.nodeId)) &&
    (stream.resourceId === null || stream.resourceId === id)
  );
}
