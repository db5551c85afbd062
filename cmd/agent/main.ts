#!/usr/bin/env node
// The node agent: parse configuration, start forwarding and the link, stop cleanly on SIGTERM.

import { Agent } from '../../internal/agent/agent.ts';
import { createLogger } from '../../internal/log/log.ts';
import { requireNode } from '../../internal/runtime/require-node.ts';
import { VERSION } from '../../internal/version.ts';
import { agentUsage, parseAgentConfig } from './config.ts';

requireNode([20, 0, 0]);
const log = createLogger((line) => process.stdout.write(line));
const parsed = parseAgentConfig(process.argv.slice(2), process.env);
if ('exit' in parsed) {
  process.stdout.write(parsed.exit === 'help' ? agentUsage : `agent ${VERSION}\n`);
  process.exit(0);
}
if ('error' in parsed) {
  process.stderr.write(`agent: ${parsed.error}\n`);
  process.exit(2);
}

const agent = new Agent({ ...parsed.config, version: VERSION, log });
try {
  await agent.start();
  log.info('agent started', { version: VERSION, master: parsed.config.masterUrl, state_dir: parsed.config.stateDir });
} catch (error) {
  log.error('could not start', { error: (error as Error).message });
  process.exit(1);
}
let stopping = false;
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    log.info('stopping', { signal });
    agent.stop().then(
      () => process.exit(0),
      (error: unknown) => {
        log.error('stop failed', { error: String(error) });
        process.exit(1);
      },
    );
  });
}
