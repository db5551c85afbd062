// What an agent needs to reach its master and to trust what it is given to run, written once: the environment
// install-ssh puts in agent.env, and the same as a command line a person can paste on a node.

import { isLoopback } from '../schema/net.ts';

export interface MasterDial {
  /** http(s)://HOST[:PORT], validated by masterOrigin. */
  masterUrl: string;
  /** The master's key pin, for an https URL the master itself answers; null otherwise (system CAs). */
  pin: string | null;
  /** The release keys (base64, as releaseKeyText writes them) whose signed bundles the agent is to run. */
  releaseKeys: readonly string[];
}

function insecure(masterUrl: string): boolean {
  const url = new URL(masterUrl);
  return url.protocol === 'http:' && !isLoopback(url.hostname.replace(/^\[|\]$/g, ''));
}

/** The agent's settings, in the order agent.env lists them. */
export function agentEnvironment(dial: MasterDial, token: string): Record<string, string> {
  return {
    AGENT_MASTER_URL: dial.masterUrl,
    ...(dial.pin ? { AGENT_MASTER_PIN: dial.pin } : {}),
    ...(dial.releaseKeys.length > 0 ? { AGENT_RELEASE_KEY: dial.releaseKeys.join(',') } : {}),
    // The master was told to speak plain HTTP off loopback (--insecure-http); its agents must be too.
    ...(insecure(dial.masterUrl) ? { AGENT_INSECURE_HTTP: '1' } : {}),
    AGENT_TOKEN: token,
  };
}

/** agent.env: KEY=VALUE lines the agent reads itself (values hold no quotes, spaces or $). */
export function envFile(environment: Record<string, string>): string {
  return Object.entries(environment)
    .map(([key, value]) => `${key}=${value}\n`)
    .join('');
}

/** The command that starts the node's agent by hand, the token in the environment rather than in its arguments. */
export function agentCommand(dial: MasterDial, token: string): string {
  return [
    `AGENT_TOKEN='${token}' node agent.mjs --master '${dial.masterUrl}'`,
    ...(dial.pin ? [`--master-pin '${dial.pin}'`] : []),
    ...(dial.releaseKeys.length > 0 ? [`--release-key '${dial.releaseKeys.join(',')}'`] : []),
    ...(insecure(dial.masterUrl) ? ['--insecure-http'] : []),
  ].join(' ');
}
