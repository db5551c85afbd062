// A WebSocket (RFC 6455) carrying one byte stream, for tunnels that must cross an HTTP reverse proxy or a CDN: the
// tunnel's TLS + HTTP/2 session rides it end to end, so the WebSocket itself needs no trust of its own. Binary
// frames only, no extensions, no subprotocol; message boundaries mean nothing (the stream is bytes), so a frame's
// payload is passed on as it arrives, whatever its size, and only control frames are held whole.

import { createHash, randomBytes, randomFillSync } from 'node:crypto';
import { request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { LookupFunction } from 'node:net';
import { Duplex } from 'node:stream';

const GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';

/** The Sec-WebSocket-Accept that answers `key`. */
export function acceptOf(key: string): string {
  return createHash('sha1')
    .update(key + GUID)
    .digest('base64');
}

const OP = { continuation: 0x0, text: 0x1, binary: 0x2, close: 0x8, ping: 0x9, pong: 0xa } as const;
/** Payloads at most this big go out in one frame; a longer chunk is cut (peers and proxies buffer frames). */
const MAX_SENT_FRAME = 64 * 1024;
const MAX_CONTROL = 125;
/** How long a closing WebSocket waits for the peer's close frame before it drops the connection. */
const CLOSE_WAIT_MS = 2_000;

/** Random bytes for masking keys, drawn in bulk: a call for each frame's four bytes cost more than the masking. */
const randomPool = Buffer.alloc(4096);
let randomAt = randomPool.length;

function maskingKey(key: Buffer): void {
  if (randomAt === randomPool.length) {
    randomFillSync(randomPool);
    randomAt = 0;
  }
  randomPool.copy(key, 0, randomAt, randomAt + 4);
  randomAt += 4;
}

/** The byte order of this machine's 32-bit words, to XOR four bytes of a mask at a time. */
const wordOf = (bytes: Buffer) => new Uint32Array(new Uint8Array(bytes).buffer)[0]!;

/**
 * XORs `bytes` in place with the 4-byte `key`, starting `offset` bytes into it: byte by byte up to a 4-byte boundary,
 * then a word at a time (four times fewer steps; a byte loop held a ws tunnel to a third of a tls one), then the rest.
 */
function mask(bytes: Buffer, key: Buffer, offset: number): void {
  const length = bytes.length;
  let i = 0;
  for (const lead = Math.min(length, (4 - (bytes.byteOffset & 3)) & 3); i < lead; i++)
    bytes[i]! ^= key[(offset + i) & 3]!;
  const words = (length - i) >>> 2;
  if (words > 0) {
    const at = offset + i;
    const word = wordOf(Buffer.from([key[at & 3]!, key[(at + 1) & 3]!, key[(at + 2) & 3]!, key[(at + 3) & 3]!]));
    const view = new Uint32Array(bytes.buffer, bytes.byteOffset + i, words);
    for (let w = 0; w < words; w++) view[w]! ^= word;
    i += words * 4;
  }
  for (; i < length; i++) bytes[i]! ^= key[(offset + i) & 3]!;
}

/** Why a peer's frames were refused, as a close code and words (RFC 6455 section 7.4.1). */
class ProtocolError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

type Role = 'client' | 'server';

/**
 * One WebSocket as a Duplex of bytes over `socket` (after the handshake; `head` is what arrived past it). Writes go
 * out as binary frames, masked by a client; what a peer sends is checked as it is read (masking by role, reserved
 * bits, opcodes, control frames' size, fragmentation's order) and a violation closes with 1002. Backpressure holds
 * both ways: a full reader pauses the socket, and a write's callback waits for the socket's. It owns what it reads from
 * `socket` (a network socket's fresh buffers): masked payloads are unmasked where they lie.
 */
export class WebSocketStream extends Duplex {
  private buffered: Buffer = Buffer.alloc(0);
  /** The data frame being read: bytes of its payload still to come, its mask and where in the mask they start. */
  private remaining = 0;
  private mask: Buffer | null = null;
  private maskOffset = 0;
  /** A fragmented message is open: continuation frames may follow, a new data frame may not. */
  private fragmented = false;
  private closeSent = false;
  private closeReceived = false;
  private closeTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly socket: Duplex,
    private readonly role: Role,
    head: Buffer = Buffer.alloc(0),
  ) {
    super({ allowHalfOpen: false });
    socket.on('data', (chunk: Buffer) => this.received(chunk));
    socket.on('end', () => this.peerGone('the connection ended without a close frame'));
    socket.on('error', (error) => this.destroy(error));
    socket.on('close', () => this.destroy());
    if (head.length > 0) this.received(head);
  }

  override _read(): void {
    this.socket.resume();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: (error?: Error | null) => void): void {
    this._writev([{ chunk }], done);
  }

  /** Writes what queued meanwhile (TLS records, mostly) as frames in one go: a socket write each cost a third. */
  override _writev(chunks: { chunk: Buffer }[], done: (error?: Error | null) => void): void {
    if (this.closeSent) return done(new Error('the WebSocket is closing'));
    const frames: Buffer[] = [];
    for (const { chunk } of chunks)
      for (let at = 0; at < chunk.length; at += MAX_SENT_FRAME)
        frames.push(this.frame(OP.binary, chunk.subarray(at, Math.min(chunk.length, at + MAX_SENT_FRAME))));
    if (frames.length === 0) return done();
    this.socket.write(frames.length === 1 ? frames[0]! : Buffer.concat(frames), done);
  }

  override _final(done: (error?: Error | null) => void): void {
    this.close(1000, '');
    done();
  }

  override _destroy(error: Error | null, done: (error?: Error | null) => void): void {
    clearTimeout(this.closeTimer);
    this.socket.destroy();
    done(error);
  }

  /** Sends a close frame (once) and drops the connection if the peer does not answer with its own in time. */
  close(code: number, reason: string): void {
    if (this.closeSent || this.socket.destroyed) return;
    this.closeSent = true;
    const payload = Buffer.alloc(2 + Buffer.byteLength(reason));
    payload.writeUInt16BE(code);
    payload.write(reason, 2);
    this.socket.write(this.frame(OP.close, payload.subarray(0, MAX_CONTROL)));
    this.closeTimer = setTimeout(() => this.socket.destroy(), CLOSE_WAIT_MS);
    this.closeTimer.unref();
  }

  private frame(opcode: number, payload: Buffer): Buffer {
    const length = payload.length;
    const extended = length < 126 ? 0 : length < 65536 ? 2 : 8;
    const masked = this.role === 'client';
    const headLength = 2 + extended + (masked ? 4 : 0);
    const frame = Buffer.allocUnsafe(headLength + length);
    frame[0] = 0x80 | opcode;
    frame[1] = (masked ? 0x80 : 0) | (extended === 0 ? length : extended === 2 ? 126 : 127);
    if (extended === 2) frame.writeUInt16BE(length, 2);
    else if (extended === 8) frame.writeBigUInt64BE(BigInt(length), 2);
    if (!masked) {
      payload.copy(frame, headLength);
      return frame;
    }
    const key = frame.subarray(2 + extended, headLength);
    maskingKey(key);
    payload.copy(frame, headLength);
    mask(frame.subarray(headLength), key, 0);
    return frame;
  }

  private received(chunk: Buffer): void {
    try {
      this.consume(chunk);
    } catch (error) {
      const refused = error instanceof ProtocolError ? error : new ProtocolError(1011, (error as Error).message);
      this.close(refused.code, refused.message);
      this.destroy(new Error(`the WebSocket peer broke the protocol: ${refused.message}`));
    }
  }

  private consume(chunk: Buffer): void {
    let data = this.buffered.length > 0 ? Buffer.concat([this.buffered, chunk]) : chunk;
    while (data.length > 0 && !this.destroyed) {
      if (this.remaining > 0) {
        const take = Math.min(this.remaining, data.length);
        this.payload(data.subarray(0, take));
        data = data.subarray(take);
        continue;
      }
      const used = this.header(data);
      if (used === 0) break;
      data = data.subarray(used);
    }
    // What is kept is copied: the chunk's memory is the socket's.
    this.buffered = data.length > 0 ? Buffer.from(data) : Buffer.alloc(0);
  }

  /** Reads one frame's header (and a control frame whole) from `data`; how many bytes it used, 0 if too few came. */
  private header(data: Buffer): number {
    if (data.length < 2) return 0;
    const fin = (data[0]! & 0x80) !== 0;
    const opcode = data[0]! & 0x0f;
    if ((data[0]! & 0x70) !== 0) throw new ProtocolError(1002, 'a frame has reserved bits set (no extension agreed)');
    const masked = (data[1]! & 0x80) !== 0;
    if (masked !== (this.role === 'server'))
      throw new ProtocolError(
        1002,
        this.role === 'server' ? 'a client frame is not masked' : 'a server frame is masked',
      );
    const short = data[1]! & 0x7f;
    const extended = short === 126 ? 2 : short === 127 ? 8 : 0;
    const headLength = 2 + extended + (masked ? 4 : 0);
    if (data.length < headLength) return 0;
    let length = short;
    if (extended === 2) length = data.readUInt16BE(2);
    else if (extended === 8) {
      const big = data.readBigUInt64BE(2);
      if (big > BigInt(Number.MAX_SAFE_INTEGER)) throw new ProtocolError(1009, 'a frame is longer than 2^53 bytes');
      length = Number(big);
    }
    const key = masked ? Buffer.from(data.subarray(2 + extended, headLength)) : null;
    if (opcode >= 0x8) {
      if (!fin || length > MAX_CONTROL) throw new ProtocolError(1002, 'a control frame is fragmented or too long');
      if (data.length < headLength + length) return 0;
      const payload = Buffer.from(data.subarray(headLength, headLength + length));
      if (key) mask(payload, key, 0);
      this.control(opcode, payload);
      return headLength + length;
    }
    if (opcode === OP.text) throw new ProtocolError(1003, 'a text frame: this WebSocket carries bytes only');
    if (opcode === OP.continuation ? !this.fragmented : opcode !== OP.binary || this.fragmented)
      throw new ProtocolError(1002, `a frame with opcode ${opcode} out of order`);
    this.fragmented = !fin;
    this.remaining = length;
    this.mask = key;
    this.maskOffset = 0;
    return headLength;
  }

  private payload(part: Buffer): void {
    this.remaining -= part.length;
    if (this.mask) {
      mask(part, this.mask, this.maskOffset);
      this.maskOffset = (this.maskOffset + part.length) & 3;
    }
    if (!this.push(part)) this.socket.pause();
  }

  private control(opcode: number, payload: Buffer): void {
    if (opcode === OP.ping) {
      if (!this.closeSent) this.socket.write(this.frame(OP.pong, payload));
    } else if (opcode === OP.close) {
      if (payload.length === 1) throw new ProtocolError(1002, 'a close frame with a one-byte body');
      this.closeReceived = true;
      this.close(1000, '');
      this.push(null);
      this.socket.end();
    } else if (opcode !== OP.pong) throw new ProtocolError(1002, `an unknown control opcode ${opcode}`);
  }

  private peerGone(why: string): void {
    if (this.closeReceived) return;
    this.destroy(this.closeSent ? undefined : new Error(why));
  }
}

