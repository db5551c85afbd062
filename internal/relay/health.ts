// Checks a rule's targets the way a relay would reach them (a TCP connect, under the same dial policy), each on its own
// every interval, and tells which are down: `fall` failures in a row mark a target down, `rise` successes up again. A
// target not checked yet counts as up. The relay's picker skips targets down, so with every target down a client is
// refused at once instead of waiting for a connect to fail.
//
// Each check's connect time is kept (a moving average) for lowest_latency, which sends new clients to the fastest
// target. It moves to another only when that one is clearly faster (by a fifth, and a millisecond at least): two
// targets about as fast would otherwise take turns at every round, and the kernel's table be rewritten each time.

import type { HealthCheck, TargetHealth } from '../domain/rules.ts';
import { formatTime } from '../schema/schema.ts';
import { probeTarget, type DialPolicy } from './dial.ts';
import { SharedHealth, type Target, type TargetHealthView } from './targets.ts';
import { contained } from './faults.ts';

interface Checked extends TargetHealth {
  /** The connect time of its checks that succeeded, averaged (ms); null before one did. */
  latency: number | null;
  successes: number;
  failures: number;
  /** A check of it is under way (a slow one is not started again meanwhile). */
  busy: boolean;
}

/** What changed: a target's status (up, down), or only which target is fastest. */
export type HealthChange = 'status' | 'lead';

/** How much faster another target must be for lowest_latency to move to it: by this ratio and by MIN_GAIN_MS. */
const SWITCH_RATIO = 0.8;
const MIN_GAIN_MS = 1;

export class HealthChecker implements TargetHealthView {
  private checked: Checked[] = [];
  /** The index of the fastest target as lowest_latency sees it (see above); null before any check succeeded. */
  private leader: number | null = null;
  private targets: Target[] = [];
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  private greeting: Buffer | null = null;
  /** Its verdicts, for the rule's pickers in the relay's other threads: a new buffer when the targets change. */
  shared = new SharedHealth(0);

  constructor(
    private check: HealthCheck,
    /** The targets as the rule gives them, and parsed, in the same order. */
    given: string[],
    parsed: Target[],
    private policy: DialPolicy,
    /** Called when a target's status changes, or which is fastest. */
    private readonly onChange: (change: HealthChange) => void,
    /** What each check sends its target first: the rule's PROXY header with no client (LOCAL, UNKNOWN), or null. */
    greeting: Buffer | null = null,
  ) {
    this.update(check, given, parsed, greeting);
  }

  /** New targets, checks or policy: a target kept keeps its status; the checks start over at the new interval. */
  update(
    check: HealthCheck,
    given: string[],
    parsed: Target[],
    greeting: Buffer | null = null,
    policy: DialPolicy = this.policy,
  ): void {
    this.greeting = greeting;
    this.policy = policy;
    const same =
      this.timer !== undefined &&
      JSON.stringify(check) === JSON.stringify(this.check) &&
      given.join() === this.checked.map((c) => c.target).join();
    if (same) return;
    const before = new Map(this.checked.map((c) => [c.target, c]));
    this.check = check;
    this.targets = parsed;
    this.checked = given.map(
      (target) =>
        before.get(target) ?? {
          target,
          status: 'unknown',
          error: null,
          checked_at: null,
          latency: null,
          successes: 0,
          failures: 0,
          busy: false,
        },
    );
    this.leader = null;
    this.shared = new SharedHealth(this.checked.length);
    this.shared.publish(this);
    clearInterval(this.timer);
    this.timer = setInterval(
      contained(
        'health_check',
        () => this.round(),
        () => undefined,
      ),
      check.interval_seconds * 1000,
    ).unref();
    this.round();
  }

  isDownAt(index: number): boolean {
    return this.checked[index]?.status === 'down';
  }

  fastest(): number | null {
    return this.leader;
  }

  report(): TargetHealth[] {
    return this.checked.map(({ target, status, error, checked_at }) => ({ target, status, error, checked_at }));
  }

  close(): void {
    this.closed = true;
    clearInterval(this.timer);
  }

  private round(): void {
    this.checked.forEach((checked, i) => {
      const target = this.targets[i];
      if (checked.busy || !target) return;
      checked.busy = true;
      const started = performance.now();
      const settle = (why: string | null) => {
        checked.busy = false;
        if (!this.closed) this.record(checked, why, performance.now() - started);
      };
      void probeTarget(target, this.policy, this.check.timeout_ms, this.greeting).then(
        contained('health_check', settle, () => (checked.busy = false)),
      );
    });
  }

  private record(checked: Checked, why: string | null, ms: number): void {
    checked.checked_at = formatTime(Date.now());
    checked.error = why;
    if (why === null) {
      checked.failures = 0;
      checked.successes++;
      checked.latency = checked.latency === null ? ms : (checked.latency + ms) / 2;
    } else {
      checked.successes = 0;
      checked.failures++;
    }
    const was = checked.status;
    if (why === null && (was === 'unknown' || checked.successes >= this.check.rise)) checked.status = 'up';
    else if (why !== null && checked.failures >= this.check.fall) checked.status = 'down';
    const leader = this.leader;
    this.lead();
    this.shared.publish(this);
    if (checked.status !== was) this.onChange('status');
    else if (this.leader !== leader) this.onChange('lead');
  }

  /** Moves the lead to the fastest target not down when the one leading is down or clearly slower. */
  private lead(): void {
    let fastest: number | null = null;
    this.checked.forEach((c, i) => {
      if (c.status === 'down' || c.latency === null) return;
      if (fastest === null || c.latency < this.checked[fastest]!.latency!) fastest = i;
    });
    const current = this.leader === null ? undefined : this.checked[this.leader];
    if (fastest === null || !current || current.status === 'down' || current.latency === null) {
      this.leader = fastest;
      return;
    }
    const gain = current.latency - this.checked[fastest]!.latency!;
    if (gain >= MIN_GAIN_MS && this.checked[fastest]!.latency! < current.latency * SWITCH_RATIO) this.leader = fastest;
  }
}
