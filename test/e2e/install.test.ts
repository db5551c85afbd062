// Install over SSH against a real OpenSSH server that this test starts on a loopback port
// with throwaway keys (`.ci/run` installs Debian's openssh-server). The "node" is this
// machine, reached as root through that server.

import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { request } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { connect, createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import { pinUnderAlias } from '../../internal/install/ssh.ts';
import { selfSigned } from '../../internal/tls/certificate.ts';
import { pinOf } from '../../internal/tls/pin.ts';
import { agentUnit } from '../../internal/install/unit.ts';
import { assertProblem, call, rule, startMaster, type Running } from '../helpers.ts';
import { freePort, until } from '../net.ts';
import { openEvents } from '../sse.ts';

// Most of these tests wait on clocks and sockets: they run side by side.
describe('install over SSH', { concurrency: 4 }, () => {
  const SSHD = '/usr/sbin/sshd';
  const canRun = existsSync(SSHD) && process.getuid?.() === 0;

  function keygen(path: string): string {
    spawnSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', path], { stdio: 'ignore' });
    return readFileSync(path, 'utf8');
  }

  /**
   * Starts sshd on `port` with `hostKey`, accepting `authorizedKey` for root; `extra` lines go at the end of its
   * config.
   */
  async function sshd(
    t: TestContext,
    dir: string,
    port: number,
    hostKey: string,
    authorizedKey: string,
    extra: string[] = ['PasswordAuthentication no'],
  ): Promise<ChildProcess> {
    mkdirSync('/run/sshd', { recursive: true });
    writeFileSync(join(dir, 'authorized_keys'), authorizedKey, { mode: 0o600 });
    const config = join(dir, `sshd_config_${port}`);
    writeFileSync(
      config,
      [
        `Port ${port}`,
        'ListenAddress 127.0.0.1',
        `HostKey ${hostKey}`,
        `AuthorizedKeysFile ${join(dir, 'authorized_keys')}`,
        `PidFile ${join(dir, `sshd_${port}.pid`)}`,
        'PermitRootLogin prohibit-password',
        'KbdInteractiveAuthentication no',
        'UsePAM no',
        'StrictModes no',
        ...extra,
        '',
      ].join('\n'),
    );
    const child = spawn(SSHD, ['-D', '-e', '-f', config], { stdio: ['ignore', 'ignore', 'pipe'] });
    t.after(() => child.kill('SIGKILL'));
    for (let i = 0; i < 50; i++) {
      const open = await new Promise<boolean>((resolve) => {
        const s = connect({ host: '127.0.0.1', port }, () => (s.destroy(), resolve(true)));
        s.on('error', () => resolve(false));
      });
      if (open) return child;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    throw new Error('sshd did not start');
  }

  async function settled(m: Running, id: number) {
    let last: { status: string; status_detail: string; install: { log_tail: string } } | undefined;
    try {
      return await until(
        `node ${id} to finish installing`,
        async () => {
          const node = (await call(m.url, 'GET', `/api/nodes/${id}`, { token: m.admin })).body;
          last = node;
          return node.install.finished_at && node;
        },
        60_000,
      );
    } catch (error) {
      throw new Error(
        `${(error as Error).message}; last seen: ${last?.status} ${last?.status_detail}\n${last?.install.log_tail}`,
      );
    }
  }

  function killAgent(installDir: string): void {
    const pidFile = join(installDir, 'agent.pid');
    if (!existsSync(pidFile)) return;
    try {
      process.kill(Number(readFileSync(pidFile, 'utf8')), 'SIGKILL');
    } catch {
      // already gone
    }
  }

  /**
   * A folder of this host for an agent installed over SSH to it: not under /tmp, a system folder the installer refuses
   * (another user could have prepared it). Its agent is killed and the folder removed after the test.
   */
  function installFolder(t: TestContext): string {
    const parent = mkdtempSync('/opt/portplane-install-test-');
    chmodSync(parent, 0o755);
    const installDir = join(parent, 'agent');
    t.after(() => {
      killAgent(installDir);
      rmSync(parent, { recursive: true, force: true });
    });
    return installDir;
  }

  test(
    'install-ssh puts the agent on a node that then forwards; a wrong key and a changed host key fail clearly',
    { skip: canRun ? false : 'needs root and /usr/sbin/sshd (Debian openssh-server)' },
    async (t) => {
      const dir = mkdtempSync(join(tmpdir(), 'portplane-sshd-'));
      const installDir = installFolder(t);
      const userKey = keygen(join(dir, 'user_key'));
      const otherKey = keygen(join(dir, 'other_key'));
      keygen(join(dir, 'host_a'));
      keygen(join(dir, 'host_b'));
      const port = await freePort();
      const first = await sshd(t, dir, port, join(dir, 'host_a'), readFileSync(join(dir, 'user_key.pub'), 'utf8'));

      // The master serves HTTPS with its own certificate, so the installed agent must pin it.
      const certificate = selfSigned(['127.0.0.1']);
      writeFileSync(join(dir, 'master-cert.pem'), certificate.cert);
      writeFileSync(join(dir, 'master-key.pem'), certificate.key, { mode: 0o600 });
      const m = await startMaster(t, {
        tls: { certPath: join(dir, 'master-cert.pem'), keyPath: join(dir, 'master-key.pem') },
        localTargets: true,
      });
      assert.equal(
        (
          await call(m.url, 'PATCH', '/api/settings', {
            token: m.admin,
            body: { install_dir: installDir, agent_report_interval_seconds: 1 },
          })
        ).status,
        200,
      );
      const node = (
        await call(m.url, 'POST', '/api/nodes', {
          token: m.admin,
          body: { name: 'ssh-node', host: '127.0.0.1', ssh_port: port, ssh_user: 'root', ssh_private_key: userKey },
        })
      ).body;

      // Every string that would reach the node is refused when it carries shell syntax, before anything runs there.
      const marker = join(dir, 'pwned');
      const hostileUrls = [
        `http://x$(touch ${marker}):1`,
        `http://x;touch\${IFS}${marker}:1`,
        'http://a`id`:1',
        "http://a'b:1",
        'http://a&b|c:1',
        'http://a\nAGENT_TOKEN=x:1',
      ];
      for (const hostile of hostileUrls) {
        assertProblem(
          await call(m.url, 'POST', `/api/nodes/${node.id}/install-ssh`, {
            token: m.admin,
            body: { master_url: hostile },
          }),
          422,
          'validation_failed',
        );
        assertProblem(
          await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { install_master_url: hostile } }),
          422,
          'validation_failed',
        );
      }
      for (const [field, hostile] of [
        ['install_dir', `/opt/x$(touch ${marker})`],
        ['install_dir', '/opt/../etc'],
        ['install_service_name', 'agent;reboot'],
        ['install_service_name', 'a b'],
      ] as const) {
        assertProblem(
          await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { [field]: hostile } }),
          422,
          'validation_failed',
        );
      }
      for (const [field, hostile] of [
        ['host', `x$(touch ${marker})`],
        ['host', '-oProxyCommand=touch'],
        ['ssh_user', 'root;id'],
        ['ssh_user', '-oProxyCommand'],
      ] as const) {
        assertProblem(
          await call(m.url, 'PUT', `/api/nodes/${node.id}`, {
            token: m.admin,
            body: { name: 'ssh-node', host: '127.0.0.1', ssh_port: port, [field]: hostile },
          }),
          422,
          'validation_failed',
        );
      }
      assert.equal(
        (await call(m.url, 'GET', `/api/nodes/${node.id}`, { token: m.admin })).body.status,
        'new',
        'nothing was started',
      );

      // An event stream follows it all: the status, each step of the log, the outcome.
      const watch = (query: string) => openEvents(m.url, m.admin, query, {}, certificate.cert);
      const everything = await watch(`?types=node&node_id=${node.id}`);
      t.after(() => everything.close());
      const started = await call(m.url, 'POST', `/api/nodes/${node.id}/install-ssh`, { token: m.admin });
      assert.equal(started.status, 202, JSON.stringify(started.body));
      assert.equal(started.body.status, 'installing');
      // The README's watch: the next change of status after the 202 is the outcome.
      const outcome = await watch(`?types=node.status&node_id=${node.id}&limit=1&timeout_seconds=60`);
      assertConflict(await call(m.url, 'POST', `/api/nodes/${node.id}/install-ssh`, { token: m.admin }));
      const done = await settled(m, node.id);
      assert.equal(done.status, 'online', `${done.status_detail}\n${done.install.log_tail}`);
      await outcome.ended;
      assert.deepEqual(
        outcome.events.map((e) => [e.event, e.data.data?.status]),
        [
          ['ready', undefined],
          ['node.status', 'online'],
        ],
      );
      // The other stream need not have carried the last event yet: it is waited for.
      const statuses = await until('both changes of status on the stream of everything', () => {
        const seen = everything.events.filter((e) => e.event === 'node.status').map((e) => e.data.resource_id);
        return seen.length >= 2 && seen;
      });
      assert.deepEqual(statuses, [node.id, node.id], 'installing, then online');
      assert.ok(everything.events.filter((e) => e.event === 'node.install').length >= 3, 'each step of the log');
      assert.match(done.install.log_tail, /done: the agent is connected/);
      assert.ok(readFileSync(join(installDir, 'agent.mjs')).length > 10_000);
      const agentEnv = readFileSync(join(installDir, 'agent.env'), 'utf8');
      assert.equal((agentEnv.match(/AGENT_TOKEN=mat_/g) ?? []).length, 1);
      // The agent pins the master from its first start, and reached it over TLS (it is online).
      assert.match(
        agentEnv,
        new RegExp(
          `^AGENT_MASTER_URL=${m.url}\nAGENT_MASTER_PIN=${pinOf(certificate.cert).replace(/[+/]/g, '\\$&')}\n`,
        ),
      );
      assert.ok(!done.install.log_tail.includes('mat_'), 'the agent token is not in the log');
      // The agent reads its env file itself: no shell on the node ever parses what is in it.
      const agentPid = Number(readFileSync(join(installDir, 'agent.pid'), 'utf8'));
      const agentArgv = readFileSync(`/proc/${agentPid}/cmdline`, 'utf8').split('\0').filter(Boolean);
      assert.deepEqual(agentArgv.slice(-4), [
        '--env-file',
        join(installDir, 'agent.env'),
        '--state-dir',
        join(installDir, 'state'),
      ]);
      assert.ok(!existsSync(marker), 'no hostile value ran');
      // The token handed out at creation was replaced by the one the installed agent got.
      assert.equal(await linkStatus(m.url, node.agent_token, certificate.cert), 401);
      const audit = (
        await call(m.url, 'GET', `/api/audit-logs?action=node.install&resource_id=${node.id}`, { token: m.admin })
      ).body.items;
      assert.deepEqual(
        audit.map((e: { actor_type: string; status: string }) => [e.actor_type, e.status]),
        [
          ['system', 'success'],
          ['user', 'success'],
        ],
      );

      // The installed agent forwards a rule.
      const echo = createServer((s) => s.pipe(s)).listen(0, '127.0.0.1');
      await once(echo, 'listening');
      t.after(() => echo.close());
      const listen = await freePort();
      const created = (
        await rule(m, {
          node_id: node.id,
          listen_port: listen,
          targets: [`127.0.0.1:${(echo.address() as AddressInfo).port}`],
        })
      ).body;
      assert.equal((await call(m.url, 'POST', `/api/rules/${created.id}/sync`, { token: m.admin })).status, 200);
      const socket = connect({ host: '127.0.0.1', port: listen });
      await once(socket, 'connect');
      socket.write('through the installed agent');
      assert.equal((await once(socket, 'data'))[0].toString(), 'through the installed agent');
      socket.destroy();

      // A key the node does not accept.
      const stranger = (
        await call(m.url, 'POST', '/api/nodes', {
          token: m.admin,
          body: { name: 'stranger', host: '127.0.0.1', ssh_port: port, ssh_user: 'root', ssh_private_key: otherKey },
        })
      ).body;
      await call(m.url, 'POST', `/api/nodes/${stranger.id}/install-ssh`, { token: m.admin });
      const refused = await settled(m, stranger.id);
      assert.equal(refused.status, 'install_failed');
      assert.match(refused.status_detail, /^auth_failed: the node refused the SSH credentials/);

      // The same address now presents another host key: refused, and the running agent is left alone.
      first.kill('SIGKILL');
      await once(first, 'exit');
      await sshd(t, dir, port, join(dir, 'host_b'), readFileSync(join(dir, 'user_key.pub'), 'utf8'));
      const again = await call(m.url, 'POST', `/api/nodes/${node.id}/reinstall`, { token: m.admin });
      assert.equal(again.status, 202);
      const changed = await settled(m, node.id);
      assert.match(changed.status_detail, /^host_key_changed: /);
      assert.equal(changed.status, 'online', 'the agent installed before still runs');

      // Pointing the node at another SSH server: the stored credential does not follow it...
      const elsewhere = await freePort();
      await sshd(t, dir, elsewhere, join(dir, 'host_b'), readFileSync(join(dir, 'user_key.pub'), 'utf8'));
      const moveBody = { name: 'ssh-node', host: '127.0.0.1', ssh_port: elsewhere, ssh_user: 'root' };
      const kept = await call(m.url, 'PUT', `/api/nodes/${node.id}`, { token: m.admin, body: moveBody });
      assertProblem(kept, 422, 'validation_failed');
      assert.match(kept.body.errors[0].detail, /needs the SSH credential again/);
      // ... and given again, the key pinned for the node (not for its old address) still has to match first.
      assert.equal(
        (
          await call(m.url, 'PUT', `/api/nodes/${node.id}`, {
            token: m.admin,
            body: { ...moveBody, ssh_private_key: userKey },
          })
        ).status,
        200,
      );
      await call(m.url, 'POST', `/api/nodes/${node.id}/reinstall`, { token: m.admin });
      assert.match((await settled(m, node.id)).status_detail, /^host_key_changed: .*forget_host_key/);
      // A tunnel ending at the node: reinstalling it gives both ends new key pairs.
      const tunnel = await call(m.url, 'POST', '/api/tunnels', {
        token: m.admin,
        // A free port: the node's agent runs on this host, where the guide's tunnel takes the default, 40000.
        body: { name: 'to-ssh-node', entry_node_id: stranger.id, exit_node_id: node.id, listen_port: await freePort() },
      });
      assert.equal(tunnel.status, 201, JSON.stringify(tunnel.body));
      const keysBefore = m.app.store.tunnels.endsOf(node.id)[0]!;
      // A node rebuilt on purpose: forgetting the pin lets the first key seen be pinned again.
      assert.equal(
        (
          await call(m.url, 'POST', `/api/nodes/${node.id}/reinstall`, {
            token: m.admin,
            body: { forget_host_key: true },
          })
        ).status,
        202,
      );
      const rebuilt = await settled(m, node.id);
      assert.equal(rebuilt.status_detail, null, rebuilt.install.log_tail);
      const keysAfter = m.app.store.tunnels.endsOf(node.id)[0]!;
      assert.notEqual(keysAfter.exit_cert, keysBefore.exit_cert, "the exit's key pair was replaced");
      assert.notEqual(keysAfter.entry_cert, keysBefore.entry_cert, "the entry's key pair was replaced");
      assert.match(
        readFileSync(join(m.dataDir, 'known_hosts', String(node.id)), 'utf8'),
        new RegExp(`^portplane-node-${node.id} `),
      );
    },
  );

  test(
    'with a password, on a node without Node.js: askpass logs in and the master copies its own runtime',
    { skip: canRun && existsSync('/usr/sbin/useradd') ? false : 'needs root, sshd and useradd' },
    async (t) => {
      const user = `pp${process.pid}`;
      const password = `pw-${Math.random().toString(36).slice(2)}-x`;
      assert.equal(spawnSync('useradd', ['-M', '-s', '/bin/sh', user]).status, 0);
      assert.equal(spawnSync('chpasswd', { input: `${user}:${password}\n` }).status, 0);

      const dir = mkdtempSync(join(tmpdir(), 'portplane-sshd-'));
      chmodSync(dir, 0o755);
      const installDir = installFolder(t);
      mkdirSync(installDir);
      spawnSync('chown', [user, installDir]);
      // userdel refuses while the user has processes, so the agent goes first.
      t.after(() => {
        killAgent(installDir);
        spawnSync('pkill', ['-KILL', '-u', user]);
        spawnSync('userdel', [user]);
      });
      // The user's PATH has the tools the installer uses, but no node.
      const tools = join(dir, 'bin');
      mkdirSync(tools);
      for (const tool of ['uname', 'cat', 'mkdir', 'chmod', 'mv', 'nohup', 'sleep'])
        symlinkSync(`/usr/bin/${tool}`, join(tools, tool));
      keygen(join(dir, 'host'));
      const port = await freePort();
      await sshd(t, dir, port, join(dir, 'host'), '', [
        'PasswordAuthentication yes',
        `Match User ${user}`,
        `  SetEnv PATH=${tools}`,
      ]);

      const m = await startMaster(t);
      await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { install_dir: installDir } });
      const node = (
        await call(m.url, 'POST', '/api/nodes', {
          token: m.admin,
          body: { name: 'bare', host: '127.0.0.1', ssh_port: port, ssh_user: user, ssh_password: password },
        })
      ).body;
      assert.equal((await call(m.url, 'POST', `/api/nodes/${node.id}/install-ssh`, { token: m.admin })).status, 202);
      const done = await settled(m, node.id);
      assert.equal(done.status, 'online', `${done.status_detail}\n${done.install.log_tail}`);
      assert.match(done.install.log_tail, /\(password\)/);
      assert.match(done.install.log_tail, /copying the master's own \(v24/);
      assert.ok(!done.install.log_tail.includes(password), 'the password is not in the log');
      assert.equal(
        spawnSync(join(installDir, 'node'), ['--version'], { encoding: 'utf8' }).stdout.trim(),
        process.version,
      );
    },
  );

  /** The status the master answers an agent link request with this token. */
  function linkStatus(base: string, token: string, ca?: string): Promise<number> {
    return new Promise((resolve, reject) => {
      const headers = { Connection: 'Upgrade', Upgrade: 'portplane-agent/1', Authorization: `Bearer ${token}` };
      const req = ca
        ? httpsRequest(`${base}/agent/v1/link`, { headers, ca })
        : request(`${base}/agent/v1/link`, { headers });
      req.on('upgrade', (res, socket) => (socket.destroy(), resolve(res.statusCode!)));
      req.on('response', (res) => (res.resume(), resolve(res.statusCode!)));
      req.on('error', reject);
      req.end();
    });
  }

  function assertConflict(answer: { status: number; body: { code: string } }): void {
    assert.deepEqual([answer.status, answer.body.code], [409, 'conflict']);
  }

  test('deploy/portplane-agent.service is the unit install-ssh writes with the default settings', () => {
    assert.equal(
      readFileSync('deploy/portplane-agent.service', 'utf8'),
      agentUnit({ nodeBinary: '/usr/bin/node', installDir: '/opt/portplane', serviceName: 'portplane-agent' }),
    );
  });

  test("keys pinned under a node's address before aliases are re-filed under the node, so they stay pinned", () => {
    const dir = mkdtempSync(join(tmpdir(), 'portplane-pins-'));
    const file = join(dir, '7');
    writeFileSync(
      file,
      '[192.0.2.7]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE1\n192.0.2.7 ecdsa-sha2-nistp256 AAAAE2VjZHNh\n',
    );
    pinUnderAlias(file, 'portplane-node-7');
    assert.equal(
      readFileSync(file, 'utf8'),
      'portplane-node-7 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE1\nportplane-node-7 ecdsa-sha2-nistp256 AAAAE2VjZHNh\n',
    );
    pinUnderAlias(join(dir, 'none'), 'portplane-node-8');
    assert.ok(!existsSync(join(dir, 'none')), 'no pin, nothing made');
  });
});
