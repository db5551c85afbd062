// Health and metrics as a monitor and Prometheus read them; the metrics are held to the
// text exposition format 0.0.4 by a strict parser.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { call, mintToken, node, rule, startMaster } from './helpers.ts';

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

/** Parses text format 0.0.4, throwing on anything the format does not allow. */
function parseMetrics(text: string): { types: Map<string, string>; samples: Sample[] } {
  assert.ok(text.endsWith('\n'), 'the last line ends with a line feed');
  const types = new Map<string, string>();
  const samples: Sample[] = [];
  for (const line of text.slice(0, -1).split('\n')) {
    const comment = /^# (HELP|TYPE) (\S+) (.*)$/.exec(line);
    if (comment) {
      assert.match(comment[2]!, NAME, line);
      if (comment[1] === 'TYPE') {
        assert.ok(['counter', 'gauge', 'histogram', 'summary', 'untyped'].includes(comment[3]!), line);
        assert.ok(!types.has(comment[2]!), `TYPE given twice: ${line}`);
        types.set(comment[2]!, comment[3]!);
      }
      continue;
    }
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(sample, `not a sample line: ${JSON.stringify(line)}`);
    const labels: Record<string, string> = {};
    const pairs = sample[2] ?? '';
    const pair = /([^=,]+)="((?:[^"\\]|\\[\\"n])*)"(,|$)/y;
    for (let at = 0; at < pairs.length;) {
      pair.lastIndex = at;
      const m = pair.exec(pairs);
      assert.ok(m, `bad labels in ${line}`);
      assert.match(m[1]!, LABEL, line);
      assert.ok(!(m[1]! in labels), `label given twice: ${line}`);
      labels[m[1]!] = m[2]!.replace(/\\n/g, '\n').replace(/\\"/g, '"').replace(/\\\\/g, '\\');
      at = pair.lastIndex;
    }
    const value = sample[3] === '+Inf' ? Infinity : sample[3] === '-Inf' ? -Infinity : Number(sample[3]);
    assert.ok(!Number.isNaN(value) || sample[3] === 'NaN', `bad value in ${line}`);
    const family = sample[1]!.replace(/_(bucket|sum|count)$/, '');
    assert.ok(types.has(sample[1]!) || types.get(family) === 'histogram', `no TYPE before ${line}`);
    samples.push({ name: sample[1]!, labels, value });
  }
  // Histograms: buckets only grow, and +Inf equals the count.
  for (const [family, type] of types) {
    if (type !== 'histogram') continue;
    const series = new Map<string, Sample[]>();
    for (const s of samples.filter((x) => x.name === `${family}_bucket`)) {
      const { le, ...rest } = s.labels;
      assert.ok(le !== undefined, `a bucket without le in ${family}`);
      const key = JSON.stringify(rest);
      series.set(key, [...(series.get(key) ?? []), s]);
    }
    for (const [key, buckets] of series) {
      const counts = buckets.map((b) => b.value);
      assert.deepEqual(
        counts,
        [...counts].sort((a, b) => a - b),
        `${family} ${key} buckets are cumulative`,
      );
      assert.equal(buckets.at(-1)!.labels.le, '+Inf');
      const count = samples.find((s) => s.name === `${family}_count` && JSON.stringify(s.labels) === key);
      assert.equal(count?.value, buckets.at(-1)!.value, `${family} ${key}: +Inf equals _count`);
    }
  }
  return { types, samples };
}

test('health: public, with the version, the database and the uptime; 503 while draining', async (t) => {
  const m = await startMaster(t);
  const answer = await call(m.url, 'GET', '/api/health');
  assert.equal(answer.status, 200);
  assert.deepEqual(Object.keys(answer.body), [
    'status',
    'starting_reason',
    'version',
    'database',
    'database_detail',
    'uptime_seconds',
    'role',
    'epoch',
    'fenced_by',
    'replication_mode',
    'sync_lapsed_since',
    'replication',
  ]);
  const { role, epoch, fenced_by, replication } = answer.body;
  assert.deepEqual([role, epoch, fenced_by, replication], ['primary', 1, null, null]);
  assert.deepEqual([answer.body.status, answer.body.database], ['ok', 'ok']);
  m.app.draining = true;
  const draining = await call(m.url, 'GET', '/api/health');
  m.app.draining = false;
  assert.equal(draining.status, 503);
  assert.equal(draining.headers.get('retry-after'), '5');
});

test('health: 503 with a retry hint when the database does not answer', async (t) => {
  const m = await startMaster(t);
  // A database that fails under a running master cannot be made on purpose here (closing it
  // takes the master's own shutdown with it), so its one read fails as SQLite would fail it.
  const db = m.app.store.db;
  const schemaVersion = db.schemaVersion;
  db.schemaVersion = () => {
    throw Object.assign(new Error('disk I/O error'), { code: 'ERR_SQLITE_ERROR' });
  };
  const answer = await call(m.url, 'GET', '/api/health');
  db.schemaVersion = schemaVersion;
  assert.equal(answer.status, 503);
  assert.equal(answer.headers.get('content-type'), 'application/problem+json');
  assert.equal(answer.headers.get('retry-after'), '5');
  assert.match(answer.body.detail, /database does not answer/);
});

test(
  'metrics: the text format 0.0.4, with requests by route and status, ' +
    'commits, agents, rules, traffic, logins, memory',
  async (t) => {
    const m = await startMaster(t);
    const reader = await mintToken(m, ['dashboard:read']);
    const n = await node(m, 'edge');
    await rule(m, { node_id: n.id, listen_port: 80 });
    await call(m.url, 'POST', '/api/auth/login', { body: { username: 'admin', password: 'wrong-password' } });
    await call(m.url, 'GET', '/api/nothing-here', { token: reader });
    assert.equal((await call(m.url, 'GET', '/api/metrics')).status, 401);
    const answer = await call(m.url, 'GET', '/api/metrics', { token: reader });
    assert.equal(answer.status, 200);
    assert.equal(answer.headers.get('content-type'), 'text/plain; version=0.0.4; charset=utf-8');
    const { types, samples } = parseMetrics(answer.body as string);
    const value = (name: string, labels: Record<string, string> = {}) =>
      samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;
    assert.equal(types.get('portplane_http_request_duration_seconds'), 'histogram');
    assert.equal(value('portplane_http_requests_total', { route: '/api/nodes', method: 'POST', status: '201' }), 1);
    assert.equal(value('portplane_http_requests_total', { route: 'unmatched', status: '404' }), 1);
    assert.equal(value('portplane_http_requests_total', { route: '/api/metrics', status: '401' }), 1);
    assert.ok(value('portplane_db_commit_duration_seconds_count')! >= 3, 'commits are timed');
    assert.equal(value('portplane_agents_connected'), 0);
    assert.equal(value('portplane_rules', { sync_state: 'pending' }), 1);
    assert.equal(value('portplane_traffic_bytes', { direction: 'in' }), 0);
    assert.equal(value('portplane_login_failures_total'), 1);
    assert.ok(value('process_resident_memory_bytes')! > 10_000_000);
  },
);
