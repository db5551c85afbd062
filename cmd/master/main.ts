#!/usr/bin/env node
// The master program: parse configuration, start, and drain cleanly on SIGTERM/SIGINT.

import { streamLogger } from '../../internal/log/log.ts';
import { run } from '../../internal/runtime/cli.ts';
import { requireNode } from '../../internal/runtime/require-node.ts';
import { VERSION } from '../../internal/version.ts';
import { readFileSync } from 'node:fs';
import { isMainThread } from 'node:worker_threads';
import { commandUsage, parseCommand, runCommand } from './commands.ts';
import { parseConfig, usage } from './config.ts';
import { startElected } from './elected.ts';
import { start, type Master } from './start.ts';

async function main(): Promise<void> {
  // node:sqlite and its API need 24; the store loads it lazily so this check runs first.
  requireNode([24, 0, 0]);
  // Whatever the master writes (database, keys, pinned host keys) is for its own user alone.
  process.umask(0o077);
  const command = parseCommand(process.argv.slice(2), process.env);
  if (command && 'error' in command) {
    process.stderr.write(`master: ${command.error}\n`);
    process.exit(2);
  }
  if (command) {
    try {
      const stdin = () => (process.stdin.isTTY ? '' : readFileSync(0, 'utf8'));
      process.stdout.write(await runCommand(command, stdin));
      process.exit(0);
    } catch (error) {
      process.stderr.write(`master ${command.name}: ${(error as Error).message}\n`);
      process.exit(1);
    }
  }
  const log = streamLogger(process.stdout);
  await run({
    name: 'master',
    version: VERSION,
    usage: `${usage}\n${commandUsage}`,
    log,
    parsed: parseConfig(process.argv.slice(2), process.env),
    async start(config) {
      // Renewals: swap the certificate files, then `systemctl reload` (SIGHUP). Handled from the
      // start, so a SIGHUP right after the listening line never takes the default action (exit).
      let master: Master | undefined;
      process.on('SIGHUP', () => (master ? master.reloadTls() : log.warn('SIGHUP before the master was up; ignored')));
      master = config.etcd ? await startElected(config, log) : await start(config, log);
      return master.close;
    },
  });
}

// The worker threads of imports and batches load this same file (see workers.ts): they are not masters.
if (isMainThread) await main();
