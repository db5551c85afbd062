import assert from 'node:assert/strict';
import { randomBytes, scrypt } from 'node:crypto';
import { createSocket } from 'node:dgram';
import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { describe, test, type TestContext } from 'node:test';
import { checkMessage } from '../internal/agentlink/wire.ts';
import { configMessage } from '../internal/domain/link.ts';
import { Forwarder } from '../internal/forward/forwarder.ts';
import { dialTargets } from '../internal/relay/dial.ts';
import { Gate } from '../internal/relay/gate.ts';
import { DEFAULT_LIMITS } from '../internal/relay/limits.ts';
import { adopt, forward, readBufferBytes } from '../internal/relay/reads.ts';
import { TargetPicker } from '../internal/relay/targets.ts';
import { TcpRelay } from '../internal/relay/tcp.ts';
import { udpRoundTrip } from './agents.ts';
import { forwardRule as rule } from './forwarding.ts';
import { NO_CONTROLS } from './helpers.ts';
import { closedPort, freePort, freeSpan, tcpEcho, tcpRoundTrip as roundTrip, udpEcho, until } from './net.ts';

// Most of these tests wait on clocks and sockets: they run side by side.
/** The rest of a config message, as a master sends it. */
const CONFIG = {
  type: 'config',
  version: 1,
  report_interval_seconds: 10,
  tcp_idle_timeout_seconds: 3600,
  max_connections_per_source: 100,
  next_master_pin: null,
};