/**
 * Opens a WebSocket to `url` (through `wss:`, the proxy's own TLS checked against the system's CAs), its name resolved
 * by `lookup` when given. Calls `opened` with the stream once the server accepted, or `failed` with why not: a status
 * other than 101, a wrong Sec-WebSocket-Accept, an extension or subprotocol nobody asked for. Returns a function that
 * abandons the attempt (calling neither).
 */
export function openWebSocket(
  url: URL,
  opened: (stream: WebSocketStream) => void,
  failed: (why: string) => void,
  lookup?: LookupFunction,
): () => void {
  const key = randomBytes(16).toString('base64');
  const request = (url.protocol === 'wss:' ? httpsRequest : httpRequest)({
    host: url.hostname.replace(/^\[|\]$/g, ''),
    port: url.port || (url.protocol === 'wss:' ? 443 : 80),
    path: `${url.pathname}${url.search}`,
    method: 'GET',
    agent: false,
    lookup,
    servername: url.protocol === 'wss:' ? url.hostname : undefined,
    headers: {
      Host: url.host,
      Connection: 'Upgrade',
      Upgrade: 'websocket',
      'Sec-WebSocket-Version': '13',
      'Sec-WebSocket-Key': key,
    },
  });
  let settled = false;
  const fail = (why: string) => {
    if (settled) return;
    settled = true;
    request.destroy();
    failed(why);
  };
  request.on('error', (error) => fail(error.message));
  request.on('response', (response: IncomingMessage) => {
    response.resume();
    fail(`${url.host} answered ${response.statusCode} instead of switching to a WebSocket`);
  });
  request.on('upgrade', (response: IncomingMessage, socket, head: Buffer) => {
    const refusal = upgradeRefusal(response, key);
    if (refusal) {
      socket.destroy();
      return fail(`${url.host} ${refusal}`);
    }
    settled = true;
    opened(new WebSocketStream(socket, 'client', head));
  });
  request.end();
  return () => {
    settled = true;
    request.destroy();
  };
}

