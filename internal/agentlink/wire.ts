// The agent link's framing, shared by master and agent: after the HTTP upgrade the socket
// carries one JSON object per line in each direction. See docs/agent-protocol.md.

import type { Socket } from 'node:net';
import { StringDecoder } from 'node:string_decoder';

export const LINK_PATH = '/agent/v1/link';
export const LINK_PROTOCOL = 'portplane-agent/1';
/** Either side closes a link that has been silent this long; each pings at a third of it. */
export const LINK_SILENCE_MS = 45_000;
const MAX_LINE_BYTES = 16 * 1024 * 1024;

export type Message = { type: string } & Record<string, unknown>;

/** Calls `onMessage` for each complete line; closes the socket on a line that is too long or not an object. */
export function readMessages(socket: Socket, onMessage: (message: Message) => void): void {
  let buffered = '';
  // Not socket.setEncoding: Node's HTTP server forbids it on its sockets, even upgraded ones.
  const decoder = new StringDecoder('utf8');
  socket.on('data', (chunk: Buffer) => {
    buffered += decoder.write(chunk);
    let newline: number;
    while ((newline = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, newline);
      buffered = buffered.slice(newline + 1);
      if (line.trim() === '') continue;
      let message: unknown;
      try {
        message = JSON.parse(line);
      } catch {
        socket.destroy(new Error('the peer sent a line that is not JSON'));
        return;
      }
      if (typeof message !== 'object' || message === null || typeof (message as Message).type !== 'string') {
        socket.destroy(new Error('the peer sent a message without a type'));
        return;
      }
      onMessage(message as Message);
    }
    if (buffered.length > MAX_LINE_BYTES) socket.destroy(new Error('the peer sent a line over the size limit'));
  });
}

export function send(socket: Socket, message: Message): void {
  if (!socket.destroyed && socket.writable) socket.write(`${JSON.stringify(message)}\n`);
}

/** Pings the peer and ends the link when it has been silent for LINK_SILENCE_MS. */
export function keepAlive(socket: Socket): void {
  let lastHeard = Date.now();
  socket.on('data', () => (lastHeard = Date.now()));
  const timer = setInterval(() => {
    if (Date.now() - lastHeard > LINK_SILENCE_MS) socket.destroy(new Error('the peer went silent'));
    else send(socket, { type: 'ping' });
  }, LINK_SILENCE_MS / 3).unref();
  socket.on('close', () => clearInterval(timer));
  // HTTP server sockets allow half-open connections: without this, a peer's FIN would leave
  // the link looking alive until the next ping failed.
  socket.on('end', () => socket.destroy());
  socket.setKeepAlive(true, 10_000);
  socket.setNoDelay(true);
}