describe('the relay', { concurrency: 4 }, () => {
  /**
   * What `forwarder` counted for one rule, drained until it holds `bytes_in` and `bytes_out` at least: a connection's
   * last bytes are counted as the relay's sockets close, a moment after the client's does.
   */
  async function countedOnce(forwarder: Forwarder, want: { bytes_in: number; bytes_out: number }) {
    const counted = { id: 0, bytes_in: 0, bytes_out: 0, refused: 0 };
    await until('the bytes to be counted', () => {
      for (const { id, bytes_in, bytes_out, refused } of forwarder.drain())
        Object.assign(counted, {
          id,
          bytes_in: counted.bytes_in + bytes_in,
          bytes_out: counted.bytes_out + bytes_out,
          refused: counted.refused + (refused ?? 0),
        });
      return counted.bytes_in >= want.bytes_in && counted.bytes_out >= want.bytes_out;
    });
    return counted;
  }

  test('TCP: bytes cross the relay both ways through a half-close, and are counted exactly', async (t) => {
    const echo = await tcpEcho(t);
    const port = await freePort();
    const forwarder = new Forwarder('127.0.0.1', { allowLocalTargets: true });
    t.after(() => forwarder.close());
    assert.deepEqual(await forwarder.apply([rule(1, port, [`127.0.0.1:${echo}`])]), [
      { id: 1, state: 'applied', error: null, path: 'relay', reason: 'the agent forwards in user space only' },
    ]);
    const payload = Buffer.alloc(3 * 1024 * 1024, 7);
    const back = await roundTrip(port, payload);
    assert.equal(back.length, payload.length);
    assert.ok(back.equals(payload));
    const counted = await countedOnce(forwarder, { bytes_in: payload.length, bytes_out: payload.length });
    assert.deepEqual(counted, { id: 1, bytes_in: payload.length, bytes_out: payload.length, refused: 0 });
    assert.deepEqual(forwarder.drain(), [], 'a drain counts each byte once');
  });

  test(
    "a rule whose allow_hours names a zone this node's runtime does not know reaches the agent and fails alone " +
      '(zone_unknown); the rest of the config applies',
    async (t) => {
      const echo = await tcpEcho(t);
      const [port, other] = [await freePort(), await freePort()];
      const hours = { zone: 'Mars/Olympus_Mons', windows: [{ days: ['mon' as const], from: '08:00', to: '18:00' }] };
      // The wire takes what the master's runtime knew: the config is read, not refused whole.
      const wire = { id: 1, protocol: 'tcp', listen_port: port, targets: ['192.0.2.1:80'], strategy: 'round_robin' };
      const config = { ...CONFIG, rules: [{ ...wire, enabled: true, tunnel_id: null, allow_hours: hours }] };
      assert.doesNotThrow(() => checkMessage(configMessage, config));
      const forwarder = new Forwarder('127.0.0.1', { allowLocalTargets: true });
      t.after(() => forwarder.close());
      const results = await forwarder.apply([
        { ...rule(1, port, [`127.0.0.1:${echo}`]), allow_hours: hours },
        rule(2, other, [`127.0.0.1:${echo}`]),
      ]);
      assert.deepEqual(
        results.map((r) => [r.id, r.state, r.error?.code ?? null]),
        [
          [1, 'failed', 'zone_unknown'],
          [2, 'applied', null],
        ],
      );
      assert.match(results[0]!.error!.detail, /knows no time zone Mars\/Olympus_Mons/);
      assert.equal((await roundTrip(other, Buffer.from('on'))).toString(), 'on');
    },
  );

  test('TCP: a refused target fails over to the next one', async (t) => {
    const echo = await tcpEcho(t);
    const dead = await closedPort();
    const port = await freePort();
    const forwarder = new Forwarder('127.0.0.1', { allowLocalTargets: true });
    t.after(() => forwarder.close());
    await forwarder.apply([rule(1, port, [`127.0.0.1:${dead}`, `127.0.0.1:${echo}`], { strategy: 'failover' })]);
    for (let i = 0; i < 3; i++) assert.equal((await roundTrip(port, Buffer.from('ping'))).toString(), 'ping');
  });

  test('UDP: datagrams are relayed per client and counted', async (t) => {
    const echo = await udpEcho(t);
    const port = await freePort();
    const forwarder = new Forwarder('127.0.0.1', { allowLocalTargets: true });
    t.after(() => forwarder.close());
    await forwarder.apply([rule(1, port, [`127.0.0.1:${echo}`], { protocol: 'udp' })]);
    const client = createSocket('udp4');
    t.after(() => client.close());
    const replies: string[] = [];
    client.on('message', (m) => replies.push(m.toString()));
    for (const word of ['alpha', 'beta', 'gamma']) client.send(word, port, '127.0.0.1');
    while (replies.length < 3) await once(client, 'message');
    assert.deepEqual(replies.sort(), ['alpha', 'beta', 'gamma']);
    assert.deepEqual(forwarder.drain(), [{ id: 1, bytes_in: 14, bytes_out: 14, refused: 0 }]);
  });

  test(
    'apply is idempotent: an unchanged rule keeps its open ' + 'connections; a removed rule closes its port',
    async (t) => {
      const echo = await tcpEcho(t);
      const port = await freePort();
      const forwarder = new Forwarder('127.0.0.1', { allowLocalTargets: true });
      t.after(() => forwarder.close());
      const config = [rule(1, port, [`127.0.0.1:${echo}`])];
      await forwarder.apply(config);
      const socket: Socket = connect({ host: '127.0.0.1', port });
      await once(socket, 'connect');
      socket.write('one');
      assert.equal((await once(socket, 'data'))[0].toString(), 'one');
      await forwarder.apply(config);
      await forwarder.apply([{ ...config[0]!, targets: [`127.0.0.1:${echo}`, `localhost:${echo}`] }]);
      socket.write('two');
      assert.equal((await once(socket, 'data'))[0].toString(), 'two', 'the connection survived both applies');
      socket.destroy();

      await forwarder.apply([]);
      const refused = connect({ host: '127.0.0.1', port });
      const [error] = await once(refused, 'error');
      assert.equal((error as NodeJS.ErrnoException).code, 'ECONNREFUSED');
    },
  );

  test(
    'failures come back as machine codes: port in use, unresolvable targets, tunnels; disabled ' +
      'rules do not listen',
    async (t) => {
      const echo = await tcpEcho(t);
      const blocker = createServer().listen(0, '127.0.0.1');
      await once(blocker, 'listening');
      t.after(() => blocker.close());
      const taken = (blocker.address() as AddressInfo).port;
      const free = await freePort();
      const forwarder = new Forwarder('127.0.0.1', { allowLocalTargets: true });
      t.after(() => forwarder.close());
      const results = await forwarder.apply([
        rule(1, taken, [`127.0.0.1:${echo}`], { protocol: 'tcp+udp' }),
        rule(
          2,
          free,
          Array.from({ length: 16 }, (_, i) => `no-such-host-${i}-${'x'.repeat(50)}.invalid:80`),
        ),
        rule(3, free, [`127.0.0.1:${echo}`], { tunnel_id: 9 }),
        rule(4, free, [`127.0.0.1:${echo}`], { enabled: false }),
      ]);
      assert.deepEqual(
        results.map((r) => [r.id, r.state, r.error?.code ?? null]),
        [
          [1, 'failed', 'port_in_use'],
          [2, 'failed', 'target_unresolvable'],
          [3, 'failed', 'tunnel_missing'],
          [4, 'applied', null],
        ],
      );
      // The master reads details of at most 500 characters: sixteen long target names are cut short.
      assert.ok(results[1]!.error!.detail.length <= 300);
      assert.deepEqual([...forwarder.listening()], []);
      // The UDP half of rule 1 was not left bound when its TCP half failed.
      const probe = createSocket('udp4');
      probe.bind(taken, '127.0.0.1');
      await once(probe, 'listening');
      probe.close();
    },
  );

  test('UDP sessions expire when idle, and the session cap turns away new clients', async (t) => {
    const echo = await udpEcho(t);
    const port = await freePort();
    const forwarder = new Forwarder('127.0.0.1', {
      allowLocalTargets: true,
      maxConnectionsPerRule: 10,
      maxUdpSessionsPerRule: 1,
      udpIdleMs: 200,
    });
    t.after(() => forwarder.close());
    await forwarder.apply([rule(1, port, [`127.0.0.1:${echo}`], { protocol: 'udp' })]);
    const first = createSocket('udp4');
    const second = createSocket('udp4');
    t.after(() => (first.close(), second.close()));
    const heard: string[] = [];
    second.on('message', (m) => heard.push(m.toString()));
    first.send('hello', port, '127.0.0.1');
    assert.equal((await once(first, 'message'))[0].toString(), 'hello');
    second.send('turned away', port, '127.0.0.1');
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal(heard.length, 0, 'one session is the cap');
    await new Promise((resolve) => setTimeout(resolve, 450));
    // The first session has been idle past 200 ms: swept, so the second client now gets a session.
    second.send('welcome', port, '127.0.0.1');
    await until('the welcome echo', () => heard.includes('welcome'), 5000);
  });

  test('TCP connections over the per-rule limit are refused, and the others go on', async (t) => {
    const echo = await tcpEcho(t);
    const port = await freePort();
    const forwarder = new Forwarder('127.0.0.1', {
      allowLocalTargets: true,
      maxConnectionsPerRule: 1,
      maxUdpSessionsPerRule: 1,
      udpIdleMs: 60_000,
    });
    t.after(() => forwarder.close());
    await forwarder.apply([rule(1, port, [`127.0.0.1:${echo}`])]);
    const kept = connect({ host: '127.0.0.1', port });
    await once(kept, 'connect');
    kept.write('a');
    await once(kept, 'data');
    const extra = connect({ host: '127.0.0.1', port });
    extra.on('error', () => undefined);
    await once(extra, 'close');
    kept.write('b');
    assert.equal((await once(kept, 'data'))[0].toString(), 'b');
    kept.destroy();
  });

  test('a relayed TCP connection idle past the timeout is closed; one that keeps talking is not', async (t) => {
    const echo = await tcpEcho(t);
    const port = await freePort();
    // An idle time well above the talking connection's 100 ms gaps: a loaded machine stalls a test process for a few
    // hundred milliseconds now and then (300 ms once closed the talking one in CI).
    const forwarder = new Forwarder('127.0.0.1', { allowLocalTargets: true, tcpIdleMs: 800 });
    t.after(() => forwarder.close());
    await forwarder.apply([rule(1, port, [`127.0.0.1:${echo}`])]);
    const idle = connect({ host: '127.0.0.1', port });
    const busy = connect({ host: '127.0.0.1', port });
    await Promise.all([once(idle, 'connect'), once(busy, 'connect')]);
    const idleClosed = once(idle, 'close');
    for (let i = 0; i < 16; i++) {
      busy.write('.');
      await once(busy, 'data');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await idleClosed;
    assert.ok(!busy.destroyed, 'the talking connection lives on past the idle timeout');
    busy.destroy();
  });

  test(
    'one client address may hold only so many connections on a ' + 'rule; other addresses are not affected',
    async (t) => {
      const echo = await tcpEcho(t);
      const port = await freePort();
      const forwarder = new Forwarder('127.0.0.1', { allowLocalTargets: true, maxConnectionsPerSource: 2 });
      t.after(() => forwarder.close());
      await forwarder.apply([rule(1, port, [`127.0.0.1:${echo}`])]);
      const open = async (localAddress: string) => {
        const socket = connect({ host: '127.0.0.1', port, localAddress });
        socket.on('error', () => undefined);
        await once(socket, 'connect');
        socket.write('x');
        const answer = await Promise.race([
          once(socket, 'data').then(() => 'relayed'),
          once(socket, 'close').then(() => 'closed'),
        ]);
        t.after(() => socket.destroy());
        return answer;
      };
      assert.deepEqual(
        [await open('127.0.0.1'), await open('127.0.0.1'), await open('127.0.0.1')],
        ['relayed', 'relayed', 'closed'],
      );
      assert.equal(await open('127.0.0.2'), 'relayed', 'another source has its own allowance');
      forwarder.setLimits({ maxConnectionsPerSource: 3 });
      assert.equal(await open('127.0.0.1'), 'relayed', 'a new limit applies to the next connection');
    },
  );

  test("datagrams that arrive before a UDP session's upstream is connected are held only up to a bound", async (t) => {
    const echo = await udpEcho(t);
    const port = await freePort();
    const forwarder = new Forwarder('127.0.0.1', { allowLocalTargets: true });
    t.after(() => forwarder.close());
    await forwarder.apply([rule(1, port, [`localhost:${echo}`], { protocol: 'udp' })]);
    // Keep libuv's thread pool busy, so the upstream socket's lookup of "localhost", and so its connect, waits.
    const busy = Array.from(
      { length: 4 },
      () => new Promise((resolve) => scrypt('x', 'salt', 32, { N: 2 ** 17, r: 8, maxmem: 256 * 1024 * 1024 }, resolve)),
    );
    const client = createSocket('udp4');
    t.after(() => client.close());
    let echoed = 0;
    client.on('message', () => (echoed += 1));
    for (let i = 0; i < 200; i++) client.send(Buffer.alloc(100), port, '127.0.0.1');
    await Promise.all(busy);
    await until('the held datagrams to come back', () => echoed >= 64, 5000);
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(echoed, 64, 'the first 64 were held and relayed, the rest dropped as a full network would');
    assert.deepEqual(
      forwarder.drain(),
      [{ id: 1, bytes_in: 6400, bytes_out: 6400, refused: 0 }],
      'only what was relayed is counted',
    );
  });

  test(
    'by default the node dials nothing local to it: loopback, link-local, its own addresses, ' + 'names resolving so',
    async (t) => {
      const echo = await tcpEcho(t);
      const udp = await udpEcho(t);
      const forwarder = new Forwarder('127.0.0.1');
      t.after(() => forwarder.close());
      const [literal, named, udpPort, allowedLater] = await Promise.all([
        freePort(),
        freePort(),
        freePort(),
        freePort(),
      ]);
      const results = await forwarder.apply([
        rule(1, literal, [`127.0.0.1:${echo}`]),
        rule(2, named, [`localhost:${echo}`]),
        rule(3, udpPort, [`127.0.0.1:${udp}`], { protocol: 'udp' }),
        rule(4, allowedLater, [`127.0.0.1:${echo}`]),
      ]);
      assert.ok(
        results.every((r) => r.state === 'applied'),
        'the rules listen: what they may dial is judged per dial',
      );
      for (const port of [literal, named]) {
        const back = await roundTrip(port, Buffer.from('hello')).catch(() => Buffer.alloc(0));
        assert.equal(back.length, 0, `port ${port}: the client gets nothing from a local target`);
      }
      // A reply on loopback takes a millisecond: none within a second is none.
      await assert.rejects(
        udpRoundTrip(udpPort, ['ping'], '127.0.0.1', 1000),
        /timed out/,
        'no UDP session to a local target',
      );
      forwarder.setLimits({ allowLocalTargets: true });
      assert.equal((await roundTrip(allowedLater, Buffer.from('hello'))).toString(), 'hello', 'allowed, it dials');
    },
  );

  test(
    'one client address may hold only so many UDP sessions on a rule, whatever ports it uses; ' +
      'others are not affected',
    async (t) => {
      const udp = await udpEcho(t);
      const port = await freePort();
      const forwarder = new Forwarder('127.0.0.1', { allowLocalTargets: true, maxConnectionsPerSource: 2 });
      t.after(() => forwarder.close());
      await forwarder.apply([rule(1, port, [`127.0.0.1:${udp}`], { protocol: 'udp' })]);
      /** Sends a datagram from a socket of its own (a port of its own) on `address`; resolves whether a reply came. */
      const answered = async (address: string) => {
        const client = createSocket('udp4');
        await new Promise<void>((resolve) => client.bind(0, address, resolve));
        const reply = once(client, 'message').then(() => true);
        client.send('hi', port, '127.0.0.1');
        const result = await Promise.race([
          reply,
          new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 500)),
        ]);
        client.close();
        return result;
      };
      const fromOne = [];
      for (let i = 0; i < 4; i++) fromOne.push(await answered('127.0.0.1'));
      assert.deepEqual(fromOne, [true, true, false, false]);
      assert.equal(await answered('127.0.0.2'), true, 'another address has sessions of its own');
    },
  );

  test('TCP: bytes cross intact both ways while either side reads slowly, and are counted exactly', async (t) => {
    // The relay reads into buffers it writes from without a copy: a buffer reused while a write still held it would
    // show here as bytes changed in flight, in either direction.
    const toTarget = randomBytes(6 * 1024 * 1024);
    const toClient = randomBytes(6 * 1024 * 1024);
    const readSlowly = (socket: Socket, received: Buffer[]) => {
      socket.on('data', (chunk: Buffer) => {
        received.push(chunk);
        socket.pause();
        setTimeout(() => socket.resume(), 1);
      });
    };
    const atTarget: Buffer[] = [];
    const target = createServer({ allowHalfOpen: true }, (socket) => {
      readSlowly(socket, atTarget);
      socket.end(toClient);
    });
    target.listen(0, '127.0.0.1');
    await once(target, 'listening');
    t.after(() => target.close());
    const port = await freePort();
    const forwarder = new Forwarder('127.0.0.1', { allowLocalTargets: true });
    t.after(() => forwarder.close());
    await forwarder.apply([rule(1, port, [`127.0.0.1:${(target.address() as AddressInfo).port}`])]);
    const client = connect({ host: '127.0.0.1', port, allowHalfOpen: true });
    // Once both ends have ended the socket closes by itself, maybe before the test would listen for it.
    const closed = once(client, 'close');
    const atClient: Buffer[] = [];
    readSlowly(client, atClient);
    client.end(toTarget);
    await once(client, 'end');
    await until('the target to have it all', () => Buffer.concat(atTarget).length === toTarget.length);
    assert.ok(Buffer.concat(atTarget).equals(toTarget), 'what the target got is what the client sent');
    assert.ok(Buffer.concat(atClient).equals(toClient), 'what the client got is what the target sent');
    client.destroy();
    await closed;
    const counted = await countedOnce(forwarder, { bytes_in: toTarget.length, bytes_out: toClient.length });
    assert.deepEqual(counted, { id: 1, bytes_in: toTarget.length, bytes_out: toClient.length, refused: 0 });
  });

  const SHARED_READS =
    'TCP: connections passing small writes at once each deliver their own bytes, whole, while targets lag';
  test(SHARED_READS, async (t) => {
    // Reads under 16 KiB go into one buffer every connection shares. A write from it that the kernel cannot take at
    // once (its target has stopped reading) must not keep it: another connection's next read would change those bytes.
    const atTarget = new Map<string, Buffer[]>();
    const target = createServer((socket) => {
      const received: Buffer[] = [];
      socket.once('data', (first: Buffer) => atTarget.set(first.subarray(0, 8).toString('hex'), received));
      socket.on('data', (chunk: Buffer) => received.push(chunk));
      // Behind for a while, so that what the relay writes to it waits in the relay.
      socket.pause();
      setTimeout(() => socket.resume(), 300);
    });
    target.listen(0, '127.0.0.1');
    await once(target, 'listening');
    t.after(() => target.close());
    const port = await freePort();
    const forwarder = new Forwarder('127.0.0.1', { allowLocalTargets: true });
    t.after(() => forwarder.close());
    await forwarder.apply([rule(1, port, [`127.0.0.1:${(target.address() as AddressInfo).port}`])]);
    const client = async () => {
      const sent = randomBytes(12 * 1024 * 1024);
      const socket = connect({ host: '127.0.0.1', port });
      await once(socket, 'connect');
      // A write at a time, each read by the relay on its own (under 16 KiB), until the socket's buffers fill.
      for (let at = 0; at < sent.length;) {
        const size = 1 + Math.floor(Math.random() * 12_000);
        if (!socket.write(sent.subarray(at, at + size))) await once(socket, 'drain');
        else await new Promise((resolve) => setImmediate(resolve));
        at += size;
      }
      socket.end();
      await once(socket, 'close');
      const key = sent.subarray(0, 8).toString('hex');
      await until('the target to have it all', () => Buffer.concat(atTarget.get(key) ?? []).length >= sent.length);
      return Buffer.concat(atTarget.get(key)!).equals(sent);
    };
    const whole = await Promise.all(Array.from({ length: 4 }, client));
    assert.deepEqual(whole, Array(4).fill(true), 'each target got exactly what its client sent');
  });

  test("TCP: a socket's read buffer grows while a burst fills it, and is small again after the burst", async (t) => {
    // What a burst on each of many connections could otherwise make a node keep: a large buffer per quiet connection.
    const sinkServer = createServer((socket) => socket.resume());
    sinkServer.listen(0, '127.0.0.1');
    await once(sinkServer, 'listening');
    t.after(() => sinkServer.close());
    const sink = connect({ host: '127.0.0.1', port: (sinkServer.address() as AddressInfo).port });
    await once(sink, 'connect');
    t.after(() => sink.destroy());
    let relayed: Socket | undefined;
    const relay = createServer({ pauseOnConnect: true, allowHalfOpen: true }, (accepted) => {
      relayed = adopt(accepted);
      forward(relayed, sink);
    });
    relay.listen(0, '127.0.0.1');
    await once(relay, 'listening');
    t.after(() => relay.close());
    const client = connect({ host: '127.0.0.1', port: (relay.address() as AddressInfo).port });
    t.after(() => client.destroy());
    await once(client, 'connect');
    const relayedBytes = async (bytes: number) => until('the sink to have it', () => sink.bytesWritten >= bytes);
    // Each read is one write to the sink: its length is what the read took.
    const reads: number[] = [];
    const write = sink.write.bind(sink) as (chunk: Buffer, callback: () => void) => boolean;
    sink.write = ((chunk: Buffer, callback: () => void) => (reads.push(chunk.length), write(chunk, callback))) as never;
    client.write(Buffer.alloc(16 * 1024 * 1024, 1));
    await relayedBytes(16 * 1024 * 1024);
    assert.ok(
      Math.max(...reads) > 16 * 1024,
      `reads grew past 16 KiB while they filled the buffer (${Math.max(...reads)})`,
    );
    assert.ok(Math.max(...reads) <= 256 * 1024, 'and no further than 256 KiB');
    client.write('quiet now');
    await relayedBytes(16 * 1024 * 1024 + 9);
    assert.equal(readBufferBytes(relayed!), 16 * 1024, 'after a read that did not fill it');
  });

  test('a config of 150,000 rules that expire one day is applied (not one call of as many arguments)', async (t) => {
    const forwarder = new Forwarder('127.0.0.1');
    t.after(() => forwarder.close());
    // Through a tunnel this node is not the entry of: each fails at once, without a socket.
    const rules = Array.from({ length: 150_000 }, (_, i) =>
      rule(i + 1, 10_000, ['192.0.2.1:80'], { tunnel_id: 99, expires_at: '2099-01-01T00:00:00Z' }),
    );
    const results = await forwarder.apply(rules);
    assert.equal(results.length, rules.length);
    assert.ok(results.every((r) => r.error?.code === 'tunnel_missing'));
  });

  test("a PROXY protocol rule's health checks send a header saying there is no client, then hang up", async (t) => {
    // What each connection to the target began with, and whether it ended cleanly (not reset).
    const seen: { first: Buffer; reset: boolean }[] = [];
    const target = createServer((socket) => {
      const chunks: Buffer[] = [];
      let reset = false;
      socket.on('data', (chunk) => chunks.push(chunk));
      socket.on('error', () => (reset = true));
      socket.on('close', () => seen.push({ first: Buffer.concat(chunks), reset }));
    }).listen(0, '127.0.0.1');
    await once(target, 'listening');
    t.after(() => target.close());
    const at = `127.0.0.1:${(target.address() as AddressInfo).port}`;
    const forwarder = new Forwarder('127.0.0.1', { allowLocalTargets: true });
    t.after(() => forwarder.close());
    const check = { interval_seconds: 1, timeout_ms: 500, fall: 1, rise: 1 };
    for (const version of ['v1', 'v2'] as const) {
      seen.length = 0;
      await forwarder.apply([rule(1, await freePort(), [at], { proxy_protocol: version, health_check: check })]);
      await until(`a ${version} check to reach the target`, async () => seen.length > 0);
      const expected =
        version === 'v1'
          ? Buffer.from('PROXY UNKNOWN\r\n')
          : Buffer.from([
              0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a, 0x20, 0x00, 0x00, 0x00,
            ]);
      assert.deepEqual(seen[0], { first: expected, reset: false }, version);
      assert.equal(forwarder.healthReports()[0]!.targets[0]!.status, 'up');
    }
    // Without the protocol a check sends nothing.
    seen.length = 0;
    await forwarder.apply([rule(1, await freePort(), [at], { health_check: check })]);
    await until('a plain check to reach the target', async () => seen.length > 0);
    assert.equal(seen[0]!.first.length, 0);
  });

  const FAILED_LATE =
    'an upstream that fails after it connected ends its connection; the next target is not dialled for it';
  test(FAILED_LATE, async (t) => {
    const resetter = createServer((socket) => socket.once('data', () => socket.resetAndDestroy())).listen(
      0,
      '127.0.0.1',
    );
    let dialled = 0;
    const spare = createServer((socket) => {
      dialled++;
      socket.destroy();
    }).listen(0, '127.0.0.1');
    await Promise.all([once(resetter, 'listening'), once(spare, 'listening')]);
    t.after(() => resetter.close());
    t.after(() => spare.close());
    const at = (server: typeof spare) => `127.0.0.1:${(server.address() as AddressInfo).port}`;
    const port = await freePort();
    const forwarder = new Forwarder('127.0.0.1', { allowLocalTargets: true });
    t.after(() => forwarder.close());
    await forwarder.apply([rule(1, port, [at(resetter), at(spare)], { strategy: 'failover' })]);
    const client = connect({ host: '127.0.0.1', port });
    client.on('error', () => undefined);
    await once(client, 'connect');
    client.write('x');
    await once(client, 'close');
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(dialled, 0);
  });

  /** Servers on `count` consecutive ports from `first` that each answer with their own port and hang up. */
  async function tellingPorts(t: TestContext, first: number, count: number): Promise<void> {
    for (let port = first; port < first + count; port++) {
      const server = createServer((socket) => socket.end(String(port))).listen(port, '127.0.0.1');
      await once(server, 'listening');
      t.after(() => server.close());
    }
  }

  const RANGED =
    'a range on the relay: each port to the port at the same place of a range target, or all to a one-port target; ' +
    'counted into the one rule';

  test(RANGED, async (t) => {
    const targets = await freeSpan(3);
    await tellingPorts(t, targets, 3);
    const shifted = await freeSpan(3);
    const gathered = await freeSpan(3);
    const forwarder = new Forwarder('127.0.0.1', { allowLocalTargets: true });
    t.after(() => forwarder.close());
    const results = await forwarder.apply([
      rule(1, shifted, [`127.0.0.1:${targets}-${targets + 2}`], { listen_port_end: shifted + 2 }),
      rule(2, gathered, [`127.0.0.1:${targets + 1}`], { listen_port_end: gathered + 2 }),
    ]);
    assert.deepEqual(
      results.map((r) => r.state),
      ['applied', 'applied'],
    );
    const answers = [];
    for (const port of [shifted, shifted + 1, shifted + 2, gathered, gathered + 2])
      answers.push((await roundTrip(port, Buffer.alloc(0))).toString());
    assert.deepEqual(answers, [targets, targets + 1, targets + 2, targets + 1, targets + 1].map(String));
    // Five answers of five digits: three through rule 1's ports, two through rule 2's.
    const out = new Map<number, number>();
    await until('the answers counted', () => {
      for (const { id, bytes_out } of forwarder.drain()) out.set(id, (out.get(id) ?? 0) + bytes_out);
      return out.get(1) === 15 && out.get(2) === 10;
    });
  });

  const CLASHING =
    "a config whose ranges overlap fails the later rule (port_in_use), a range wider than the relay's fails where " +
    'the kernel cannot carry it, and a range no master would send fails alone';

  test(CLASHING, async (t) => {
    const first = await freeSpan(10);
    const forwarder = new Forwarder('127.0.0.1', { allowLocalTargets: true });
    t.after(() => forwarder.close());
    const results = await forwarder.apply([
      rule(1, first, ['127.0.0.1:9'], { listen_port_end: first + 5 }),
      rule(2, first + 5, ['127.0.0.1:9'], { listen_port_end: first + 9 }),
      rule(3, 40_000, ['127.0.0.1:9'], { listen_port_end: 41_000 }),
      // What the master refuses, from a master that sent it all the same: that rule fails, and it alone.
      rule(4, 42_010, ['127.0.0.1:9'], { listen_port_end: 42_000 }),
      rule(5, 42_020, ['127.0.0.1:9-10'], { listen_port_end: 42_029 }),
    ]);
    assert.deepEqual(
      results.slice(3).map((r) => [r.error?.code, r.error?.detail]),
      [
        ['listen_failed', 'listen_port_end is below listen_port'],
        ['listen_failed', "targets covers 2 ports and the rule 10: a range target has one port for each of the rule's"],
      ],
    );
    assert.equal(results[0]!.state, 'applied');
    assert.equal(results[1]!.error?.code, 'port_in_use');
    assert.match(results[1]!.error!.detail, new RegExp(`overlap rule 1's \\(${first}-${first + 5}\\)`));
    assert.equal(results[2]!.error?.code, 'kernel_unsupported');
    assert.match(results[2]!.error!.detail, /1,001 ports are the kernel's alone .* user space only/);
  });

  const ANY_ORDER =
    'TCP: connections that end in any order leave the relay carrying exactly those still open, each byte counted once';

  test(ANY_ORDER, async (t) => {
    const echo = await tcpEcho(t);
    const limits = { ...DEFAULT_LIMITS, allowLocalTargets: true };
    const picker = new TargetPicker([{ host: '127.0.0.1', port: echo }], 'round_robin');
    const relay = new TcpRelay(dialTargets(picker, limits), limits, new Gate(NO_CONTROLS));
    await relay.listen('127.0.0.1', 0);
    t.after(() => relay.close());
    const port = (relay as unknown as { server: { address(): AddressInfo } }).server.address().port;
    // Twelve connections, each echoing a message of its own length; they close in an order that is not the opening's.
    const sockets: Socket[] = [];
    t.after(() => sockets.forEach((socket) => socket.destroy()));
    let sent = 0;
    for (let i = 1; i <= 12; i++) {
      const socket = connect({ host: '127.0.0.1', port });
      socket.on('error', () => undefined);
      await once(socket, 'connect');
      socket.write(Buffer.alloc(i * 100, i));
      sent += i * 100;
      let echoed = 0;
      await new Promise<void>((resolve) =>
        socket.on('data', (chunk: Buffer) => (echoed += chunk.length) >= i * 100 && resolve()),
      );
      sockets.push(socket);
    }
    assert.equal(relay.carrying, 12);
    const counted = relay.drain();
    assert.deepEqual(counted, { bytes_in: sent, bytes_out: sent }, 'the bytes of connections still open');
    const order = [4, 0, 11, 7, 5, 1, 10, 2, 9, 3, 8, 6];
    for (const [n, i] of order.entries()) {
      sockets[i]!.end();
      await until(`${n + 1} closed`, () => relay.carrying === 11 - n);
      assert.deepEqual(relay.drain(), { bytes_in: 0, bytes_out: 0 }, 'nothing counted twice');
      // Each still open is still counted while open: what it moves now is in the next drain.
      for (const open of order.slice(n + 1)) {
        sockets[open]!.write('seven b');
        await once(sockets[open]!, 'data');
      }
      const moved = 7 * (11 - n);
      assert.deepEqual(relay.drain(), { bytes_in: moved, bytes_out: moved }, `after ${n + 1} closed`);
    }
  });
});
