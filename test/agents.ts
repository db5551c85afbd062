// Agents as real child processes (from source), for end-to-end tests: started against a
// master, optionally inside a network namespace, and stopped the way systemd would.

import { spawn, type ChildProcess } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { call, node, startMaster, type Running } from './helpers.ts';
import { until } from './net.ts';
import { ip, namespaces, netnsUnavailable, veth } from './netns.ts';
import { built } from './dist.ts';
import { Agent } from '../internal/agent/agent.ts';
import type { Fields } from '../internal/log/log.ts';
import { VERSION } from '../internal/version.ts';
import { parseAgentConfig } from '../cmd/agent/config.ts';

export interface AgentProcess extends ChildProcess {
  output: string[];
  stateDir: string;
}

export interface AgentOptions {
  stateDir?: string;
  listenHost?: string;
  /** A command the agent runs under, e.g. `ip netns exec NAME`. */
  within?: string[];
  extraArgs?: string[];
  /** Run the built bundle (dist/agent.mjs, current: see test/dist.ts) rather than the source. */
  built?: boolean;
  /** More environment, e.g. NODE_EXTRA_CA_CERTS: what a process reads once, at its start. */
  env?: Record<string, string>;
}

export function startAgent(t: TestContext, master: string, token: string, options: AgentOptions = {}): AgentProcess {
  const stateDir = options.stateDir ?? mkdtempSync(join(tmpdir(), 'portplane-agent-'));
  const argv = [
    process.execPath,
    ...(options.built ? [built('agent')] : ['--import', 'tsx', 'cmd/agent/main.ts']),
    '--master',
    master,
    '--state-dir',
    stateDir,
    '--listen-host',
    options.listenHost ?? '127.0.0.1',
    ...(options.extraArgs ?? []),
  ];
  const [command, ...args] = [...(options.within ?? []), ...argv];
  const child = spawn(command!, args, {
    // The relay unless a test asks for the kernel: agents here share the host's one nftables table otherwise.
    env: { AGENT_FORWARDING: 'relay', ...process.env, ...options.env, AGENT_TOKEN: token },
    stdio: ['ignore', 'pipe', 'inherit'],
    // A group of its own: a supervisor's workers go with it at the end, even a worker orphaned by a failing test,
    // which would otherwise keep the test's process alive through the output pipe it shares.
    detached: true,
  }) as AgentProcess;
  child.output = [];
  child.stateDir = stateDir;
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => child.output.push(chunk));
  t.after(() => {
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      // The group is gone already.
    }
  });
  return child;
}

export interface InProcessAgent {
  agent: Agent;
  stateDir: string;
  /** What it logged, a JSON line each (as its process would write them, without the time). */
  output: string[];
  /** Stops it as its process would on SIGTERM (a last report, then the link and its ports closed); once. */
  stop(): Promise<void>;
}

/**
 * An agent run in the test's own process: the same Agent the program wires (cmd/agent/main.ts), from the same flags,
 * its relay on loopback, stopped after `t`. For what the agent's process itself is not the point of: no supervisor,
 * no upgrade, no kill -9 (those are startAgent's, and test/e2e's). Given a state dir, it starts from what an agent
 * before it left there (the same node again); otherwise from a new one, removed after `t`. Its relay runs on one
 * thread unless `extraArgs` say otherwise: a relay thread compiles the sources anew (half a second under tsx), which
 * every agent of every test would pay; the threads are test/e2e/relay-threads.test.ts's, and the spawned agents'.
 */
export async function agentInProcess(
  t: TestContext,
  master: string,
  token: string,
  options: { stateDir?: string; extraArgs?: string[] } = {},
): Promise<InProcessAgent> {
  const stateDir = options.stateDir ?? mkdtempSync(join(tmpdir(), 'portplane-agent-'));
  const flags = ['--master', master, '--state-dir', stateDir, '--listen-host', '127.0.0.1'];
  flags.push(...(options.extraArgs ?? []));
  const parsed = parseAgentConfig(flags, { AGENT_TOKEN: token, AGENT_FORWARDING: 'relay', AGENT_RELAY_WORKERS: '1' });
  if (!('config' in parsed)) throw new Error(`the agent's flags: ${JSON.stringify(parsed)}`);
  const output: string[] = [];
  const line =
    (level: string) =>
    (msg: string, fields: Fields = {}) =>
      void output.push(JSON.stringify({ level, msg, ...fields }));
  const log = { info: line('info'), warn: line('warn'), error: line('error') };
  const agent = new Agent({ ...parsed.config, version: VERSION, log });
  let stopped: Promise<void> | undefined;
  const stop = () => (stopped ??= agent.stop());
  t.after(async () => {
    await stop();
    if (!options.stateDir) rmSync(stateDir, { recursive: true, force: true });
  });
  await agent.start();
  return { agent, stateDir, output, stop };
}

