// Leader election among masters through etcd, as Patroni elects PostgreSQL's: the leader holds a key that lives by its
// lease, renews the lease every RENEW_MS and takes no write once it cannot be sure the lease still lives. Under the
// cluster's prefix:
//   leader          {url, pin, epoch}: who leads, by its lease; standbys follow the address and trust the pin
//   epoch           the epoch, raised in the transaction that elects a leader
//   sync            {epoch, leader, standby}: in sync mode the standby the leader waits for, which alone holds every
//                   acknowledged write; null while none is chosen (async mode, or a lapse)
//   members/<url>   {url, epoch, generation, seq, source}: where each master's database stands, by its own lease
// A standby takes the leader key only when the leader is gone and the rules below say it holds every acknowledged
// write: the chosen standby (or the leader itself, back), or, with none chosen, the furthest of those that answer.

import type { Logger } from '../log/log.ts';
import { masterOrigin } from '../schema/net.ts';
import { PIN } from '../tls/pin.ts';
import { absent, type Etcd, heldBy, put, unchangedSince } from './etcd.ts';

/** The lease's life: how long a leader that died keeps the key. */
export const TTL_SECONDS = 6;
/** How often the lease is renewed. */
const RENEW_MS = 2000;
/** How much sooner than its lease could expire a leader stops taking writes: room for clocks and answers. */
const MARGIN_MS = 1000;

export interface Member {
  /** The address this master publishes for standbys and agents (--advertise). */
  url: string;
  /** The pin of the key it serves TLS with; null: plain HTTP, or a certificate the system CAs trust. */
  pin: string | null;
}

export interface Leader extends Member {
  epoch: number;
}

/** Where a master's database stands, which decides whether it may lead. */
export interface Standing {
  epoch: number;
  /** Where its copy stands in its leader's record; null for a database of its own (source) or none yet. */
  generation: string | null;
  seq: number | null;
  /** Whether the database is a leader's own (every write of its epoch is on it), not a copy. */
  source: boolean;
}

interface Published extends Standing {
  url: string;
}

export interface ElectionDeps {
  etcd: Etcd;
  /** The cluster's key prefix, e.g. /portplane. */
  prefix: string;
  me: Member;
  log: Logger;
  now?: () => number;
}

/** Whether `a` holds what `b` holds and more: a later epoch, or of the same its source, or further in its record. */
export function further(a: Standing, b: Standing): boolean {
  if (a.epoch !== b.epoch) return a.epoch > b.epoch;
  if (a.source !== b.source) return a.source;
  return a.generation !== null && a.generation === b.generation && (a.seq ?? 0) > (b.seq ?? 0);
}

export class Election {
  private lease: string | null = null;
  /** Until when this master's lease is sure to live (ms); 0 before it was first renewed. */
  private leaseSureUntil = 0;
  private leading = false;
  /** The standby chosen in sync mode (see designate); null while none is. */
  private chosen: string | null = null;
  private designating: Promise<void> = Promise.resolve();
  private renewal: NodeJS.Timeout | undefined;
  private renewing = false;
  private stopped = false;
  private readonly now: () => number;
  /** Whether a leader said it cannot renew its lease (said once until it can). */
  private unsure = false;

  constructor(private readonly deps: ElectionDeps) {
    this.now = deps.now ?? Date.now;
  }

  private key(name: string): string {
    return `${this.deps.prefix}/${name}`;
  }

  private get memberKey(): string {
    return this.key(`members/${encodeURIComponent(this.deps.me.url)}`);
  }

  /** Grants this master's lease and keeps it renewed until stopped. */
  async start(): Promise<void> {
    await this.grant();
    this.renewal = setInterval(() => void this.renew(), RENEW_MS);
    this.renewal.unref();
  }

  private async grant(): Promise<void> {
    const sentAt = this.now();
    this.lease = await this.deps.etcd.grant(TTL_SECONDS);
    this.leaseSureUntil = sentAt + TTL_SECONDS * 1000 - MARGIN_MS;
  }

  private async renew(): Promise<void> {
    if (this.renewing || this.stopped || this.lease === null) return;
    this.renewing = true;
    const sentAt = this.now();
    try {
      const ttl = await this.deps.etcd.keepAlive(this.lease);
      if (ttl > 0) {
        // The lease lived throughout, and with it the leader key: no other master can have taken it meanwhile.
        if (this.leading && sentAt >= this.leaseSureUntil) this.deps.log.warn('renewed its lease again: leads again');
        this.leaseSureUntil = sentAt + ttl * 1000 - MARGIN_MS;
        return;
      }
      if (this.leading) this.deps.log.error('lost the leadership: its lease in etcd expired');
      this.leading = false;
      await this.grant();
    } catch (error) {
      // Unanswered: the lease may yet live, and the leader key with it; until it is renewed no write is taken.
      if (this.leading && this.now() >= this.leaseSureUntil && !this.unsure)
        this.deps.log.error('cannot renew its lease in etcd: takes no write until it can', {
          error: (error as Error).message,
        });
      this.unsure = this.leading && this.now() >= this.leaseSureUntil;
    } finally {
      this.renewing = false;
    }
  }

  /**
   * Whether this master leads and is sure its lease still lives: only then may it take a write. A leader whose lease
   * expired leads no more (see renew); one that cannot renew it holds again once it can.
   */
  holds(): boolean {
    return this.leading && this.now() < this.leaseSureUntil;
  }

  get isLeader(): boolean {
    return this.leading;
  }

  /** The master etcd names the leader; null when none leads. Throws when etcd cannot be asked. */
  async leader(): Promise<Leader | null> {
    const kv = await this.deps.etcd.get(this.key('leader'));
    return kv ? leaderOf(kv.value) : null;
  }

