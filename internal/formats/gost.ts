// gost v3's JSON config read into rules: a service whose handler and listener are `tcp` or `udp` forwards its `addr`
// port to its forwarder's nodes, spread by the selector's strategy (round, rand, fifo, hash); the traffic, connection
// and rate limiters it names, where they limit the whole service (`$`), become its bandwidth_limit, max_connections
// and max_new_connections_per_second. A reverse forward (`rtcp`, `rudp`) and the relay its chain reaches are a
// tunnel's two ends, with the relay's node as the peer. Other handlers (proxies), listeners (tls, ws, ...) and
// per-client limits (`$$`) are listed. JSON has no lines: an item's `line` is the service's place in `services`.

import type { Strategy } from '../domain/rules.ts';
import {
  ruleName,
  SourceError,
  splitHostPort,
  targetOf,
  type ForeignConfig,
  type ForeignRule,
  type ForeignTunnel,
  type Unmapped,
  isObject,
  type Json,
  type JsonObject,
} from './foreign.ts';

const STRATEGIES: Record<string, Strategy> = {
  round: 'round_robin',
  rand: 'random',
  fifo: 'failover',
  hash: 'source_hash',
};

/** gost's sizes (`100MB`, `10KiB`, bytes without a unit) in bytes; null when it is none. */
function bytesOf(text: string | undefined): number | null {
  const found = /^(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B)?$/i.exec(text ?? '');
  if (!found) return null;
  const power = ' KMGT'.indexOf((found[2] ?? '').toUpperCase() || ' ');
  return Math.round(Number(found[1]) * (found[3]?.toLowerCase() === 'ib' ? 1024 : 1000) ** power);
}

/** The service-wide (`$`) limit a limiter named `name` of `list` sets: its values after `$`, or null. */
function serviceLimit(list: Json | undefined, name: Json | undefined): { values: string[]; perClient: boolean } | null {
  if (!Array.isArray(list) || typeof name !== 'string') return null;
  const limiter = list.find((item) => isObject(item) && item.name === name);
  if (!isObject(limiter) || !Array.isArray(limiter.limits)) return null;
  const lines = limiter.limits
    .filter((line): line is string => typeof line === 'string')
    .map((l) => l.trim().split(/\s+/));
  const service = lines.find((words) => words[0] === '$');
  return { values: service?.slice(1) ?? [], perClient: lines.some((words) => words[0] !== '$') };
}

/** The config's port forwards as rules; throws SourceError when it is no gost JSON config. */
export function readGost(source: string): ForeignConfig {
  let config: Json;
  try {
    config = JSON.parse(source) as Json;
  } catch (error) {
    throw new SourceError(
      1,
      `not JSON (gost's YAML is not read: gost -C config.yaml -O json writes JSON): ${(error as Error).message}`,
    );
  }
  if (!isObject(config) || !Array.isArray(config.services))
    throw new SourceError(1, 'no "services" list: give a gost v3 config as JSON');
  const unmapped: Unmapped[] = [];
  const rules: ForeignRule[] = [];
  const tunnels: ForeignTunnel[] = [];
  for (const key of Object.keys(config))
    if (!['services', 'limiters', 'climiters', 'rlimiters', 'chains'].includes(key))
      unmapped.push({ line: 1, construct: key, why: 'no rule setting carries it' });
  for (const [i, service] of config.services.entries()) {
    if (!isObject(service)) throw new SourceError(i + 1, 'a service that is not an object');
    const rule = readService(i + 1, service, config, unmapped, tunnels);
    if (rule) rules.push(rule);
  }
  return { rules, tunnels, unmapped };
}

/**
 * A reverse forward (`rtcp`, `rudp`): its port is listened on at the far end of its chain (the relay, the peer: the
 * tunnel's entry), its targets dialled from here (the exit), through the tunnel on the relay's port.
 */
function reverse(
  line: number,
  name: string,
  service: JsonObject,
  config: JsonObject,
  list: (construct: string, why: string) => void,
): ForeignTunnel[] {
  const protocol = (service.handler as JsonObject).type === 'rtcp' ? 'tcp' : 'udp';
  const listen = typeof service.addr === 'string' ? splitHostPort(service.addr.replace(/^:/, '0.0.0.0:')) : null;
  const chainName = isObject(service.listener) ? service.listener.chain : null;
  const chain = Array.isArray(config.chains)
    ? config.chains.find((item) => isObject(item) && item.name === chainName)
    : undefined;
  const hop = isObject(chain) && Array.isArray(chain.hops) ? chain.hops[0] : undefined;
  const relay = isObject(hop) && Array.isArray(hop.nodes) ? hop.nodes[0] : undefined;
  const relayAddress = isObject(relay) && typeof relay.addr === 'string' ? splitHostPort(relay.addr) : null;
  const targets = targetsOf(service);
  if (!listen || !relayAddress || typeof targets === 'string') {
    list(
      `handler ${protocol === 'tcp' ? 'rtcp' : 'rudp'}`,
      typeof targets === 'string' ? targets : 'no addr, or no chain to its relay',
    );
    return [];
  }
  return [
    {
      line,
      name: `gost-${name}`.replace(/[^A-Za-z0-9._-]/g, '-').slice(0, 64),
      peerIs: 'entry',
      listen_port: relayAddress.port,
      rule: {
        line,
        name: ruleName('gost', protocol, listen.port),
        protocol,
        listen_port: listen.port,
        targets,
        strategy: 'round_robin',
      },
    },
  ];
}

