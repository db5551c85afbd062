import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { test } from 'node:test';
import { maintain } from '../internal/service/maintenance.ts';
import { migrations } from '../internal/store/migrations.ts';
import { openStore } from '../internal/store/store.ts';
import { assertProblem, call, mintToken, node, rule, startMaster, type Running } from './helpers.ts';

const MAX = Number.MAX_SAFE_INTEGER;
const HOUR = 3600;
const DAY = 86_400;

/** A count as the store adds them: never past 2^53-1. */
const saturating = (a: number, b: number) => Math.min(a + b, MAX);

/** Deterministic counts: the same every run, different every minute. */
function* counts(seed: number): Generator<number> {
  let x = seed;
  for (;;) {
    x = (x * 1_103_515_245 + 12_345) % 2 ** 31;
    yield x % 100_000;
  }
}

type Series = { at: string; bytes_in: number; bytes_out: number }[];

async function series(m: Running, query: string, token = m.admin): Promise<Series> {
  const answer = await call(m.url, 'GET', `/api/dashboard/traffic?${query}`, { token });
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  return answer.body.points;
}

const rows = (m: Running, table: string) =>
  (m.app.store.db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;

const iso = (seconds: number) => new Date(seconds * 1000).toISOString().replace('.000Z', 'Z');

const exact = 'roll-ups keep every total exact: hours sum their minutes and days their hours, saturation included';

test(exact, async (t) => {
  const m = await startMaster(t);
  const [a, b] = [await node(m, 'a'), await node(m, 'b')];
  const ra = (await rule(m, { node_id: a.id, listen_port: 1 })).body;
  const rb = (await rule(m, { node_id: b.id, listen_port: 2 })).body;
  const now = Math.floor(m.app.now() / 1000);
  const start = Math.floor(now / HOUR) * HOUR - 5 * HOUR;
  const [ins, outs] = [counts(1), counts(2)];
  m.app.store.write(() => {
    // Three hours of minutes, two rules on two nodes; two of rule a's minutes carry all a count can hold.
    for (let at = start; at < start + 3 * HOUR; at += 60) {
      const huge = at === start + 600 || at === start + 660;
      m.app.store.traffic.record(ra.id, a.id, at, huge ? MAX : ins.next().value, outs.next().value);
      m.app.store.traffic.record(rb.id, b.id, at, ins.next().value, outs.next().value);
    }
  });
  // Whole days: a row counts where it starts, so a window that starts within a day row's span would not count it.
  const window = `from=${iso(Math.floor(start / DAY) * DAY)}&to=${iso(Math.floor(start / DAY) * DAY + 2 * DAY)}`;
  const queries = ['', `&node_id=${a.id}`, `&node_id=${b.id}`, `&rule_id=${ra.id}`, `&rule_id=${rb.id}`];
  // A token outlives the days the clock is moved on; a session would not.
  const reader = await mintToken(m, ['dashboard:read']);
  const read = (step: number) => Promise.all(queries.map((q) => series(m, `${window}&step=${step}${q}`, reader)));
  const byHour = await read(HOUR);
  const byDay = await read(DAY);
  assert.equal(byHour[3]![0]!.bytes_in, MAX, "rule a's first hour is saturated");
  assert.equal(rows(m, 'traffic_by_rule'), 2 * 180);

  // A day on, the minutes are hours; the same series read the same.
  m.advance(DAY * 1000 + HOUR * 1000);
  await maintain(m.app);
  assert.equal(rows(m, 'traffic_by_rule'), 2 * 3, 'a row an hour per rule');
  assert.equal(rows(m, 'traffic_by_node'), 2 * 3, 'a row an hour per node');
  assert.equal(rows(m, 'traffic_total'), 3, 'a row an hour for the master');
  assert.deepEqual(await read(HOUR), byHour);
  const ruleRows = m.app.store.db
    .prepare('SELECT start, bytes_in FROM traffic_by_rule WHERE id = ? ORDER BY start')
    .all(ra.id) as { start: number; bytes_in: number }[];
  assert.deepEqual(
    ruleRows.map((r) => r.start),
    [start, start + HOUR, start + 2 * HOUR],
  );

  // Past history_hours_days, the hours are a day; still the same sums.
  m.advance(40 * DAY * 1000);
  await maintain(m.app);
  const days = new Set([start, start + 2 * HOUR].map((at) => Math.floor(at / DAY))).size;
  assert.equal(rows(m, 'traffic_by_rule'), 2 * days, 'a row a day per rule');
  assert.deepEqual(await read(DAY), byDay);
  const sum = (points: Series) => points.reduce((s, p) => saturating(s, p.bytes_in), 0);
  assert.equal(sum(byDay[0]!), saturating(sum(byHour[3]!), sum(byHour[4]!)));
});

const boundary = 'a series across a resolution boundary reads each row where it starts; a late report joins its hour';

test(boundary, async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'a');
  const r = (await rule(m, { node_id: n.id, listen_port: 1 })).body;
  const now = Math.floor(m.app.now() / 1000);
  const old = Math.floor(now / HOUR) * HOUR - 30 * HOUR;
  m.app.store.write(() => {
    for (let at = old; at < old + 2 * HOUR; at += 60) m.app.store.traffic.record(r.id, n.id, at, 1, 2);
  });
  await maintain(m.app);
  // Older than history_minutes_hours: folded into two hours. Then three recent minutes, and a late report.
  const recent = Math.floor(now / 60) * 60 - 180;
  m.app.store.write(() => {
    for (let at = recent; at < recent + 180; at += 60) m.app.store.traffic.record(r.id, n.id, at, 10, 20);
    m.app.store.traffic.record(r.id, n.id, old + HOUR + 1234, 1000, 0);
  });
  const points = await series(m, `from=${iso(old)}&to=${iso(now)}&step=60&rule_id=${r.id}`);
  assert.deepEqual(points, [
    { at: iso(old), bytes_in: 60, bytes_out: 120 },
    { at: iso(old + HOUR), bytes_in: 1060, bytes_out: 120 },
    { at: iso(recent), bytes_in: 10, bytes_out: 20 },
    { at: iso(recent + 60), bytes_in: 10, bytes_out: 20 },
    { at: iso(recent + 120), bytes_in: 10, bytes_out: 20 },
  ]);
  assert.equal(rows(m, 'traffic_by_rule'), 5, 'the late report was added to its hour, not kept as a minute');
  const hourly = await series(m, `from=${iso(old)}&to=${iso(now)}&step=${HOUR}&node_id=${n.id}`);
  assert.equal(
    hourly.reduce((s, p) => s + p.bytes_in, 0),
    60 + 1060 + 30,
  );
  // A rule and a node together: the rule's series on its own node, none on another.
  const other = await node(m, 'b');
  const window = `from=${iso(old)}&to=${iso(now)}&step=${HOUR}&rule_id=${r.id}`;
  assert.deepEqual(await series(m, `${window}&node_id=${n.id}`), await series(m, window));
  assert.deepEqual(await series(m, `${window}&node_id=${other.id}`), []);
});

