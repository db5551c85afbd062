// Three "hosts" for the kernel-path rows: a client, the node and a target, each a network namespace, joined by veth
// pairs (client <-> node <-> target), plus a link from this namespace to the node for its agent. Made at the start of
// the part and removed at its end (and at exit, whatever happens).

import { execFileSync, spawnSync } from 'node:child_process';
import { veth } from '../test/netns.ts';

const tag = `${process.pid % 10_000}`;
export const CLIENT = `pb${tag}c`;
export const NODE = `pb${tag}n`;
export const TARGET = `pb${tag}t`;
export const HOST_SIDE = '10.215.1.1';
export const NODE_ADDRESS = '10.215.2.2';
export const TARGET_ADDRESS = '10.215.3.2';

function ip(...args: string[]): void {
  execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}

export function removeLab(): void {
  for (const ns of [CLIENT, NODE, TARGET]) spawnSync('ip', ['netns', 'del', ns], { stdio: 'ignore' });
  spawnSync('ip', ['link', 'del', `${NODE}h`], { stdio: 'ignore' });
}

/** Why the lab cannot be made here, or null once it is made. */
export function makeLab(): string | null {
  if (process.getuid?.() !== 0) return 'needs root (network namespaces, nftables)';
  for (const tool of ['nft', 'iperf3', 'haproxy'])
    if (spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0) return `needs ${tool} (Debian package)`;
  removeLab();
  process.on('exit', removeLab);
  try {
    for (const ns of [CLIENT, NODE, TARGET]) {
      ip('netns', 'add', ns);
      ip('netns', 'exec', ns, 'ip', 'link', 'set', 'lo', 'up');
    }
    veth(`${NODE}h`, null, `${HOST_SIDE}/30`, `${NODE}m`, NODE, '10.215.1.2/30');
    veth(`${CLIENT}n`, CLIENT, '10.215.2.1/24', `${NODE}c`, NODE, `${NODE_ADDRESS}/24`);
    veth(`${NODE}t`, NODE, '10.215.3.1/24', `${TARGET}n`, TARGET, `${TARGET_ADDRESS}/24`);
    ip('netns', 'exec', CLIENT, 'ip', 'route', 'add', 'default', 'via', NODE_ADDRESS);
    // The target routes back through the node too, so that the node can also be measured as a plain router.
    ip('netns', 'exec', TARGET, 'ip', 'route', 'add', 'default', 'via', '10.215.3.1');
    ip('netns', 'exec', NODE, 'sysctl', '-qw', 'net.ipv4.ip_forward=1');
    // Connection-rate rows open tens of thousands of connections from the client and from the node (the relay's and
    // HAProxy's own): with the default port range and no reuse of TIME_WAIT ports, whichever way ran third found its
    // ports taken and measured a tenth of its rate.
    for (const ns of [CLIENT, NODE, TARGET])
      ip('netns', 'exec', ns, 'sysctl', '-qw', 'net.ipv4.tcp_tw_reuse=1', 'net.ipv4.ip_local_port_range=1024 65000');
    // And conntrack keeps a closed connection 120 s (TIME_WAIT): a row following another measured the table the
    // earlier one filled (the same kernel rule fell from 8,000 connections a second to 6,600 within a minute). A
    // second, here, so that each row meets an empty table, as the router it is compared with does.
    ip('netns', 'exec', NODE, 'sysctl', '-qw', 'net.netfilter.nf_conntrack_tcp_timeout_time_wait=1');
    return null;
  } catch (error) {
    removeLab();
    return `could not make the namespaces: ${(error as Error).message.split('\n')[0]}`;
  }
}

/** argv run inside namespace `ns`. */
export function within(ns: string, argv: string[]): string[] {
  return ['ip', 'netns', 'exec', ns, ...argv];
}
