// The data-plane load generator and sinks, run pinned to its own CPU. Modes:
//   sink                         TCP sink (counts and discards) and UDP sink; prints their ports
//   tcp PORT STREAMS BYTES       STREAMS connections each send BYTES; prints MiB/s
//   connrate PORT SECONDS CONC   connect, send 1 byte, get it back, close, for SECONDS; prints per second
//   udp PORT RATE SECONDS SIZE   sends RATE datagrams/s; prints sent and received (the sink echoes)
// Results are one JSON line on stdout. BENCH_HOST is where the load goes and the sink listens (default 127.0.0.1; the
// kernel-path rows run these in namespaces of their own, where the sink listens on every address).

import { createSocket } from 'node:dgram';
import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';

/** The load's own UDP sockets (generator and echo) get room for bursts, so that they are not what drops. */
const LOAD_BUFFER_BYTES = 4 * 1024 * 1024;

const [mode, ...args] = process.argv.slice(2);
const HOST = process.env.BENCH_HOST ?? '127.0.0.1';
const LOCAL = HOST === '127.0.0.1' ? '127.0.0.1' : '0.0.0.0';
const print = (value: object) => console.log(JSON.stringify(value));

async function sink(): Promise<void> {
  const handle = (socket: Socket) => {
    socket.on('data', (chunk) => {
      // One-byte messages are echoed (connection-rate probes); bulk data is discarded.
      if (chunk.length === 1) socket.write(chunk);
    });
    socket.on('error', () => socket.destroy());
  };
  // BENCH_SINK_PORT: the port (0: any), or several, comma-separated: one process behind them all, so that a load
  // spread over them costs the target what the same load to one of them does.
  const [first, ...more] = (process.env.BENCH_SINK_PORT ?? '0').split(',').map(Number);
  const tcp = createServer(handle).listen(first, LOCAL);
  await once(tcp, 'listening');
  tcp.on('error', (error) => print({ msg: 'sink error', error: error.message }));
  for (const port of more) {
    const extra = createServer(handle).listen(port, LOCAL);
    await once(extra, 'listening');
  }
  const udp = createSocket({ type: 'udp4', recvBufferSize: LOAD_BUFFER_BYTES });
  // A reply to a client that has gone is an ICMP error, not a reason to stop.
  udp.on('error', () => undefined);
  udp.on('message', (message, from) => udp.send(message, from.port, from.address));
  udp.bind(first, LOCAL);
  await once(udp, 'listening');
  print({ msg: 'sink', tcp: (tcp.address() as AddressInfo).port, udp: udp.address().port });
}

async function tcpStreams(port: number, streams: number, bytes: number): Promise<void> {
  const chunk = Buffer.alloc(256 * 1024, 1);
  const started = performance.now();
  let delivered = 0;
  let failed = 0;
  // Where each stream stands: a stream whose promise never settles although no socket is left (Node's "unsettled
  // top-level await"; see the resume() below for the one way found) counts as failed, with its stage reported, instead
  // of the generator dying without a result.
  const stages = new Map<number, string>();
  const report = () => {
    const stuck = [...stages.values()];
    const seconds = (performance.now() - started) / 1000;
    print({ msg: 'tcp', mib_per_s: delivered / 1024 / 1024 / seconds, seconds, failed: failed + stuck.length, stuck });
  };
  process.once('beforeExit', () => {
    if (stages.size > 0) report();
  });
  await Promise.all(
    Array.from({ length: streams }, async (_, index) => {
      const stage = (name: string) => stages.set(index, name);
      stage('connecting');
      const socket = connect({ host: HOST, port });
      // Whatever comes back is read and dropped. The sink echoes a chunk that arrives as one byte (its connection-rate
      // probe), which through a tunnel now and then a chunk of a stream does; left unread, that byte held back the
      // relay's close ('end' waits for buffered data to be read), so the socket never closed and the run through the
      // tunnel died with this stream waiting for its close.
      socket.resume();
      // Listened for from the start: a relay that closes right after accepting could otherwise close the socket
      // before the listener is there, leaving this stream waiting on nothing.
      const closed = once(socket, 'close').then(
        () => undefined,
        () => undefined,
      );
      try {
        // A socket closed without an error before it connected would leave this waiting on nothing.
        await Promise.race([
          once(socket, 'connect'),
          closed.then(() => Promise.reject(new Error('closed before it connected'))),
        ]);
        let sent = 0;
        while (sent < bytes) {
          sent += chunk.length;
          stage('writing');
          // A relay that drops the connection mid-write must count as a failure, not hang the run.
          if (!socket.write(chunk)) {
            stage('waiting for drain');
            await Promise.race([once(socket, 'drain'), closed]);
          }
          if (socket.destroyed) throw new Error('the relay closed the connection');
        }
        stage('waiting for close');
        socket.end();
        await closed;
        delivered += bytes;
      } catch {
        // A reset stream counts as failed; only delivered bytes count towards throughput.
        failed += 1;
        socket.destroy();
      }
      stages.delete(index);
    }),
  );
  report();
}

async function connRate(port: number, seconds: number, concurrency: number): Promise<void> {
  const end = performance.now() + seconds * 1000;
  let done = 0;
  let failed = 0;
  const one = () =>
    new Promise<void>((resolve) => {
      const socket = connect({ host: HOST, port }, () => socket.write('x'));
      let answered = false;
      socket.once('data', () => {
        answered = true;
        done += 1;
        socket.destroy();
      });
      socket.on('error', () => undefined);
      // A connection closed without an answer (refused, or reset by a relay) is a failure.
      socket.once('close', () => {
        if (!answered) failed += 1;
        resolve();
      });
    });
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end) await one();
    }),
  );
  print({ msg: 'connrate', per_second: done / seconds, failed });
}

async function udpRate(port: number, rate: number, seconds: number, size: number): Promise<void> {
  const socket = createSocket({ type: 'udp4', recvBufferSize: LOAD_BUFFER_BYTES });
  socket.on('error', () => undefined);
  let received = 0;
  socket.on('message', () => (received += 1));
  socket.bind(0, LOCAL);
  await once(socket, 'listening');
  const payload = Buffer.alloc(size, 7);
  const total = rate * seconds;
  const perTick = rate / 1000;
  let sent = 0;
  const started = performance.now();
  while (sent < total) {
    const due = Math.min(total, Math.floor(((performance.now() - started) / 1000) * rate) + perTick);
    while (sent < due) {
      socket.send(payload, port, HOST);
      sent += 1;
    }
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
  await new Promise((resolve) => setTimeout(resolve, 500));
  socket.close();
  print({
    msg: 'udp',
    sent,
    received,
    loss: 1 - received / sent,
    offered_pps: sent / ((performance.now() - started - 500) / 1000),
  });
}

if (mode === 'sink') await sink();
else if (mode === 'tcp') await tcpStreams(Number(args[0]), Number(args[1]), Number(args[2]));
else if (mode === 'connrate') await connRate(Number(args[0]), Number(args[1]), Number(args[2]));
else if (mode === 'udp') await udpRate(Number(args[0]), Number(args[1]), Number(args[2]), Number(args[3]));
else throw new Error(`unknown mode ${mode}`);