function upgradeRefusal(response: IncomingMessage, key: string): string | null {
  const { headers } = response;
  if (String(headers.upgrade).toLowerCase() !== 'websocket') return 'upgraded to something other than a WebSocket';
  if (headers['sec-websocket-accept'] !== acceptOf(key)) return 'answered with the wrong Sec-WebSocket-Accept';
  if (headers['sec-websocket-extensions'] || headers['sec-websocket-protocol'])
    return 'agreed to an extension or subprotocol nobody asked for';
  return null;
}

/**
 * Answers a WebSocket handshake (an HTTP server's `upgrade` event) with 101 and returns the stream, or answers 400
 * and returns null for anything else. The path is not checked: a proxy may rewrite it, and the tunnel's TLS inside
 * is what admits a peer.
 */
export function acceptWebSocket(request: IncomingMessage, socket: Duplex, head: Buffer): WebSocketStream | null {
  const key = request.headers['sec-websocket-key'];
  const valid =
    request.method === 'GET' &&
    String(request.headers.upgrade).toLowerCase() === 'websocket' &&
    request.headers['sec-websocket-version'] === '13' &&
    typeof key === 'string' &&
    /^[A-Za-z0-9+/]{22}==$/.test(key);
  if (!valid) {
    socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
    return null;
  }
  socket.write(
    'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
      `Sec-WebSocket-Accept: ${acceptOf(key)}\r\n\r\n`,
  );
  return new WebSocketStream(socket, 'server', head);
}

/** What an exit's WebSocket port says to plain HTTP: nothing about what it is. */
export function notFound(_request: IncomingMessage, response: ServerResponse): void {
  response.writeHead(404, { 'Content-Type': 'text/plain', Connection: 'close' }).end('not found\n');
}