/** A service's forwarder nodes as targets, or why they are not. */
function targetsOf(service: JsonObject): string[] | string {
  const forwarder = isObject(service.forwarder) ? service.forwarder : null;
  const nodes = Array.isArray(forwarder?.nodes) ? forwarder.nodes : [];
  const targets: string[] = [];
  for (const node of nodes) {
    const split = isObject(node) && typeof node.addr === 'string' ? splitHostPort(node.addr) : null;
    if (!split) return `a forwarder node that is no host:port: ${JSON.stringify(node)}`;
    targets.push(targetOf(split.host, split.port));
  }
  return targets.length > 0 ? targets : 'no forwarder node to send to';
}

function readService(
  line: number,
  service: JsonObject,
  config: JsonObject,
  unmapped: Unmapped[],
  tunnels: ForeignTunnel[],
): ForeignRule | null {
  const name = typeof service.name === 'string' ? service.name : `service ${line}`;
  const list = (construct: string, why: string) => unmapped.push({ line, construct: `${name}: ${construct}`, why });
  const handler = isObject(service.handler) ? service.handler.type : null;
  const listener = isObject(service.listener) ? service.listener.type : null;
  if (handler === 'rtcp' || handler === 'rudp')
    return (tunnels.push(...reverse(line, name, service, config, list)), null);
  if ((handler !== 'tcp' && handler !== 'udp') || (listener !== null && listener !== handler))
    return (list(`handler ${String(handler)}, listener ${String(listener)}`, 'not a TCP or UDP port forward'), null);
  const listen =
    typeof service.addr === 'string'
      ? splitHostPort(service.addr.startsWith(':') ? `0.0.0.0${service.addr}` : service.addr)
      : null;
  if (!listen) return (list(`addr ${JSON.stringify(service.addr ?? null)}`, 'not host:port'), null);
  const forwarder = isObject(service.forwarder) ? service.forwarder : null;
  const targets = targetsOf(service);
  if (typeof targets === 'string') return (list('forwarder', targets), null);
  const rule: ForeignRule = {
    line,
    name: ruleName('gost', handler, listen.port),
    protocol: handler,
    listen_port: listen.port,
    targets,
    strategy: 'round_robin',
  };
  const selector = isObject(forwarder?.selector) ? forwarder.selector : null;
  if (typeof selector?.strategy === 'string') {
    const strategy = STRATEGIES[selector.strategy];
    if (strategy) rule.strategy = strategy;
    else list(`selector strategy ${selector.strategy}`, 'no rule strategy is it');
  }
  const traffic = serviceLimit(config.limiters, service.limiter);
  if (traffic) {
    const [input, output] = traffic.values.map(bytesOf);
    if (input !== undefined && input !== null && (output === undefined || output === input))
      rule.bandwidth_limit = input;
    else if (traffic.values.length > 0)
      list(`limiter ${String(service.limiter)}`, 'in and out differ: a rule has one limit');
    if (traffic.perClient) list(`limiter ${String(service.limiter)}`, "per-client limits are not a rule's");
  }
  const connections = serviceLimit(config.climiters, service.climiter);
  if (connections && /^\d+$/.test(connections.values[0] ?? '')) rule.max_connections = Number(connections.values[0]);
  if (connections?.perClient) list(`climiter ${String(service.climiter)}`, "per-client limits are not a rule's");
  const rate = serviceLimit(config.rlimiters, service.rlimiter);
  if (rate && /^\d+$/.test(rate.values[0] ?? '')) rule.max_new_connections_per_second = Number(rate.values[0]);
  if (rate?.perClient) list(`rlimiter ${String(service.rlimiter)}`, "per-client limits are not a rule's");
  for (const key of Object.keys(service))
    if (!['name', 'addr', 'handler', 'listener', 'forwarder', 'limiter', 'climiter', 'rlimiter'].includes(key))
      list(key, 'no rule setting carries it');
  return rule;
}
