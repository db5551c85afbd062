// The agent link's framing, shared by master and agent: after the HTTP upgrade the socket
// carries one JSON object per line in each direction. See docs/agent-protocol.md.

import type { Socket } from 'node:net';
import { StringDecoder } from 'node:string_decoder';
import { MAX_ENTRIES } from '../domain/link.ts';
import { withinDepth } from '../schema/json.ts';
import { validate, type Schema } from '../schema/schema.ts';

export const LINK_PATH = '/agent/v1/link';
export const LINK_PROTOCOL = 'portplane-agent/1';
/** Either side closes a link that has been silent this long; each pings at a third of it. */
export const LINK_SILENCE_MS = 45_000;
/** How often a side looks for silence: a silent link ends at most this long after LINK_SILENCE_MS. */
export const SILENCE_CHECK_MS = 5_000;
/** The longest line the master reads from an agent: MAX_ENTRIES results with full error details fit. */
export const AGENT_LINE_BYTES = 256 * 1024;
/** The longest line an agent reads from its master: a whole node's config. */
export const MASTER_LINE_BYTES = 64 * 1024 * 1024;
/** Deeper JSON than any message of the protocol has; checked before parsing, which would take long on a deep line. */
const MAX_DEPTH = 8;
/** Messages handled per event-loop turn; past that the socket pauses so other work runs between. */
const MESSAGES_PER_TURN = 32;

export type Message = { type: string } & Record<string, unknown>;

export class ProtocolError extends Error {}

/** The message a line holds. Throws ProtocolError for anything but a shallow JSON object with a string `type`. */
export function parseMessage(line: string): Message {
  if (!withinDepth(line, MAX_DEPTH)) throw new ProtocolError('the peer sent a line nested too deep');
  let message: unknown;
  try {
    message = JSON.parse(line);
  } catch {
    throw new ProtocolError('the peer sent a line that is not JSON');
  }
  if (
    typeof message !== 'object' ||
    message === null ||
    Array.isArray(message) ||
    typeof (message as Message).type !== 'string'
  ) {
    throw new ProtocolError('the peer sent a message without a type');
  }
  return message as Message;
}

/**
 * Calls `onMessage` for each complete line, a few per event-loop turn so that a flood from
 * one peer cannot hold the process. A line that is too long or not a message, or an
 * exception from `onMessage`, destroys the socket with that error: it ends this link only.
 * While `wait()` returns a promise, messages wait for it, in order, and the socket stays paused.
 */
export function readMessages(
  socket: Socket,
  onMessage: (message: Message) => void,
  maxLineBytes: number,
  wait: () => Promise<void> | null = () => null,
): void {
  let buffered = '';
  const lines: string[] = [];
  let scheduled = false;
  // Not socket.setEncoding: Node's HTTP server forbids it on its sockets, even upgraded ones.
  const decoder = new StringDecoder('utf8');

  const drain = () => {
    scheduled = false;
    for (let handled = 0; handled < MESSAGES_PER_TURN && lines.length > 0 && !socket.destroyed; handled++) {
      const waiting = wait();
      if (waiting) {
        scheduled = true;
        void waiting.then(drain);
        return;
      }
      try {
        onMessage(parseMessage(lines.shift()!));
      } catch (error) {
        socket.destroy(error instanceof Error ? error : new Error(String(error)));
        return;
      }
    }
    if (socket.destroyed) return;
    if (lines.length > 0) {
      scheduled = true;
      setImmediate(drain);
    } else {
      socket.resume();
    }
  };

  socket.on('data', (chunk: Buffer) => {
    buffered += decoder.write(chunk);
    let newline: number;
    while ((newline = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, newline);
      buffered = buffered.slice(newline + 1);
      if (line.length > maxLineBytes)
        return void socket.destroy(new ProtocolError('the peer sent a line over the size limit'));
      if (line.trim() !== '') lines.push(line);
    }
    if (buffered.length > maxLineBytes)
      return void socket.destroy(new ProtocolError('the peer sent a line over the size limit'));
    if (lines.length === 0 || scheduled) return;
    // Handle what came now, and hold further input until the backlog is gone.
    socket.pause();
    drain();
  });
}

/** The message as `schema` types it. Throws ProtocolError, which ends the link, when it is not one. */
export function checkMessage<T>(schema: Schema<T>, message: Message): T {
  const { value, errors } = validate(schema, message);
  if (errors.length > 0) {
    throw new ProtocolError(
      `malformed ${message.type.slice(0, 16)} message: ${errors
        .slice(0, 3)
        .map((e) => `${e.pointer} ${e.detail}`)
        .join('; ')}`,
    );
  }
  return value;
}

export function send(socket: Socket, message: Message): void {
  if (!socket.destroyed && socket.writable) socket.write(`${JSON.stringify(message)}\n`);
}

/** `items` in pieces of at most MAX_ENTRIES (one empty piece when there are none). */
export function inPieces<T>(items: readonly T[]): T[][] {
  const pieces: T[][] = [];
  for (let start = 0; start < items.length; start += MAX_ENTRIES) pieces.push(items.slice(start, start + MAX_ENTRIES));
  return pieces.length > 0 ? pieces : [[]];
}

/**
 * Pings the peer every third of `silenceMs` and ends the link once it has been silent for `silenceMs`, looked for
 * every SILENCE_CHECK_MS (every ninth of a shorter `silenceMs`).
 */
export function keepAlive(socket: Socket, silenceMs = LINK_SILENCE_MS): void {
  let lastHeard = Date.now();
  let lastPinged = lastHeard;
  socket.on('data', () => (lastHeard = Date.now()));
  const timer = setInterval(
    () => {
      const now = Date.now();
      if (now - lastHeard > silenceMs) socket.destroy(new Error('the peer went silent'));
      else if (now - lastPinged >= silenceMs / 3) {
        lastPinged = now;
        send(socket, { type: 'ping' });
      }
    },
    Math.min(SILENCE_CHECK_MS, silenceMs / 9),
  ).unref();
  socket.on('close', () => clearInterval(timer));
  // HTTP server sockets allow half-open connections: without this, a peer's FIN would leave
  // the link looking alive until the next ping failed.
  socket.on('end', () => socket.destroy());
  socket.setKeepAlive(true, 10_000);
  socket.setNoDelay(true);
}
