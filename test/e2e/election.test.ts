// Masters elected through a real three-member etcd cluster on loopback, each master a process of its own (the bundled
// master and agent), over HTTPS with each key pinned by what etcd publishes: the leader SIGKILLed 20 times under four
// writers, an agent given all three masters; a leader cut from etcd; etcd members lost one and then two.

import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test, { type TestContext } from 'node:test';
import { startAgent } from '../agents.ts';
import { etcdCluster, etcdMissing, etcdProxy } from '../etcd.ts';
import { ADMIN_PASSWORD, call, login, mintToken, trustMaster, type Running } from '../helpers.ts';
import { freePort, tcpEcho, tcpRoundTrip, until } from '../net.ts';

const skip = etcdMissing() ?? false;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Elected {
  url: string;
  /** Its key's pin, as its start logged it. */
  pin(): string;
  output(): string;
  kill(): void;
  /** Starts it again as it was (its unit unchanged, as systemd would). */
  start(): Promise<void>;
  /** Stops it (SIGTERM) and starts it again with `env` added to its environment. */
  restart(env: Record<string, string>): Promise<void>;
}

/** A master elected through etcd at `endpoints`, serving HTTPS with the certificate it makes itself. */
async function elected(t: TestContext, endpoints: string[], env: Record<string, string> = {}): Promise<Elected> {
  const port = await freePort();
  const dataDir = mkdtempSync(join(tmpdir(), 'portplane-elected-'));
  const url = `https://127.0.0.1:${port}`;
  let child: ChildProcess | null = null;
  let out = '';
  const argv = ['dist/master.mjs', '--listen', `0.0.0.0:${port}`, '--data-dir', dataDir, '--advertise', url];
  const master: Elected = {
    url,
    pin: () => /"tls_pin":"([^"]+)"/.exec(out)![1]!,
    output: () => out,
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

const health = async (master: Elected) =>
  (await call(master.url, 'GET', '/api/health').catch(() => null))?.body as Record<string, any> | undefined;

