// Network namespaces for tests that need "hosts" of their own: made by the test, joined by veth pairs, removed after.

import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import type { TestContext } from 'node:test';

export function ip(...args: string[]): string {
  return execFileSync('ip', args, { stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8' });
}

/** Why namespaces cannot be made here (not root, no `ip netns`), or null when they can. */
export function netnsUnavailable(probeName: string): string | null {
  if (process.getuid?.() !== 0) return 'network namespaces need root';
  try {
    ip('netns', 'add', probeName);
    ip('netns', 'del', probeName);
    return null;
  } catch (error) {
    return `ip netns is unavailable: ${(error as Error).message.split('\n')[0]}`;
  }
}

/** Makes namespaces with their loopback up; they are deleted after the test. */
export function namespaces(t: TestContext, names: string[]): void {
  t.after(() => {
    for (const ns of names) {
      try {
        ip('netns', 'del', ns);
      } catch {
        // already gone
      }
    }
  });
  for (const ns of names) {
    ip('netns', 'add', ns);
    ip('netns', 'exec', ns, 'ip', 'link', 'set', 'lo', 'up');
  }
}

/** A veth pair from `a` (in namespace `aNs`, or this one when null) to `b` in `bNs`, each with its address, up. */
export function veth(a: string, aNs: string | null, aAddr: string, b: string, bNs: string, bAddr: string): void {
  const inNs = (ns: string | null, ...args: string[]) => (ns ? ip('netns', 'exec', ns, 'ip', ...args) : ip(...args));
  ip('link', 'add', a, 'type', 'veth', 'peer', 'name', b);
  if (aNs) ip('link', 'set', a, 'netns', aNs);
  ip('link', 'set', b, 'netns', bNs);
  inNs(aNs, 'addr', 'add', aAddr, 'dev', a);
  inNs(aNs, 'link', 'set', a, 'up');
  inNs(bNs, 'addr', 'add', bAddr, 'dev', b);
  inNs(bNs, 'link', 'set', b, 'up');
}

/** TCP and UDP echo on `port` (default 7007) of `address` in namespace `ns`, until the test ends. */
export async function echoIn(t: TestContext, ns: string, address: string, port = 7007): Promise<void> {
  const script = `
    import { createServer } from 'node:net';
    import { createSocket } from 'node:dgram';
    // A connection reset (a quota spent, a port closed) ends that connection, not the echo.
    const echo = (s) => s.on('error', () => s.destroy()).pipe(s);
    createServer({ allowHalfOpen: true }, echo).listen(${port}, '${address}');
    const udp = createSocket('${address.includes(':') ? 'udp6' : 'udp4'}');
    udp.on('message', (m, from) => udp.send(m, from.port, from.address));
    udp.bind(${port}, '${address}', () => console.log('ready'));`;
  const child = spawn('ip', ['netns', 'exec', ns, process.execPath, '--input-type=module', '-e', script], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  t.after(() => child.kill('SIGKILL'));
  await once(child.stdout!, 'data');
}

/** Runs nft in namespace `ns`: its exit code and what it printed. */
export function nftIn(ns: string, ...args: string[]): { code: number; out: string } {
  const run = spawnSync('ip', ['netns', 'exec', ns, 'nft', ...args], { encoding: 'utf8' });
  return { code: run.status ?? -1, out: `${run.stdout}${run.stderr}` };
}

/** Runs a Node.js module script in `ns`; resolves with what it printed once it exits. */
export async function runIn(ns: string, script: string, ...args: string[]): Promise<string> {
  const child = spawn('ip', ['netns', 'exec', ns, process.execPath, '--input-type=module', '-e', script, ...args], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (out += chunk));
  // 'close': what it printed may still be on its way when it has exited.
  const [code] = await once(child, 'close');
  if (code !== 0) throw new Error(`script in ${ns} exited ${code}: ${out}`);
  return out.trim();
}

/** Why nftables cannot be used in a namespace here (see netnsUnavailable; nft missing or refused), or null. */
export function nftUnavailable(probeName: string): string | null {
  const namespacesOut = netnsUnavailable(probeName);
  if (namespacesOut) return namespacesOut;
  if (spawnSync('nft', ['--version']).status !== 0) return 'nft is not installed (Debian package nftables)';
  ip('netns', 'add', probeName);
  const probe = spawnSync('ip', ['netns', 'exec', probeName, 'nft', 'list', 'tables'], { encoding: 'utf8' });
  ip('netns', 'del', probeName);
  return probe.status === 0 ? null : `nftables does not answer in a namespace: ${probe.stderr.split('\n')[0]}`;
}

/** Three "hosts" joined through the middle one, and the names and addresses a test reaches them by. */
export interface ThreeHosts {
  client: string;
  node: string;
  target: string;
  /** The node's address on the client's side, and the target's on the node's. */
  nodeAddress: string;
  targetAddress: string;
  /** This namespace's end of its link to the node (where the node's agent dials the master). */
  hostAddress: string;
}

/**
 * A client, a node and a target (namespaces named from `prefix`), in `10.<net>.0.0/16`: this namespace and the node at
 * .1.1 and .1.2, the client and the node at .2.1 and .2.2, the node and the target at .3.1 and .3.2. The client's
 * default route goes through the node, which forwards IPv4; the target has no route back to the client, so a reply
 * that arrives came back through the node's source NAT.
 */
export function threeHosts(t: TestContext, prefix: string, net: number): ThreeHosts {
  const [client, node, target] = ['c', 'n', 't'].map((end) => `${prefix}${end}`) as [string, string, string];
  const at = (subnet: number, host: number) => `10.${net}.${subnet}.${host}`;
  namespaces(t, [client, node, target]);
  // The host's end of the previous test's link goes some time after its namespace: take it now.
  try {
    ip('link', 'del', `${node}h`);
  } catch {
    // there was none
  }
  veth(`${node}h`, null, `${at(1, 1)}/30`, `${node}m`, node, `${at(1, 2)}/30`);
  veth(`${client}n`, client, `${at(2, 1)}/24`, `${node}c`, node, `${at(2, 2)}/24`);
  veth(`${node}t`, node, `${at(3, 1)}/24`, `${target}n`, target, `${at(3, 2)}/24`);
  ip('netns', 'exec', client, 'ip', 'route', 'add', 'default', 'via', at(2, 2));
  ip('netns', 'exec', node, 'sysctl', '-qw', 'net.ipv4.ip_forward=1');
  return { client, node, target, nodeAddress: at(2, 2), targetAddress: at(3, 2), hostAddress: at(1, 1) };
}

/** Sends `bytes` to HOST:PORT over TCP from the client and prints how many came back (all, or it fails). */
export const TCP_ROUND_TRIP = `
  import { connect } from 'node:net';
  const [host, port, bytes] = process.argv.slice(1);
  const payload = Buffer.alloc(Number(bytes), 7);
  const socket = connect(Number(port), host, () => socket.end(payload));
  let got = 0;
  socket.on('data', (chunk) => (got += chunk.length));
  socket.on('end', () => { console.log(got); process.exit(got === payload.length ? 0 : 1); });
  socket.on('error', (error) => { console.log(error.message); process.exit(1); });
  setTimeout(() => { console.log('timed out at', got); process.exit(1); }, 10000);`;

/** Sends datagrams to HOST:PORT from the client and prints how many were echoed. */
export const UDP_ROUND_TRIP = `
  import { createSocket } from 'node:dgram';
  const [host, port, count] = process.argv.slice(1);
  const socket = createSocket('udp4');
  let got = 0;
  socket.on('message', () => { if (++got === Number(count)) { console.log(got); process.exit(0); } });
  for (let i = 0; i < Number(count); i++) socket.send(Buffer.alloc(100, i), Number(port), host);
  setTimeout(() => { console.log(got); process.exit(1); }, 5000);`;
