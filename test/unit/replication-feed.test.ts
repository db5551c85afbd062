// The primary's feed of changes (replication/feed.ts): what a standby is given after its position, and when it is told
// to seed anew instead.

import assert from 'node:assert/strict';
import test from 'node:test';
import { MAX_CHANGES, PAGE_CHANGES, ReplicationFeed } from '../../internal/replication/feed.ts';
import { decodeChanges, encodeChanges } from '../../internal/replication/wire.ts';

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

test('a page of changes goes as JSON and bytes, and a standby reads back exactly it or refuses it whole', () => {
  const changes = [1, 2, 3].map((seq) => ({ ...change('g', seq, seq * 100), sha256: `h${seq}` }));
  changes[1]!.changeset.fill(0x0a);
  const page = { reseed: false, changes };
  const encoded = Buffer.concat(encodeChanges(page));
  assert.deepEqual(decodeChanges(encoded), {
    reseed: false,
    changes: changes.map((c) => ({ ...c, changeset: Buffer.from(c.changeset) })),
  });
  assert.deepEqual(decodeChanges(Buffer.concat(encodeChanges({ reseed: true, changes: [] }))), {
    reseed: true,
    changes: [],
  });
  const head = (value: unknown, tail = Buffer.alloc(0)) =>
    Buffer.concat([Buffer.from(`${JSON.stringify(value)}\n`), tail]);
  const one = { generation: 'g', seq: 1, at: 1, sha256: 'h', bytes: 4 };
  const refused: [string, Buffer][] = [
    ['no head line', Buffer.from('{"reseed":false,"changes":[]}')],
    ['a head past its bound', Buffer.concat([Buffer.alloc(2 * 1024 * 1024, 0x20), Buffer.from('\n')])],
    ['bytes cut short', encoded.subarray(0, encoded.length - 1)],
    ['bytes no change claims', Buffer.concat([encoded, Buffer.from([0])])],
    ['a change claiming more than there is', head({ reseed: false, changes: [one] }, Buffer.alloc(3))],
    ['a negative length', head({ reseed: false, changes: [{ ...one, bytes: -1 }] })],
    ['a length that is no integer', head({ reseed: false, changes: [{ ...one, bytes: 1.5 }] }, Buffer.alloc(1))],
    ['a change that is no object', head({ reseed: false, changes: [null] })],
    ['a number that is text', head({ reseed: false, changes: [{ ...one, seq: '1' }] }, Buffer.alloc(4))],
    ['no reseed', head({ changes: [] })],
    ['not JSON', Buffer.from('{nope\n')],
  ];
  for (const [what, bytes] of refused) assert.throws(() => decodeChanges(bytes), Error, what);
});
