// A listener's connections in all and per client address, counted by several threads at once over one shared table
// (relay/listener-counts.ts), as the relay's threads listening on one port count them: real worker threads, started
// together.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ListenerCounts } from '../../internal/relay/listener-counts.ts';
import type { CountsDone, CountsWork } from '../counts-worker.ts';
import { together as threads } from '../threads.ts';

type Job = Omit<CountsWork, 'counts' | 'thread' | 'maxOpen' | 'perSource'>;

/** Runs one job a thread over one listener's counts, started at once; what each holds after, and the counts. */
async function together(maxOpen: number, perSource: number, jobs: Job[]) {
  const counts = new ListenerCounts(maxOpen, undefined, 0, jobs.length + 1);
  const data = jobs.map(
    (job, i) => ({ ...job, counts: counts.buffer, thread: i + 1, maxOpen, perSource }) satisfies CountsWork,
  );
  const held = await threads<CountsDone>(new URL('../counts-worker.ts', import.meta.url), data);
  return { held, counts };
}

const total = (held: CountsDone[], source?: string) =>
  held.reduce(
    (sum, one) => sum + Object.entries(one).reduce((s, [k, n]) => s + (!source || k === source ? n : 0), 0),
    0,
  );

test('four threads racing for three addresses: each address holds its cap exactly, the listener its own', async () => {
  const sources = ['192.0.2.1', '192.0.2.2', '2001:db8::1'];
  const { held, counts } = await together(
    40,
    10,
    Array.from({ length: 4 }, () => ({ sources, tries: 50, release: 0 })),
  );
  for (const source of sources) assert.equal(total(held, source), 10, source);
  assert.equal(counts.open, 30);
  // The listener's cap, below the addresses' sum.
  const capped = await together(
    25,
    10,
    Array.from({ length: 4 }, () => ({ sources, tries: 50, release: 0 })),
  );
  assert.equal(total(capped.held), 25);
  assert.equal(capped.counts.open, 25);
  for (const source of sources) assert.ok(total(capped.held, source) <= 10, source);
});

test('thousands of addresses claimed and released by four threads at once keep every count', async () => {
  // Each thread claims a place for each of its own 3,000 addresses (the table grows from 16 slots to 32,768 meanwhile)
  // and for one all share (one place at most), then gives back its first 1,500.
  const shared = '198.51.100.1';
  const jobs = Array.from({ length: 4 }, (_, thread) => ({
    sources: [...Array.from({ length: 3000 }, (_, i) => `10.${thread}.${i >> 8}.${i & 255}`), shared],
    tries: 2,
    release: 1500,
  }));
  const { held, counts } = await together(20_000, 1, jobs);
  assert.equal(total(held, shared), 1);
  for (const [thread, one] of held.entries()) {
    const own = Object.entries(one).filter(([source]) => source.startsWith(`10.${thread}.`));
    assert.equal(own.length, 1500);
    assert.ok(own.every(([, n]) => n === 1));
  }
  assert.equal(counts.open, total(held));
  // Each thread's share came through the table's growth: a thread that ends gives back exactly what it held, per
  // address too (the one all share is free again only once its holder's places are given back).
  const holder = held.findIndex((one) => one[shared] === 1);
  assert.ok(!counts.claim(shared, 20_000, 1));
  for (const [i, one] of held.entries()) {
    if (i === holder) continue;
    assert.equal(counts.reclaim(i + 1), total([one]));
  }
  assert.equal(counts.open, total([held[holder]!]));
  assert.ok(!counts.claim(shared, 20_000, 1), 'still held');
  assert.equal(counts.reclaim(holder + 1), total([held[holder]!]));
  assert.equal(counts.open, 0);
  // An address given back is claimed again, once.
  assert.ok(counts.claim(shared, 20_000, 1));
  assert.ok(!counts.claim(shared, 20_000, 1));
  assert.ok(counts.claim('10.0.0.1', 20_000, 1));
});
