// `nft -j list ruleset` read into rules (nat.ts makes them): each rule of a nat chain hooked at prerouting that ends
// in a dnat (its protocol by `tcp dport`, `udp dport`, `th dport` with `meta l4proto`; its port, range or set of
// one; the source addresses it matches; a numgen map spreading to several addresses), and masquerade and snat of a
// chain hooked at postrouting. JSON has no lines: an item's `line` is its place in the `nftables` array (from 1).
// Everything else (filter chains, other expressions) is listed with that place.

import type { Strategy } from '../domain/rules.ts';
import {
  isObject,
  SourceError,
  targetOf,
  type ForeignConfig,
  type Json,
  type JsonObject,
  type Unmapped,
} from './foreign.ts';
import { natRules, type Dnat, type SourceNat } from './nat.ts';

/** What a match compares: `tcp dport`, `meta l4proto`, `ip saddr`... as "protocol field". */
function leftOf(match: JsonObject): string | null {
  const left = match.left;
  if (!isObject(left)) return null;
  if (isObject(left.payload)) return `${String(left.payload.protocol)} ${String(left.payload.field)}`;
  if (isObject(left.meta)) return `meta ${String(left.meta.key)}`;
  return null;
}

/** A port, a range or a set of one: [low, high]; null otherwise. */
function portsOf(right: Json | undefined): [number, number] | null {
  if (typeof right === 'number') return [right, right];
  if (isObject(right) && Array.isArray(right.range) && right.range.every((p) => typeof p === 'number'))
    return [right.range[0] as number, right.range[1] as number];
  if (isObject(right) && Array.isArray(right.set) && right.set.length === 1) return portsOf(right.set[0]);
  return null;
}

/** An address or prefix as a source list item: `192.0.2.0/24`. */
function addressOf(right: Json | undefined): string[] | null {
  if (typeof right === 'string') return [right];
  if (isObject(right) && isObject(right.prefix)) return [`${String(right.prefix.addr)}/${String(right.prefix.len)}`];
  if (isObject(right) && Array.isArray(right.set)) {
    const all = right.set.map((item) => addressOf(item));
    return all.every((item) => item !== null) ? all.flat() : null;
  }
  return null;
}

/** How many values a map's key span `[low, high]` covers (0 when it is none). */
const spanOf = (range: Json[]) =>
  typeof range[0] === 'number' && typeof range[1] === 'number' && range[1] >= range[0] ? range[1] - range[0] + 1 : 0;

const brief = (value: Json) => JSON.stringify(value).slice(0, 160);

function readRule(line: number, expressions: Json[], unmapped: Unmapped[]): Dnat[] {
  const list = (construct: Json, why: string) => unmapped.push({ line, construct: brief(construct), why });
  let protocols: ('tcp' | 'udp')[] = [];
  let ports: [number, number] | null = null;
  const sources: string[] = [];
  const denied: string[] = [];
  let hosts: string[] | null = null;
  let spread: Strategy | null = null;
  let port: [number, number] | null = null;
  let weights: number[] = [];
  for (const expression of expressions) {
    if (!isObject(expression)) return (list(expression, 'not an expression'), []);
    if (isObject(expression.match)) {
      const match = expression.match;
      const left = leftOf(match);
      const negated = match.op === '!=';
      if (left === 'tcp dport' || left === 'udp dport' || left === 'th dport') {
        if (left !== 'th dport') protocols = [left.slice(0, 3) as 'tcp' | 'udp'];
        ports = portsOf(match.right);
        if (!ports) return (list(expression, 'a port match other than a port, a range or a set of one'), []);
      } else if (left === 'meta l4proto' && !negated) {
        const named = typeof match.right === 'string' ? [match.right] : isObject(match.right) ? match.right.set : null;
        if (!Array.isArray(named) || !named.every((p) => p === 'tcp' || p === 'udp'))
          return (list(expression, 'rules forward TCP and UDP'), []);
        protocols = named as ('tcp' | 'udp')[];
      } else if (left === 'ip saddr' || left === 'ip6 saddr') {
        const addresses = addressOf(match.right);
        if (!addresses) return (list(expression, 'a source match of no address or prefix'), []);
        (negated ? denied : sources).push(...addresses);
      } else if (left === 'ip daddr' || left === 'ip6 daddr')
        list(expression, 'rules listen on every address of their node: the address is dropped');
      else list(expression, 'no rule setting carries this match: the rule is read without it');
    } else if (isObject(expression.dnat)) {
      const dnat = expression.dnat;
      const addr = dnat.addr;
      if (typeof addr === 'string') hosts = [addr];
      else if (isObject(addr) && isObject(addr.map) && isObject(addr.map.key)) {
        const key = addr.map.key;
        const data = isObject(addr.map.data) ? addr.map.data.set : null;
        const pairs = Array.isArray(data) ? data.filter((pair): pair is Json[] => Array.isArray(pair)) : [];
        const spans = pairs.map(([span]) =>
          typeof span === 'number' ? 1 : isObject(span) && Array.isArray(span.range) ? spanOf(span.range) : 0,
        );
        if (
          (!isObject(key.numgen) && !isObject(key.jhash)) ||
          pairs.length === 0 ||
          !pairs.every((pair) => typeof pair[1] === 'string') ||
          spans.some((span) => span < 1)
        )
          return (list(expression, 'a map of no addresses, or drawn by other than numgen or jhash'), []);
        hosts = pairs.map((pair) => pair[1] as string);
        weights = spans;
        spread = isObject(key.jhash)
          ? 'source_hash'
          : (key.numgen as JsonObject).mode === 'inc'
            ? 'round_robin'
            : 'random';
      } else return (list(expression, 'a dnat to other than an address or a numgen map of addresses'), []);
      port = dnat.port === undefined ? null : portsOf(dnat.port);
      if (dnat.port !== undefined && !port) return (list(expression, 'a dnat port other than a port or range'), []);
    } else if (!('counter' in expression) && !('comment' in expression))
      list(expression, 'no rule setting carries it: the rule is read without it');
  }
  if (!hosts) return [];
  if (!ports || protocols.length === 0)
    return (list({ expr: expressions }, 'a dnat without a protocol and destination port is no rule'), []);
  const [low, high] = port ?? ports;
  if (high - low !== ports[1] - ports[0] && !(port && port[0] === port[1] && ports[0] === ports[1]))
    return (list({ expr: expressions }, 'a dnat to a port range of another size'), []);
  return protocols.flatMap((protocol) =>
    hosts!.map((host, i) => ({
      line,
      weight: weights[i] ?? 1,
      protocol,
      ports: ports!,
      target: ports![0] === ports![1] ? targetOf(host, low) : `${targetOf(host, low)}-${high}`,
      targetHost: host,
      sources,
      denied,
      spread,
    })),
  );
}

