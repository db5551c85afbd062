#!/usr/bin/env node
// The node agent: parse configuration, start forwarding and the link, stop cleanly on SIGTERM. An agent that trusts
// release keys runs as a supervisor, which runs the agent itself as its worker and carries out upgrades. The bundle is
// also what the relay's threads run (forward/relay-thread.ts): in a thread this file does nothing.

import { isMainThread } from 'node:worker_threads';
import { Agent } from '../../internal/agent/agent.ts';
import { ROLE_ENV, Supervisor, type WorkerRole } from '../../internal/agent/supervisor.ts';
import { inheritedSockets, obeySupervisor, supervisorChannel } from '../../internal/agent/worker.ts';
import { removeAgentTables } from '../../internal/kernel/nft.ts';
import { streamLogger } from '../../internal/log/log.ts';
import { run } from '../../internal/runtime/cli.ts';
import { requireNode } from '../../internal/runtime/require-node.ts';
import { VERSION } from '../../internal/version.ts';
import { agentUsage, parseAgentConfig } from './config.ts';

async function main(): Promise<void> {
  requireNode([20, 0, 0]);
  const log = streamLogger(process.stdout);
  const args = process.argv.slice(2);
  // What the agent leaves on the node beyond its folder: its nftables table, which forwards on when the agent stops.
  if (args.includes('--uninstall')) {
    try {
      log.info('removed the agent nftables tables', { tables: await removeAgentTables() });
      process.exit(0);
    } catch (error) {
      process.stderr.write(`agent: ${(error as Error).message}\n`);
      process.exit(1);
    }
  }
  const role = process.env[ROLE_ENV] as WorkerRole | undefined;
  await run({
    name: 'agent',
    version: VERSION,
    usage: agentUsage,
    log,
    parsed: parseAgentConfig(args, process.env),
    async start(config) {
      if (!role && config.releaseKeys.length > 0) {
        const supervisor = new Supervisor({
          launcher: process.argv[1]!,
          execArgv: process.execArgv,
          args,
          stateDir: config.stateDir,
          releaseKeys: config.releaseKeys,
          drainSeconds: config.drainSeconds,
          log,
        });
        supervisor.start();
        log.info('agent supervisor started', { version: VERSION, state_dir: config.stateDir });
        return () => supervisor.stop();
      }
      const supervised = role !== undefined && process.send !== undefined;
      const agent = new Agent({
        ...config,
        version: VERSION,
        log,
        ...(supervised ? { supervisor: supervisorChannel } : {}),
        ...(role === 'takeover' ? { inherited: await inheritedSockets() } : {}),
      });
      await agent.start();
      if (supervised) obeySupervisor(agent, log, (code) => process.exit(code));
      log.info('agent started', { version: VERSION, master: config.masterUrl, state_dir: config.stateDir });
      return () => agent.stop();
    },
  });
}

if (isMainThread) await main();
