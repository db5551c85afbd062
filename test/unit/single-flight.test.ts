import assert from 'node:assert/strict';
import test from 'node:test';
import { singleFlight } from '../../internal/runtime/single-flight.ts';

test('callers asking while the work runs share it, its error too; one asking after starts it again', async () => {
  let made = 0;
  let fail = false;
  const shared = singleFlight(async () => {
    made++;
    await new Promise((resolve) => setTimeout(resolve, 20));
    if (fail) throw new Error('no copy');
    return made;
  });
  assert.deepEqual(await Promise.all([shared(), shared(), shared()]), [1, 1, 1]);
  assert.equal(await shared(), 2);
  fail = true;
  const failing = [shared(), shared()];
  for (const result of failing) await assert.rejects(result, /no copy/);
  assert.equal(made, 3);
});
