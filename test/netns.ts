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
  const [code] = await once(child, 'exit');
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