test("vitals fold into hours as their minutes' average, weighted by the minutes each stands for", async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'a');
  const now = Math.floor(m.app.now() / 1000);
  // Two hours that are one step of two hours (steps start at multiples of the step since the epoch).
  const start = Math.floor(now / (2 * HOUR)) * 2 * HOUR - 2 * HOUR;
  m.app.store.write(() => {
    for (let i = 0; i < 120; i++)
      m.app.store.vitals.record(n.id, '{}', start + i * 60, {
        cpu_percent: i % 2 === 0 ? null : i / 2,
        load1: i,
        memory_used_bytes: 1000 + i,
        rx_bytes_per_second: 10,
        tx_bytes_per_second: null,
      });
  });
  const read = () => m.app.store.vitals.series(n.id, start, start + 2 * HOUR, 2 * HOUR);
  const before = read();
  m.advance(DAY * 1000);
  await maintain(m.app);
  const after = read();
  assert.equal(rows(m, 'node_vitals'), 2);
  assert.equal(after.length, 1);
  for (const key of ['cpu_percent', 'load1', 'rx_bytes_per_second'] as const)
    assert.ok(Math.abs(after[0]![key]! - before[0]![key]!) < 1e-9, key);
  assert.equal(after[0]!.memory_used_bytes, before[0]!.memory_used_bytes);
  assert.equal(after[0]!.tx_bytes_per_second, null, 'never reported stays unknown');
  assert.equal(after[0]!.load1, 59.5);
});

/** `minutes` minute buckets of `rules` rules from `start` (rules 1 and 2 on node 1, the others on node 2), as schema 19
 * held them. */
