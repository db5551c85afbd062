import assert from 'node:assert/strict';
import { test } from 'node:test';
import { OldestFirst } from '../../internal/http/oldest-first.ts';

interface Item {
  id: number;
  gone: boolean;
}

test('the oldest live one is first, whatever order the others go in', () => {
  const queue = new OldestFirst<Item>();
  const items = Array.from({ length: 10 }, (_, id) => ({ id, gone: false }));
  items.forEach((item, at) => queue.push(item, at + 1));
  for (const id of [3, 0, 1, 7]) items[id]!.gone = true;
  assert.equal(queue.first()?.id, 2);
  items[2]!.gone = true;
  assert.equal(queue.first()?.id, 4);
  assert.deepEqual(
    [...queue].map((item) => item.id),
    [4, 5, 6, 8, 9],
  );
  for (const item of items) item.gone = true;
  assert.equal(queue.first(), undefined);
});

test('what it holds stays bounded when the oldest is evicted at every push, as a flood at the cap does', () => {
  const cap = 4096;
  const queue = new OldestFirst<Item>();
  let live = 0;
  let most = 0;
  for (let id = 0; id < 100_000; id++) {
    if (live === cap) {
      queue.first()!.gone = true;
      live--;
    }
    live++;
    queue.push({ id, gone: false }, live);
    most = Math.max(most, queue.held);
  }
  assert.equal(queue.first()?.id, 100_000 - cap);
  assert.ok(most <= 2 * cap + 1025, `held ${most} at most`);
});

test('what it holds stays bounded when every one closes soon after it came', () => {
  const queue = new OldestFirst<Item>();
  let most = 0;
  let previous: Item | null = null;
  for (let id = 0; id < 100_000; id++) {
    if (previous) previous.gone = true;
    previous = { id, gone: false };
    queue.push(previous, 1);
    most = Math.max(most, queue.held);
  }
  assert.ok(most <= 1027, `held ${most} at most`);
  assert.equal(queue.first()?.id, 99_999);
});