/** The master that says it is the primary of an epoch past `after`. */
async function leaderOf(masters: Elected[], after = 0, ms = 15_000): Promise<{ master: Elected; epoch: number }> {
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
 * README bootstraps them: the first leads alone, its replication token is made, and it is started again with it (to
 * follow whoever leads after it), then the others with it.
 */
async function cluster(t: TestContext, endpoints: string[][]) {
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
async function inStep(masters: Elected[], ms = 60_000): Promise<void> {
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

const quantile = (values: number[], q: number) =>
  [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(q * values.length))]!;

test(
  'the leader SIGKILLed 20 times under four writers: a standby leads within 10 s each time, the agent follows, ' +
    'the old leader comes back as a standby, and every acknowledged write is on the last leader',
  { skip, timeout: 900_000 },
  async (t) => {
    const etcd = await etcdCluster(t, 3);
    const { masters, admin } = await cluster(t, [etcd.endpoints, etcd.endpoints, etcd.endpoints]);
    let { master: leader, epoch } = await leaderOf(masters);

    const edge = await call(leader.url, 'POST', '/api/nodes', {
      token: admin,
      body: { name: 'edge', host: '192.0.2.1' },
    });
    const echo = await tcpEcho(t);
    const listen = await freePort();
    const forwarded = {
      name: 'echo',
      protocol: 'tcp',
      node_id: edge.body.id,
      listen_port: listen,
      targets: [`127.0.0.1:${echo}`],
    };
    assert.equal((await call(leader.url, 'POST', '/api/rules', { token: admin, body: forwarded })).status, 201);
    const agent = startAgent(t, masters.map((m) => m.url).join(','), edge.body.agent_token, {
      built: true,
      extraArgs: ['--master-pin', masters.map((m) => m.pin()).join(',')],
    });
    await until('the rule forwarding', async () => {
      try {
        return (await tcpRoundTrip(listen, Buffer.from('ping'))).toString() === 'ping';
      } catch {
        return false;
      }
    });

    // Four writers, each a rule every 100 ms with a name of its own, to whichever master leads: on a node with no
    // agent, so that nothing listens on their ports.
    const paper = await call(leader.url, 'POST', '/api/nodes', {
      token: admin,
      body: { name: 'paper', host: '192.0.2.3' },
    });
    const acknowledged: string[] = [];
    let writing = true;
    let port = 20000;
    let target = leader.url;
    const writer = async (n: number) => {
      for (let i = 0; writing; i++) {
        const body = {
          name: `w${n}-${i}`,
          protocol: 'tcp',
          node_id: paper.body.id,
          listen_port: port++,
          targets: ['192.0.2.2:80'],
        };
        const made = await call(target, 'POST', '/api/rules', { token: admin, body }).catch(() => null);
        if (made?.status === 201) acknowledged.push(body.name);
        await sleep(made?.status === 201 ? 100 : 250);
      }
    };
    const writers = [1, 2, 3, 4].map(writer);
    t.after(() => (writing = false));

    const failovers: number[] = [];
    const relinks: number[] = [];
    for (let round = 1; round <= 20; round++) {
      await inStep(masters);
      await sleep(1000 + Math.random() * 2000);
      const killed = leader;
      killed.kill();
      const killedAt = Date.now();
      ({ master: leader, epoch } = await leaderOf(
        masters.filter((m) => m !== killed),
        epoch,
        20_000,
      ));
      const took = Date.now() - killedAt;
      failovers.push(took);
      target = leader.url;
      assert.ok(took <= 10_000, `round ${round}: a standby led ${took} ms after the kill`);
      await until(
        `round ${round}: the agent linked to the new leader`,
        async () =>
          (await call(leader.url, 'GET', `/api/nodes/${edge.body.id}`, { token: admin })).body.status === 'online',
        15_000,
      ).catch((error: Error) => {
        throw new Error(`${error.message}; the agent said: ${agent.output.join('').slice(-3000)}`);
      });
      relinks.push(Date.now() - killedAt);
      // The old leader, started as it was, follows the new one and takes no write.
      await killed.start();
      await until(
        `round ${round}: the old leader a standby`,
        async () => (await health(killed))?.role === 'standby',
        30_000,
      );
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
    const lost = acknowledged.filter((name) => !kept.has(name));
    t.diagnostic(
      `20 kills: a standby led after p50 ${quantile(failovers, 0.5)} ms, p99 ${quantile(failovers, 0.99)} ms; the ` +
        `agent linked to it after p50 ${quantile(relinks, 0.5)} ms; ${acknowledged.length} writes acknowledged, ` +
        `${lost.length} not on the last leader`,
    );
    assert.ok(acknowledged.length > 500, `${acknowledged.length} writes`);
    assert.deepEqual(lost, []);
  },
);

test(
  'a leader cut from etcd takes no write within its lease, and follows the one elected in its place',
  { skip, timeout: 180_000 },
  async (t) => {
    const etcd = await etcdCluster(t, 3);
    const proxies = await Promise.all(etcd.endpoints.map((endpoint) => etcdProxy(t, endpoint)));
    const { masters, admin } = await cluster(t, [proxies.map((p) => p.url), etcd.endpoints, etcd.endpoints]);
    const { master: leader, epoch } = await leaderOf(masters);
    assert.equal(leader, masters[0]);
    const write = async (master: Elected, name: string) =>
      (await call(master.url, 'POST', '/api/plans', { token: admin, body: { name } }).catch(() => null))?.status;
    assert.equal(await write(leader, 'before'), 201);

    for (const proxy of proxies) proxy.cut();
    const cutAt = Date.now();
    const refusedAt = await until(
      'the cut leader refusing writes',
      async () => (await write(leader, `w${Date.now()}`)) === 503 && Date.now(),
      15_000,
    );
    const { master: next, epoch: nextEpoch } = await leaderOf(masters.slice(1), epoch, 20_000);
    const ledAt = Date.now();
    t.diagnostic(`cut: writes refused after ${refusedAt - cutAt} ms, another led after ${ledAt - cutAt} ms`);
    assert.ok(refusedAt - cutAt <= 6000, `refused ${refusedAt - cutAt} ms after the cut (the lease is 6 s)`);
    assert.equal((await health(leader))?.role, 'fenced');
    assert.equal(await write(next, 'after'), 201);

    // Reachable again, it finds another leads, and follows it.
    for (const proxy of proxies) proxy.mend();
    await until(
      'the old leader a standby of the new',
      async () => {
        const said = await health(leader);
        return said?.role === 'standby' && said.replication?.primary === next.url && said.epoch === nextEpoch;
      },
      30_000,
    );
    assert.equal(await write(leader, 'again'), 503);
  },
);

test(
  'one etcd member down changes nothing; two down stop writes and keep reads',
  { skip, timeout: 180_000 },
  async (t) => {
    const etcd = await etcdCluster(t, 3);
    const { masters, admin } = await cluster(t, [etcd.endpoints, etcd.endpoints, etcd.endpoints]);
    const { master: leader, epoch } = await leaderOf(masters);
    let n = 0;
    const write = async (to = leader) =>
      (await call(to.url, 'POST', '/api/plans', { token: admin, body: { name: `p${n++}` } }).catch(() => null))?.status;

    etcd.kill(0);
    const until10s = Date.now() + 10_000;
    while (Date.now() < until10s) {
      assert.equal(await write(), 201);
      await sleep(200);
    }
    assert.equal((await leaderOf(masters)).epoch, epoch, 'the same leader');

    etcd.kill(1);
    const lostAt = Date.now();
    const refusedAt = await until('writes stopped', async () => (await write()) === 503 && Date.now(), 15_000);
    t.diagnostic(`two members down: writes refused after ${refusedAt - lostAt} ms`);
    for (const master of masters) {
      const read = await call(master.url, 'GET', '/api/plans?limit=1', { token: admin });
      assert.equal(read.status, 200, `${master.url} serves reads`);
    }

    await etcd.revive(0);
    await etcd.revive(1);
    const { master: again } = await leaderOf(masters, 0, 30_000);
    assert.equal(await write(again), 201);
  },
);
