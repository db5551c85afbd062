// Rules whose target is an SRV name (`_service._proto.name`): the agent reads the name's records and hands the
// forwarder the rule with the records as its targets, in order of priority, each with its weight, as if the master
// had sent them. Each name is read again when its records' TTL runs out (held between the master's bounds); when the
// answer changed, the rules are applied again: new connections go by the new records, open ones stay where they are.
// A name that cannot be read keeps the records it had, also across a restart of the agent (`keepIn`); one never read
// leaves its rule's target unresolvable.

import { isHost, isSrvName } from '../schema/net.ts';
import { resolveSrv, type SrvAnswer, type SrvRecord } from '../relay/dns.ts';

/** Each target's priority, lowest first, beside a rule's targets: what TargetPicker and the kernel spread by. */
export interface Tiered {
  tiers?: readonly number[];
}

/** The least and most seconds an SRV answer is kept, whatever its TTL says. */
export interface SrvBounds {
  minSeconds: number;
  maxSeconds: number;
}

export const DEFAULT_SRV_BOUNDS: SrvBounds = { minSeconds: 5, maxSeconds: 300 };

/** Where the records read are kept for the agent's next start (its state dir). */
export interface SrvKeeper {
  loadSrv(): { name: string; records: SrvRecord[] }[];
  saveSrv(answers: readonly { name: string; records: readonly SrvRecord[] }[]): void;
}

/** Names resolved at once, at most: a config of many SRV names is read a few at a time. */
const PARALLEL = 16;

interface Known {
  records: SrvRecord[];
  /** The records as text, to tell a changed answer from the same one. */
  key: string;
  /** When to read it again (ms). */
  due: number;
  /** The last failure to read it, while it has failed since it was last read. */
  error: string | null;
}

/** A record as a target, `host:port` (an IPv6 address in brackets). */
function targetOf(record: SrvRecord): string {
  return record.target.includes(':') ? `[${record.target}]:${record.port}` : `${record.target}:${record.port}`;
}

/** The most records a name's answer makes targets of: as many as a rule may have (an answer is the nameserver's). */
export const MAX_SRV_TARGETS = 16;

/**
 * The records in the order they are tried (priority, then weight down) with their weights: a weight of 0 counts as 1
 * (a picker needs one, and RFC 2782 gives 0 "a very small chance" beside heavier records, which 1 beside them is).
 * A record with no port, or whose host is no hostname or address, is passed over; past MAX_SRV_TARGETS, the rest.
 */
export function expansion(records: readonly SrvRecord[]): { targets: string[]; weights: number[]; tiers: number[] } {
  const sorted = records
    .filter((record) => record.port > 0 && isHost(record.target))
    .sort((a, b) => a.priority - b.priority || b.weight - a.weight || targetOf(a).localeCompare(targetOf(b)))
    .slice(0, MAX_SRV_TARGETS);
  return {
    targets: sorted.map(targetOf),
    weights: sorted.map((record) => Math.max(1, record.weight)),
    tiers: sorted.map((record) => record.priority),
  };
}

export class SrvTargets {
  private readonly known = new Map<string, Known>();
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  private keeper: SrvKeeper | null = null;
  /** Called when a name read again answers otherwise: the rules are to be applied again. */
  onChange: () => void = () => undefined;

  constructor(
    private readonly bounds: () => SrvBounds = () => DEFAULT_SRV_BOUNDS,
    private readonly resolve: (name: string) => Promise<SrvAnswer> = resolveSrv,
  ) {}

  /**
   * `rules` with each SRV target replaced by its records (see expansion), those not known or due read first. A rule
   * whose name has no records keeps the name as its target, which no dial resolves. A rule through a tunnel is left
   * as it is: its exit reads the name.
   */
  async expand<R extends { targets: string[]; weights: number[] | null; tunnel_id?: number | null }>(
    rules: readonly R[],
  ): Promise<(R & Tiered)[]> {
    const names = new Set<string>();
    for (const rule of rules)
      if (rule.tunnel_id == null)
        for (const target of rule.targets) if (isSrvName(target)) names.add(target.toLowerCase());
    let forgotten = false;
    for (const name of this.known.keys()) if (!names.has(name)) forgotten = this.known.delete(name) || forgotten;
    const now = Date.now();
    const changed = await this.read([...names].filter((name) => (this.known.get(name)?.due ?? 0) <= now));
    if (changed || forgotten) this.keep();
    this.schedule();
    return rules.map((rule) => {
      const srv = rule.tunnel_id == null && rule.targets.length === 1 && isSrvName(rule.targets[0]!);
      const name = srv ? rule.targets[0]!.toLowerCase() : null;
      const records = name === null ? [] : (this.known.get(name)?.records ?? []);
      if (records.length === 0) return rule;
      return { ...rule, ...expansion(records) };
    });
  }

  /**
   * Keeps what is read in `keeper`, and starts from what it kept: each name is read again at its first use, and
   * keeps those records while its nameserver does not answer.
   */
  keepIn(keeper: SrvKeeper): void {
    this.keeper = keeper;
    for (const { name, records } of keeper.loadSrv())
      this.known.set(name, { records, key: JSON.stringify(expansion(records)), due: 0, error: null });
  }

  /** Why an SRV name has no records here, if it has none. */
  problem(name: string): string | null {
    const known = this.known.get(name.toLowerCase());
    if (!known) return null;
    return known.records.length > 0 ? null : (known.error ?? 'the name has no SRV records');
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
  }

  /** Reads `names`, PARALLEL at a time; true when an answer differs from the one known. */
  private async read(names: string[]): Promise<boolean> {
    let changed = false;
    const queue = [...names];
    const worker = async () => {
      for (let name = queue.shift(); name !== undefined; name = queue.shift()) {
        const known = this.known.get(name);
        const { minSeconds, maxSeconds } = this.bounds();
        const keep = (ttl: number) => Date.now() + Math.min(Math.max(ttl, minSeconds), maxSeconds) * 1000;
        try {
          const answer = await this.resolve(name);
          const key = JSON.stringify(expansion(answer.records));
          if (known?.key !== key) changed = true;
          this.known.set(name, { records: answer.records, key, due: keep(answer.ttl), error: null });
        } catch (error) {
          // What it had stands: a nameserver that does not answer for a while moves no rule anywhere.
          const message = (error as Error).message;
          if (known) this.known.set(name, { ...known, due: keep(minSeconds), error: message });
          else this.known.set(name, { records: [], key: '[]', due: keep(minSeconds), error: message });
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(PARALLEL, queue.length) }, worker));
    return changed;
  }

  /** Writes the records known (those of names that have any) to the keeper, if there is one. */
  private keep(): void {
    const answers = [...this.known].flatMap(([name, { records }]) => (records.length > 0 ? [{ name, records }] : []));
    this.keeper?.saveSrv(answers);
  }

  /** Sets the timer for the name due first; when it fires, the due names are read and a change applied. */
  private schedule(): void {
    clearTimeout(this.timer);
    if (this.closed || this.known.size === 0) return;
    let due = Infinity;
    for (const known of this.known.values()) due = Math.min(due, known.due);
    this.timer = setTimeout(
      () => {
        const now = Date.now();
        const names = [...this.known].filter(([, known]) => known.due <= now).map(([name]) => name);
        void this.read(names)
          .then((changed) => {
            this.schedule();
            if (changed) this.keep();
            if (changed && !this.closed) this.onChange();
          })
          // A listener that throws fails its own turn, not the agent: the next TTL reads the names again.
          .catch(() => this.schedule());
      },
      Math.max(0, due - Date.now()),
    );
    this.timer.unref();
  }
}
