// Agent configuration: flags over an env file over AGENT_* environment over defaults,
// validated up front. An agent never talks to a master it cannot verify: https with a pin
// or the system CAs, or plain HTTP only to this machine unless told --insecure-http.

import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import type { Parsed } from '../../internal/runtime/cli.ts';
import { isLoopback, masterOrigin } from '../../internal/schema/net.ts';
import { PIN } from '../../internal/tls/pin.ts';
import type { KeyObject } from 'node:crypto';
import { parseReleaseKeys } from '../../internal/release/signature.ts';
import { forwardingModes, type ForwardingMode } from '../../internal/forward/forwarder.ts';

export interface AgentConfig {
  masterUrl: string;
  /** The master's key pin (sha256/<base64>); null: verify its certificate against the system CAs. */
  masterPin: string | null;
  /** The masters after the first (its standbys), each with its pin, in the order the agent tries them. */
  otherMasters: { url: string; pin: string | null }[];
  token: string;
  stateDir: string;
  listenHost: string;
  forwarding: ForwardingMode;
  resolveSeconds: number;
  /** The release keys whose signed bundles this agent will run (what POST /api/nodes gives); none: no upgrades. */
  releaseKeys: KeyObject[];
  /** How long an agent that an upgrade replaced carries its open connections. */
  drainSeconds: number;
  /** How many threads relay the rules straight to their targets (see forward/relay-thread.ts). */
  relayWorkers: number;
}

export type AgentParse = Parsed<AgentConfig>;

export const agentUsage = `Usage: agent --master URL --token TOKEN [options]

Options:
  --master URL         the master's address, e.g. https://192.0.2.1:8080 (env AGENT_MASTER_URL); with
                       standbys, each one (given again, or comma-separated): tried in order
  --master-pin PIN     the master's key pin, sha256/<base64> as POST /api/nodes shows it (env
                       AGENT_MASTER_PIN); with standbys, one for each master, in their order. Without it an
                       https master must have a certificate the system trusts. The agent sends nothing to a
                       master it cannot verify.
  --token TOKEN        the node's agent token from POST /api/nodes (env AGENT_TOKEN; prefer the
                       environment, since arguments are visible to every user of the machine)
  --release-key KEYS   the release keys (comma-separated) whose signed agent bundles this agent will run,
                       as POST /api/nodes gives them (env AGENT_RELEASE_KEY); none: it runs no other bundle.
                       With keys the agent runs under a supervisor that carries out upgrades
  --drain-seconds N    after an upgrade, how long the old agent carries its open relayed connections
                       (env AGENT_DRAIN_SECONDS, default 60)
  --state-dir DIR      where the last applied config and unsent traffic are kept
                       (env AGENT_STATE_DIR, default ./agent-state)
  --listen-host ADDR   address the forwarding ports listen on (env AGENT_LISTEN_HOST, default 0.0.0.0)
  --forwarding MODE    auto: direct rules in the kernel (nftables) where the agent can, else the relay;
                       kernel: the kernel only (rules it cannot carry fail); relay: user space only
                       (env AGENT_FORWARDING, default auto)
  --relay-workers N    how many threads relay (1 to 64), each listening on every relayed port and sharing
                       every rule control; about 20 MiB each (env AGENT_RELAY_WORKERS, default the node's
                       cores, at most 4; 1 on Node.js older than 22.12, which lacks reusePort)
  --resolve-every SECONDS
                       how often the kernel path looks up its targets' host names again, and
                       follows a changed address (env AGENT_RESOLVE_SECONDS, default 60)
  --uninstall          remove the agents' nftables tables (inet portplane_<node id>) and exit
  --env-file FILE      read AGENT_* settings from FILE: one KEY=VALUE per line, taken literally
                       (no quotes, no expansion; lines starting with # are comments). Flags
                       win over the file, the file over the environment.
  --insecure-http      allow an http:// master that is not on this machine: the token then
                       crosses the network in clear (env AGENT_INSECURE_HTTP=1)
  --help, --version
`;

const FLAGS = {
  '--master': 'AGENT_MASTER_URL',
  '--master-pin': 'AGENT_MASTER_PIN',
  '--token': 'AGENT_TOKEN',
  '--state-dir': 'AGENT_STATE_DIR',
  '--listen-host': 'AGENT_LISTEN_HOST',
  '--forwarding': 'AGENT_FORWARDING',
  '--resolve-every': 'AGENT_RESOLVE_SECONDS',
  '--release-key': 'AGENT_RELEASE_KEY',
  '--drain-seconds': 'AGENT_DRAIN_SECONDS',
  '--relay-workers': 'AGENT_RELAY_WORKERS',
  '--env-file': 'AGENT_ENV_FILE',
} as const;
/** Flags that take no value; their variable is on when it is 1 or true. */
const SWITCHES = { '--insecure-http': 'AGENT_INSECURE_HTTP' } as const;
const FILE_KEYS = new Set<string>(
  [...Object.values(FLAGS), ...Object.values(SWITCHES)].filter((name) => name !== 'AGENT_ENV_FILE'),
);

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

const on = (value: string | undefined) => /^(1|true)$/i.test(value ?? '');

/** The most masters an agent is given: a primary and its standbys. */
const MAX_MASTERS = 8;

