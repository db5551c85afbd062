import assert from 'node:assert/strict';
import { once } from 'node:events';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { streamLogger } from '../internal/log/log.ts';

/** A stream whose reader is stalled until `release()`: every write stays pending until then. */
function stalledStream() {
  const written: string[] = [];
  let pending: (() => void)[] = [];
  let stalled = true;
  const stream = new Writable({
    highWaterMark: 1024,
    write(chunk: Buffer, _encoding, done) {
      written.push(chunk.toString('utf8'));
      if (stalled) pending.push(done);
      else done();
    },
  });
  const release = () => {
    stalled = false;
    const waiting = pending;
    pending = [];
    for (const done of waiting) done();
  };
  return { stream, written, release };
}

test('a stalled log reader holds at most the cap in memory, and a warning counts the lines dropped', async () => {
  const { stream, written, release } = stalledStream();
  const log = streamLogger(stream, 4096, () => 0);
  for (let i = 0; i < 1000; i++) log.info('request', { path: `/api/nodes/${i}` });
  assert.ok(stream.writableLength <= 4096 + 200, `pending ${stream.writableLength} bytes`);

  const drained = once(stream, 'drain');
  release();
  await drained;
  const lines = written.map((text) => JSON.parse(text) as Record<string, unknown>);
  const kept = lines.filter((line) => line.msg === 'request').length;
  assert.ok(kept > 0 && kept < 1000, `${kept} lines kept`);
  const warning = lines.at(-1)!;
  assert.deepEqual(warning, {
    time: new Date(0).toISOString(),
    level: 'warn',
    msg: 'log lines dropped',
    count: 1000 - kept,
    reason: 'the log reader fell behind',
  });

  log.info('after', {});
  assert.equal(JSON.parse(written.at(-1)!).msg, 'after');
});

test('a log line is one JSON object: time, level and message, then the fields given (undefined ones left out)', () => {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(chunk.toString('utf8'));
      done();
    },
  });
  let ms = Date.UTC(2026, 10, 23, 10, 0, 0, 250);
  const log = streamLogger(stream, 4096, () => ms);
  log.error('no fields');
  log.info('fields', { path: '/a "quoted"\n path', status: 200, user: null, skipped: undefined });
  ms += 1;
  log.warn('a millisecond later', {});
  assert.ok(lines.every((line) => line.endsWith('}\n') && !line.slice(0, -1).includes('\n')));
  assert.deepEqual(
    lines.map((line) => JSON.parse(line)),
    [
      { time: '2026-11-23T10:00:00.250Z', level: 'error', msg: 'no fields' },
      {
        time: '2026-11-23T10:00:00.250Z',
        level: 'info',
        msg: 'fields',
        path: '/a "quoted"\n path',
        status: 200,
        user: null,
      },
      { time: '2026-11-23T10:00:00.251Z', level: 'warn', msg: 'a millisecond later' },
    ],
  );
});
