#!/usr/bin/env node
// The node agent: parse configuration, start forwarding and the link, stop cleanly on SIGTERM.

import { Agent } from '../../internal/agent/agent.ts';
import { removeAgentTables } from '../../internal/kernel/nft.ts';
import { streamLogger } from '../../internal/log/log.ts';
import { run } from '../../internal/runtime/cli.ts';
import { requireNode } from '../../internal/runtime/require-node.ts';
import { VERSION } from '../../internal/version.ts';
import { agentUsage, parseAgentConfig } from './config.ts';

requireNode([20, 0, 0]);
const log = streamLogger(process.stdout);
// What the agent leaves on the node beyond its folder: its nftables table, which forwards on when the agent stops.
if (process.argv.slice(2).includes('--uninstall')) {
  try {
    log.info('removed the agent nftables tables', { tables: await removeAgentTables() });
    process.exit(0);
  } catch (error) {
    process.stderr.write(`agent: ${(error as Error).message}\n`);
    process.exit(1);
  }
}
await run({
  name: 'agent',
  version: VERSION,
  usage: agentUsage,
  log,
  parsed: parseAgentConfig(process.argv.slice(2), process.env),
  async start(config) {
    const agent = new Agent({ ...config, version: VERSION, log });
    await agent.start();
    log.info('agent started', { version: VERSION, master: config.masterUrl, state_dir: config.stateDir });
    return () => agent.stop();
  },
});
