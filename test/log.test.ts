import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { streamLogger, throttledBy, type Logger } from '../internal/log/log.ts';
import { node, startMaster } from './helpers.ts';
import { link, type RawLink } from './rawlink.ts';

/** A stream that keeps each write's text, and takes it at once. */
function recordingStream() {
  const writes: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      writes.push(chunk.toString('utf8'));
      done();
    },
  });
  return { stream, writes };
}

/** Lines are written once per event-loop turn: this waits for the turn's write. */
const nextTurn = () => new Promise((resolve) => setImmediate(resolve));

/** The JSON lines in what was written, however the writes cut them. */
const linesOf = (written: string[]) =>
  written
    .join('')
    .split('\n')
    .filter(Boolean)
    .map((text) => JSON.parse(text) as Record<string, unknown>);

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
  await nextTurn();
  assert.ok(stream.writableLength <= 4096 + 200, `pending ${stream.writableLength} bytes`);

  const drained = once(stream, 'drain');
  release();
  await drained;
  await nextTurn();
  const lines = linesOf(written);
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
  await nextTurn();
  assert.equal(linesOf(written).at(-1)!.msg, 'after');
});

test('a log line is one JSON object: time, level, message, then the fields given (none undefined)', async () => {
  const { stream, writes: lines } = recordingStream();
  let ms = Date.UTC(2026, 10, 23, 10, 0, 0, 250);
  const log = streamLogger(stream, 4096, () => ms);
  log.error('no fields');
  log.info('fields', { path: '/a "quoted"\n path', status: 200, user: null, skipped: undefined });
  ms += 1;
  log.warn('a millisecond later', {});
  await nextTurn();
  assert.ok(lines.join('').endsWith('}\n'));
  assert.deepEqual(linesOf(lines), [
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
  ]);
});

test("the lines of one turn go out in one write, in order; the next turn's in another", async () => {
  const { stream, writes } = recordingStream();
  const log = streamLogger(stream, 4096, () => 0);
  for (const msg of ['a', 'b', 'c']) log.info(msg);
  assert.equal(writes.length, 0, 'nothing is written within the turn');
  await nextTurn();
  log.warn('d');
  await nextTurn();
  assert.deepEqual(
    writes.map((chunk) => linesOf([chunk]).map((line) => line.msg)),
    [['a', 'b', 'c'], ['d']],
  );
});

test('a line logged just before the process exits is written', () => {
  const program =
    `import(${JSON.stringify(new URL('../internal/log/log.ts', import.meta.url).href)}).then(({ streamLogger }) => {` +
    "streamLogger(process.stdout).info('last words'); process.exit(3); })";
  const run = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', program], {
    encoding: 'utf8',
  });
  assert.equal(run.status, 3, run.stderr);
  assert.equal(linesOf([run.stdout])[0]!.msg, 'last words');
});

test('a log reader that goes away ends no process: its lines are dropped and the program goes on', async () => {
  const program =
    `import(${JSON.stringify(new URL('../internal/log/log.ts', import.meta.url).href)}).then(({ streamLogger }) => {` +
    "const log = streamLogger(process.stdout); const timer = setInterval(() => log.info('tick'), 5);" +
    'setTimeout(() => { clearInterval(timer); process.exit(0); }, 1000); })';
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', program], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk));
  // The reader reads one line and goes away, as `| head -1` does.
  await once(child.stdout, 'data');
  child.stdout.destroy();
  const [code] = await once(child, 'exit');
  assert.equal(code, 0, stderr);
});

test('a key logs at most 20 lines a minute; the rest are counted and the next window says how many', () => {
  let now = 0;
  const lines: { msg: string; fields?: Record<string, unknown> }[] = [];
  const sink: Logger = {
    info: (msg, fields) => lines.push({ msg, fields }),
    warn: (msg, fields) => lines.push({ msg, fields }),
    error: (msg, fields) => lines.push({ msg, fields }),
  };
  const logOf = throttledBy(sink, () => now);
  for (let i = 0; i < 1000; i++) logOf('node:1').warn('flood', { i });
  logOf('node:2').info('another key');
  assert.equal(lines.filter((l) => l.msg === 'flood').length, 20);
  assert.equal(lines.at(-1)!.msg, 'another key', 'other keys log as before');
  now += 60_000;
  logOf('node:1').warn('flood', { i: 1000 });
  assert.deepEqual(lines.at(-1)!.fields, { i: 1000, lines_dropped_before: 980 });
});

test('an agent link that floods the master with messages it does not know logs 20 lines a minute', async (t) => {
  const logged: string[] = [];
  const log: Logger = {
    info: (msg) => logged.push(msg),
    warn: (msg) => logged.push(msg),
    error: (msg) => logged.push(msg),
  };
  const m = await startMaster(t, { log });
  const edge = await node(m, 'edge');
  const raw = (await link(m, edge.agent_token)) as RawLink;
  await raw.next('config');
  raw.socket.write('{"type":"nonsense"}\n'.repeat(5000) + '{"type":"ping"}\n');
  await raw.next('pong');
  // Its link's lines together: 'agent connected', then the unknown messages up to the node's 20.
  assert.deepEqual(
    [logged.filter((msg) => msg.startsWith('agent')).length, logged.filter((msg) => msg.includes('unknown')).length],
    [20, 19],
  );
  raw.socket.destroy();
});
