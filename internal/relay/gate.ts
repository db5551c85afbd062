// Who may use a rule, how many at once, how often, how fast and how much: its allow and deny lists of address blocks,
// its max_connections and max_new_connections_per_second, its expiry, the token buckets of its bandwidth_limit and its
// quota. One gate serves a rule's TCP and UDP relays, so a tcp+udp rule's connections and sessions count (and share the
// bandwidth, the rate of new ones and the quota) together, and it counts what it turns away (the rule's
// traffic.refused), the node's own limits' refusals included.
//
// The quota is held here, not only by the master: the gate counts the bytes the quota bills as they pass, from the
// count the master last sent for the period, and once spent refuses new clients and ends the open ones (onSpent). The
// master's count lags by what the node had not reported yet when it sent its config; the gate's does not, so what
// the rule carries past its quota is what was in flight (a read, at most 256 KiB a connection), also while the
// master is away.

import { BlockList } from 'node:net';
import { parseCidr } from '../schema/net.ts';
import { allowedAt, type AllowHours } from '../domain/hours.ts';
import type { ForwardQuota, ForwardRule } from '../domain/rules.ts';
import type { TokenBucket } from './bucket.ts';
import { RuleCells } from './cells.ts';
import { Turns, type Waiter } from './turns.ts';

export type GateRule = Pick<
  ForwardRule,
  | 'allow_sources'
  | 'deny_sources'
  | 'max_connections'
  | 'max_new_connections_per_second'
  | 'bandwidth_limit'
  | 'expires_at'
  | 'quota'
  | 'allow_hours'
>;

/** What a socket reads at most at a time where its way is limited, and reserves of the bandwidth beforehand. */
export const READ_BYTES = 16 * 1024;

/** A direction of a rule's bytes: in (client to target) or out (back). */
export type Way = keyof Buckets;

/** The buckets a rule's bytes go through: in (client to target) and out (back); null where it has no limit. */
export interface Buckets {
  in: TokenBucket | null;
  out: TokenBucket | null;
}

function blockList(blocks: readonly string[]): BlockList | null {
  if (blocks.length === 0) return null;
  const list = new BlockList();
  for (const block of blocks) {
    const parsed = parseCidr(block);
    if (parsed) list.addSubnet(parsed.address, parsed.prefix, parsed.family);
  }
  return list;
}

/** A client's address as the lists match it: an IPv4-mapped IPv6 address (a dual-stack listener's) as IPv4. */
function familyOf(address: string): { address: string; family: 'ipv4' | 'ipv6' } {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return { address: mapped[1]!, family: 'ipv4' };
  return { address, family: address.includes(':') ? 'ipv6' : 'ipv4' };
}

export class Gate {
  private allow: BlockList | null = null;
  private deny: BlockList | null = null;
  private max = Infinity;
  /** New clients a second (a burst of as many); null: any number. */
  private newClients: TokenBucket | null = null;
  private expiresAtMs = Infinity;
  /** When it takes new clients; null: always. The answer holds for the minute it was asked in. */
  private hours: AllowHours | null = null;
  private hoursMinute = -1;
  private hoursOpen = true;
  /** Replaced only when the limit comes or goes, so that connections open keep sharing them. */
  private readonly buckets: Buckets = { in: null, out: null };
  /** The sockets waiting for a read's worth of each way's bucket, in turn. */
  private readonly turns: Record<Way, Turns | null> = { in: null, out: null };
  private quota: ForwardQuota | null = null;
  /** Whether this gate told its connections that the quota is spent. */
  private spentTold = false;
  /** Called when the quota is spent: the rule's connections and sessions are to end. */
  onSpent: () => void = () => undefined;

  constructor(
    rule: GateRule,
    /** Its counts and buckets: its own, or a rule's in another thread too. */
    readonly cells = new RuleCells(),
  ) {
    this.update(rule);
  }

  /** Takes a rule's new controls; what is open stays open, and the next client meets them. */
  update(rule: GateRule): void {
    this.allow = blockList(rule.allow_sources);
    this.deny = blockList(rule.deny_sources);
    this.max = rule.max_connections ?? Infinity;
    const perSecond = rule.max_new_connections_per_second;
    // A bucket of a second's worth, full when the rate comes or changes.
    const newClients = this.cells.bucket('new_clients');
    newClients.configure(perSecond ?? 0, perSecond ?? 0, true);
    this.newClients = perSecond === null ? null : newClients;
    this.expiresAtMs = rule.expires_at === null ? Infinity : Date.parse(rule.expires_at);
    this.hours = rule.allow_hours ?? null;
    this.hoursMinute = -1;
    const rate = rule.bandwidth_limit;
    for (const way of ['in', 'out'] as const) {
      const bucket = this.cells.bucket(way);
      if (rate === null) bucket.configure(0, 0);
      else bucket.setRate(rate);
      if (rate === null) {
        this.buckets[way] = null;
        this.turns[way]?.releaseAll();
        this.turns[way] = null;
      } else if (this.buckets[way]) {
        this.turns[way]!.rescheduled();
      } else {
        this.buckets[way] = bucket;
        this.turns[way] = new Turns(bucket, READ_BYTES);
      }
    }
    const started = rule.quota ? Date.parse(rule.quota.period_start) : NaN;
    this.cells.quotaPeriod(Number.isFinite(started) ? started : 0);
    this.quota = rule.quota;
    // Told again if still spent, as any update tells; a quota raised past the count takes clients again.
    this.spentTold = false;
    if (this.quota && Math.max(this.quota.used, this.cells.countQuota(0)) < this.quota.bytes) this.cells.clearSpent();
    this.count(0);
  }

