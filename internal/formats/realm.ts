// realm (github.com/zhboner/realm): its TOML config read into rules, and a node's rules written as one. An endpoint
// is a rule: `listen` its port, `remote` and `extra_remotes` its targets, `balance` its strategy and weights, the
// `network` options (the global [network], an endpoint's own over it) its protocol and PROXY protocol, `through` its
// source address. What realm does that a rule does not (transports, interfaces, accepting PROXY, timeouts) is listed.

import type { Protocol, RuleFields, Strategy } from '../domain/rules.ts';
import {
  ANY_ADDRESS,
  leftOut,
  notCarried,
  ruleName,
  SourceError,
  splitHostPort,
  targetOf,
  type ForeignConfig,
  type ForeignRule,
  type Unmapped,
} from './foreign.ts';
import { lineOf, parseToml, TomlError, type TomlTable, type TomlValue } from './toml.ts';

/** The options of [network] and an endpoint's `network` that a rule carries; any other is listed. */
const CARRIED_NETWORK = new Set(['no_tcp', 'use_udp', 'send_proxy', 'send_proxy_version']);
const ENDPOINT_KEYS = new Set(['listen', 'remote', 'extra_remotes', 'balance', 'through', 'network']);
const BALANCES: Record<string, Strategy> = { roundrobin: 'round_robin', iphash: 'source_hash' };

const isTable = (value: TomlValue | undefined): value is TomlTable =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** The config's endpoints as rules, and what does not map. Throws SourceError when it is no realm TOML. */
export function readRealm(source: string): ForeignConfig {
  let doc: TomlTable;
  try {
    doc = parseToml(source);
  } catch (error) {
    if (error instanceof TomlError) throw new SourceError(error.line, `not TOML: ${error.message}`);
    throw error;
  }
  const unmapped: Unmapped[] = [];
  const rules: ForeignRule[] = [];
  const global = isTable(doc.network) ? doc.network : {};
  for (const key of Object.keys(doc))
    if (key !== 'endpoints' && key !== 'network')
      unmapped.push({ line: lineOf(doc, key), construct: `[${key}]`, why: "the agent's own settings, not a rule's" });
  for (const key of Object.keys(global))
    if (!CARRIED_NETWORK.has(key))
      unmapped.push({ line: lineOf(global, key), construct: `[network] ${key}`, why: 'no rule setting carries it' });
  const endpoints = doc.endpoints;
  if (endpoints !== undefined && !Array.isArray(endpoints))
    throw new SourceError(lineOf(doc, 'endpoints'), 'endpoints must be [[endpoints]] tables');
  for (const endpoint of (endpoints ?? []) as TomlValue[]) {
    if (!isTable(endpoint)) throw new SourceError(lineOf(doc, 'endpoints'), 'endpoints must be [[endpoints]] tables');
    const rule = readEndpoint(endpoint, global, unmapped);
    if (rule) rules.push(rule);
  }
  return { rules, tunnels: [], unmapped };
}

