// A real DNS server for tests of SRV targets: Debian's dnsmasq, answering only from the records a test gives it
// (names under pp.test), on a port of loopback or, in a network namespace, on that namespace's own port 53. Started
// again with other records to change its answers (dnsmasq reads SRV records from its command line once).

import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import type { TestContext } from 'node:test';

export interface SrvEntry {
  name: string;
  target: string;
  port: number;
  priority?: number;
  weight?: number;
}

export interface DnsmasqOptions {
  /** Records answered: SRV entries and the addresses of their targets. */
  srv: SrvEntry[];
  hosts: Record<string, string>;
  /** The TTL of every answer, in seconds. */
  ttl?: number;
  /** Where it listens: 127.0.0.1 at `port`, in namespace `namespace` when given. */
  port?: number;
  namespace?: string;
}

/** Why dnsmasq cannot be used here, or null. */
export function dnsmasqMissing(): string | null {
  return spawnSync('dnsmasq', ['--version'], { stdio: 'ignore' }).error ? 'dnsmasq is not installed' : null;
}

export class Dnsmasq {
  private child: ChildProcess | null = null;

  constructor(
    t: TestContext,
    private options: DnsmasqOptions,
  ) {
    t.after(() => this.stop());
  }

  async start(change: Partial<DnsmasqOptions> = {}): Promise<void> {
    await this.stop();
    this.options = { ...this.options, ...change };
    const { srv, hosts, ttl = 1, port = 53, namespace } = this.options;
    const args = [
      '--keep-in-foreground',
      '--conf-file=/dev/null',
      '--no-resolv',
      '--no-hosts',
      '--user=root',
      '--pid-file=',
      '--bind-interfaces',
      '--listen-address=127.0.0.1',
      `--port=${port}`,
      `--local-ttl=${ttl}`,
      '--log-facility=-',
      // The tests' domain is this server's own: a name it does not hold is NXDOMAIN, not refused.
      '--local=/pp.test/',
      ...srv.map((e) => `--srv-host=${e.name},${e.target},${e.port},${e.priority ?? 0},${e.weight ?? 0}`),
      ...Object.entries(hosts).map(([name, address]) => `--host-record=${name},${address}`),
    ];
    const [command, ...rest] = namespace
      ? ['ip', 'netns', 'exec', namespace, 'dnsmasq', ...args]
      : ['dnsmasq', ...args];
    const child = spawn(command!, rest, { stdio: ['ignore', 'ignore', 'pipe'] });
    this.child = child;
    // It says it started once it has bound its port.
    let said = '';
    await new Promise<void>((resolve, reject) => {
      child.stderr!.on('data', (chunk) => {
        said += String(chunk);
        if (/started, version/.test(said)) resolve();
      });
      child.once('exit', (code) => reject(new Error(`dnsmasq exited with ${code}: ${said}`)));
    });
  }

  async stop(): Promise<void> {
    const child = this.child;
    this.child = null;
    if (!child || child.exitCode !== null) return;
    child.kill('SIGTERM');
    await once(child, 'exit');
  }
}
