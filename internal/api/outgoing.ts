// What goes back to a caller: a handler's reply or a thrown error as one response. This is the one place errors become
// problem+json (with http/problem.ts), and errors from below the API that mean something to the caller get that
// meaning.

import type { ServerResponse } from 'node:http';
import { PasswordWorkBusy } from '../auth/secrets.ts';
import { DomainError } from '../errors/errors.ts';
import { problemOf } from '../http/problem.ts';
import type { Reply } from './route.ts';
import { CommitFailed, WritesBusy, isDiskFull } from '../errors/storage.ts';

export interface Outgoing {
  status: number;
  headers: Record<string, string>;
  body: Buffer | readonly Buffer[] | null;
  /** See `Reply.stream`. */
  stream?: (res: ServerResponse | null) => void;
}

export function json(status: number, body: unknown, headers: Record<string, string> = {}): Outgoing {
  return {
    status,
    headers: { 'Content-Type': 'application/json', ...headers },
    body: Buffer.from(JSON.stringify(body)),
  };
}

export function fromReply(reply: Reply): Outgoing {
  if (reply.stream)
    return {
      status: reply.status,
      // A proxy that buffers (nginx) is told not to hold the stream back.
      headers: { 'Content-Type': 'text/event-stream', 'X-Accel-Buffering': 'no', ...reply.headers },
      body: null,
      stream: reply.stream,
    };
  // Bytes go as they are: Buffer.from would copy them (a snapshot is the size of the database).
  if (reply.raw !== undefined)
    return {
      status: reply.status,
      headers: { ...reply.headers },
      body: typeof reply.raw === 'string' ? Buffer.from(reply.raw) : reply.raw,
    };
  if (reply.json !== undefined)
    return {
      status: reply.status,
      headers: { 'Content-Type': 'application/json', ...reply.headers },
      body: typeof reply.json === 'string' ? Buffer.from(reply.json) : reply.json,
    };
  if (reply.body === undefined) return { status: reply.status, headers: reply.headers ?? {}, body: null };
  return json(reply.status, reply.body, reply.headers);
}

export function fromError(error: DomainError, requestId: string): Outgoing {
  const problem = problemOf(error, requestId);
  const out = json(problem.status, problem.body, problem.headers);
  out.headers['Content-Type'] = 'application/problem+json';
  return out;
}

export function write(res: ServerResponse, out: Outgoing, requestId: string): void {
  // All headers at once, as a list: setHeader one by one keeps a second copy of them for nothing. No answer is for a
  // cache (each is its caller's, some carry a secret shown once), and none is to be sniffed into another type.
  const headers = ['X-Request-Id', requestId, 'Cache-Control', 'no-store', 'X-Content-Type-Options', 'nosniff'];
  for (const name in out.headers) headers.push(name, out.headers[name]!);
  if (out.body) headers.push('Content-Length', String(bodyLength(out.body)));
  res.writeHead(out.status, headers);
  if (out.stream) return out.stream(res);
  if (!out.body || Buffer.isBuffer(out.body)) return void res.end(out.body ?? undefined);
  res.cork();
  for (const chunk of out.body) res.write(chunk);
  res.end();
}

export function bodyLength(body: Buffer | readonly Buffer[]): number {
  return Buffer.isBuffer(body) ? body.length : body.reduce((sum, chunk) => sum + chunk.length, 0);
}

/** Errors from below the API that have a meaning for the caller, as that meaning; anything else as it is. */
export function asDomainError(error: unknown): unknown {
  if (error instanceof PasswordWorkBusy)
    return new DomainError(
      'rate_limited',
      'the server is checking too many passwords at once; retry shortly',
      { retryAfterSeconds: 1 },
      error,
    );
  if (error instanceof WritesBusy)
    return new DomainError(
      'unavailable',
      `an import or batch held writes for the ${Math.round(error.waitedMs / 1000)} s this write waited ` +
        '(write_wait_seconds); nothing was changed; retry shortly',
      { retryAfterSeconds: 5 },
      error,
    );
  if (isDiskFull(error))
    return new DomainError(
      'insufficient_storage',
      "the master's disk is full: nothing was changed; writes go on by themselves once space is freed (reads go on " +
        'meanwhile)',
      { retryAfterSeconds: 30 },
      error,
    );
  if (error instanceof CommitFailed)
    return new DomainError('internal', 'the change could not be saved; nothing was changed', {}, error);
  return error;
}
