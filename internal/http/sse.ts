// Server-sent events' framing (the WHATWG HTML standard, "Server-sent events"): what a stream writes.

/** One event: `data` is a single line (JSON as JSON.stringify writes it); without an id it moves no resume point. */
export function eventFrame(type: string, data: string, id?: number): string {
  return `${id === undefined ? '' : `id: ${id}\n`}event: ${type}\ndata: ${data}\n\n`;
}

/** A comment line: ignored by clients, and keeps proxies from closing a quiet stream. */
export const HEARTBEAT = ': keep-alive\n\n';

/** How long a client waits before reconnecting after the stream ends, in milliseconds. */
export function retryFrame(ms: number): string {
  return `retry: ${ms}\n\n`;
}
