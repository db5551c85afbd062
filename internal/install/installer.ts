// Installs (or reinstalls) the agent on a node over SSH, as a background job whose steps,
// log tail and outcome are recorded on the node: probe the node, make sure it has a
// Node.js new enough (its own, or the master's runtime when OS and architecture match),
// copy the agent, write its environment and service, start it with a fresh agent token,
// and wait for it to connect.

import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { hashSecret, newAgentToken } from '../auth/secrets.ts';
import type { SecretBox } from '../crypto/box.ts';
import { issueExitKeys, issueTunnelKeys } from '../tunnel/keys.ts';
import type { Logger } from '../log/log.ts';
import type { Clock } from '../runtime/clock.ts';
import type { Settings } from '../settings/settings.ts';
import type { Store } from '../store/store.ts';
import type { SyncHub } from '../sync/hub.ts';
import { SYSTEM_ACTOR } from '../store/audit.ts';
import { DomainError } from '../errors/errors.ts';
import { agentEnvironment, envFile, type MasterDial } from './agent-env.ts';
import { agentBundle } from './bundle.ts';
import { pinUnderAlias, SshError, SshSession, type SshAuth } from './ssh.ts';
import { agentUnit } from './unit.ts';

export type InstallMode = 'install' | 'reinstall';

const MIN_AGENT_NODE_MAJOR = 20;
const CONNECT_WAIT_MS = 30_000;
/** The longest an install may take, every step included: past it the node is install_failed (timed_out). */
export const INSTALL_TIMEOUT_MS = 10 * 60_000;
/** The longest one SSH command may take. */
const SSH_COMMAND_MS = 120_000;

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
    private readonly timeoutMs = INSTALL_TIMEOUT_MS,
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
   * Marks the node installing, inside the write of the request that asks for it (with that request's audit entry,
   * written by the caller). Throws `conflict` unless the node may be (re)installed now: the row is the lock, so two
   * requests cannot both pass.
   */
  markStarted(nodeId: number, mode: InstallMode): void {
    const { store } = this.app;
    const node = store.nodes.find(nodeId);
    if (!node) throw new DomainError('not_found', `node ${nodeId} does not exist`);
    if (this.running.has(nodeId) || node.status === 'installing')
      throw new DomainError(
        'conflict',
        `an install is already running on node ${nodeId}; watch GET /api/nodes/${nodeId}`,
      );
    if (mode === 'install' && (node.status === 'online' || node.status === 'offline'))
      throw new DomainError(
        'conflict',
        `node ${nodeId} already has an agent (${node.status}); use POST /api/nodes/${nodeId}/reinstall`,
      );
    store.nodes.installStarted(nodeId, `${mode}: connecting over SSH`, this.app.clock.timestamp());
  }

  /**
   * Runs the job of an install `markStarted` recorded and its caller committed. It ends, whatever happens, with the
   * node's outcome written (install_failed with the reason, timed_out past INSTALL_TIMEOUT_MS) and the node no longer
   * marked running. With `forgetHostKey`, the node's pinned host key is dropped first (a node rebuilt on purpose).
   */
  run(nodeId: number, mode: InstallMode, dial: MasterDial, forgetHostKey: boolean): Promise<void> {
    this.running.add(nodeId);
    return this.job(nodeId, mode, dial, forgetHostKey)
      .then((error) => this.finish(nodeId, mode, error))
      .catch((error: Error) =>
        this.app.log.error('recording the outcome of an install failed', { node_id: nodeId, error: error.message }),
      )
      .finally(() => this.running.delete(nodeId));
  }

  private log(nodeId: number, detail: string, line = detail): void {
    if (this.app.draining) throw new InstallFailure('interrupted', 'the master shut down during the install');
    const entry = `[${this.app.clock.timestamp()}] ${line}\n`;
    this.app.store.db.whenWritable(() =>
      this.app.store.write(() => this.app.store.nodes.installProgress(nodeId, detail, entry)),
    );
  }

  /** The install's steps; resolves to why it failed (`code: message`), or null once the agent is connected. */
  private async job(
    nodeId: number,
    mode: InstallMode,
    dial: MasterDial,
    forgetHostKey: boolean,
  ): Promise<string | null> {
    // Each SSH command takes at most the time left, and none starts past it.
    const deadline = new Deadline(this.timeoutMs);
    try {
      if (forgetHostKey) rmSync(this.knownHostsFile(nodeId), { force: true });
      await this.steps(nodeId, mode, dial, deadline);
      return null;
    } catch (error) {
      // A step cut short by the install's deadline (its SSH command killed) failed for that reason.
      const failure =
        deadline.timedOut() ??
        (error instanceof SshError || error instanceof InstallFailure
          ? error
          : new InstallFailure('install_failed', (error as Error).message));
      return `${failure instanceof SshError ? failure.failure : failure.code}: ${failure.message}`;
    }
  }

  private async steps(nodeId: number, mode: InstallMode, dial: MasterDial, deadline: Deadline): Promise<void> {
    const { masterUrl } = dial;
    const { app } = this;
    const node = app.store.nodes.find(nodeId);
    const sealed = app.store.nodes.sealedSecret(nodeId);
    if (!node || !sealed) throw new InstallFailure('interrupted', 'the node was deleted during the install');
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
      () => deadline.left(SSH_COMMAND_MS),
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
      await app.store.db.writeInTurn(() => {
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
      const waitMs = deadline.left(CONNECT_WAIT_MS);
      if (!(await this.connected(nodeId, waitMs))) {
        deadline.left();
        throw new InstallFailure(
          'agent_silent',
          `the agent started but did not connect to ${masterUrl} within ${Math.round(waitMs / 1000)} s; check ` +
            `that the node can reach that address (install_master_url)`,
        );
      }
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
      // The node's own key pair is what is new: an exit past the first has one of its own.
      if (tunnel.entry_node_id === nodeId || tunnel.exit_node_id === nodeId)
        store.tunnels.setKeys(
          tunnelId,
          issueTunnelKeys(tunnelId, (key) => box.seal(key)),
        );
      else
        store.tunnels.setExitKeys(
          tunnelId,
          nodeId,
          issueExitKeys(tunnelId, nodeId, (key) => box.seal(key)),
        );
      for (const end of [tunnel.entry_node_id, ...tunnel.exit_node_ids]) {
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

  private async connected(nodeId: number, waitMs: number): Promise<boolean> {
    const deadline = Date.now() + waitMs;
    while (Date.now() < deadline) {
      if (this.app.sync.isConnected(nodeId)) return true;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    return false;
  }

  /** Writes the install's outcome, in its turn; a master shutting down leaves it to its next start (afterRestart). */
  private async finish(nodeId: number, mode: InstallMode, error: string | null): Promise<void> {
    const { store } = this.app;
    if (this.app.draining) return;
    await store.db.writeInTurn(() => {
      if (!store.nodes.exists(nodeId)) return;
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
        SYSTEM_ACTOR,
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

/** The time an install has left; past it, every step fails with timed_out. */
class Deadline {
  private readonly at: number;

  constructor(private readonly ms: number) {
    this.at = Date.now() + ms;
  }

  /** The time left, at most `ms`. Throws InstallFailure (timed_out) when none is. */
  left(ms = Infinity): number {
    const failure = this.timedOut();
    if (failure) throw failure;
    return Math.min(ms, this.at - Date.now());
  }

  /** The failure of an install past its time, or null while it has time left. */
  timedOut(): InstallFailure | null {
    if (Date.now() < this.at) return null;
    const within = this.ms >= 60_000 ? `${this.ms / 60_000} minutes` : `${this.ms / 1000} s`;
    return new InstallFailure(
      'timed_out',
      `the install did not finish within ${within}; the install log shows its last step`,
    );
  }
}
