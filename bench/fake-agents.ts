// Light clients speaking the real agent protocol, for the sync fan-out benchmark: each links
// with its node's token and acknowledges every config as applied, and links again (after a
// jittered wait, as real agents do) when its link drops. Prints one JSON line when all have
// linked, one when all have acknowledged a config pushed after their first, and one when all
// have linked again after losing their link. A link refused or lost on the way is tried
// again after the same jittered wait; the retries are counted by reason and reported.
// With REPORT_SECONDS set, each also reports traffic on every rule of its config that often, as busy agents do.
// Usage: [REPORT_SECONDS=10] node --import tsx bench/fake-agents.ts MASTER_URL TOKENS_FILE

import { request } from 'node:http';
import { readFileSync } from 'node:fs';
import type { Socket } from 'node:net';
import { LINK_PATH, LINK_PROTOCOL, MASTER_LINE_BYTES, readMessages, send } from '../internal/agentlink/wire.ts';

const [masterUrl, tokensFile] = process.argv.slice(2);
const reportSeconds = Number(process.env.REPORT_SECONDS ?? 0);
const tokens = JSON.parse(readFileSync(tokensFile!, 'utf8')) as string[];
const firstVersion = new Map<number, number>();
const updated = new Set<number>();
const everLinked = new Set<number>();
const retries: Record<string, number> = {};
let started = 0;
/** Agents whose link dropped and that have not linked again yet. */
const lost = new Set<number>();
let relinking = false;

function link(index: number, token: string): void {
  const req = request(`${masterUrl}${LINK_PATH}`, {
    headers: {
      Connection: 'Upgrade',
      Upgrade: LINK_PROTOCOL,
      Authorization: `Bearer ${token}`,
      'X-Agent-Version': 'fake',
    },
    agent: false,
    // A fleet's agents come from addresses of their own: 64 agents each of 127.0.0.0/8 stand for its hosts.
    localAddress: `127.0.${Math.floor(index / 64 / 254)}.${(Math.floor(index / 64) % 254) + 1}`,
    // A master going down may take the connection and never answer: give up and try again, as real agents do.
    timeout: 5_000,
  });
  // One outcome per attempt: a refusal followed by the connection's error or time-out is one retry, not two links.
  let ended = false;
  const retry = (reason: string) => {
    if (ended) return;
    ended = true;
    later(index, token, reason);
  };
  req.on('timeout', () => req.destroy(new Error('timed out')));
  req.on('upgrade', (_res, socket: Socket, head: Buffer) => {
    ended = true;
    // The handshake's time limit ends with it: a linked agent waits for the master's pings.
    socket.setTimeout(0);
    req.removeAllListeners('timeout');
    if (head.length > 0) socket.unshift(head);
    if (!everLinked.has(index)) {
      everLinked.add(index);
      if (everLinked.size === tokens.length) console.log(JSON.stringify({ msg: 'linked', retries }));
    }
    if (lost.delete(index) && relinking && lost.size === 0) {
      relinking = false;
      console.log(JSON.stringify({ msg: 'all relinked', at: performance.timeOrigin + performance.now() }));
    }
    socket.on('error', () => undefined);
    socket.on('close', () => {
      relinking = true;
      lost.add(index);
      later(index, token);
    });
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
        // The first config comes with the link; any later one is a change pushed to this agent.
        if (reportSeconds > 0) reportTraffic(socket, index, rules);
        if (!firstVersion.has(index)) firstVersion.set(index, version);
        else if (!updated.has(index)) {
          updated.add(index);
          if (updated.size === tokens.length)
            console.log(JSON.stringify({ msg: 'all acknowledged', at: performance.timeOrigin + performance.now() }));
        }
      },
      MASTER_LINE_BYTES,
    );
  });
  // The master is away (restarting) or busy: try again shortly, as a real agent would.
  req.on('error', (error) => retry(error.message));
  req.on('response', (res) => {
    res.resume();
    retry(`HTTP ${res.statusCode}`);
  });
  req.end();
}

const reporters = new Map<number, NodeJS.Timeout>();
let reports = 0;

/** Every REPORT_SECONDS (the first after a random part of it), a report of up to 2 MB each way on each rule. */
function reportTraffic(socket: Socket, index: number, rules: { id: number }[]): void {
  clearInterval(reporters.get(index));
  const stream = `fake-${index}-${Date.now()}`;
  let seq = 0;
  const report = () => {
    if (socket.destroyed) return clearInterval(reporters.get(index));
    send(socket, {
      type: 'traffic',
      stream,
      seq: ++seq,
      at: Math.floor(Date.now() / 1000),
      rules: rules.map((r) => ({
        id: r.id,
        bytes_in: Math.floor(Math.random() * 2e6),
        bytes_out: Math.floor(Math.random() * 2e6),
      })),
    });
    reports++;
  };
  setTimeout(
    () => {
      report();
      reporters.set(index, setInterval(report, reportSeconds * 1000));
    },
    Math.random() * reportSeconds * 1000,
  );
}

if (reportSeconds > 0) setInterval(() => console.log(JSON.stringify({ msg: 'reported', reports })), 5_000).unref();

function later(index: number, token: string, reason?: string): void {
  if (reason !== undefined) retries[reason] = (retries[reason] ?? 0) + 1;
  setTimeout(() => link(index, token), 500 * (0.5 + Math.random() / 2));
}

// Open links at a steady pace, like a fleet coming online, not all in the same millisecond.
const timer = setInterval(() => {
  for (let i = 0; i < 50 && started < tokens.length; i++, started++) link(started, tokens[started]!);
  if (started === tokens.length) clearInterval(timer);
}, 10);