function legacyDatabase(path: string, rules: number, start: number, minutes: number): void {
  const db = new DatabaseSync(path);
  db.exec('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL) STRICT');
  for (let version = 1; version <= 19; version++) {
    db.exec(migrations[version - 1]!);
    db.prepare('INSERT INTO schema_migrations VALUES (?, ?)').run(version, new Date().toISOString());
  }
  const insert = db.prepare('INSERT INTO traffic_buckets VALUES (?, ?, ?, ?, ?)');
  db.exec('BEGIN');
  for (let rule = 1; rule <= rules; rule++)
    for (let i = 0; i < minutes; i++) insert.run(rule, rule <= 2 ? 1 : 2, start + i * 60, rule, i);
  db.exec('COMMIT');
  db.close();
}

/** What the buckets of legacyDatabase's rules `ids` sum to. */
const legacySums = (ids: number[], minutes: number) => ({
  bytes_in: ids.reduce((s, id) => s + id * minutes, 0),
  bytes_out: ids.length * ((minutes * (minutes - 1)) / 2),
});

const sumOf = (points: { bytes_in: number; bytes_out: number }[]) => ({
  bytes_in: points.reduce((s, p) => s + p.bytes_in, 0),
  bytes_out: points.reduce((s, p) => s + p.bytes_out, 0),
});

const LEGACY_TABLE = "SELECT 1 FROM sqlite_schema WHERE name = 'traffic_buckets_before_20'";

const stepwise =
  "a data dir's minute buckets of before move in steps, every series exact after each: the nodes' counted first";

