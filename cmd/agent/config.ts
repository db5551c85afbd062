// Agent configuration: flags over AGENT_* environment over defaults, validated up front.

import type { Parsed } from '../../internal/runtime/cli.ts';

export interface AgentConfig {
  masterUrl: string;
  token: string;
  stateDir: string;
  listenHost: string;
}

export type AgentParse = Parsed<AgentConfig>;

export const agentUsage = `Usage: agent --master URL --token TOKEN [options]

Options:
  --master URL         the master's address, e.g. http://192.0.2.1:8080 (env AGENT_MASTER_URL)
  --token TOKEN        the node's agent token from POST /api/nodes (env AGENT_TOKEN; prefer the
                       environment, since arguments are visible to every user of the machine)
  --state-dir DIR      where the last applied config and unsent traffic are kept
                       (env AGENT_STATE_DIR, default ./agent-state)
  --listen-host ADDR   address the forwarding ports listen on (env AGENT_LISTEN_HOST, default 0.0.0.0)
  --help, --version
`;

const FLAGS = { '--master': 'AGENT_MASTER_URL', '--token': 'AGENT_TOKEN', '--state-dir': 'AGENT_STATE_DIR', '--listen-host': 'AGENT_LISTEN_HOST' } as const;

export function parseAgentConfig(argv: readonly string[], env: Record<string, string | undefined>): AgentParse {
  const values: Record<string, string | undefined> = {};
  for (const [flag, name] of Object.entries(FLAGS)) values[flag] = env[name] || undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--help' || arg === '-h') return { exit: 'help' };
    if (arg === '--version') return { exit: 'version' };
    const eq = arg.indexOf('=');
    const flag = eq > 0 ? arg.slice(0, eq) : arg;
    if (!Object.hasOwn(FLAGS, flag)) return { error: `unknown option '${arg}' (see --help)` };
    const value = eq > 0 ? arg.slice(eq + 1) : argv[++i];
    if (!value) return { error: `${flag} needs a value` };
    values[flag] = value;
  }
  const master = values['--master'];
  if (!master) return { error: '--master (or AGENT_MASTER_URL) is required' };
  let url: URL;
  try {
    url = new URL(master);
  } catch {
    return { error: `--master must be a URL such as http://192.0.2.1:8080, got '${master}'` };
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return { error: '--master must be an http:// or https:// URL' };
  const token = values['--token'];
  if (!token || !/^mat_[1-9][0-9]*_[A-Za-z0-9_-]{43}$/.test(token)) return { error: '--token (or AGENT_TOKEN) must be the node\'s agent token (mat_...)' };
  return { config: { masterUrl: url.origin, token, stateDir: values['--state-dir'] ?? './agent-state', listenHost: values['--listen-host'] ?? '0.0.0.0' } };
}
