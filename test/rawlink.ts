// A raw client of the agent link's wire protocol, for driving the master as an agent would
// (or as a hostile one might).

import { once } from 'node:events';
import { request } from 'node:http';
import type { Socket } from 'node:net';
import { LINK_PATH, LINK_PROTOCOL, MASTER_LINE_BYTES, readMessages, type Message } from '../internal/agentlink/wire.ts';
import type { Running } from './helpers.ts';

export interface RawLink {
  socket: Socket;
  next(type: string): Promise<Message>;
}

/** Opens a link as an agent with `token`; returns the link, or the refusal with its status and problem body. */
export async function link(
  m: Pick<Running, 'url'>,
  token: string,
  protocol = LINK_PROTOCOL,
  version = 'raw-test',
  headers: Record<string, string> = {},
): Promise<RawLink | { status: number; body: any }> {
  const req = request(`${m.url}${LINK_PATH}`, {
    headers: {
      Connection: 'Upgrade',
      Upgrade: protocol,
      Authorization: `Bearer ${token}`,
      'X-Agent-Version': version,
      ...headers,
    },
  });
  req.end();
  const outcome = await Promise.race([
    once(req, 'upgrade').then(([, socket, head]) => {
      // Bytes that came in with the 101 (often the first config) arrive here, not as data.
      if ((head as Buffer).length > 0) (socket as Socket).unshift(head as Buffer);
      return { socket: socket as Socket };
    }),
    once(req, 'response').then(([res]) => ({ res })),
  ]);
  if ('res' in outcome) {
    let body = '';
    for await (const chunk of outcome.res) body += chunk;
    return { status: outcome.res.statusCode!, body: JSON.parse(body) };
  }
  // A test may make the master cut the link; the reset is what it expects, not a failure.
  outcome.socket.on('error', () => undefined);
  const inbox: Message[] = [];
  const waiting: [string, (m: Message) => void][] = [];
  readMessages(
    outcome.socket,
    (message) => {
      const i = waiting.findIndex(([type]) => type === message.type);
      if (i >= 0) waiting.splice(i, 1)[0]![1](message);
      else inbox.push(message);
    },
    MASTER_LINE_BYTES,
  );
  return {
    socket: outcome.socket,
    next: (type) => {
      const i = inbox.findIndex((m) => m.type === type);
      if (i >= 0) return Promise.resolve(inbox.splice(i, 1)[0]!);
      return new Promise((resolve) => waiting.push([type, resolve]));
    },
  };
}
