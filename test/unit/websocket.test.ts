// The WebSocket a ws tunnel rides on (RFC 6455), one end at a time against frames written here by hand: what it
// passes on, what it answers, and each way a peer can break the protocol, which closes it with the RFC's code.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { duplexPair, type Duplex } from 'node:stream';
import { describe, test } from 'node:test';
import { acceptOf, WebSocketStream } from '../../internal/tunnel/websocket.ts';

interface FrameOptions {
  fin?: boolean;
  mask?: boolean;
  rsv?: number;
  /** Claim this length in the header (the payload sent is what is given). */
  length?: bigint;
}

/** A frame as a peer would write it. */
function frame(opcode: number, payload: Buffer, { fin = true, mask = false, rsv = 0, length }: FrameOptions = {}) {
  const size = length ?? BigInt(payload.length);
  const extended = length !== undefined ? 8 : payload.length < 126 ? 0 : payload.length < 65536 ? 2 : 8;
  const head = Buffer.alloc(2 + extended + (mask ? 4 : 0));
  head[0] = (fin ? 0x80 : 0) | (rsv << 4) | opcode;
  head[1] = (mask ? 0x80 : 0) | (extended === 0 ? payload.length : extended === 2 ? 126 : 127);
  if (extended === 2) head.writeUInt16BE(payload.length, 2);
  if (extended === 8) head.writeBigUInt64BE(size, 2);
  if (!mask) return Buffer.concat([head, payload]);
  const key = Buffer.from([0x12, 0x34, 0x56, 0x78]);
  key.copy(head, 2 + extended);
  return Buffer.concat([head, Buffer.from(payload.map((byte, i) => byte ^ key[i & 3]!))]);
}

/** Frames as they arrive at a peer: opcode and unmasked payload, from a server (unmasked) or a client (masked). */
function frames(bytes: Buffer): { opcode: number; fin: boolean; payload: Buffer }[] {
  const found = [];
  let at = 0;
  while (at < bytes.length) {
    const masked = (bytes[at + 1]! & 0x80) !== 0;
    let length = bytes[at + 1]! & 0x7f;
    let head = 2;
    if (length === 126) [length, head] = [bytes.readUInt16BE(at + 2), 4];
    else if (length === 127) [length, head] = [Number(bytes.readBigUInt64BE(at + 2)), 10];
    const key = masked ? bytes.subarray(at + head, at + head + 4) : null;
    head += masked ? 4 : 0;
    const payload = Buffer.from(bytes.subarray(at + head, at + head + length));
    if (key) for (let i = 0; i < payload.length; i++) payload[i]! ^= key[i & 3]!;
    found.push({ opcode: bytes[at]! & 0x0f, fin: (bytes[at]! & 0x80) !== 0, payload });
    at += head + length;
  }
  return found;
}

/** A WebSocket of `role` on one side of a pipe; the test writes and reads raw bytes on the other. */
function end(role: 'client' | 'server') {
  const [near, far] = duplexPair();
  const ws = new WebSocketStream(near, role);
  const read: Buffer[] = [];
  const sent: Buffer[] = [];
  ws.on('data', (chunk: Buffer) => read.push(chunk));
  far.on('data', (chunk: Buffer) => sent.push(chunk));
  const errors: Error[] = [];
  ws.on('error', (error) => errors.push(error));
  return {
    ws,
    far: far as Duplex,
    read: () => Buffer.concat(read),
    sent: () => frames(Buffer.concat(sent)),
    errors,
  };
}

const turn = () => new Promise((resolve) => setImmediate(resolve));

