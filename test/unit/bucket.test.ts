// The token bucket behind a rule's bandwidth_limit, on a clock the test moves: what the relay's readers may read
// together over any span. (The same limit measured through the relay in real time: test/e2e/rates.test.ts.)

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { TokenBucket } from '../../internal/relay/bucket.ts';

const KiB = 1024;

function bucketAt(rate: number) {
  let now = 0;
  return { bucket: TokenBucket.of(rate, undefined, () => now), advance: (ms: number) => (now += ms) };
}

test('readers sharing a bucket, however many and whenever they come, read at most its burst plus the rate', () => {
  const rate = 64 * KiB;
  const { bucket, advance } = bucketAt(rate);
  assert.equal(bucket.capacity, 16 * KiB, 'the burst is at least one read');
  // Each millisecond, every reader whose wait is over reserves a read of 16 KiB, reads half and gives back the rest;
  // a new reader joins every 100 ms.
  const readers: { readyAt: number }[] = [{ readyAt: 0 }];
  let read = 0;
  for (let ms = 0; ms <= 5000; ms++) {
    if (ms % 100 === 0) readers.push({ readyAt: ms });
    for (const reader of readers) {
      if (reader.readyAt > ms) continue;
      const wait = bucket.reserve(16 * KiB);
      if (wait > 0) {
        reader.readyAt = ms + wait;
        continue;
      }
      read += 8 * KiB;
      bucket.refund(8 * KiB);
    }
    advance(1);
  }
  const span = 5.001;
  assert.ok(read <= bucket.capacity + rate * span, `${read} bytes in ${span} s at ${rate} B/s`);
  assert.ok(read >= rate * span - 16 * KiB * readers.length, `${read} bytes: the readers were kept below the rate`);
});

test('a reader is told how long to wait for what the bucket lacks, and nothing is taken meanwhile', () => {
  const { bucket, advance } = bucketAt(16 * KiB);
  assert.equal(bucket.reserve(16 * KiB), 0);
  assert.equal(bucket.reserve(4 * KiB), 250, 'a quarter of a second at 16 KiB/s');
  advance(100);
  assert.equal(bucket.reserve(4 * KiB), 150, 'the earlier ask took nothing');
  advance(150);
  assert.equal(bucket.reserve(4 * KiB), 0);
  assert.equal(bucket.full(), false);
  advance(1000);
  assert.equal(bucket.full(), true, 'never more than full');
});

test('what a stream took past the bucket is a debt waited out before reading on', () => {
  const { bucket, advance } = bucketAt(16 * KiB);
  assert.equal(bucket.take(48 * KiB), 2000, '32 KiB past a full bucket: two seconds at 16 KiB/s');
  advance(1000);
  assert.equal(bucket.take(0), 1000);
  assert.equal(bucket.tryTake(1), false, 'a datagram is dropped while in debt');
  advance(1000);
  assert.equal(bucket.take(0), 0, 'the debt is paid');
  advance(1);
  assert.equal(bucket.tryTake(16), true, 'and a millisecond gives 16 bytes again');
});

test('a new rate applies from now and keeps what the bucket holds, within the new burst', () => {
  const { bucket, advance } = bucketAt(1024 * KiB);
  assert.equal(bucket.capacity, 128 * KiB);
  bucket.setRate(16 * KiB);
  assert.equal(bucket.capacity, 16 * KiB);
  assert.equal(bucket.reserve(16 * KiB), 0, 'full, down to the new burst');
  assert.equal(bucket.reserve(16 * KiB), 1000);
  bucket.setRate(1024 * KiB);
  assert.equal(bucket.reserve(16 * KiB), 16, 'raised: the wait is at the new rate at once');
  advance(16);
  assert.equal(bucket.reserve(16 * KiB), 0);
});
