// The agent's hands on nftables: whether this node can forward in the kernel (and why not), applying the table as
// one transaction, reading its counters, removing it. Only the `nft` program is run, with arguments and a script
// this module writes from checked numbers and addresses; nothing reaches a shell.

import { spawn } from 'node:child_process';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import {
  counterOf,
  flowtableDevices,
  isAgentTable,
  planScript,
  type Held,
  type Outline,
  type TablePlan,
} from './ruleset.ts';

/** CAP_NET_ADMIN, the capability nftables asks of whoever changes a table. */
const CAP_NET_ADMIN = 12n;
const NFT_TIMEOUT_MS = 10_000;

export type KernelAvailability =
  | { available: true; ipv6: boolean; /** See flowtableDevices. */ flowOffload: string[] }
  | { available: false; reason: string };

export interface Counts {
  bytes_in: number;
  bytes_out: number;
  /** Clients refused by the rule's sources (packets: TCP connections, UDP datagrams); absent without the counter. */
  refused?: number;
}

function run(args: string[], input?: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn('nft', args, { stdio: ['pipe', 'pipe', 'pipe'], timeout: NFT_TIMEOUT_MS });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.on('error', (error: NodeJS.ErrnoException) =>
      resolve({ code: -1, stdout, stderr: error.code === 'ENOENT' ? 'nft is not installed' : error.message }),
    );
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
    child.stdin.on('error', () => undefined);
    child.stdin.end(input ?? '');
  });
}

async function sysctl(path: string): Promise<string | null> {
  try {
    return (await readFile(path, 'utf8')).trim();
  } catch {
    return null;
  }
}

/** Whether this process holds CAP_NET_ADMIN (root has it; so may a service given AmbientCapabilities). */
async function hasNetAdmin(): Promise<boolean> {
  const status = await sysctl('/proc/self/status');
  const effective = status && /^CapEff:\s*([0-9a-f]+)$/m.exec(status)?.[1];
  return effective ? ((BigInt(`0x${effective}`) >> CAP_NET_ADMIN) & 1n) === 1n : false;
}

/** Why the kernel path cannot be used here, or that it can (and whether for IPv6 too). */
export async function kernelAvailability(): Promise<KernelAvailability> {
  if (process.platform !== 'linux') return { available: false, reason: 'nftables is Linux only' };
  if (!(await hasNetAdmin()))
    return { available: false, reason: 'the agent lacks CAP_NET_ADMIN (run it as root, or give it the capability)' };
  // A listing of flowtables: as much a sign that nft answers as any, and cheap where a table holds 10,000 rules (a
  // `list tables` reads the whole ruleset, 180 ms); the tables where a kernel would not list flowtables.
  const flowtables = await run(['-j', 'list', 'flowtables']);
  const listed = flowtables.code === 0 ? flowtables : await run(['list', 'tables']);
  if (listed.code !== 0) return { available: false, reason: `nft does not answer: ${firstLine(listed.stderr)}` };
  if ((await sysctl('/proc/sys/net/ipv4/ip_forward')) !== '1')
    return { available: false, reason: 'IPv4 forwarding is off (sysctl net.ipv4.ip_forward=1)' };
  return {
    available: true,
    ipv6: (await sysctl('/proc/sys/net/ipv6/conf/all/forwarding')) === '1',
    flowOffload: flowtables.code === 0 ? flowtableDevices(flowtables.stdout) : [],
  };
}

/**
 * With IPv6 forwarding on, Linux ignores router advertisements on an interface whose accept_ra is 1, so a node that
 * takes its IPv6 address and default route from them (SLAAC, as cloud VMs do) loses its route when the router's
 * lifetime runs out. Such interfaces are set to 2, which accepts them while forwarding; 0 (never) is left as it is.
 * Returns the interfaces changed. What cannot be read or written is left alone.
 */
export async function keepRouterAdvertisements(): Promise<string[]> {
  if ((await sysctl('/proc/sys/net/ipv6/conf/all/forwarding')) !== '1') return [];
  let names: string[];
  try {
    names = await readdir('/proc/sys/net/ipv6/conf');
  } catch {
    return [];
  }
  const changed: string[] = [];
  for (const name of names) {
    if (name === 'all' || name === 'lo') continue;
    const path = `/proc/sys/net/ipv6/conf/${name}/accept_ra`;
    if ((await sysctl(path)) !== '1') continue;
    try {
      await writeFile(path, '2');
      changed.push(name);
    } catch {
      // Not ours to change here (a read-only /proc/sys in a container): the operator's to set.
    }
  }
  return changed;
}

function firstLine(text: string): string {
  return (
    text
      .split('\n')
      .find((line) => line.trim() !== '')
      ?.trim()
      .slice(0, 300) ?? 'no reason given'
  );
}

/** The devices flowtables offload connections on, whoever's they are (see flowtableDevices); none when nft fails. */
export async function flowOffloadDevices(): Promise<string[]> {
  const listed = await run(['-j', 'list', 'flowtables']);
  return listed.code === 0 ? flowtableDevices(listed.stdout) : [];
}

/** The counters of `table` by rule id, or null when there is no such table. */
export async function readCounters(table: string): Promise<Map<number, Counts> | null> {
  const listed = await run(['-j', 'list', 'counters', 'table', 'inet', table]);
  if (listed.code !== 0) return null;
  const counts = new Map<number, Counts>();
  let parsed: unknown;
  try {
    parsed = JSON.parse(listed.stdout);
  } catch {
    return counts;
  }
  const objects = (parsed as { nftables?: unknown[] }).nftables ?? [];
  for (const object of objects) {
    const counter = (object as { counter?: { name?: unknown; bytes?: unknown; packets?: unknown } }).counter;
    if (!counter || typeof counter.name !== 'string' || typeof counter.bytes !== 'number') continue;
    const of = counterOf(counter.name);
    if (!of) continue;
    const entry: Counts = counts.get(of.id) ?? { bytes_in: 0, bytes_out: 0 };
    if (of.direction === 'in') entry.bytes_in = counter.bytes;
    else if (of.direction === 'out') entry.bytes_out = counter.bytes;
    else entry.refused = typeof counter.packets === 'number' ? counter.packets : 0;
    counts.set(of.id, entry);
  }
  return counts;
}

