// A standby master's follower: keeps a copy of its primary's database (store/replication.ts) at a path, seeded from a
// snapshot and then changed by every change the primary commits, in order. A change that does not follow, does not
// match or does not apply makes it seed anew by itself; so does the primary saying it no longer keeps what follows.

import { request as httpRequest, type ClientRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Logger } from '../log/log.ts';
import type { Position } from '../store/recording.ts';
import { Replica, ReplicaDiverged } from '../store/replication.ts';
import { trustedByPin } from '../tls/pin.ts';
import { PAGE_CHANGES } from './feed.ts';
import { CHANGES_TYPE, decodeChanges } from './wire.ts';

export interface FollowerOptions {
  /** The primary's address, http(s)://host:port. */
  url: string;
  /** The primary's key pin, for a primary with its own certificate; null: the system CAs (or plain HTTP). */
  pin: string | null;
  /** A token of the primary holding the `replication` scope. */
  token: string;
  /** The name this standby gives its primary (its --advertise address, with etcd); none without. */
  name?: string;
  /** Where the copy is kept. */
  path: string;
  log: Logger;
  /** Called after the copy changed (a change applied, or seeded anew): for what reads it through other connections. */
  changed?: () => void;
}

/** The longest answer read from the primary: a snapshot (the database) or a page of changes. */
const MAX_ANSWER_BYTES = 4 * 1024 * 1024 * 1024;
/** How soon a failed request to the primary is made again, at first and at most. */
const RETRY_FIRST_MS = 1000;
const RETRY_LAST_MS = 30_000;
/** How long a request for changes waits for one at the primary. */
const WAIT_SECONDS = 10;

interface Answer {
  status: number;
  headers: IncomingMessage['headers'];
  body: Buffer;
}

/**
 * The copy is of a later epoch than the master it was told to follow: it was promoted since, and that master is no
 * primary of it. Following it would discard what was written here: the follower stops.
 */
export class PromotedAlready extends Error {}

/** The copy could not take what the primary sent (a full disk, a file it cannot write): a fault of this master's. */
class CopyFailed extends Error {}

export class Follower {
  private replica: Replica | null;
  private stopped = false;
  /** The request to the primary under way, ended by `stop`. */
  private asking: ClientRequest | null = null;
  /** When the primary committed the last change applied here (ms); null before the first. */
  lastChangeAt: number | null = null;
  /** How many times the copy was seeded. */
  seeds = 0;
  /** When the primary last answered (ms); null before it first did. */
  lastHeardAt: number | null = null;
  /** Whether the primary's last answer left nothing after it: the copy stood where the primary did. */
  inStep = false;
  /** Why the follower stopped by itself (see PromotedAlready); null while it follows. */
  halted: string | null = null;
  /**
   * Why its last step failed, since when its steps have been failing (ms), and whether the fault is its own copy's
   * (a change that did not apply: a full disk) rather than the primary's (it did not answer: a failover's first
   * sign); null once one goes through.
   */
  failing: { since: number; reason: string; copy: boolean } | null = null;
  /** Whether the primary last said it runs in sync mode, where its writes wait for a standby to ask. */
  private syncPrimary = false;

  constructor(private readonly options: FollowerOptions) {
    this.replica = Replica.open(options.path);
  }

  /** The primary's address. */
  get primary(): string {
    return this.options.url;
  }

  /**
   * How far behind the primary the copy may be, in seconds: 0 while in step (the primary's last answer, within a wait
   * for changes, left nothing after it); once the primary is silent for longer than a wait, the time since it spoke.
   */
  lagSeconds(now = Date.now()): number | null {
    // A copy whose steps fail is behind by the time since it last stood where its primary did.
    if (this.failing && this.inStep && this.lastHeardAt !== null) return Math.round((now - this.lastHeardAt) / 1000);
    if (this.inStep && this.lastHeardAt !== null) {
      const silentMs = now - this.lastHeardAt;
      return silentMs <= (WAIT_SECONDS + 5) * 1000 ? 0 : Math.round(silentMs / 1000);
    }
    return this.lastChangeAt === null ? null : Math.max(0, Math.round((now - this.lastChangeAt) / 1000));
  }

  /** Where the copy stands; null before it is seeded. */
  position(): Position | null {
    return this.replica?.position() ?? null;
  }

  /** Follows until stopped; a failed step is logged and tried again a second later. */
  async run(): Promise<void> {
    // A primary gone, or a token revoked there, is asked again 1 s later, then twice as late each time up to 30 s;
    // one in sync mode every second: once back, its writes wait for a standby to ask.
    let retryMs = RETRY_FIRST_MS;
    while (!this.stopped) {
      try {
        await this.step();
        retryMs = RETRY_FIRST_MS;
        this.failing = null;
      } catch (error) {
        this.failing = {
          since: this.failing?.since ?? Date.now(),
          reason: (error as Error).message,
          copy: error instanceof CopyFailed,
        };
        if (error instanceof PromotedAlready) {
          this.halted = error.message;
          this.options.log.error('not following: this copy was promoted since', { reason: error.message });
          return;
        }
        this.options.log.warn('following the primary failed; trying again', {
          error: (error as Error).message,
          retry_in_seconds: retryMs / 1000,
        });
        await new Promise((resolve) => setTimeout(resolve, retryMs));
        retryMs = this.syncPrimary ? RETRY_FIRST_MS : Math.min(retryMs * 2, RETRY_LAST_MS);
      }
    }
  }

