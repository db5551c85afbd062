// Masters elected through etcd, each a process of its own (the bundled master), over HTTPS with the certificate each
// makes itself, trusted by the pin it publishes: started, killed and started again as systemd would; and the drill the
// end-to-end test and the bench share, the leader SIGKILLed again and again under writers.

import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { ADMIN_PASSWORD, call, login, mintToken, trustMaster, type Running } from './helpers.ts';
import { freePort, until } from './net.ts';

/** What cleans up after a test, or after the bench. */
export type After = Pick<TestContext, 'after'>;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface Elected {
  url: string;
  /** Its key's pin, as its start logged it. */
  pin(): string;
  kill(): void;
  /** Starts it again as it was (its unit unchanged, as systemd would). */
  start(): Promise<void>;
  /** Stops it (SIGTERM) and starts it again with `env` added to its environment. */
  restart(env: Record<string, string>): Promise<void>;
}

/** A master elected through etcd at `endpoints`. */
export async function elected(t: After, endpoints: string[], env: Record<string, string> = {}): Promise<Elected> {
  const port = await freePort();
  const dataDir = mkdtempSync(join(tmpdir(), 'portplane-elected-'));
  const url = `https://127.0.0.1:${port}`;
  let child: ChildProcess | null = null;
  let out = '';
  const argv = ['dist/master.mjs', '--listen', `0.0.0.0:${port}`, '--data-dir', dataDir, '--advertise', url];
  const master: Elected = {
    url,
    pin: () => /"tls_pin":"([^"]+)"/.exec(out)![1]!,
    kill: () => void child?.kill('SIGKILL'),
    async restart(more) {
      Object.assign(env, more);
      const exited = new Promise((resolve) => child!.once('exit', resolve));
      child!.kill('SIGTERM');
      await exited;
      await master.start();
    },
    async start() {
      const before = out.length;
      child = spawn(process.execPath, [...argv, '--etcd', endpoints.join(',')], {
        env: { PATH: process.env.PATH ?? '', MASTER_ADMIN_PASSWORD: ADMIN_PASSWORD, ...env },
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (out += chunk));
      await until('the master listening', () => out.slice(before).includes('"msg":"listening"'), 60_000);
      trustMaster(url, readFileSync(join(dataDir, 'tls', 'cert.pem'), 'utf8'));
    },
  };
  t.after(() => master.kill());
  await master.start();
  return master;
}

export const health = async (master: Elected) =>
  (await call(master.url, 'GET', '/api/health').catch(() => null))?.body as Record<string, any> | undefined;

/** The master that says it is the primary of an epoch past `after`. */
export async function leaderOf(
  masters: Elected[],
  after = 0,
  ms = 15_000,
): Promise<{ master: Elected; epoch: number }> {
  return until(
    `a leader past epoch ${after}`,
    async () => {
      for (const master of masters) {
        const said = await health(master);
        if (said?.role === 'primary' && said.epoch > after) return { master, epoch: said.epoch as number };
      }
      return false;
    },
    ms,
  );
}

/**
 * Three masters on `endpoints` (each may be its own list), in sync mode, the standbys in step; and an admin. As the
 * README starts them: the first leads alone, its replication token is made, and it is started again with it (to
 * follow whoever leads after it), then the others with it.
 */
export async function cluster(t: After, endpoints: string[][]) {
  const first = await elected(t, endpoints[0]!);
  const admin = await login(first.url, 'admin', ADMIN_PASSWORD);
  const settings = { replication_mode: 'sync', replication_sync_timeout_seconds: 5, allow_local_rule_targets: 1 };
  assert.equal((await call(first.url, 'PATCH', '/api/settings', { token: admin, body: settings })).status, 200);
  const token = await mintToken({ url: first.url, admin } as Running, ['replication'], 'standbys');
  await first.restart({ MASTER_FOLLOW_TOKEN: token });
  const others = [];
  for (const list of endpoints.slice(1)) others.push(await elected(t, list, { MASTER_FOLLOW_TOKEN: token }));
  const masters = [first, ...others];
  await inStep(masters);
  return { masters, admin, token };
}

