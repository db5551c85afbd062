// What a master that starts as the primary asks the masters it knows (its standby_masters) before it takes a write:
// whether one of them was promoted past it while it was down. A primary restarted as it was (its unit unchanged)
// would otherwise take writes beside the master that took over from it.

import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { trustedByPin } from '../tls/pin.ts';

/** How long a master that starts waits for each peer's answer (they are asked together). */
export const PEER_WAIT_MS = 3000;
/** The most of a peer's health answer read. */
const MAX_ANSWER_BYTES = 64 * 1024;

export interface Peer {
  url: string;
  pin: string | null;
}

/** What a peer says of itself: its role and epoch; null when it did not answer in time, or not as a master. */
export function standingOf(peer: Peer, waitMs = PEER_WAIT_MS): Promise<{ role: string; epoch: number } | null> {
  const url = new URL('/api/health', peer.url);
  const request = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve) => {
    const req = request(url, { timeout: waitMs, ...trustedByPin(peer.pin) }, (res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size > MAX_ANSWER_BYTES) req.destroy();
        else chunks.push(chunk);
      });
      res.on('end', () => {
        try {
          const { role, epoch } = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
          const said = typeof role === 'string' && Number.isSafeInteger(epoch) && (epoch as number) >= 1;
          resolve(said ? { role, epoch: epoch as number } : null);
        } catch {
          resolve(null);
        }
      });
      res.on('error', () => resolve(null));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(null));
    req.end();
  });
}

/** What the peers said, asked together: the one that leads the latest epoch past `epoch`, and how many answered. */
export interface PeersHeard {
  /** A peer's epoch later than `epoch`, the latest, and its address if it says it is the primary; null: none. */
  newer: { epoch: number; primary: string | null } | null;
  /** How many answered as masters at all. */
  answered: number;
}

export async function askPeers(peers: readonly Peer[], epoch: number, waitMs = PEER_WAIT_MS): Promise<PeersHeard> {
  const standings = await Promise.all(peers.map(async (peer) => ({ peer, standing: await standingOf(peer, waitMs) })));
  let newer: PeersHeard['newer'] = null;
  for (const { peer, standing } of standings) {
    if (!standing || standing.epoch <= epoch || (newer && newer.epoch >= standing.epoch)) continue;
    newer = { epoch: standing.epoch, primary: standing.role === 'primary' ? peer.url : null };
  }
  return { newer, answered: standings.filter(({ standing }) => standing !== null).length };
}
