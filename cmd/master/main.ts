#!/usr/bin/env node
// The master program: parse configuration, start, and drain cleanly on SIGTERM/SIGINT.

import { createLogger } from '../../internal/log/log.ts';
import { requireNode } from '../../internal/runtime/require-node.ts';
import { VERSION } from '../../internal/version.ts';
import { parseConfig, usage } from './config.ts';
import { start } from './start.ts';

// node:sqlite and its API need 24; the store loads it lazily so this check runs first.
requireNode([24, 0, 0]);
const log = createLogger((line) => process.stdout.write(line));
const parsed = parseConfig(process.argv.slice(2), process.env);

if ('exit' in parsed) {
  process.stdout.write(parsed.exit === 'help' ? usage : `master ${VERSION}\n`);
  process.exit(0);
}
if ('error' in parsed) {
  process.stderr.write(`master: ${parsed.error}\n`);
  process.exit(2);
}

try {
  const master = await start(parsed.config, log);
  let stopping = false;
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.on(signal, () => {
      if (stopping) return;
      stopping = true;
      log.info('stopping', { signal });
      master.close().then(
        () => process.exit(0),
        (error: unknown) => {
          log.error('stop failed', { error: String(error) });
          process.exit(1);
        },
      );
    });
  }
} catch (error) {
  log.error('could not start', { error: (error as Error).message });
  process.exit(1);
}