/** The ruleset as rules; throws SourceError when it is no `nft -j list ruleset` output. */
export function readNftables(source: string): ForeignConfig {
  let document: Json;
  try {
    document = JSON.parse(source) as Json;
  } catch (error) {
    throw new SourceError(1, `not JSON: ${(error as Error).message}`);
  }
  const items = isObject(document) ? document.nftables : undefined;
  if (!Array.isArray(items)) throw new SourceError(1, 'no "nftables" array: give the output of nft -j list ruleset');
  const unmapped: Unmapped[] = [];
  const hooks = new Map<string, string>();
  const dnats: Dnat[] = [];
  const nat: SourceNat = { byTarget: new Map(), all: false };
  for (const [i, item] of items.entries()) {
    const line = i + 1;
    if (!isObject(item)) throw new SourceError(line, 'an item of nftables is not an object');
    if (isObject(item.chain)) {
      const chain = item.chain;
      if (chain.type === 'nat' && typeof chain.hook === 'string')
        hooks.set(`${String(chain.family)} ${String(chain.table)} ${String(chain.name)}`, chain.hook);
      else if (typeof chain.hook === 'string' && chain.policy === 'drop')
        unmapped.push({ line, construct: brief(item), why: "a chain's drop policy is the node's own firewall" });
      continue;
    }
    if (!isObject(item.rule)) continue;
    const rule = item.rule;
    const hook = hooks.get(`${String(rule.family)} ${String(rule.table)} ${String(rule.chain)}`);
    const expressions = Array.isArray(rule.expr) ? rule.expr : [];
    const last = expressions.at(-1);
    if (hook === 'prerouting' && isObject(last) && 'dnat' in last) dnats.push(...readRule(line, expressions, unmapped));
    else if (hook === 'postrouting' && isObject(last) && ('masquerade' in last || 'snat' in last)) {
      const daddr = expressions.find(
        (e) => isObject(e) && isObject(e.match) && /^ip6? daddr$/.test(leftOf(e.match) ?? ''),
      ) as JsonObject | undefined;
      const destinations = daddr ? (addressOf((daddr.match as JsonObject).right) ?? []) : null;
      const to = 'snat' in last && isObject(last.snat) && typeof last.snat.addr === 'string' ? last.snat.addr : null;
      if (destinations === null) nat.all = true;
      for (const destination of destinations ?? [])
        nat.byTarget.set(destination.replace(/\/(32|128)$/, ''), { kind: to ? 'snat' : 'masquerade', to });
    } else
      unmapped.push({
        line,
        construct: `${String(rule.family)} ${String(rule.table)} ${String(rule.chain)}: ${brief(rule.expr ?? null)}`,
        why: hook ? 'only dnat at prerouting is a rule' : "a chain that is no nat hook: the node's own firewall",
      });
  }
  return { rules: natRules('nftables', dnats, nat, unmapped), tunnels: [], unmapped };
}
