// Installs (or reinstalls) the agent on a node over SSH, as a background job whose steps,
// log tail and outcome are recorded on the node: probe the node, make sure it has a
// Node.js new enough (its own, or the master's runtime when OS and architecture match),
// copy the agent, write its environment and service, start it with a fresh agent token,
// and wait for it to connect.

import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { hashSecret, newAgentToken } from '../auth/secrets.ts';
import type { SecretBox } from '../crypto/box.ts';
import { issueTunnelKeys } from '../tunnel/keys.ts';
import type { Logger } from '../log/log.ts';
import type { Clock } from '../runtime/clock.ts';
import type { Settings } from '../settings/settings.ts';
import type { Store } from '../store/store.ts';
import type { SyncHub } from '../sync/hub.ts';
import type { Actor } from '../store/audit.ts';
import { agentEnvironment, envFile, type MasterDial } from './agent-env.ts';
import { agentBundle } from './bundle.ts';
import { pinUnderAlias, SshError, SshSession, type SshAuth } from './ssh.ts';
import { agentUnit } from './unit.ts';

export type InstallMode = 'install' | 'reinstall';

const MIN_AGENT_NODE_MAJOR = 20;
const CONNECT_WAIT_MS = 30_000;

/** A value in single quotes for a POSIX shell. Values are validated already; this is the second line of defence. */
export function shellQuote(value: string): string {
  return `'${value.replace(/'/g, `'\\''`)}'`;
}

const UNAME: Record<string, string> = { 'Linux x86_64': 'linux-x64', 'Linux aarch64': 'linux-arm64' };

export interface Probe {
  platform: string | null;
  nodePath: string | null;
  nodeMajor: number | null;
  systemd: boolean;
}

const PROBE =
  'uname -sm; command -v node || echo no-node; node --version 2>/dev/null || echo v0; if [ -d ' +
  '/run/systemd/system ]; then echo systemd; else echo no-systemd; fi';

/** A path we will write into a unit file and a script: plain characters only, whatever the node printed. */
const PLAIN_PATH = /^(\/[A-Za-z0-9._+-]+)+$/;

export function parseProbe(stdout: string): Probe {
  const [uname = '', nodePath = 'no-node', nodeVersion = 'v0', init = 'no-systemd'] = stdout
    .trim()
    .split('\n')
    .map((l) => l.trim());
  const major = Number(/^v(\d+)\./.exec(nodeVersion)?.[1] ?? 0);
  return {
    platform: UNAME[uname] ?? null,
    nodePath: PLAIN_PATH.test(nodePath) ? nodePath : null,
    nodeMajor: major > 0 ? major : null,
    systemd: init === 'systemd',
  };
}

class InstallFailure extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** What the installer uses of the master. */
export interface InstallBackend {
  readonly store: Store;
  readonly box: SecretBox;
  readonly settings: Settings;
  readonly sync: SyncHub;
  readonly log: Logger;
  readonly clock: Clock;
  readonly dataDir: string;
  /** True once the master is shutting down: a running install stops at its next step. */
  readonly draining: boolean;
}

export class Installer {
  private readonly running = new Set<number>();

  constructor(
    private readonly app: InstallBackend,
    private readonly ssh = 'ssh',
  ) {}

  isRunning(nodeId: number): boolean {
    return this.running.has(nodeId);
  }

  /** Where the node's pinned SSH host key lives. */
  private knownHostsFile(nodeId: number): string {
    mkdirSync(join(this.app.dataDir, 'known_hosts'), { recursive: true, mode: 0o700 });
    return join(this.app.dataDir, 'known_hosts', String(nodeId));
  }

  /**
   * Marks the node installing and starts the job; the caller has checked it may. With
   * `forgetHostKey`, the node's pinned host key is dropped first (a node rebuilt on purpose).
   */
  begin(nodeId: number, mode: InstallMode, dial: MasterDial, forgetHostKey: boolean, actor: Actor): void {
    const { store } = this.app;
    this.running.add(nodeId);
    if (forgetHostKey) rmSync(this.knownHostsFile(nodeId), { force: true });
    store.write(() => {
      store.nodes.installStarted(nodeId, `${mode}: connecting over SSH`, this.app.clock.timestamp());
      store.audit.record(
        actor,
        {
          action: `node.${mode}`,
          resource: 'node',
          resource_id: nodeId,
          status: 'success',
          changes: { master_url: dial.masterUrl, master_pin: dial.pin, forget_host_key: forgetHostKey },
        },
        this.app.clock.timestamp(),
      );
    });
    void this.run(nodeId, mode, dial)
      .catch((error: Error) => this.app.log.error('install job failed', { node_id: nodeId, error: error.message }))
      .finally(() => this.running.delete(nodeId));
  }

  private log(nodeId: number, detail: string, line = detail): void {
    if (this.app.draining) throw new InstallFailure('interrupted', 'the master shut down during the install');
    const entry = `[${this.app.clock.timestamp()}] ${line}\n`;
    this.app.store.db.whenWritable(() =>
      this.app.store.write(() => this.app.store.nodes.installProgress(nodeId, detail, entry)),
    );
  }

  private async run(nodeId: number, mode: InstallMode, dial: MasterDial): Promise<void> {
    const { masterUrl } = dial;
    const { app } = this;
    const node = app.store.nodes.find(nodeId);
    const sealed = app.store.nodes.sealedSecret(nodeId);
    if (!node || !sealed) return;
    const auth: SshAuth =
      sealed.auth === 'key' && sealed.sealed
        ? { kind: 'key', privateKey: app.box.open(sealed.sealed) }
        : sealed.auth === 'password' && sealed.sealed
          ? { kind: 'password', password: app.box.open(sealed.sealed) }
          : { kind: 'none' };
    const knownHostsFile = this.knownHostsFile(nodeId);
    const hostKeyAlias = `portplane-node-${nodeId}`;
    pinUnderAlias(knownHostsFile, hostKeyAlias);
    const session = new SshSession(
      { host: node.host, port: node.ssh_port, user: node.ssh_user, auth, knownHostsFile, hostKeyAlias },
      this.ssh,
    );
    const dir = app.settings.get('install_dir');
    const service = app.settings.get('install_service_name');
    try {
      this.log(
        nodeId,
        `${mode}: probing the node`,
        `ssh ${node.ssh_user}@${node.host}:${node.ssh_port} ` +
          `(${auth.kind === 'none' ? "the master's own SSH keys" : auth.kind})`,
      );
      const probe = parseProbe((await session.run(PROBE)).stdout);
      this.log(
        nodeId,
        `${mode}: probed`,
        `platform ${probe.platform ?? 'unknown'}, node ${probe.nodeMajor ?? 'none'}` +
          `${probe.nodePath ? ` at ${probe.nodePath}` : ''}, ${probe.systemd ? 'systemd' : 'no systemd'}`,
      );

      let nodeBinary = probe.nodePath;
      if (!nodeBinary || (probe.nodeMajor ?? 0) < MIN_AGENT_NODE_MAJOR) {
        const mine = `${process.platform}-${process.arch}`;
        if (probe.platform !== mine) {
          throw new InstallFailure(
            'runtime_missing',
            `the node has no Node.js ${MIN_AGENT_NODE_MAJOR}+ and is ${probe.platform ?? 'an unknown platform'}, ` +
              `not ${mine} like the master, so the master's runtime cannot be copied; install Node.js ` +
              `${MIN_AGENT_NODE_MAJOR} or newer on it and retry`,
          );
        }
        this.log(
          nodeId,
          `${mode}: copying a Node.js runtime`,
          `no Node.js ${MIN_AGENT_NODE_MAJOR}+ on the node; copying the master's own (${process.version}) to ` +
            `${dir}/node`,
        );
        nodeBinary = `${dir}/node`;
        await this.copy(session, readFileSync(process.execPath), nodeBinary, '0755');
      }

      this.log(nodeId, `${mode}: copying the agent`, `copying agent.mjs to ${dir}`);
      await this.copy(session, agentBundle(), `${dir}/agent.mjs`, '0644');

      const token = newAgentToken(nodeId);
      this.log(
        nodeId,
        `${mode}: writing the agent's environment`,
        `${dir}/agent.env (mode 0600)${dial.pin ? `, pinning the master's key ${dial.pin}` : ''}`,
      );
      await this.copy(session, Buffer.from(envFile(agentEnvironment(dial, token))), `${dir}/agent.env`, '0600');
      // From here the old token no longer works: the new agent is about to start with the new one.
      await app.store.db.writable();
      app.store.write(() => {
        app.store.nodes.setAgentTokenHash(nodeId, hashSecret(token));
        this.rekeyTunnels(nodeId);
      });

      const start = probe.systemd ? this.systemdScript(nodeBinary, dir, service) : this.fallbackScript(nodeBinary, dir);
      this.log(
        nodeId,
        `${mode}: starting the agent`,
        probe.systemd ? `systemd service ${service}` : `no systemd: nohup with ${dir}/agent.pid and ${dir}/agent.log`,
      );
      const started = await session.run('/bin/sh -s', start);
      if (started.code !== 0)
        throw new InstallFailure(
          'start_failed',
          `starting the agent failed (exit ${started.code}): ` +
            `${started.stderr.trim().slice(-500) || started.stdout.trim().slice(-500)}`,
        );

      this.log(nodeId, `${mode}: waiting for the agent to connect`, `the agent dials ${masterUrl}`);
      if (!(await this.connected(nodeId))) {
        throw new InstallFailure(
          'agent_silent',
          `the agent started but did not connect to ${masterUrl} within ${CONNECT_WAIT_MS / 1000} s; check that ` +
            `the node can reach that address (install_master_url)`,
        );
      }
      await app.store.db.writable();
      this.finish(nodeId, mode, null);
    } catch (error) {
      const failure =
        error instanceof SshError || error instanceof InstallFailure
          ? error
          : new InstallFailure('install_failed', (error as Error).message);
      const code = failure instanceof SshError ? failure.failure : failure.code;
      await app.store.db.writable();
      this.finish(nodeId, mode, `${code}: ${failure.message}`);
    } finally {
      session.close();
    }
  }

  /**
   * A (re)installed node's tunnels get new key pairs, so keys the old installation held open
   * nothing; the other ends learn the new ones with their next config. Call inside a write.
   */
  private rekeyTunnels(nodeId: number): void {
    const { store, box, sync } = this.app;
    for (const tunnelId of store.tunnels.idsOfNode(nodeId)) {
      const tunnel = store.tunnels.find(tunnelId)!;
      store.tunnels.setKeys(
        tunnelId,
        issueTunnelKeys(tunnelId, (key) => box.seal(key)),
      );
      for (const end of [tunnel.entry_node_id, tunnel.exit_node_id]) {
        store.nodes.bumpConfig(end);
        store.db.afterCommit(() => sync.configChanged(end));
      }
    }
  }

  private async copy(session: SshSession, content: Buffer, path: string, mode: string): Promise<void> {
    const tmp = `${path}.tmp`;
    const result = await session.run(
      `umask 077 && mkdir -p ${shellQuote(path.slice(0, path.lastIndexOf('/')))} && cat > ${shellQuote(tmp)} && ` +
        `chmod ${mode} ${shellQuote(tmp)} && mv -f ${shellQuote(tmp)} ${shellQuote(path)}`,
      content,
    );
    if (result.code !== 0)
      throw new InstallFailure(
        'copy_failed',
        `writing ${path} on the node failed: ${result.stderr.trim().slice(-300)}`,
      );
  }

  private systemdScript(nodeBinary: string, dir: string, service: string): string {
    const unitPath = `/etc/systemd/system/${service}.service`;
    return [
      'set -e',
      `cat > ${shellQuote(unitPath)} <<'PORTPLANE_UNIT'`,
      agentUnit({ nodeBinary, installDir: dir, serviceName: service }).trimEnd(),
      'PORTPLANE_UNIT',
      'systemctl daemon-reload',
      `systemctl enable ${shellQuote(service)} >/dev/null 2>&1`,
      `systemctl restart ${shellQuote(service)}`,
      '',
    ].join('\n');
  }

  /**
   * Where there is no systemd: a nohup'd agent with a pid file; it does not come back after a reboot (see the README).
   */
  private fallbackScript(nodeBinary: string, dir: string): string {
    const q = shellQuote;
    return [
      'set -e',
      `cd ${q(dir)}`,
      'if [ -f agent.pid ] && kill -0 "$(cat agent.pid)" 2>/dev/null; then kill "$(cat agent.pid)"; sleep 1; fi',
      // The agent reads its env file itself, as data: no shell ever parses what is in it.
      `nohup ${q(nodeBinary)} ${q(`${dir}/agent.mjs`)} --env-file ${q(`${dir}/agent.env`)} ` +
        `--state-dir ${q(`${dir}/state`)} >> agent.log 2>&1 < /dev/null &`,
      'echo $! > agent.pid',
      '',
    ].join('\n');
  }

  private async connected(nodeId: number): Promise<boolean> {
    const deadline = Date.now() + CONNECT_WAIT_MS;
    while (Date.now() < deadline) {
      if (this.app.sync.isConnected(nodeId)) return true;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    return false;
  }

  private finish(nodeId: number, mode: InstallMode, error: string | null): void {
    const { store } = this.app;
    // The master may have shut down (and closed the store) while the job ran.
    if (this.app.draining || !store.nodes.find(nodeId)) return;
    const system: Actor = { actor_type: 'system', actor_id: null, actor_name: 'system', ip: null, request_id: null };
    store.write(() => {
      store.nodes.installProgress(
        nodeId,
        error ?? `${mode}: done`,
        `[${this.app.clock.timestamp()}] ${error ? `failed: ${error}` : 'done: the agent is connected'}\n`,
      );
      // Whatever happened, a connected agent means the node is online: a failed reinstall leaves the old one
      // forwarding, and the detail says what failed.
      store.nodes.installFinished(
        nodeId,
        this.app.sync.isConnected(nodeId) ? 'online' : 'install_failed',
        error,
        this.app.clock.timestamp(),
      );
      store.audit.record(
        system,
        {
          action: `node.${mode}`,
          resource: 'node',
          resource_id: nodeId,
          status: error ? 'failed' : 'success',
          changes: { outcome: error ?? 'connected' },
        },
        this.app.clock.timestamp(),
      );
    });
  }
}