/** The node "edge" of `m`, its agent in this process reporting each second; once online. */
export async function onlineNode(t: TestContext, m: Running) {
  await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { agent_report_interval_seconds: 1 } });
  const n = await node(m, 'edge');
  await agentInProcess(t, m.url, n.agent_token);
  await until('the node to come online', async () => (await nodeOf(m, n.id)).status === 'online');
  return n;
}

export async function stopAgent(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
  child.kill('SIGTERM');
  const [code] = await once(child, 'exit');
  return code as number | null;
}

/** Sends each word as a datagram to host:port and collects the replies, sorted. */
export async function udpRoundTrip(
  port: number,
  words: string[],
  host = '127.0.0.1',
  waitMs = 5000,
): Promise<string[]> {
  const client = createSocket('udp4');
  const replies: string[] = [];
  client.on('message', (m) => replies.push(m.toString()));
  for (const word of words) client.send(word, port, host);
  try {
    await until('UDP replies', async () => replies.length >= words.length, waitMs);
  } finally {
    client.close();
  }
  return replies.sort();
}

export async function nodeOf(m: Running, id: number) {
  return (await call(m.url, 'GET', `/api/nodes/${id}`, { token: m.admin })).body;
}

export async function ruleOf(m: Running, id: number) {
  return (await call(m.url, 'GET', `/api/rules/${id}`, { token: m.admin })).body;
}

/**
 * A master in the test's namespace with `settings` set, the node "edge" at `nodeAddress`, and its agent in namespace
 * `namespace` (linked to the master at `hostAddress`) forwarding where it can in the kernel (`--forwarding auto`),
 * online.
 */
export async function kernelEdge(
  t: TestContext,
  where: { namespace: string; nodeAddress: string; hostAddress: string },
  settings: Record<string, unknown> = {},
) {
  const m = await startMaster(t, { host: '0.0.0.0', insecureHttp: true });
  if (Object.keys(settings).length > 0) {
    const patched = await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: settings });
    if (patched.status !== 200) throw new Error(`settings refused: ${JSON.stringify(patched.body)}`);
  }
  const edge = await node(m, 'edge', { host: where.nodeAddress });
  const agent = startAgent(t, `http://${where.hostAddress}:${new URL(m.url).port}`, edge.agent_token, {
    within: ['ip', 'netns', 'exec', where.namespace],
    listenHost: '0.0.0.0',
    extraArgs: ['--insecure-http', '--forwarding', 'auto'],
  });
  await until('the agent online', async () => (await nodeOf(m, edge.id)).status === 'online');
  return { m, edge, agent };
}

let elsewhere = 0;

/**
 * A master listening on every address and the node "edge" on a host of its own: its agent in a network namespace
 * joined to this one by a veth pair, online. What listens here at `targetHost` is another host to the node, as a
 * tenant's targets must be (never what is local to it); clients reach the node's ports at `host`. A string (why)
 * where namespaces cannot be made.
 */
export async function edgeElsewhere(
  t: TestContext,
  settings: Record<string, unknown> = {},
  nodeFields: Record<string, unknown> = {},
): Promise<{ m: Running; edge: { id: number }; host: string; targetHost: string } | string> {
  const namespace = `pp-else-${process.pid}-${elsewhere}`;
  const unavailable = netnsUnavailable(`${namespace}-probe`);
  if (unavailable) return unavailable;
  const subnet = `10.218.${(process.pid * 7 + elsewhere++) % 250}`;
  const link = `ppe${process.pid % 100_000}${elsewhere}`.slice(0, 12);
  namespaces(t, [namespace]);
  veth(`${link}h`, null, `${subnet}.1/24`, `${link}n`, namespace, `${subnet}.2/24`);
  ip('addr', 'add', `${subnet}.3/24`, 'dev', `${link}h`);
  const m = await startMaster(t, { host: '0.0.0.0', insecureHttp: true });
  if (Object.keys(settings).length > 0) {
    const patched = await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: settings });
    if (patched.status !== 200) throw new Error(`settings refused: ${JSON.stringify(patched.body)}`);
  }
  const edge = await node(m, 'edge', { host: `${subnet}.2`, ...nodeFields });
  startAgent(t, `http://${subnet}.1:${new URL(m.url).port}`, edge.agent_token, {
    within: ['ip', 'netns', 'exec', namespace],
    listenHost: '0.0.0.0',
    extraArgs: ['--insecure-http'],
  });
  await until('the agent online', async () => (await nodeOf(m, edge.id)).status === 'online');
  return { m, edge, host: `${subnet}.2`, targetHost: `${subnet}.3` };
}
