// Checks a rule's targets the way a relay would reach them (a TCP connect, under the same dial policy), each on its own
// every interval, and tells which are down: `fall` failures in a row mark a target down, `rise` successes up again. A
// target not checked yet counts as up. The relay's picker skips targets down, so with every target down a client is
// refused at once instead of waiting for a connect to fail.

import type { HealthCheck, TargetHealth } from '../domain/rules.ts';
import { formatTime } from '../schema/schema.ts';
import { probeTarget, type DialPolicy } from './dial.ts';
import type { Target } from './targets.ts';
import { contained } from './faults.ts';

interface Checked extends TargetHealth {
  successes: number;
  failures: number;
  /** A check of it is under way (a slow one is not started again meanwhile). */
  busy: boolean;
}

export class HealthChecker {
  private checked: Checked[] = [];
  private targets: Target[] = [];
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  private greeting: Buffer | null = null;

  constructor(
    private check: HealthCheck,
    /** The targets as the rule gives them, and parsed, in the same order. */
    given: string[],
    parsed: Target[],
    private readonly policy: DialPolicy,
    /** Called when a target's status changes. */
    private readonly onChange: () => void,
    /** What each check sends its target first: the rule's PROXY header with no client (LOCAL, UNKNOWN), or null. */
    greeting: Buffer | null = null,
  ) {
    this.update(check, given, parsed, greeting);
  }

  /** New targets or checks: a target kept keeps its status; the checks start over at the new interval. */
  update(check: HealthCheck, given: string[], parsed: Target[], greeting: Buffer | null = null): void {
    this.greeting = greeting;
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
          successes: 0,
          failures: 0,
          busy: false,
        },
    );
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
      const settle = (why: string | null) => {
        checked.busy = false;
        if (!this.closed) this.record(checked, why);
      };
      void probeTarget(target, this.policy, this.check.timeout_ms, this.greeting).then(
        contained('health_check', settle, () => (checked.busy = false)),
      );
    });
  }

  private record(checked: Checked, why: string | null): void {
    checked.checked_at = formatTime(Date.now());
    checked.error = why;
    if (why === null) {
      checked.failures = 0;
      checked.successes++;
    } else {
      checked.successes = 0;
      checked.failures++;
    }
    const was = checked.status;
    if (why === null && (was === 'unknown' || checked.successes >= this.check.rise)) checked.status = 'up';
    else if (why !== null && checked.failures >= this.check.fall) checked.status = 'down';
    if (checked.status !== was) this.onChange();
  }
}
