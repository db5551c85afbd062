// Real etcd for the election's tests: a cluster of members on loopback (Debian's etcd-server), each a process of its
// own that a test can kill and start again; and a user-space proxy in front of a member, which a test closes to cut
// one master from etcd while the others still reach it.

import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { freePort, until } from './net.ts';

/** Why etcd tests cannot run here; null when they can. */
export function etcdMissing(): string | null {
  const found = spawnSync('etcd', ['--version'], { encoding: 'utf8' });
  return found.status === 0 ? null : 'etcd is not installed (Debian: apt-get install etcd-server)';
}

export interface EtcdCluster {
  /** Each member's client address, http://127.0.0.1:PORT. */
  endpoints: string[];
  /** SIGKILLs member `i`. */
  kill(i: number): void;
  /** Starts member `i` again on its data. */
  revive(i: number): Promise<void>;
}

export async function etcdCluster(t: TestContext, size = 3): Promise<EtcdCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'portplane-etcd-'));
  const members: { name: string; client: number; peer: number }[] = [];
  for (let i = 0; i < size; i++) members.push({ name: `m${i}`, client: await freePort(), peer: await freePort() });
  const initial = members.map((m) => `${m.name}=http://127.0.0.1:${m.peer}`).join(',');
  const children: (ChildProcess | null)[] = members.map(() => null);
  const endpoints = members.map((m) => `http://127.0.0.1:${m.client}`);
  const startMember = (i: number) => {
    const m = members[i]!;
    const child = spawn(
      'etcd',
      [
        `--name=${m.name}`,
        `--data-dir=${join(dir, m.name)}`,
        `--listen-client-urls=${endpoints[i]}`,
        `--advertise-client-urls=${endpoints[i]}`,
        `--listen-peer-urls=http://127.0.0.1:${m.peer}`,
        `--initial-advertise-peer-urls=http://127.0.0.1:${m.peer}`,
        `--initial-cluster=${initial}`,
        '--initial-cluster-state=new',
        '--initial-cluster-token=portplane-test',
        // Quicker than the defaults across a WAN (100 ms, 1 s), as loopback allows.
        '--heartbeat-interval=50',
        '--election-timeout=500',
      ],
      { stdio: 'ignore' },
    );
    children[i] = child;
  };
  const healthy = async (i: number) => {
    try {
      const answer = await fetch(`${endpoints[i]}/health`);
      return answer.ok && ((await answer.json()) as { health: string }).health === 'true';
    } catch {
      return false;
    }
  };
  for (let i = 0; i < size; i++) startMember(i);
  t.after(() => {
    for (const child of children) child?.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });
  for (let i = 0; i < size; i++) await until(`etcd member ${i} healthy`, () => healthy(i), 30_000);
  return {
    endpoints,
    kill(i) {
      children[i]?.kill('SIGKILL');
      children[i] = null;
    },
    async revive(i) {
      startMember(i);
      await until(`etcd member ${i} healthy again`, () => healthy(i), 30_000);
    },
  };
}

/** A TCP proxy on loopback to `target`; `cut` closes it and every connection through it, `mend` opens it again. */
export async function etcdProxy(t: TestContext, target: string): Promise<{ url: string; cut(): void; mend(): void }> {
  const { hostname, port } = new URL(target);
  const sockets = new Set<Socket>();
  const listenPort = await freePort();
  let server: Server | null = null;
  const open = async () => {
    server = createServer((client) => {
      const upstream = connect(Number(port), hostname);
      for (const socket of [client, upstream]) {
        sockets.add(socket);
        socket.on('close', () => sockets.delete(socket));
        socket.on('error', () => {
          client.destroy();
          upstream.destroy();
        });
      }
      client.pipe(upstream).pipe(client);
    }).listen(listenPort, '127.0.0.1');
    await once(server, 'listening');
  };
  await open();
  const cut = () => {
    server?.close();
    server = null;
    for (const socket of sockets) socket.destroy();
  };
  t.after(cut);
  return { url: `http://127.0.0.1:${listenPort}`, cut, mend: () => void open() };
}
