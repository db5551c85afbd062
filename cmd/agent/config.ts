// Agent configuration: flags over AGENT_* environment over defaults, validated up front.

import { readFileSync } from 'node:fs';
import type { Parsed } from '../../internal/runtime/cli.ts';
import { masterOrigin } from '../../internal/schema/net.ts';

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
  --env-file FILE      read AGENT_* settings from FILE: one KEY=VALUE per line, taken literally
                       (no quotes, no expansion; lines starting with # are comments). Flags
                       win over the file, the file over the environment.
  --help, --version
`;

const FLAGS = { '--master': 'AGENT_MASTER_URL', '--token': 'AGENT_TOKEN', '--state-dir': 'AGENT_STATE_DIR', '--listen-host': 'AGENT_LISTEN_HOST', '--env-file': 'AGENT_ENV_FILE' } as const;
const FILE_KEYS = new Set<string>(Object.values(FLAGS).filter((name) => name !== 'AGENT_ENV_FILE'));

/**
 * The settings in an env file, read as data: never by a shell, so nothing in a value is
 * syntax. Returns an error string for a line that is not KEY=VALUE with a known key.
 */
export function parseEnvFile(text: string): Record<string, string> | string {
  const values: Record<string, string> = {};
  for (const [index, raw] of text.split('\n').entries()) {
    const line = raw.replace(/\r$/, '');
    if (line.trim() === '' || line.trimStart().startsWith('#')) continue;
    const eq = line.indexOf('=');
    const key = eq > 0 ? line.slice(0, eq) : '';
    if (!FILE_KEYS.has(key)) return `line ${index + 1} is not KEY=VALUE with one of ${[...FILE_KEYS].join(', ')}`;
    values[key] = line.slice(eq + 1);
  }
  return values;
}

export function parseAgentConfig(
  argv: readonly string[],
  env: Record<string, string | undefined>,
  readFile: (path: string) => string = (path) => readFileSync(path, 'utf8'),
): AgentParse {
  const values: Record<string, string | undefined> = {};
  for (const [flag, name] of Object.entries(FLAGS)) values[flag] = env[name] || undefined;
  const flags: Record<string, string> = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--help' || arg === '-h') return { exit: 'help' };
    if (arg === '--version') return { exit: 'version' };
    const eq = arg.indexOf('=');
    const flag = eq > 0 ? arg.slice(0, eq) : arg;
    if (!Object.hasOwn(FLAGS, flag)) return { error: `unknown option '${arg}' (see --help)` };
    const value = eq > 0 ? arg.slice(eq + 1) : argv[++i];
    if (!value) return { error: `${flag} needs a value` };
    flags[flag] = value;
  }
  const envFile = flags['--env-file'] ?? values['--env-file'];
  if (envFile) {
    let text: string;
    try {
      text = readFile(envFile);
    } catch (error) {
      return { error: `cannot read --env-file ${envFile}: ${(error as Error).message}` };
    }
    const fromFile = parseEnvFile(text);
    if (typeof fromFile === 'string') return { error: `${envFile}: ${fromFile}` };
    for (const [flag, name] of Object.entries(FLAGS)) if (fromFile[name]) values[flag] = fromFile[name];
  }
  Object.assign(values, flags);
  const master = values['--master'];
  if (!master) return { error: '--master (or AGENT_MASTER_URL) is required' };
  const origin = masterOrigin(master);
  if (origin === null) return { error: `--master must be http(s)://HOST[:PORT], such as http://192.0.2.1:8080, got '${master}'` };
  const token = values['--token'];
  if (!token || !/^mat_[1-9][0-9]*_[A-Za-z0-9_-]{43}$/.test(token)) return { error: '--token (or AGENT_TOKEN) must be the node\'s agent token (mat_...)' };
  return { config: { masterUrl: origin, token, stateDir: values['--state-dir'] ?? './agent-state', listenHost: values['--listen-host'] ?? '0.0.0.0' } };
}
