// How soon a tunnel's entry moves off an exit that degrades: two exits behind links impaired in user space (test/
// tunnel-fleet.ts exitsFleet, agents in this process), rounds of a second, three to move, no cooldown. The better
// exit turns worse by 145 ms each way (and the other better); the time is from then until the entry's choice moves (as
// its log says: new connections follow at once), the master's view of it in the note. Its floor is what the
// hysteresis asks for: the rounds a better exit must stay better.

import type { TestContext } from 'node:test';
import { chosenExit, exitsFleet, SWITCHING } from '../test/tunnel-fleet.ts';
import type { Row } from './row.ts';

const MOVES = 6;
const FAST_MS = 5;
const SLOW_MS = 150;

export async function exitSwitching(record: (row: Row) => void): Promise<void> {
  const cleanups: (() => unknown)[] = [];
  const t = { after: (fn: () => unknown) => void cleanups.push(fn) } as unknown as TestContext;
  try {
    const settings = { ...SWITCHING, tunnel_switch_cooldown_seconds: 0 };
    const { m, tunnel, exitIds, links, entry } = await exitsFleet(
      t,
      [FAST_MS, SLOW_MS],
      'lowest_latency',
      [],
      settings,
    );
    const deadline = Date.now() + 60_000;
    while ((await chosenExit(m, tunnel.id)) !== exitIds[0]) {
      if (Date.now() > deadline) throw new Error('the entry never chose the fast exit');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    // The entry's move as its log says it (new connections follow at once), and as the master shows it.
    const movedTo = (node: number, after: number) =>
      entry.output.slice(after).some((line) => {
        const { msg, to } = JSON.parse(line) as { msg: string; to?: number };
        return msg === 'tunnel exit switched' && to === node;
      });
    const times: number[] = [];
    const shown: number[] = [];
    for (let move = 0; move < MOVES; move++) {
      const [from, to] = move % 2 === 0 ? [0, 1] : [1, 0];
      const logged = entry.output.length;
      links[from]!.setDelay(SLOW_MS);
      links[to]!.setDelay(FAST_MS);
      const started = performance.now();
      let atEntry: number | null = null;
      while ((await chosenExit(m, tunnel.id)) !== exitIds[to]) {
        if (atEntry === null && movedTo(exitIds[to]!, logged)) atEntry = performance.now() - started;
        if (performance.now() - started > 30_000) throw new Error(`move ${move} did not happen within 30 s`);
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      shown.push(performance.now() - started);
      times.push(atEntry ?? performance.now() - started);
    }
    const median = medianOf(times);
    const floor = settings.tunnel_switch_rounds * settings.tunnel_round_seconds * 1000;
    record({
      id: '11h',
      scenario:
        'switching time after an exit degrades (2 exits, lowest_latency, rounds of ' +
        `${settings.tunnel_round_seconds} s, ${settings.tunnel_switch_rounds} to move, no cooldown; ${FAST_MS} -> ` +
        `${SLOW_MS} ms each way)`,
      value: Math.round(median),
      unit: 'ms',
      p50_ms: Math.round(median),
      ceiling: floor,
      ratio: floor / median,
      target: '>= 0.75x the floor (the move within a round of what its rounds ask)',
      met: floor / median >= 0.75,
      note:
        `median of ${MOVES} moves at the entry (${times.map((ms) => Math.round(ms)).join(', ')} ms); as the master ` +
        `shows them ${Math.round(medianOf(shown))} ms (its tunnel's writes are held to one per 2 s); floor: the ` +
        'rounds a better exit must stay better',
    });
  } finally {
    for (const cleanup of cleanups.reverse()) await cleanup();
  }
}

function medianOf(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}