function readEndpoint(endpoint: TomlTable, global: TomlTable, unmapped: Unmapped[]): ForeignRule | null {
  const line = lineOf(endpoint);
  const at = (key: string) => lineOf(endpoint, key);
  const skip = (why: string) => {
    unmapped.push({ line, construct: `[[endpoints]] listen = ${JSON.stringify(endpoint.listen ?? '')}`, why });
    return null;
  };
  for (const key of Object.keys(endpoint))
    if (!ENDPOINT_KEYS.has(key))
      unmapped.push({ line: at(key), construct: `${key} = ${JSON.stringify(endpoint[key])}`, why: whyNot(key) });
  const own = isTable(endpoint.network) ? endpoint.network : {};
  for (const key of Object.keys(own))
    if (!CARRIED_NETWORK.has(key))
      unmapped.push({ line: lineOf(own, key), construct: `network.${key}`, why: 'no rule setting carries it' });
  const network = { ...global, ...own };
  const listen = typeof endpoint.listen === 'string' ? splitHostPort(endpoint.listen) : null;
  if (!listen) return skip('listen is not host:port');
  if (!ANY_ADDRESS.has(listen.host))
    unmapped.push({
      line: at('listen'),
      construct: `listen = "${endpoint.listen as string}"`,
      why: 'rules listen on every address of their node: the address is dropped, the port kept',
    });
  const remotes = [endpoint.remote, ...(Array.isArray(endpoint.extra_remotes) ? endpoint.extra_remotes : [])];
  const targets: string[] = [];
  for (const remote of remotes) {
    const split = typeof remote === 'string' ? splitHostPort(remote) : null;
    if (!split) return skip(`remote ${JSON.stringify(remote ?? null)} is not host:port`);
    targets.push(targetOf(split.host, split.port));
  }
  const udp = network.use_udp === true;
  const tcp = network.no_tcp !== true;
  if (!udp && !tcp) return skip('no_tcp without use_udp forwards nothing');
  const protocol: Protocol = tcp && udp ? 'tcp+udp' : udp ? 'udp' : 'tcp';
  const rule: ForeignRule = {
    line,
    name: ruleName('realm', protocol, listen.port),
    protocol,
    listen_port: listen.port,
    targets,
    strategy: 'failover',
  };
  if (typeof endpoint.balance === 'string') {
    const balance = /^\s*(\w+)\s*(?::\s*([\d,\s]*))?$/.exec(endpoint.balance);
    const strategy = balance && BALANCES[balance[1]!];
    const weights = balance?.[2]?.trim() ? balance[2].split(',').map((w) => Number(w.trim())) : null;
    if (!strategy)
      unmapped.push({ line: at('balance'), construct: `balance = "${endpoint.balance}"`, why: 'an unknown strategy' });
    else {
      rule.strategy = strategy;
      if (weights && weights.length === targets.length && weights.every((w) => Number.isInteger(w) && w > 0))
        rule.weights = weights;
      else if (weights)
        unmapped.push({
          line: at('balance'),
          construct: `balance = "${endpoint.balance}"`,
          why: `${weights.length} weights for ${targets.length} remotes: the weights are dropped`,
        });
    }
  }
  if (network.send_proxy === true) rule.proxy_protocol = network.send_proxy_version === 1 ? 'v1' : 'v2';
  if (typeof endpoint.through === 'string') {
    const withPort = /^(\[[^\]]+\]|[^:]+):(\d+)$/.exec(endpoint.through);
    rule.source_address = (withPort ? withPort[1]! : endpoint.through).replace(/^\[|\]$/g, '');
    if (withPort && withPort[2] !== '0')
      unmapped.push({
        line: at('through'),
        construct: `through = "${endpoint.through}"`,
        why: 'a rule chooses its source address, not its source port: the port is dropped',
      });
  }
  return rule;
}

function whyNot(key: string): string {
  if (key.endsWith('transport')) return "realm's own transports (ws, tls) are not a rule's: use a tunnel";
  if (key.includes('interface')) return 'a rule binds no interface: use source_address';
  return 'no rule setting carries it';
}

/** TOML's basic string of `text`. */
const quoted = (text: string) => JSON.stringify(text);

/**
 * A node's rules as a realm config: an endpoint each, with comments for what realm cannot carry (those rules left
 * out, and the controls realm does not have). `rules` are the node's, ordered as they should appear.
 */
export function writeRealm(rules: readonly RuleFields[]): string {
  const out = ['# portplane rules as realm endpoints (github.com/zhboner/realm)'];
  for (const rule of rules) {
    const left = leftOut(rule);
    if (left) {
      out.push('', `# rule ${rule.name} (port ${rule.listen_port}) is left out: ${left}`);
      continue;
    }
    out.push('', `# rule ${rule.name}`, '[[endpoints]]', `listen = ${quoted(`0.0.0.0:${rule.listen_port}`)}`);
    out.push(`remote = ${quoted(rule.targets[0]!)}`);
    if (rule.targets.length > 1) out.push(`extra_remotes = [${rule.targets.slice(1).map(quoted).join(', ')}]`);
    const balance = rule.strategy === 'round_robin' ? 'roundrobin' : rule.strategy === 'source_hash' ? 'iphash' : null;
    if (rule.targets.length > 1 && balance)
      out.push(`balance = ${quoted(`${balance}${rule.weights ? `: ${rule.weights.join(', ')}` : ''}`)}`);
    if (rule.source_address) out.push(`through = ${quoted(rule.source_address)}`);
    const network = [
      ...(rule.protocol === 'udp' ? ['no_tcp = true'] : []),
      ...(rule.protocol !== 'tcp' ? ['use_udp = true'] : []),
      ...(rule.proxy_protocol !== 'none'
        ? ['send_proxy = true', `send_proxy_version = ${rule.proxy_protocol === 'v1' ? 1 : 2}`]
        : []),
    ];
    if (network.length > 0) out.push(`network = { ${network.join(', ')} }`);
    const uncarried = notCarried(rule, ['source_address', 'proxy_protocol']);
    if (rule.targets.length > 1 && !balance && rule.strategy !== 'failover')
      uncarried.push(`strategy ${rule.strategy}`);
    if (uncarried.length > 0) out.push(`# not carried by realm: ${uncarried.join(', ')}`);
  }
  return `${out.join('\n')}\n`;
}