  /** Whether a master ever led the cluster (its epoch is kept in etcd from the first election on). */
  async hasLed(): Promise<boolean> {
    return (await this.deps.etcd.get(this.key('epoch'))) !== null;
  }

  /** Publishes where this master's database stands, by its lease (gone with it). */
  async publish(standing: Standing): Promise<void> {
    if (this.lease === null) return;
    const published: Published = { url: this.deps.me.url, ...standing };
    await this.deps.etcd.put(this.memberKey, JSON.stringify(published), this.lease);
  }

  /** Why this master may not lead now that none does (see the top of this file); null: it may. */
  async mayNotLead(standing: Standing): Promise<string | null> {
    const { etcd, me } = this.deps;
    const [epochKv, syncKv, members] = await Promise.all([
      etcd.get(this.key('epoch')),
      etcd.get(this.key('sync')),
      etcd.list(this.key('members/')),
    ]);
    const epoch = epochKv ? Number(epochKv.value) || 0 : 0;
    const sync = syncKv ? syncOf(syncKv.value) : null;
    if (sync && sync.epoch === epoch && sync.standby !== null) {
      const theLeaderBack = sync.leader === me.url && standing.source && standing.epoch === epoch;
      if (sync.standby === me.url || theLeaderBack) return null;
      return `only ${sync.standby}, the standby the last leader waited for, holds every acknowledged write`;
    }
    for (const kv of members) {
      const other = publishedOf(kv.value);
      if (other && other.url !== me.url && further(other, standing))
        return `${other.url} holds more (epoch ${other.epoch}${other.source ? ', its own database' : ''})`;
    }
    return null;
  }

  /**
   * Takes the leader key if no master holds it, raising the epoch past both etcd's and `standing`'s in the same
   * transaction; the new epoch, or null when another took it first.
   */
  async campaign(standing: Standing): Promise<number | null> {
    const { etcd, me } = this.deps;
    if (this.lease === null) return null;
    const epochKv = await etcd.get(this.key('epoch'));
    const epoch = Math.max(epochKv ? Number(epochKv.value) || 0 : 0, standing.epoch) + 1;
    const leader: Leader = { ...me, epoch };
    const won = await etcd.txn(
      [absent(this.key('leader')), unchangedSince(this.key('epoch'), epochKv?.modRevision ?? 0)],
      [
        put(this.key('leader'), JSON.stringify(leader), this.lease),
        put(this.key('epoch'), String(epoch)),
        put(this.key('sync'), JSON.stringify({ epoch, leader: me.url, standby: null })),
      ],
    );
    if (!won) return null;
    this.leading = true;
    this.chosen = null;
    this.deps.log.warn('elected the leader', { epoch });
    return epoch;
  }

  /** The standby a sync-mode leader waits for; null while none is chosen. */
  current(): string | null {
    return this.chosen;
  }

  /**
   * Makes `standby` the one a sync-mode leader waits for (null: none), in etcd before any write is answered on it.
   * One at a time; throws when this master no longer leads.
   */
  designate(standby: string | null): Promise<void> {
    const next = this.designating.then(async () => {
      if (this.chosen === standby) return;
      const { etcd, me } = this.deps;
      if (!this.holds() || this.lease === null) throw new Error('this master no longer leads');
      const epochKv = await etcd.get(this.key('epoch'));
      const epoch = epochKv ? Number(epochKv.value) || 0 : 0;
      const sync = JSON.stringify({ epoch, leader: me.url, standby });
      if (!(await etcd.txn([heldBy(this.key('leader'), this.lease)], [put(this.key('sync'), sync)])))
        throw new Error('this master no longer leads');
      this.chosen = standby;
      this.deps.log.info(standby ? 'writes wait for this standby' : 'no standby holds the writes', { standby });
    });
    this.designating = next.catch(() => {});
    return next;
  }

  /** Stops renewing; a leader lets go of the key at once (its lease revoked) so that a standby leads sooner. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.renewal);
    const lease = this.lease;
    this.leading = false;
    if (lease !== null) await this.deps.etcd.revoke(lease).catch(() => {});
  }
}

function parsed(value: string): Record<string, unknown> | null {
  try {
    const object = JSON.parse(value) as unknown;
    return typeof object === 'object' && object !== null && !Array.isArray(object)
      ? (object as Record<string, unknown>)
      : null;
  } catch {
    return null;
  }
}

const isEpoch = (value: unknown): value is number => Number.isSafeInteger(value) && (value as number) >= 1;

export function leaderOf(value: string): Leader | null {
  const object = parsed(value);
  const url = typeof object?.url === 'string' ? masterOrigin(object.url) : null;
  const pin =
    object?.pin === null || (typeof object?.pin === 'string' && PIN.test(object.pin)) ? object.pin : undefined;
  if (!object || !url || pin === undefined || !isEpoch(object.epoch)) return null;
  return { url, pin, epoch: object.epoch };
}

function syncOf(value: string): { epoch: number; leader: string; standby: string | null } | null {
  const object = parsed(value);
  if (!object || !isEpoch(object.epoch) || typeof object.leader !== 'string') return null;
  if (object.standby !== null && typeof object.standby !== 'string') return null;
  return { epoch: object.epoch, leader: object.leader, standby: object.standby };
}

function publishedOf(value: string): Published | null {
  const object = parsed(value);
  if (!object || typeof object.url !== 'string' || !isEpoch(object.epoch) || typeof object.source !== 'boolean')
    return null;
  const generation = typeof object.generation === 'string' ? object.generation : null;
  const seq = Number.isSafeInteger(object.seq) ? (object.seq as number) : null;
  return { url: object.url, epoch: object.epoch, source: object.source, generation, seq };
}