test(stepwise, () => {
  const [rules, minutes] = [3, 3 * 24 * 60];
  const now = Math.floor(Date.now() / 1000);
  const start = Math.floor(now / 60) * 60 - minutes * 60;
  const dataDir = mkdtempSync(join(tmpdir(), 'portplane-upgrade-'));
  legacyDatabase(join(dataDir, 'master.db'), rules, start, minutes);
  const store = openStore(dataDir, { secretFields: new Set() });
  try {
    const keep = { minutes: DAY, hours: 35 * DAY, all: 730 * DAY };
    const window = { from: Math.floor(start / DAY) * DAY, to: now + 60, step: DAY };
    const check = (when: string) => {
      const series = (node_id: number | null, rule_id: number | null) =>
        sumOf(store.traffic.series({ ...window, node_id, rule_id }));
      assert.deepEqual(series(null, null), legacySums([1, 2, 3], minutes), `the master's, ${when}`);
      assert.deepEqual(series(1, null), legacySums([1, 2], minutes), `node 1's, ${when}`);
      for (const id of [1, 2, 3]) assert.deepEqual(series(null, id), legacySums([id], minutes), `rule ${id}, ${when}`);
    };
    assert.equal(store.traffic.legacyNodesPending(), true);
    const counted = store.write(() => store.traffic.countLegacyNodes(now, keep));
    // Two nodes and the master: their older two days in hours, the last day (and the hour it starts in) in minutes.
    assert.ok(counted <= 3 * (25 * 60 + 2 * 24 + 1), `two older days in hours: ${counted} rows`);
    assert.equal(store.traffic.legacyNodesPending(), false);
    check('once the nodes are counted');
    let steps = 0;
    while (store.write(() => store.traffic.rollUp(now, keep))) check(`after step ${++steps}`);
    assert.ok(steps >= 6, `${steps} steps: a rule's 4,320 buckets take three of 2,000`);
    assert.equal(store.db.prepare(LEGACY_TABLE).get(), undefined, 'the old table is dropped');
    check('once moved');
  } finally {
    store.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

const upgrade =
  "a master on a data dir of before the history counts the nodes' before serving, then moves each rule's and gives " +
  'the space back';

test(upgrade, async (t) => {
  const rules = 4;
  const minutes = 3 * 24 * 60;
  const now = Math.floor(Date.now() / 1000);
  const start = Math.floor(now / 60) * 60 - minutes * 60;
  const dataDir = mkdtempSync(join(tmpdir(), 'portplane-upgrade-'));
  const m = await startMaster(t, {
    dataDir,
    prepare: () => legacyDatabase(join(dataDir, 'master.db'), rules, start, minutes),
  });
  // Removed once the masters on it have stopped: a test's hooks run in the order they were added.
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  assert.equal(m.app.store.db.prepare(LEGACY_TABLE).get(), undefined, 'moved and dropped');
  assert.equal(
    (m.app.store.db.prepare('PRAGMA auto_vacuum').get() as { auto_vacuum: number }).auto_vacuum,
    2,
    'the database gives free pages back in steps',
  );
  const window = `from=${iso(Math.floor(start / DAY) * DAY)}&to=${iso(now + 60)}&step=${DAY}`;
  assert.deepEqual(sumOf(await series(m, window)), legacySums([1, 2, 3, 4], minutes));
  assert.deepEqual(sumOf(await series(m, `${window}&node_id=1`)), legacySums([1, 2], minutes));
  assert.deepEqual(sumOf(await series(m, `${window}&rule_id=3`)), legacySums([3], minutes));
  await maintain(m.app);
  const kept = rows(m, 'traffic_by_rule');
  assert.ok(kept <= rules * (25 * 60 + 2 * 24 + 1), `the two older days are hours: ${kept} rows`);
  const free = m.app.store.db.prepare('PRAGMA freelist_count').get() as { freelist_count: number };
  assert.equal(free.freelist_count, 0, 'every page the old table had is given back');
});

test('the history retention settings are validated and need the scope *', async (t) => {
  const m = await startMaster(t);
  for (const [key, bad] of [
    ['history_minutes_hours', 0],
    ['history_minutes_hours', 8761],
    ['history_minutes_hours', 1.5],
    ['history_hours_days', 0],
    ['history_hours_days', 3651],
    ['history_hours_days', '35'],
    ['traffic_retention_days', 0],
  ] as const) {
    const answer = await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { [key]: bad } });
    assertProblem(answer, 422, 'validation_failed');
    assert.equal(answer.body.errors[0].pointer, `#/${key}`);
  }
  const writer = await mintToken(m, ['settings:write', 'settings:read']);
  for (const key of ['history_minutes_hours', 'history_hours_days', 'traffic_retention_days']) {
    const answer = await call(m.url, 'PATCH', '/api/settings', { token: writer, body: { [key]: 2 } });
    assert.equal(answer.status, 403, key);
  }
  const settings = (await call(m.url, 'GET', '/api/settings', { token: m.admin })).body;
  assert.equal(settings.history_minutes_hours, 24);
  assert.equal(settings.history_hours_days, 35);
});

test('space a roll-up frees is given back to the file system, in steps, while the master runs', async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'a');
  const ids: number[] = [];
  for (let port = 1; port <= 40; port++) ids.push((await rule(m, { node_id: n.id, listen_port: port })).body.id);
  const now = Math.floor(m.app.now() / 1000);
  const start = Math.floor(now / HOUR) * HOUR - 20 * HOUR;
  const file = join(m.dataDir, 'master.db');
  m.app.store.db.checkpoint();
  // What the file holds but for the traffic written below (the schema, the rules): not the roll-up's to give back.
  const without = statSync(file).size;
  m.app.store.write(() => {
    for (let at = start; at < start + 12 * HOUR; at += 60)
      for (const id of ids) m.app.store.traffic.record(id, n.id, at, 1, 1);
  });
  await m.app.store.committed();
  const mode = m.app.store.db.prepare('PRAGMA auto_vacuum').get() as { auto_vacuum: number };
  assert.equal(mode.auto_vacuum, 2, 'incremental');
  m.app.store.db.checkpoint();
  const before = statSync(file).size;
  m.advance(DAY * 1000);
  await maintain(m.app);
  m.app.store.db.checkpoint();
  const after = statSync(file).size;
  assert.ok(
    after - without < (before - without) / 2,
    `the traffic's part of the file went from ${before - without} to ${after - without} bytes`,
  );
  const free = m.app.store.db.prepare('PRAGMA freelist_count').get() as { freelist_count: number };
  assert.equal(free.freelist_count, 0);
});

test("a master's log is copied into its database file by a thread of its own, not by its commits", async (t) => {
  const m = await startMaster(t);
  const n = await node(m, 'a');
  const r = (await rule(m, { node_id: n.id, listen_port: 1 })).body;
  const pages = m.app.store.db.prepare('PRAGMA wal_autocheckpoint').get() as { wal_autocheckpoint: number };
  assert.equal(pages.wal_autocheckpoint, 16_384, 'commits copy the log only past 64 MiB of it');
  const file = join(m.dataDir, 'master.db');
  const before = statSync(file).size;
  const now = Math.floor(m.app.now() / 1000);
  m.app.store.write(() => {
    for (let i = 0; i < 20_000; i++) m.app.store.traffic.record(r.id, n.id, now - i * 60, 1, 1);
  });
  await m.app.store.committed();
  const wal = statSync(`${file}-wal`).size;
  // 20,000 rows are 280 KB of pages: they are in the log, not yet in the file.
  assert.ok(wal > 200_000, `the commit went to the log (${wal} bytes)`);
  for (let waited = 0; statSync(file).size < before + 50_000; waited += 50) {
    assert.ok(waited < 5000, 'the log was copied within 5 s');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
});
