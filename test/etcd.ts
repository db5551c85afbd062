// Real etcd for the election's tests: a cluster of members on loopback (Debian's etcd-server), each a process of its
// own that a test can kill and start again; and a user-space proxy in front of a member, which a test closes to cut
// one master from etcd while the others still reach it.

import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { get as httpGet } from 'node:http';
import { get as httpsGet } from 'node:https';
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

/** Files of a CA and of the certificates it signs for etcd (the server, 127.0.0.1) and for its client. */
export interface EtcdCertificates {
  ca: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
}

/** A throwaway CA and what it signs, made by openssl in `dir`. */
export function etcdCertificates(dir: string): EtcdCertificates {
  const run = (...args: string[]) => {
    const made = spawnSync('openssl', args, { cwd: dir, encoding: 'utf8' });
    if (made.status !== 0) throw new Error(`openssl ${args[0]}: ${made.stderr}`);
  };
  const key = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  run('req', '-x509', ...key, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=portplane test CA');
  for (const [name, usage] of [
    // etcd's JSON gateway dials its own gRPC with the server's certificate: it must be a client's too.
    ['server', 'serverAuth,clientAuth'],
    ['client', 'clientAuth'],
  ] as const) {
    writeFileSync(join(dir, `${name}.ext`), `subjectAltName=IP:127.0.0.1\nextendedKeyUsage=${usage}\n`);
    run('req', ...key, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`);
    const sign = ['-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '2'];
    run('x509', '-req', ...sign, '-extfile', `${name}.ext`, '-out', `${name}.pem`);
  }
  const at = (file: string) => join(dir, file);
  return {
    ca: at('ca.pem'),
    serverCert: at('server.pem'),
    serverKey: at('server.key'),
    clientCert: at('client.pem'),
    clientKey: at('client.key'),
  };
}

/** `size` members of a new cluster; with `tls`, clients must show a certificate its CA signed. */
export async function etcdCluster(
  t: Pick<TestContext, 'after'>,
  size = 3,
  tls: EtcdCertificates | null = null,
): Promise<EtcdCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'portplane-etcd-'));
  const members: { name: string; client: number; peer: number }[] = [];
  for (let i = 0; i < size; i++) members.push({ name: `m${i}`, client: await freePort(), peer: await freePort() });
  const initial = members.map((m) => `${m.name}=http://127.0.0.1:${m.peer}`).join(',');
  const children: (ChildProcess | null)[] = members.map(() => null);
  const scheme = tls ? 'https' : 'http';
  const endpoints = members.map((m) => `${scheme}://127.0.0.1:${m.client}`);
  // Clients must show a certificate the CA signed (--client-cert-auth); members speak to each other in the clear.
  const secured = tls
    ? [
        `--cert-file=${tls.serverCert}`,
        `--key-file=${tls.serverKey}`,
        `--trusted-ca-file=${tls.ca}`,
        '--client-cert-auth',
      ]
    : [];
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
        ...secured,
      ],
      { stdio: 'ignore' },
    );
    children[i] = child;
  };
  const healthy = (i: number) =>
    new Promise<boolean>((resolve) => {
      const options = tls
        ? { ca: readFileSync(tls.ca), cert: readFileSync(tls.clientCert), key: readFileSync(tls.clientKey) }
        : {};
      const req = (tls ? httpsGet : httpGet)(`${endpoints[i]}/health`, { ...options, timeout: 2000 }, (res) => {
        let body = '';
        res.setEncoding('utf8').on('data', (chunk: string) => (body += chunk));
        res.on('end', () => resolve(res.statusCode === 200 && /"health":"true"/.test(body)));
      });
      req.on('timeout', () => req.destroy());
      req.on('error', () => resolve(false));
    });
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
