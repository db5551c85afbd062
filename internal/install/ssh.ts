// Runs commands on a node with the system OpenSSH client, non-interactively. Arguments are
// a fixed vector (no local shell); the host key is pinned per node on first contact and a
// changed one is refused; a key lives in a private temp file for the session, a password
// reaches ssh only through SSH_ASKPASS from the environment, never on a command line.

import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { writeFileAtomic } from '../runtime/files.ts';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export type SshAuth = { kind: 'key'; privateKey: string } | { kind: 'password'; password: string } | { kind: 'none' };

export interface SshTarget {
  host: string;
  port: number;
  user: string;
  auth: SshAuth;
  /** Where this node's pinned host key lives. */
  knownHostsFile: string;
  /** The name the key is pinned under: the node, not its address, so an address change cannot pin a new key. */
  hostKeyAlias: string;
}

/**
 * Re-files every key in a node's known_hosts file under `alias`. Keys pinned before aliases
 * (under the node's address) stay pinned, now for the node wherever it points.
 */
export function pinUnderAlias(knownHostsFile: string, alias: string): void {
  let text: string;
  try {
    text = readFileSync(knownHostsFile, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw error;
  }
  const lines = text.split('\n').filter((line) => line.trim() !== '');
  const rewritten = lines.map((line) => line.replace(/^\S+/, alias));
  if (rewritten.join('\n') !== lines.join('\n')) writeFileAtomic(knownHostsFile, `${rewritten.join('\n')}\n`);
}

export interface SshResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export type SshFailure = 'auth_failed' | 'host_key_changed' | 'unreachable' | 'ssh_failed';

export class SshError extends Error {
  constructor(
    readonly failure: SshFailure,
    message: string,
  ) {
    super(message);
  }
}

/** Names what went wrong from ssh's own words, so the node says something a person can act on. */
export function classify(stderr: string): { failure: SshFailure; message: string } {
  if (/REMOTE HOST IDENTIFICATION HAS CHANGED|Host key verification failed/i.test(stderr)) {
    return {
      failure: 'host_key_changed',
      message:
        "the node's SSH host key differs from the one pinned at first contact; if the node was rebuilt on " +
        'purpose, reinstall with forget_host_key: true',
    };
  }
  if (/Permission denied|Too many authentication failures/i.test(stderr)) {
    return { failure: 'auth_failed', message: 'the node refused the SSH credentials (wrong key, password or user)' };
  }
  if (
    /Connection refused|timed out|No route to host|Could not resolve|Network is unreachable|Connection closed by/i.test(
      stderr,
    )
  ) {
    return { failure: 'unreachable', message: `cannot reach the node over SSH: ${stderr.trim().split('\n').pop()}` };
  }
  return {
    failure: 'ssh_failed',
    message: `ssh failed: ${stderr.trim().split('\n').slice(-2).join(' ') || 'no message'}`,
  };
}

export class SshSession {
  private readonly dir: string;
  private readonly args: string[];
  private readonly env: NodeJS.ProcessEnv;

  constructor(
    private readonly target: SshTarget,
    private readonly binary = 'ssh',
    /** How long the next command may take (an install's time left bounds each of its commands). */
    private readonly commandTimeoutMs: () => number = () => 120_000,
  ) {
    this.dir = mkdtempSync(join(tmpdir(), 'portplane-ssh-'));
    chmodSync(this.dir, 0o700);
    this.env = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? this.dir };
    this.args = [
      '-F',
      '/dev/null',
      '-o',
      `UserKnownHostsFile=${target.knownHostsFile}`,
      '-o',
      'GlobalKnownHostsFile=/dev/null',
      '-o',
      `HostKeyAlias=${target.hostKeyAlias}`,
      // The first contact pins the key; after that, any other key is refused before any credential is offered.
      '-o',
      'StrictHostKeyChecking=accept-new',
      '-o',
      'CheckHostIP=no',
      '-o',
      'ConnectTimeout=10',
      '-o',
      'ServerAliveInterval=10',
      '-o',
      'ServerAliveCountMax=3',
      '-o',
      'LogLevel=ERROR',
      '-p',
      String(target.port),
      '-l',
      target.user,
    ];
    if (target.auth.kind === 'key') {
      const keyFile = join(this.dir, 'key');
      writeFileSync(
        keyFile,
        target.auth.privateKey.endsWith('\n') ? target.auth.privateKey : `${target.auth.privateKey}\n`,
        { mode: 0o600 },
      );
      this.args.push(
        '-o',
        'BatchMode=yes',
        '-o',
        'IdentitiesOnly=yes',
        '-o',
        'PasswordAuthentication=no',
        '-o',
        'KbdInteractiveAuthentication=no',
        '-i',
        keyFile,
      );
    } else if (target.auth.kind === 'password') {
      const askpass = join(this.dir, 'askpass');
      writeFileSync(askpass, '#!/bin/sh\nprintf \'%s\\n\' "$PORTPLANE_SSH_SECRET"\n', { mode: 0o700 });
      Object.assign(this.env, {
        SSH_ASKPASS: askpass,
        SSH_ASKPASS_REQUIRE: 'force',
        DISPLAY: 'portplane:0',
        PORTPLANE_SSH_SECRET: target.auth.password,
      });
      this.args.push(
        '-o',
        'BatchMode=no',
        '-o',
        'PubkeyAuthentication=no',
        '-o',
        'PreferredAuthentications=password,keyboard-interactive',
        '-o',
        'NumberOfPasswordPrompts=1',
      );
    } else {
      this.args.push('-o', 'BatchMode=yes');
    }
  }

  /**
   * Runs `command` (a fixed string the installer builds from validated values) with `input`
   * on its stdin. Throws SshError when ssh itself fails (exit 255); returns other exits.
   */
  run(command: string, input?: Buffer | string, timeoutMs = this.commandTimeoutMs()): Promise<SshResult> {
    return new Promise((resolve, reject) => {
      const child = spawn(this.binary, [...this.args, '--', this.target.host, command], {
        env: this.env,
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout = (stdout + chunk).slice(-65536)));
      child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr = (stderr + chunk).slice(-65536)));
      const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      child.on('error', (error) => {
        clearTimeout(timer);
        reject(new SshError('ssh_failed', `cannot run ${this.binary}: ${error.message}`));
      });
      child.on('close', (code, signal) => {
        clearTimeout(timer);
        if (signal === 'SIGKILL')
          return reject(new SshError('unreachable', `the SSH command did not finish within ${timeoutMs / 1000} s`));
        if (code === 255) {
          const { failure, message } = classify(stderr);
          return reject(new SshError(failure, message));
        }
        resolve({ code, stdout, stderr });
      });
      child.stdin.on('error', () => undefined);
      child.stdin.end(input);
    });
  }

  close(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}