  /** Whether `way` waits for a bucket (its reads are kept small then). */
  throttles(way: Way): boolean {
    return this.buckets[way] !== null;
  }

  /**
   * Reserves a read's worth (at most READ_BYTES) of `way`'s bandwidth for `waiter`, which `way` limits: the bytes
   * reserved now, or 0, and it is granted in its turn (see Turns).
   */
  reserve(way: Way, waiter: Waiter): number {
    return this.turns[way]?.take(waiter) ?? READ_BYTES;
  }

  /** Counts a read of `bytes` gone `way` that had `reserved` of the bandwidth: what it did not use goes back. */
  read(way: Way, reserved: number, bytes: number): void {
    this.bill(way, bytes);
    const bucket = this.buckets[way];
    if (!bucket) return;
    if (bytes < reserved) {
      bucket.refund(reserved - bytes);
      this.turns[way]!.poke();
    } else if (bytes > reserved) bucket.take(bytes - reserved);
  }

  /** Gives back `bytes` of `way` that were read but never reached the other side (its socket was gone). */
  undelivered(way: Way, bytes: number): void {
    this.read(way, bytes, 0);
  }

  /** Counts `bytes` gone `way`; returns how many milliseconds that way is to wait before it moves more. */
  flowed(way: Way, bytes: number): number {
    this.bill(way, bytes);
    return this.buckets[way]?.take(bytes) ?? 0;
  }

  /** Whether a datagram of `bytes` may go `way` (within the bandwidth and the quota); counts it if so. */
  datagram(way: Way, bytes: number): boolean {
    if (this.spent() || this.buckets[way]?.tryTake(bytes) === false) return false;
    this.bill(way, bytes);
    return true;
  }

  /** Counts bytes gone `way` against the quota, where its direction bills them. */
  private bill(way: Way, bytes: number): void {
    if (this.quota && (this.quota.direction === 'both' || this.quota.direction === way)) this.count(bytes);
  }

  /** Counts `bytes` of the quota, in every thread's count; the first to see it spent marks it so. */
  private count(bytes: number): void {
    if (!this.quota) return;
    const counted = this.cells.countQuota(bytes);
    if (Math.max(this.quota.used, counted) >= this.quota.bytes) this.cells.markSpent();
    this.spent();
  }

  /**
   * Tells this gate's connections if another thread found the quota spent: one that moves no bytes here would not
   * hear of it otherwise. Called on a timer by each thread relaying the rule.
   */
  watchQuota(): void {
    this.spent();
  }

  /** Whether the quota is spent (in any thread): the first time this gate sees it, its connections are told. */
  private spent(): boolean {
    if (!this.quota || !this.cells.spent) return false;
    if (!this.spentTold) {
      this.spentTold = true;
      this.onSpent();
    }
    return true;
  }

  /** Whether a client at `address` may be carried; one that may counts as open until `release`. */
  admit(address: string): boolean {
    // What a rule without controls needs costs nothing per client: no clock read, no address parsed.
    if (
      this.spent() ||
      (this.expiresAtMs !== Infinity && Date.now() >= this.expiresAtMs) ||
      ((this.allow !== null || this.deny !== null) && !this.allows(address)) ||
      (this.hours !== null && !this.inHours()) ||
      !this.cells.claim(this.max)
    ) {
      this.cells.refuse();
      return false;
    }
    // Last: a client refused for another reason takes no place in the second's allowance.
    if (this.newClients !== null && this.newClients.reserve(1) !== 0) {
      this.cells.leave();
      this.cells.refuse();
      return false;
    }
    return true;
  }

  /** Whether now is in one of allow_hours' windows, worked out once a minute (a window starts and ends on one). */
  private inHours(): boolean {
    const minute = Math.floor(Date.now() / 60_000);
    if (minute !== this.hoursMinute) {
      this.hoursMinute = minute;
      this.hoursOpen = allowedAt(this.hours!, Date.now());
    }
    return this.hoursOpen;
  }

  release(): void {
    this.cells.leave();
  }

  /** Counts a client turned away by something besides the gate (the node's own limits). */
  refuse(): void {
    this.cells.refuse();
  }

  /** Clients turned away since the previous call, in every thread. */
  drainRefused(): number {
    return this.cells.drainRefused();
  }

  private allows(raw: string): boolean {
    const { address, family } = familyOf(raw);
    if (this.deny?.check(address, family)) return false;
    return this.allow === null || this.allow.check(address, family);
  }
}
