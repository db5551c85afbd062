// Which exit of a tunnel its entry sends new connections to. An exit that is down is left at once; otherwise a
// move needs a lasting, meaningful gain: the same better exit for `rounds` measuring rounds in a row, ahead by
// `gain_ms` and by `gain_percent` of the current score, and `cooldown_ms` since the last move. Connections already
// open stay on the exit they went to; only new ones follow the choice.

import type { ExitStrategy, SwitchReason } from '../domain/tunnels.ts';

export interface Switching {
  rounds: number;
  gain_ms: number;
  gain_percent: number;
  cooldown_ms: number;
}

/** What an exit measured at a round: its session's round trip and loss, and the time to reach the probe target. */
export interface Measure {
  up: boolean;
  rtt_ms: number | null;
  loss_percent: number | null;
  /** The exit's connect to the probe target; null: none (no target, or an exit older than probes). */
  probe_ms: number | null;
  /** The exit reached no probe target: its session may be up, but it leads nowhere. */
  probe_failed: boolean;
}

export interface Switch {
  from: number | null;
  to: number | null;
  reason: SwitchReason;
}

/**
 * An exit's score in ms, lower is better: the path's time (the session's round trip plus the exit's connect to the
 * probe target), plus for each lost PING in a hundred a hundredth of what a loss costs a TCP connection, a
 * retransmission timeout (at least 200 ms, as Linux's, and twice the path's time past that). Null: not usable.
 */
export function scoreOf(measure: Measure): number | null {
  if (!measure.up || measure.rtt_ms === null) return null;
  const path = measure.rtt_ms + (measure.probe_ms ?? 0);
  const loss = (measure.loss_percent ?? 0) / 100;
  return Math.round((path + loss * Math.max(200, 2 * path)) * 10) / 10;
}

/**
 * Each exit's score as the choice goes by: an exit whose session is down, or that reached no probe target while
 * another did, has none. When no exit reaches the target, sessions alone decide (the target may be down for all).
 */
export function usableScores(measures: readonly Measure[]): (number | null)[] {
  const reaching = measures.map((measure) => (measure.probe_failed ? null : scoreOf(measure)));
  if (reaching.some((score) => score !== null)) return reaching;
  return measures.map((measure) => scoreOf({ ...measure, probe_ms: null }));
}

export class ExitChoice {
  /** The exit new connections go to, by position; null while none is up. */
  chosen: number | null = null;
  private streak: { candidate: number; rounds: number } | null = null;
  private switchedAt = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly strategy: ExitStrategy,
    private readonly switching: Switching,
  ) {}

  /**
   * Looks at the exits' scores (by position; null: not usable) and moves the choice where it must: at once when the
   * chosen exit is not usable; on a gain only at a measuring round (`measured`), which counts towards `rounds`.
   */
  look(scores: readonly (number | null)[], now: number, measured: boolean): Switch | null {
    const usable = scores.flatMap((score, index) => (score === null ? [] : [index]));
    const current = this.chosen;
    if (current === null || scores[current] === null || scores[current] === undefined) {
      this.streak = null;
      const next = usable.length === 0 ? null : this.strategy === 'failover' ? usable[0]! : best(scores, usable);
      if (next === current) return null;
      return this.move(next, current === null ? 'first_up' : 'exit_down', now);
    }
    if (!measured) return null;
    const candidate = this.strategy === 'failover' ? usable[0]! : best(scores, usable);
    if (candidate === current || !this.worthIt(scores[current]!, scores[candidate]!)) {
      this.streak = null;
      return null;
    }
    const rounds = this.streak?.candidate === candidate ? this.streak.rounds + 1 : 1;
    this.streak = { candidate, rounds };
    if (rounds < this.switching.rounds || now - this.switchedAt < this.switching.cooldown_ms) return null;
    return this.move(candidate, this.strategy === 'failover' ? 'preferred_back' : 'lower_latency', now);
  }

  /** A preferred exit back (failover) is always worth it; a faster one, by both margins. */
  private worthIt(current: number, candidate: number): boolean {
    if (this.strategy === 'failover') return true;
    const gain = current - candidate;
    return gain >= this.switching.gain_ms && gain * 100 >= this.switching.gain_percent * current;
  }

  private move(to: number | null, reason: SwitchReason, now: number): Switch {
    const from = this.chosen;
    this.chosen = to;
    this.streak = null;
    if (to !== null) this.switchedAt = now;
    return { from, to, reason };
  }
}

/** The usable exit of the lowest score; the earlier one of equal scores. */
function best(scores: readonly (number | null)[], usable: readonly number[]): number {
  return usable.reduce((a, b) => (scores[b]! < scores[a]! ? b : a));
}
