// Light clients speaking the real agent protocol, for the sync fan-out benchmark: each links
// with its node's token and acknowledges every config as applied. Prints one JSON line when
// all have linked, and one when all have acknowledged a config newer than their first.
// Usage: node --import tsx bench/fake-agents.ts MASTER_URL TOKENS_FILE

import { request } from 'node:http';
import { readFileSync } from 'node:fs';
import type { Socket } from 'node:net';
import { LINK_PATH, LINK_PROTOCOL, MASTER_LINE_BYTES, readMessages, send } from '../internal/agentlink/wire.ts';

const [masterUrl, tokensFile] = process.argv.slice(2);
const tokens = JSON.parse(readFileSync(tokensFile!, 'utf8')) as string[];
const firstVersion = new Map<number, number>();
const updated = new Set<number>();
let linked = 0;
let started = 0;

function link(index: number, token: string): void {
  const req = request(`${masterUrl}${LINK_PATH}`, {
    headers: {
      Connection: 'Upgrade',
      Upgrade: LINK_PROTOCOL,
      Authorization: `Bearer ${token}`,
      'X-Agent-Version': 'fake',
    },
    agent: false,
  });
  req.on('upgrade', (_res, socket: Socket, head: Buffer) => {
    if (head.length > 0) socket.unshift(head);
    linked += 1;
    if (linked === tokens.length) console.log(JSON.stringify({ msg: 'linked', count: linked }));
    readMessages(
      socket,
      (message) => {
        if (message.type === 'ping') return send(socket, { type: 'pong' });
        if (message.type !== 'config') return;
        const version = message.version as number;
        const rules = message.rules as { id: number }[];
        send(socket, {
          type: 'applied',
          version,
          results: rules.map((r) => ({ id: r.id, state: 'applied', error: null })),
        });
        if (!firstVersion.has(index)) firstVersion.set(index, version);
        else if (version > firstVersion.get(index)! && !updated.has(index)) {
          updated.add(index);
          if (updated.size === tokens.length)
            console.log(JSON.stringify({ msg: 'all acknowledged', at: performance.timeOrigin + performance.now() }));
        }
      },
      MASTER_LINE_BYTES,
    );
  });
  req.on('error', (error) => console.log(JSON.stringify({ msg: 'link failed', error: error.message })));
  req.end();
}

// Open links at a steady pace, like a fleet coming online, not all in the same millisecond.
const timer = setInterval(() => {
  for (let i = 0; i < 50 && started < tokens.length; i++, started++) link(started, tokens[started]!);
  if (started === tokens.length) clearInterval(timer);
}, 10);
