import assert from 'node:assert/strict';
import { request } from 'node:http';
import { connect } from 'node:net';
import { test } from 'node:test';
import { listen } from '../internal/http/server.ts';

const IDLE_MS = 100;

/** A GET on `url`: its status and body, or the error that ended it. */
function get(url: string): Promise<{ status: number; body: string } | Error> {
  return new Promise((resolve) => {
    request(url, { agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode!, body }));
      res.on('error', resolve);
    })
      .on('error', resolve)
      .end();
  });
}

test('an answer the server works on for longer than the idle timeout still reaches its client', async (t) => {
  const server = await listen(
    async (_req, res) => {
      await new Promise((resolve) => setTimeout(resolve, IDLE_MS * 4));
      res.end('done');
    },
    '127.0.0.1',
    0,
    null,
    IDLE_MS,
  );
  t.after(() => server.close(0));
  assert.deepEqual(await get(server.url), { status: 200, body: 'done' });
});

test('a client that stops reading its answer is cut at the idle timeout', async (t) => {
  let cut: () => void;
  const wasCut = new Promise<void>((resolve) => (cut = resolve));
  const server = await listen(
    async (_req, res) => {
      res.on('close', () => {
        if (!res.writableFinished) cut();
      });
      res.end(Buffer.alloc(64 * 1024 * 1024));
    },
    '127.0.0.1',
    0,
    null,
    IDLE_MS,
  );
  t.after(() => server.close(0));
  const client = connect(Number(new URL(server.url).port), '127.0.0.1');
  t.after(() => client.destroy());
  client.pause();
  client.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
  await wasCut;
});

test('a request whose body the handler stopped reading (a 413) leaves nothing to throw once answered', async (t) => {
  const thrown: unknown[] = [];
  const onRejection = (reason: unknown) => thrown.push(reason);
  process.on('unhandledRejection', onRejection);
  t.after(() => process.off('unhandledRejection', onRejection));
  let returned!: () => void;
  const handled = new Promise<void>((resolve) => (returned = resolve));
  const server = await listen(
    async (req, res) => {
      // Leaving the body's iteration early destroys the request, as a body past its cap does.
      for await (const chunk of req) if (chunk) break;
      res.writeHead(413, { connection: 'close' }).end('too large');
      setImmediate(returned);
    },
    '127.0.0.1',
    0,
    null,
    IDLE_MS,
  );
  t.after(() => server.close(0));
  const answered = await new Promise<number | Error>((resolve) => {
    const sent = request(server.url, { method: 'POST', agent: false }, (res) => resolve(res.resume().statusCode!));
    sent.on('error', resolve);
    sent.write(Buffer.alloc(64 * 1024));
    setTimeout(() => sent.end(Buffer.alloc(64 * 1024)), 20);
  });
  assert.ok(answered === 413 || answered instanceof Error, String(answered));
  await handled;
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.deepEqual(thrown, []);
});
