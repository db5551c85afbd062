// The primary's feed of changes (replication/feed.ts): what a standby is given after its position, and when it is told
// to seed anew instead.

import assert from 'node:assert/strict';
import test from 'node:test';
import { MAX_CHANGES, PAGE_CHANGES, ReplicationFeed } from '../../internal/replication/feed.ts';

const change = (generation: string, seq: number, bytes = 10) => ({
  generation,
  seq,
  at: seq,
  sha256: '',
  changeset: new Uint8Array(bytes),
});

const PAGED =
  'a standby is given the changes after its position, a page at most, and told to seed anew past what is kept';

test(PAGED, () => {
  const feed = new ReplicationFeed({ generation: 'g', seq: 0 });
  for (let seq = 1; seq <= MAX_CHANGES + 5; seq++) feed.add(change('g', seq));
  const latest = MAX_CHANGES + 5;
  assert.deepEqual(feed.after({ generation: 'g', seq: latest }), []);
  const page = feed.after({ generation: 'g', seq: latest - 2 * PAGE_CHANGES }) as { seq: number }[];
  assert.equal(page.length, PAGE_CHANGES);
  assert.equal(page[0]!.seq, latest - 2 * PAGE_CHANGES + 1);
  // The oldest five were let go: a standby that far behind seeds anew.
  assert.equal(feed.after({ generation: 'g', seq: 4 }), 'reseed');
  assert.equal(feed.after({ generation: 'g', seq: 5 }).length, PAGE_CHANGES);
  // Ahead of the record, or of another generation: seed anew.
  assert.equal(feed.after({ generation: 'g', seq: latest + 1 }), 'reseed');
  assert.equal(feed.after({ generation: 'other', seq: 3 }), 'reseed');
  feed.restart({ generation: 'h', seq: 0 });
  assert.equal(feed.after({ generation: 'g', seq: latest }), 'reseed');
  assert.deepEqual(feed.after({ generation: 'h', seq: 0 }), []);
});

test('a write waits for a standby to hold it, and no longer than asked', async () => {
  const feed = new ReplicationFeed({ generation: 'g', seq: 0 });
  feed.add(change('g', 1));
  assert.equal(await feed.held({ generation: 'g', seq: 1 }, 50), false, 'nobody asked past it');
  const holding = feed.held({ generation: 'g', seq: 1 }, 5000);
  feed.after({ generation: 'g', seq: 1 });
  assert.equal(await holding, true);
  assert.equal(feed.holds({ generation: 'g', seq: 1 }), true);
  // A position a standby cannot be at (ahead of the record) holds nothing.
  feed.after({ generation: 'g', seq: 99 });
  assert.equal(feed.holds({ generation: 'g', seq: 2 }), false);
});