describe('websocket', () => {
  test("Sec-WebSocket-Accept is the RFC's own example", () => {
    assert.equal(acceptOf('dGhlIHNhbXBsZSBub25jZQ=='), 's3pPLMBiTxaQ9kYGzzhZRbK+xOo=');
  });

  test('a client masks what it writes, in frames of at most 64 KiB, and the bytes come out whole', async () => {
    const client = end('client');
    const payload = Buffer.alloc(200_000);
    for (let i = 0; i < payload.length; i++) payload[i] = i % 251;
    client.ws.write(payload);
    await turn();
    const sent = client.sent();
    assert.deepEqual(
      sent.map((f) => [f.opcode, f.fin, f.payload.length]),
      [
        [2, true, 65536],
        [2, true, 65536],
        [2, true, 65536],
        [2, true, 3392],
      ],
    );
    assert.ok(Buffer.concat(sent.map((f) => f.payload)).equals(payload));
  });

  test('a server passes on masked frames fed a byte at a time, a fragmented one with a ping inside', async () => {
    const server = end('server');
    const bytes = Buffer.concat([
      frame(2, Buffer.from('hello '), { mask: true }),
      frame(2, Buffer.from('frag'), { mask: true, fin: false }),
      frame(9, Buffer.from('are you there'), { mask: true }),
      frame(0, Buffer.from('mented'), { mask: true }),
    ]);
    for (const byte of bytes) server.far.write(Buffer.from([byte]));
    await turn();
    assert.equal(server.read().toString(), 'hello fragmented');
    assert.deepEqual(
      server.sent().map((f) => [f.opcode, f.payload.toString()]),
      [[10, 'are you there']],
      'the ping answered with a pong of its payload',
    );
    assert.deepEqual(server.errors, []);
  });

  test('a server unmasks a long frame arriving in pieces that start anywhere in the mask and in memory', async () => {
    const server = end('server');
    const payload = Buffer.alloc(100_003);
    for (let i = 0; i < payload.length; i++) payload[i] = (i * 7) % 256;
    const bytes = frame(2, payload, { mask: true });
    for (let at = 0; at < bytes.length; at += 4093) server.far.write(Buffer.from(bytes.subarray(at, at + 4093)));
    await turn();
    assert.ok(server.read().equals(payload));
  });

  const broken: [string, 'client' | 'server', Buffer, number][] = [
    ['an unmasked frame from a client', 'server', frame(2, Buffer.from('x')), 1002],
    ['a masked frame from a server', 'client', frame(2, Buffer.from('x'), { mask: true }), 1002],
    ['a text frame', 'client', frame(1, Buffer.from('words')), 1003],
    ['reserved bits without an extension', 'client', frame(2, Buffer.from('x'), { rsv: 4 }), 1002],
    ['a continuation with no message open', 'client', frame(0, Buffer.from('x')), 1002],
    [
      'a new message while one is open',
      'client',
      Buffer.concat([frame(2, Buffer.from('a'), { fin: false }), frame(2, Buffer.from('b'))]),
      1002,
    ],
    ['a control frame longer than 125 bytes', 'client', frame(9, Buffer.alloc(126)), 1002],
    ['a fragmented control frame', 'client', frame(9, Buffer.from('x'), { fin: false }), 1002],
    ['an unknown opcode', 'client', frame(0xb, Buffer.alloc(0)), 1002],
    ['a length past 2^53', 'client', frame(2, Buffer.alloc(0), { length: 2n ** 60n }), 1009],
    ['a close frame with a one-byte body', 'client', frame(8, Buffer.from([3])), 1002],
  ];
  for (const [what, role, bytes, code] of broken)
    test(`${what} closes the WebSocket with ${code} and errors it`, async () => {
      const peer = end(role);
      peer.far.write(bytes);
      await turn();
      const close = peer.sent().find((f) => f.opcode === 8);
      assert.ok(close, 'a close frame was sent');
      assert.equal(close.payload.readUInt16BE(0), code);
      assert.equal(peer.errors.length, 1);
      assert.match(peer.errors[0]!.message, /^the WebSocket peer broke the protocol: /);
      assert.ok(peer.ws.destroyed);
    });

  test("a peer's close frame is answered with one, and the stream ends cleanly", async () => {
    const client = end('client');
    client.far.write(frame(2, Buffer.from('last words')));
    client.far.write(frame(8, Buffer.from([0x03, 0xe8])));
    client.ws.resume();
    await once(client.ws, 'end');
    assert.equal(client.read().toString(), 'last words');
    const close = client.sent().find((f) => f.opcode === 8);
    assert.equal(close?.payload.readUInt16BE(0), 1000);
    assert.deepEqual(client.errors, []);
  });

  test('a reader that stops reading pauses the connection under it, and resumes it when it reads again', async () => {
    const server = end('server');
    server.ws.removeAllListeners('data');
    server.ws.pause();
    const chunk = frame(2, Buffer.alloc(60_000, 1), { mask: true });
    for (let i = 0; i < 20; i++) server.far.write(chunk);
    await turn();
    const held = server.ws.readableLength;
    assert.ok(held < 20 * 60_000, `held ${held} bytes: not everything was read off the connection`);
    let got = 0;
    server.ws.on('data', (data: Buffer) => (got += data.length));
    server.ws.resume();
    await until(() => got === 20 * 60_000);
  });
});

async function until(done: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !done(); i++) await turn();
  assert.ok(done());
}