/** Waits for every master but the leader to be its standby, in step. */
export async function inStep(masters: Elected[], ms = 60_000): Promise<void> {
  await until(
    'the standbys in step',
    async () => {
      const said = await Promise.all(masters.map(health));
      const standbys = said.filter((one) => one?.role === 'standby');
      return (
        said.filter((one) => one?.role === 'primary').length === 1 &&
        standbys.length === masters.length - 1 &&
        standbys.every((one) => one!.replication?.lag_seconds === 0)
      );
    },
    ms,
  );
}

export const quantile = (values: number[], q: number) =>
  [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(q * values.length))]!;

export interface Drill {
  /** Milliseconds from each kill to a standby saying it leads. */
  failovers: number[];
  acknowledged: number;
  /** Acknowledged writes (rules, by name) not on the last leader. */
  lost: string[];
}

/**
 * Four writers, each a rule every 100 ms with a name of its own, to whichever master leads, on `nodeId` (a node no
 * agent forwards: nothing listens on their ports); the leader SIGKILLed `rounds` times, at a random moment once the
 * standbys are in step, and started again as it was, after `afterFailover` (given the new leader and the kill's
 * time). Then which acknowledged writes the last leader lacks.
 */
export async function killLeaders(
  t: After,
  masters: Elected[],
  admin: string,
  nodeId: number,
  rounds: number,
  afterFailover: (leader: Elected, killedAt: number, round: number) => Promise<void> = async () => {},
): Promise<Drill> {
  let { master: leader, epoch } = await leaderOf(masters);
  const acknowledged: string[] = [];
  let writing = true;
  let port = 20000;
  const writer = async (n: number) => {
    for (let i = 0; writing; i++) {
      const body = {
        name: `w${n}-${i}`,
        protocol: 'tcp',
        node_id: nodeId,
        listen_port: port++,
        targets: ['192.0.2.2:80'],
      };
      const made = await call(leader.url, 'POST', '/api/rules', { token: admin, body }).catch(() => null);
      if (made?.status === 201) acknowledged.push(body.name);
      await sleep(made?.status === 201 ? 100 : 250);
    }
  };
  const writers = [1, 2, 3, 4].map(writer);
  t.after(() => (writing = false));
  const failovers: number[] = [];
  for (let round = 1; round <= rounds; round++) {
    await inStep(masters);
    await sleep(1000 + Math.random() * 2000);
    const killed = leader;
    killed.kill();
    const killedAt = Date.now();
    const others = masters.filter((m) => m !== killed);
    ({ master: leader, epoch } = await leaderOf(others, epoch, 20_000));
    failovers.push(Date.now() - killedAt);
    await afterFailover(leader, killedAt, round);
    await killed.start();
    await until(
      `round ${round}: the old leader a standby`,
      async () => (await health(killed))?.role === 'standby',
      30_000,
    );
    // It follows the new one, and takes no write.
    const refused = await call(killed.url, 'POST', '/api/plans', { token: admin, body: { name: `x${round}` } });
    assert.equal(refused.status, 503, JSON.stringify(refused.body));
  }
  writing = false;
  await Promise.all(writers);
  await inStep(masters);
  const kept = new Set<string>();
  for (let cursor = ''; ;) {
    const page = await call(leader.url, 'GET', `/api/rules?limit=1000${cursor ? `&cursor=${cursor}` : ''}`, {
      token: admin,
    });
    for (const rule of page.body.items) kept.add(rule.name);
    if (!page.body.next_cursor) break;
    cursor = page.body.next_cursor;
  }
  return { failovers, acknowledged: acknowledged.length, lost: acknowledged.filter((name) => !kept.has(name)) };
}