  stop(): void {
    this.stopped = true;
    this.asking?.destroy(new Error('the follower stopped'));
    this.replica?.close();
    this.replica = null;
  }

  /** Seeds the copy if it has none, otherwise takes the changes that follow it (waiting a while for one). */
  async step(): Promise<void> {
    const at = this.replica?.position();
    if (!this.replica || !at) return this.seed();
    const name = this.options.name ? `&standby=${encodeURIComponent(this.options.name)}` : '';
    const where = `generation=${encodeURIComponent(at.generation)}&after=${at.seq}`;
    const query = `${where}&wait_seconds=${WAIT_SECONDS}${name}`;
    const answer = await this.get(`/api/replication/changes?${query}`);
    if (answer.status !== 200) throw new Error(`the primary answered ${answer.status} for changes`);
    this.heardFrom(answer);
    // A primary of another version sends its changes in another form: said as such, not as bytes that do not parse.
    const type = answer.headers['content-type'];
    if (type !== CHANGES_TYPE)
      throw new Error(
        `the primary sent its changes as ${type ?? 'no type'}, not ${CHANGES_TYPE}: it runs another version ` +
          '(a primary and its standbys are upgraded together)',
      );
    const { reseed, changes } = decodeChanges(answer.body);
    if (reseed || this.stopped) return reseed ? this.seed() : undefined;
    try {
      this.replica.apply(changes);
    } catch (error) {
      if (!(error instanceof ReplicaDiverged))
        throw new CopyFailed(`a change did not apply: ${(error as Error).message}`);
      this.options.log.warn('a change did not follow or apply: seeding the copy anew', { reason: error.message });
      return this.seed();
    }
    // Heard, and in step, only once what it said is applied: a copy that cannot apply (a full disk) falls behind.
    this.lastHeardAt = Date.now();
    this.inStep = changes.length < PAGE_CHANGES;
    if (changes.length === 0) return;
    this.lastChangeAt = changes.at(-1)!.at;
    this.options.changed?.();
  }

  private async seed(): Promise<void> {
    const answer = await this.get('/api/replication/snapshot');
    if (answer.status !== 200) throw new Error(`the primary answered ${answer.status} for a snapshot`);
    this.heardFrom(answer);
    if (this.stopped) return;
    const current = this.replica;
    this.replica = null;
    try {
      this.replica = await Replica.seed(this.options.path, answer.body, current);
    } catch (error) {
      throw new CopyFailed(`the copy could not be seeded: ${(error as Error).message}`);
    }
    this.seeds++;
    // The snapshot stood where the primary did when it answered.
    this.lastHeardAt = Date.now();
    this.inStep = true;
    this.options.changed?.();
    this.options.log.info('seeded from the primary', { position: String(answer.headers['x-replication-position']) });
  }

  /**
   * Notes the primary's mode; throws PromotedAlready when the copy is of a later epoch than the master that answered.
   */
  private heardFrom(answer: Answer): void {
    this.syncPrimary = answer.headers['x-replication-mode'] === 'sync';
    const theirs = Number(answer.headers['x-master-epoch'] ?? 1);
    const ours = this.replica?.epoch() ?? 1;
    if (ours > theirs)
      throw new PromotedAlready(
        `this copy was promoted to epoch ${ours}, and ${this.options.url} is of epoch ${theirs}: start this master ` +
          'without --follow to serve as the primary, or follow the primary of the newest epoch',
      );
  }

  private get(path: string): Promise<Answer> {
    const url = new URL(path, this.options.url);
    const { pin } = this.options;
    const request = url.protocol === 'https:' ? httpsRequest : httpRequest;
    return new Promise((resolve, reject) => {
      const req = request(
        url,
        {
          headers: { Authorization: `Bearer ${this.options.token}` },
          timeout: (WAIT_SECONDS + 20) * 1000,
          // With a pin, the pin is the trust: the certificate may be the primary's own.
          ...trustedByPin(pin),
        },
        (res) => {
          const chunks: Buffer[] = [];
          let size = 0;
          res.on('data', (chunk: Buffer) => {
            size += chunk.length;
            if (size > MAX_ANSWER_BYTES) return req.destroy(new Error('the primary answered too much'));
            chunks.push(chunk);
          });
          res.on('end', () =>
            resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }),
          );
          res.on('error', reject);
        },
      );
      req.on('timeout', () => req.destroy(new Error('the primary did not answer in time')));
      req.on('error', reject);
      req.on('close', () => {
        if (this.asking === req) this.asking = null;
      });
      this.asking = req;
      req.end();
    });
  }
}
