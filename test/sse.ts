// A server-sent events client for tests: GET /api/events, its frames parsed as they come.

import { request, type ClientRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';

export interface StreamEvent {
  id: number | null;
  event: string;
  data: any;
}

export interface EventClient {
  res: IncomingMessage;
  events: StreamEvent[];
  /** Resolves with the first event from `from` on (an index into `events`) that `match` accepts. */
  next(match: (e: StreamEvent) => boolean, timeoutMs?: number, from?: number): Promise<StreamEvent>;
  /** Resolves once the server ended the stream. */
  ended: Promise<void>;
  close(): void;
}

export function parseFrames(text: string): { frames: StreamEvent[]; rest: string } {
  const blocks = text.split('\n\n');
  const rest = blocks.pop()!;
  const frames: StreamEvent[] = [];
  for (const block of blocks) {
    let id: number | null = null;
    let event = 'message';
    const data: string[] = [];
    for (const line of block.split('\n')) {
      if (line.startsWith('id: ')) id = Number(line.slice(4));
      else if (line.startsWith('event: ')) event = line.slice(7);
      else if (line.startsWith('data: ')) data.push(line.slice(6));
    }
    if (data.length > 0) frames.push({ id, event, data: JSON.parse(data.join('\n')) });
  }
  return { frames, rest };
}

/**
 * Opens a stream (over HTTPS trusting `ca`, a master's certificate); rejects with the status and body when the server
 * answers anything but 200.
 */
export function openEvents(
  base: string,
  token: string,
  query = '',
  headers: Record<string, string> = {},
  ca?: string,
): Promise<EventClient> {
  return new Promise((resolve, reject) => {
    const options = { headers: { authorization: `Bearer ${token}`, ...headers } };
    const req: ClientRequest = ca
      ? httpsRequest(`${base}/api/events${query}`, { ...options, ca, checkServerIdentity: () => undefined })
      : request(`${base}/api/events${query}`, options);
    req.on('error', reject);
    req.on('response', (res) => {
      if (res.statusCode !== 200) {
        let body = '';
        res.on('data', (chunk) => (body += chunk));
        res.on('end', () => reject(Object.assign(new Error(`${res.statusCode} ${body}`), { status: res.statusCode })));
        return;
      }
      const events: StreamEvent[] = [];
      const waiters = new Set<() => void>();
      let buffered = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        const { frames, rest } = parseFrames(buffered + chunk);
        buffered = rest;
        events.push(...frames);
        for (const wake of waiters) wake();
      });
      res.on('error', () => undefined);
      const ended = new Promise<void>((done) => res.on('close', () => done()));
      resolve({
        res,
        events,
        ended,
        next(match, timeoutMs = 5000, from = 0) {
          return new Promise((found, fail) => {
            const look = () => {
              const hit = events.slice(from).find(match);
              if (!hit) return;
              waiters.delete(look);
              clearTimeout(timer);
              found(hit);
            };
            const timer = setTimeout(() => {
              waiters.delete(look);
              fail(new Error(`no such event within ${timeoutMs} ms; got ${events.map((e) => e.event).join(', ')}`));
            }, timeoutMs);
            waiters.add(look);
            look();
          });
        },
        close: () => req.destroy(),
      });
    });
    req.end();
  });
}
