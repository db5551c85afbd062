// The master's event stream (GET /api/events), read with fetch: EventSource cannot send the session's Authorization
// header, and the token is never put in a URL. Pages reload what they show when one of their resources changes, and
// poll only while the stream is down; a reconnect resumes after the last event seen (Last-Event-ID).

import { session } from './api.ts';

/**
 * What a page is told: the resource an event was about (`rule`, `node`, `traffic`; `vitals` for a node's vitals), or
 * `*` to re-read everything.
 */
type Listener = (resource: string) => void;

const RETRY_MS = [1000, 2000, 5000, 10_000, 30_000];

export class Changes {
  private readonly listeners = new Set<Listener>();
  private readonly watchers = new Set<(connected: boolean) => void>();
  private controller: AbortController | null = null;
  private lastId: string | null = null;
  private failures = 0;
  private open = false;

  /** True while the stream is open: pages need not poll. */
  get connected(): boolean {
    return this.open;
  }

  /** Follows the stream until `stop`, reconnecting after a pause whenever it ends or cannot be opened. */
  start(): void {
    if (this.controller) return;
    const controller = new AbortController();
    this.controller = controller;
    void this.follow(controller.signal);
  }

  stop(): void {
    this.controller?.abort();
    this.controller = null;
    this.setConnected(false);
    this.lastId = null;
  }

  /** Calls `fn` with whether the stream is open, now and whenever that changes. */
  onConnection(fn: (connected: boolean) => void): void {
    this.watchers.add(fn);
    fn(this.connected);
  }

  private setConnected(connected: boolean): void {
    if (connected === this.open) return;
    this.open = connected;
    for (const watcher of this.watchers) watcher(connected);
  }

  /** Calls `fn` with the resource of each event; returns what stops it. */
  on(fn: Listener): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  private tell(resource: string): void {
    for (const listener of this.listeners) listener(resource);
  }

  private async follow(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      try {
        await this.read(signal);
        this.failures = 0;
      } catch {
        this.failures++;
      }
      if (this.connected) {
        this.setConnected(false);
        this.tell('*');
      }
      const pause = RETRY_MS[Math.min(this.failures, RETRY_MS.length - 1)]!;
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }

  private async read(signal: AbortSignal): Promise<void> {
    const token = session.token;
    if (!token) throw new Error('signed out');
    const headers: Record<string, string> = { Authorization: `Bearer ${token}`, Accept: 'text/event-stream' };
    if (this.lastId) headers['Last-Event-ID'] = this.lastId;
    const response = await fetch('/api/events?data=false', { headers, signal, cache: 'no-store', credentials: 'omit' });
    if (!response.ok || !response.body) throw new Error(`the event stream answered ${response.status}`);
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffered = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffered += value;
      const frames = buffered.split('\n\n');
      buffered = frames.pop()!;
      for (const frame of frames) this.take(frame);
    }
  }

  private take(frame: string): void {
    let type = '';
    for (const line of frame.split('\n')) {
      if (line.startsWith('id: ')) this.lastId = line.slice(4);
      else if (line.startsWith('event: ')) type = line.slice(7);
    }
    if (type === 'ready') {
      // Opened (again): what changed while it was down is unknown unless it resumed, so pages re-read once.
      this.setConnected(true);
      this.tell('*');
    } else if (type === 'reset') this.tell('*');
    // A node's vitals come with every report of every node: only pages that show them follow them.
    else if (type === 'node.vitals') this.tell('vitals');
    else if (type && type !== 'dropped' && type !== 'shutdown') this.tell(type.split('.')[0]!);
  }
}

export const changes = new Changes();
