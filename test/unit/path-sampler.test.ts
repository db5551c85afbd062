import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { pathSampler } from '../../internal/service/tunnel-paths.ts';
import { openStore, type Store } from '../../internal/store/store.ts';

test("a minute of the tunnels' paths that comes while writes are held is sampled once they are not", async (t) => {
  const store = openStore(mkdtempSync(join(tmpdir(), 'portplane-paths-')), { secretFields: new Set() });
  t.after(() => store.close());
  let now = Date.UTC(2026, 11, 7, 10, 0, 30);
  const sample = pathSampler({ store, now: () => now });
  const { db } = store;
  const written = () => db.changeStatementsRun;

  const before = written();
  sample();
  const perSample = written() - before;
  assert.ok(perSample > 0, 'a minute is sampled');
  sample();
  assert.equal(written() - before, perSample, 'once');

  now += 60_000;
  let release!: () => void;
  const held = db.holdWrites(() => new Promise<void>((resolve) => (release = resolve)));
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(db.writesHeld, true);
  const during = written();
  assert.doesNotThrow(sample, 'no write tried while an import or a batch holds them');
  assert.equal(written(), during);
  release();
  await held;
  sample();
  assert.equal(written() - during, perSample, 'the new minute sampled after the hold');
});

test("a minute whose sample failed (a full disk) is not tried again at every second's turn", () => {
  let tries = 0;
  const failing = {
    db: { writesHeld: false },
    write: () => {
      tries++;
      throw new Error('database or disk is full');
    },
  } as unknown as Store;
  let now = Date.UTC(2026, 11, 7, 10, 0, 0);
  const sample = pathSampler({ store: failing, now: () => now });
  for (let second = 0; second < 60; second++, now += 1000) {
    try {
      sample();
    } catch {
      // The clock's turn logs it.
    }
  }
  assert.equal(tries, 1);
});