/** A listed object of nftables' JSON, one key (table, chain, set, map, counter, rule, ...) naming what it is. */
type Listed = Record<string, Record<string, unknown>>;

/**
 * What `table` holds, as its objects (`counter r5_in`, `map tcp4`, `chain prerouting`, ...) and each chain's number
 * of rules, from a listing without set elements (`-t`): what something else changes when it removes or changes the
 * table (a flush, a firewall's or Docker's reload, a rule added to a chain). Elements alone changed are not seen here
 * (the next write that needs them fails and writes the table anew). Null when there is no such table.
 */
export async function tableOutline(table: string): Promise<Outline | null> {
  const listed = await run(['-j', '-t', 'list', 'table', 'inet', table]);
  if (listed.code !== 0) return null;
  const outline: Outline = { objects: new Set(), rules: new Map() };
  let objects: Listed[];
  try {
    objects = (JSON.parse(listed.stdout) as { nftables?: Listed[] }).nftables ?? [];
  } catch {
    return outline;
  }
  for (const object of objects) {
    const [kind, body] = Object.entries(object)[0] ?? ['', {}];
    if (kind === 'rule') {
      const chain = String(body.chain);
      outline.rules.set(chain, (outline.rules.get(chain) ?? 0) + 1);
    } else if (typeof body.name === 'string' && kind !== 'table') {
      outline.objects.add(`${kind} ${body.name}`);
      if (kind === 'chain' && !outline.rules.has(body.name)) outline.rules.set(body.name, 0);
    }
  }
  return outline;
}

/** A watch of the ruleset, until closed. */
export interface RulesetWatch {
  close(): void;
}

/**
 * Calls `onChange` whenever the ruleset changes, whoever changes it (this agent too), as `nft monitor` tells: a watch
 * that costs nothing while nothing changes, where comparing the table every second cost 300 ms a check at 10,000
 * rules. Started again a second after nft ends (calling `onChange` then: it may have missed something); `close`
 * ends it.
 */
export function watchRuleset(onChange: () => void): RulesetWatch {
  let closed = false;
  let child: ReturnType<typeof spawn> | null = null;
  // Through setpriv (util-linux), so that the kernel ends the watch with the agent, however the agent ends: a killed
  // agent would leave an `nft monitor` waiting for ever. Without setpriv, nft alone.
  let direct = false;
  // A second after it ends; longer (up to half a minute) while it keeps ending at once, as a broken nft would.
  let delay = 500;
  const start = (again: boolean) => {
    if (closed) return;
    const started = Date.now();
    // Rules only: a removed table, chain or rule, an added rule, all show as rules; every element of a map rewritten
    // would be a line too (nft's own cost of printing them was 0.6 s of CPU a write at 10,000 rules). What changes
    // elements alone is found by the periodic look.
    const command = direct
      ? ['nft', 'monitor', 'rules']
      : ['setpriv', '--pdeathsig', 'KILL', '--', 'nft', 'monitor', 'rules'];
    const watcher = spawn(command[0]!, command.slice(1), { stdio: ['ignore', 'pipe', 'ignore'] });
    child = watcher;
    watcher.stdout!.on('data', () => onChange());
    watcher.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT' && !direct) direct = true;
    });
    // nft 1.0.6's monitor dies (SIGSEGV) printing the deletion of a ct timeout object, as a `flush ruleset` makes:
    // what changed while it was down is looked at once it is back.
    watcher.on('close', () => {
      delay = Date.now() - started < 10_000 ? Math.min(delay * 2, 30_000) : 1000;
      if (!closed) setTimeout(() => start(true), delay).unref();
    });
    if (again) onChange();
  };
  start(false);
  return {
    close() {
      closed = true;
      child?.kill();
    },
  };
}

/**
 * Makes `table` hold `plan`, deleting what of `held` it no longer needs, in one transaction (only what changed since
 * `previous`, the plan last written, where the table still holds it); throws with nft's reason when it refuses.
 */
export async function applyPlan(table: string, plan: TablePlan, held: Held, previous: TablePlan | null) {
  const applied = await run(['-f', '-'], planScript(table, plan, held, previous));
  if (applied.code !== 0) throw new Error(`nft refused the table: ${firstLine(applied.stderr)}`);
}

/** Removes `table`, and with it every kernel rule in it; none there is fine. */
export async function removeTable(table: string): Promise<void> {
  const removed = await run(['delete', 'table', 'inet', table]);
  if (removed.code !== 0 && !/No such file|does not exist/i.test(removed.stderr))
    throw new Error(`nft could not remove the table ${table}: ${firstLine(removed.stderr)}`);
}

/** Removes every table an agent made on this machine (agent --uninstall); returns their names. */
export async function removeAgentTables(): Promise<string[]> {
  const listed = await run(['-j', 'list', 'tables', 'inet']);
  if (listed.code !== 0) throw new Error(`nft does not answer: ${firstLine(listed.stderr)}`);
  const names = ((JSON.parse(listed.stdout) as { nftables?: { table?: { name?: unknown } }[] }).nftables ?? [])
    .map((entry) => entry.table?.name)
    .filter((name): name is string => typeof name === 'string' && isAgentTable(name));
  for (const name of names) await removeTable(name);
  return names;
}