/** A master as given (its address, and its pin or none), or why an agent must not talk to it. */
function checkMaster(
  master: string,
  pin: string | null,
  insecureHttp: boolean,
): { url: string; pin: string | null } | string {
  const origin = masterOrigin(master);
  if (origin === null) return `--master must be http(s)://HOST[:PORT], such as https://192.0.2.1:8080, got '${master}'`;
  const url = new URL(origin);
  if (pin !== null && !PIN.test(pin))
    return `--master-pin must be sha256/<base64 of 32 bytes>, as POST /api/nodes shows it, got '${pin}'`;
  if (url.protocol === 'http:') {
    if (pin !== null) return '--master-pin pins a TLS key: give the master as https://';
    if (!isLoopback(url.hostname.replace(/^\[|\]$/g, '')) && !insecureHttp)
      return (
        `--master ${origin} would send the agent token in clear across the network: use https:// (with ` +
        `--master-pin for a master's own certificate), or pass --insecure-http`
      );
  }
  return { url: origin, pin };
}

export function parseAgentConfig(
  argv: readonly string[],
  env: Record<string, string | undefined>,
  readFile: (path: string) => string = (path) => readFileSync(path, 'utf8'),
): AgentParse {
  // Settings by variable name: the environment first, then the env file, then flags over both.
  const settings: Record<string, string | undefined> = {};
  for (const name of [...Object.values(FLAGS), ...Object.values(SWITCHES)]) settings[name] = env[name] || undefined;
  const flags: Record<string, string> = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--help' || arg === '-h') return { exit: 'help' };
    if (arg === '--version') return { exit: 'version' };
    if (Object.hasOwn(SWITCHES, arg)) {
      flags[SWITCHES[arg as keyof typeof SWITCHES]] = '1';
      continue;
    }
    const eq = arg.indexOf('=');
    const flag = eq > 0 ? arg.slice(0, eq) : arg;
    if (!Object.hasOwn(FLAGS, flag)) return { error: `unknown option '${arg}' (see --help)` };
    const value = eq > 0 ? arg.slice(eq + 1) : argv[++i];
    if (!value) return { error: `${flag} needs a value` };
    const name = FLAGS[flag as keyof typeof FLAGS];
    // A primary and its standbys: --master (and --master-pin) given once each, in order, or comma-separated.
    const listed = (name === 'AGENT_MASTER_URL' || name === 'AGENT_MASTER_PIN') && flags[name] !== undefined;
    flags[name] = listed ? `${flags[name]},${value}` : value;
  }
  const envFile = flags.AGENT_ENV_FILE ?? settings.AGENT_ENV_FILE;
  if (envFile) {
    let text: string;
    try {
      text = readFile(envFile);
    } catch (error) {
      return { error: `cannot read --env-file ${envFile}: ${(error as Error).message}` };
    }
    const fromFile = parseEnvFile(text);
    if (typeof fromFile === 'string') return { error: `${envFile}: ${fromFile}` };
    for (const [name, value] of Object.entries(fromFile)) if (value) settings[name] = value;
  }
  Object.assign(settings, flags);

  const given = (settings.AGENT_MASTER_URL ?? '').split(',').filter((part) => part !== '');
  if (given.length === 0) return { error: '--master (or AGENT_MASTER_URL) is required' };
  if (given.length > MAX_MASTERS) return { error: `at most ${MAX_MASTERS} masters` };
  // Pins in the masters' order; one for each, or none at all.
  const pins = (settings.AGENT_MASTER_PIN ?? '').split(',').filter((part) => part !== '');
  if (pins.length > 0 && pins.length !== given.length)
    return { error: `--master-pin gives ${pins.length} pins for ${given.length} masters: one each, in their order` };
  const masters: { url: string; pin: string | null }[] = [];
  for (const [i, master] of given.entries()) {
    const checked = checkMaster(master, pins[i] ?? null, on(settings.AGENT_INSECURE_HTTP));
    if (typeof checked === 'string') return { error: checked };
    masters.push(checked);
  }
  const forwarding = settings.AGENT_FORWARDING ?? 'auto';
  if (!(forwardingModes as readonly string[]).includes(forwarding))
    return { error: `--forwarding must be auto, kernel or relay, got '${forwarding}'` };
  const resolveSeconds = Number(settings.AGENT_RESOLVE_SECONDS ?? 60);
  if (!Number.isInteger(resolveSeconds) || resolveSeconds < 1 || resolveSeconds > 86_400)
    return { error: `--resolve-every must be whole seconds from 1 to 86400, got '${settings.AGENT_RESOLVE_SECONDS}'` };
  const token = settings.AGENT_TOKEN;
  if (!token || !/^mat_[1-9][0-9]*_[A-Za-z0-9_-]{43}$/.test(token))
    return { error: "--token (or AGENT_TOKEN) must be the node's agent token (mat_...)" };
  const releaseKeys = parseReleaseKeys(settings.AGENT_RELEASE_KEY ?? '');
  if (typeof releaseKeys === 'string') return { error: `--release-key: ${releaseKeys}` };
  const drainSeconds = Number(settings.AGENT_DRAIN_SECONDS ?? 60);
  if (!Number.isInteger(drainSeconds) || drainSeconds < 0 || drainSeconds > 86_400)
    return { error: `--drain-seconds must be whole seconds from 0 to 86400, got '${settings.AGENT_DRAIN_SECONDS}'` };
  const relayWorkers = Number(settings.AGENT_RELAY_WORKERS ?? Math.min(availableParallelism(), 4));
  if (!Number.isInteger(relayWorkers) || relayWorkers < 1 || relayWorkers > 64)
    return { error: `--relay-workers must be a whole number from 1 to 64, got '${settings.AGENT_RELAY_WORKERS}'` };
  return {
    config: {
      masterUrl: masters[0]!.url,
      masterPin: masters[0]!.pin,
      otherMasters: masters.slice(1),
      token,
      stateDir: settings.AGENT_STATE_DIR ?? './agent-state',
      listenHost: settings.AGENT_LISTEN_HOST ?? '0.0.0.0',
      forwarding: forwarding as ForwardingMode,
      resolveSeconds,
      releaseKeys,
      drainSeconds,
      relayWorkers,
    },
  };
}
