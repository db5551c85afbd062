// HAProxy in TCP mode: its config read into rules, and a node's rules written as one. A `listen` section, or a
// `frontend` with its `default_backend`, is a rule a bind: `bind` its port or range, `server` lines its targets (a
// port offset `+N` where a range shifts), `balance` its strategy, `weight` its weights, `check` (`inter`, `fall`,
// `rise`, `timeout check`) its health check, `send-proxy`/`send-proxy-v2` its PROXY protocol, `source` its source
// address, `maxconn` its max_connections, `rate-limit sessions` its new connections a second, and `tcp-request
// connection reject` on `src` its allowed and denied sources. HTTP mode, other keywords and conditions are listed.

import type { HealthCheck, RuleFields, Strategy } from '../domain/rules.ts';
import {
  ANY_ADDRESS,
  notCarried,
  ruleName,
  SourceError,
  splitHostPort,
  targetOf,
  type ForeignConfig,
  type ForeignRule,
  type Unmapped,
} from './foreign.ts';

const BALANCES: Record<string, Strategy> = {
  roundrobin: 'round_robin',
  'static-rr': 'round_robin',
  leastconn: 'least_conn',
  source: 'source_hash',
  random: 'random',
  first: 'failover',
};
const STRATEGIES: Partial<Record<Strategy, string>> = {
  round_robin: 'roundrobin',
  least_conn: 'leastconn',
  source_hash: 'source',
  random: 'random',
  failover: 'first',
};

interface Line {
  line: number;
  words: string[];
}

interface Section {
  kind: string;
  name: string;
  line: number;
  lines: Line[];
}

/** The config's sections, each with its lines' words (comments gone, quotes honoured). */
function sectionsOf(source: string): Section[] {
  const sections: Section[] = [];
  for (const [i, raw] of source.split(/\r?\n/).entries()) {
    const text = raw.replace(/(^|\s)#.*$/, '').trim();
    if (text === '') continue;
    const words = [...text.matchAll(/"((?:[^"\\]|\\.)*)"|'([^']*)'|(\S+)/g)].map((m) => m[1] ?? m[2] ?? m[3]!);
    if (
      [
        'global',
        'defaults',
        'frontend',
        'backend',
        'listen',
        'resolvers',
        'peers',
        'userlist',
        'program',
        'mailers',
      ].includes(words[0]!)
    )
      sections.push({ kind: words[0]!, name: words[1] ?? '', line: i + 1, lines: [] });
    else if (sections.length === 0) throw new SourceError(i + 1, `${words[0]} is outside a section`);
    else sections.at(-1)!.lines.push({ line: i + 1, words });
  }
  return sections;
}

/** HAProxy's time (`2s`, `500ms`, `1m`, or ms without a unit) in milliseconds; null when it is none. */
function millis(text: string | undefined): number | null {
  const found = /^(\d+)(us|ms|s|m|h|d)?$/.exec(text ?? '');
  if (!found) return null;
  const unit = { us: 0.001, ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[found[2] ?? 'ms']!;
  return Number(found[1]) * unit;
}

interface Server {
  line: number;
  host: string;
  /** The port, an offset (`+1000`), or null: the port the client connected to. */
  port: string | null;
  weight: number;
  check: boolean;
  proxy: 'v1' | 'v2' | null;
  inter: number | null;
  fall: number | null;
  rise: number | null;
}

/** What a section (with the defaults before it) says of forwarding, and what it says that does not map. */
interface Proxy {
  binds: { line: number; ports: [number, number] }[];
  servers: Server[];
  balance: Strategy | null;
  maxconn: number | null;
  rate: number | null;
  source: string | null;
  allow: string[];
  deny: string[];
  checkTimeout: number | null;
  http: boolean;
  backend: string | null;
}

function emptyProxy(): Proxy {
  return {
    binds: [],
    servers: [],
    balance: null,
    maxconn: null,
    rate: null,
    source: null,
    allow: [],
    deny: [],
    checkTimeout: null,
    http: false,
    backend: null,
  };
}

function readServer(line: Line, unmapped: Unmapped[]): Server | null {
  const [, , address, ...options] = line.words;
  const found = /^(\[[^\]]+\]|[^:[\]]+)(?::([+-]?\d{1,5}))?$/.exec(address ?? '');
  if (!found) {
    unmapped.push({ line: line.line, construct: line.words.join(' '), why: 'a server address that is no host[:port]' });
    return null;
  }
  const server: Server = {
    line: line.line,
    host: found[1]!,
    port: found[2] ?? null,
    weight: 1,
    check: false,
    proxy: null,
    inter: null,
    fall: null,
    rise: null,
  };
  for (let i = 0; i < options.length; i++) {
    const option = options[i]!;
    const value = options[i + 1];
    if (option === 'check') server.check = true;
    else if (option === 'send-proxy') server.proxy = 'v1';
    else if (option === 'send-proxy-v2') server.proxy = 'v2';
    else if (option === 'weight' && /^\d+$/.test(value ?? '')) ((server.weight = Number(value)), i++);
    else if (option === 'inter' && millis(value) !== null) ((server.inter = millis(value)), i++);
    else if ((option === 'fall' || option === 'rise') && /^\d+$/.test(value ?? ''))
      ((server[option] = Number(value)), i++);
    else
      unmapped.push({
        line: line.line,
        construct: `server ${line.words[1]} ${option}`,
        why: 'no rule setting carries it',
      });
  }
  return server;
}

function readLine(proxy: Proxy, line: Line, unmapped: Unmapped[]): void {
  const [keyword, ...rest] = line.words;
  const list = (why: string): void => void unmapped.push({ line: line.line, construct: line.words.join(' '), why });
  const joined = rest.join(' ');
  if (keyword === 'mode') proxy.http = rest[0] === 'http';
  else if (keyword === 'bind') {
    for (const address of (rest[0] ?? '').split(',')) {
      const found = /^(.*):(\d{1,5})(?:-(\d{1,5}))?$/.exec(address);
      if (!found) return list('a bind that is no address:port');
      if (!ANY_ADDRESS.has(found[1]!.replace(/^\[|\]$/g, '')))
        list('rules listen on every address of their node: the address is dropped');
      proxy.binds.push({ line: line.line, ports: [Number(found[2]), Number(found[3] ?? found[2])] });
    }
    if (rest.length > 1 && rest.slice(1).join(' ') !== 'v4v6') list('bind options are not a rule setting');
  } else if (keyword === 'server') {
    const server = readServer(line, unmapped);
    if (server) proxy.servers.push(server);
  } else if (keyword === 'balance') {
    const strategy = BALANCES[rest[0] ?? ''];
    if (strategy) proxy.balance = strategy;
    else list('a balance no rule strategy is');
  } else if (keyword === 'maxconn' && /^\d+$/.test(rest[0] ?? '')) proxy.maxconn = Number(rest[0]);
  else if (keyword === 'rate-limit' && rest[0] === 'sessions' && /^\d+$/.test(rest[1] ?? ''))
    proxy.rate = Number(rest[1]);
  else if (keyword === 'source' && rest.length === 1) proxy.source = rest[0]!.replace(/:0$/, '');
  else if (keyword === 'default_backend') proxy.backend = rest[0] ?? null;
  else if (keyword === 'timeout' && rest[0] === 'check') proxy.checkTimeout = millis(rest[1]);
  else if (keyword === 'tcp-request' && /^connection reject (if|unless) \{ src (.+) \}$/.test(joined)) {
    const [, how, blocks] = /^connection reject (if|unless) \{ src (.+) \}$/.exec(joined)!;
    (how === 'unless' ? proxy.allow : proxy.deny).push(...blocks!.split(/\s+/));
  } else if (keyword === 'timeout' || keyword === 'option' || keyword === 'log')
    list("the agent's own timeouts, options and logs");
  else list('no rule setting carries it');
}

/** The config's TCP proxies as rules, and what does not map. Throws SourceError when it is no HAProxy config. */
export function readHaproxy(source: string): ForeignConfig {
  const unmapped: Unmapped[] = [];
  const sections = sectionsOf(source);
  const backends = new Map<string, Proxy>();
  const defaults = { lines: [] as Line[] };
  const proxies: { section: Section; proxy: Proxy }[] = [];
  for (const section of sections) {
    if (section.kind === 'defaults') defaults.lines = section.lines;
    if (!['frontend', 'backend', 'listen'].includes(section.kind)) {
      for (const line of section.kind === 'defaults' ? [] : section.lines)
        unmapped.push({ line: line.line, construct: line.words.join(' '), why: `${section.kind}: the agent's own` });
      if (section.kind !== 'defaults' && section.kind !== 'global')
        unmapped.push({ line: section.line, construct: section.kind, why: 'no rule setting carries it' });
      continue;
    }
    const proxy = emptyProxy();
    // The defaults section's settings apply to each proxy after it; what of them does not map is listed once.
    for (const line of defaults.lines) readLine(proxy, line, []);
    for (const line of section.lines) readLine(proxy, line, unmapped);
    if (section.kind === 'backend') backends.set(section.name, proxy);
    else proxies.push({ section, proxy });
  }
  for (const line of defaults.lines) readLine(emptyProxy(), line, unmapped);
  const rules: ForeignRule[] = [];
  for (const { section, proxy } of proxies) {
    const backend = section.kind === 'listen' ? proxy : backends.get(proxy.backend ?? '');
    if (proxy.http || backend?.http) {
      unmapped.push({
        line: section.line,
        construct: `${section.kind} ${section.name}`,
        why: 'HTTP mode: rules forward TCP',
      });
      continue;
    }
    if (!backend || backend.servers.length === 0) {
      unmapped.push({ line: section.line, construct: `${section.kind} ${section.name}`, why: 'no server to send to' });
      continue;
    }
    for (const bind of proxy.binds) rules.push(ruleOf(section, bind, proxy, backend, unmapped));
  }
  return { rules, tunnels: [], unmapped };
}

function ruleOf(
  section: Section,
  bind: { line: number; ports: [number, number] },
  front: Proxy,
  back: Proxy,
  unmapped: Unmapped[],
): ForeignRule {
  const [port, last] = bind.ports;
  const range = last !== port;
  const targets = back.servers.map((server) => {
    const offset = server.port === null ? 0 : /^[+-]/.test(server.port) ? Number(server.port) : null;
    const first = offset === null ? Number(server.port) : port + offset;
    return range ? `${targetOf(server.host, first)}-${first + last - port}` : targetOf(server.host, first);
  });
  const rule: ForeignRule = {
    line: bind.line,
    name: ruleName('haproxy', 'tcp', port, range ? last : null),
    protocol: 'tcp',
    listen_port: port,
    listen_port_end: range ? last : null,
    targets,
    strategy: back.balance ?? 'round_robin',
  };
  if (back.servers.some((server) => server.weight !== 1)) rule.weights = back.servers.map((server) => server.weight);
  const proxies = new Set(back.servers.map((server) => server.proxy));
  if (proxies.size === 1 && back.servers[0]!.proxy) rule.proxy_protocol = back.servers[0]!.proxy;
  else if (proxies.size > 1)
    unmapped.push({
      line: section.line,
      construct: 'send-proxy',
      why: 'some servers only: a rule sends it to all or none',
    });
  const maxconn = front.maxconn ?? back.maxconn;
  if (maxconn !== null) rule.max_connections = maxconn;
  if (front.rate !== null) rule.max_new_connections_per_second = front.rate;
  if (back.source) rule.source_address = back.source;
  if (front.allow.length > 0) rule.allow_sources = front.allow;
  if (front.deny.length > 0) rule.deny_sources = front.deny;
  const checked = back.servers.find((server) => server.check);
  if (checked) {
    const check: HealthCheck = {
      interval_seconds: Math.max(1, Math.round((checked.inter ?? 2000) / 1000)),
      timeout_ms: Math.min(60_000, Math.max(50, back.checkTimeout ?? checked.inter ?? 2000)),
      fall: checked.fall ?? 3,
      rise: checked.rise ?? 2,
    };
    rule.health_check = check;
  }
  return rule;
}

/** The words of a rule's allowed and denied sources, as tcp-request lines. */
function sourceLines(rule: RuleFields): string[] {
  return [
    ...(rule.allow_sources.length > 0
      ? [`tcp-request connection reject unless { src ${rule.allow_sources.join(' ')} }`]
      : []),
    ...(rule.deny_sources.length > 0
      ? [`tcp-request connection reject if { src ${rule.deny_sources.join(' ')} }`]
      : []),
  ];
}

/** A node's TCP rules as an HAProxy config (`haproxy -c -f` clean): a `listen` section each. */
export function writeHaproxy(rules: readonly RuleFields[]): string {
  const out = [
    '# portplane rules as HAProxy TCP proxies (haproxy -c -f FILE to check it)',
    'defaults',
    '    mode tcp',
    '    timeout connect 5s',
    '    timeout client 1h',
    '    timeout server 1h',
  ];
  for (const rule of rules) {
    const why = !rule.enabled
      ? 'it is disabled'
      : rule.tunnel_id !== null
        ? 'it goes through a tunnel'
        : rule.protocol === 'udp'
          ? 'HAProxy forwards TCP'
          : !STRATEGIES[rule.strategy]
            ? `strategy ${rule.strategy} has no balance`
            : null;
    const targets = why ? [] : rule.targets.map((target) => serverOf(rule, target));
    const bad = targets.find((target) => typeof target === 'string' && target.startsWith('!'));
    if (why || bad) {
      out.push('', `# rule ${rule.name} (port ${rule.listen_port}) is left out: ${why ?? bad!.slice(1)}`);
      continue;
    }
    const uncarried = notCarried(rule, [
      'max_connections',
      'max_new_connections_per_second',
      'proxy_protocol',
      'source_address',
      'allow_sources',
      'deny_sources',
      'health_check',
    ]);
    if (rule.protocol === 'tcp+udp') uncarried.push('UDP');
    const ports = rule.listen_port_end === null ? `${rule.listen_port}` : `${rule.listen_port}-${rule.listen_port_end}`;
    out.push('', `# rule ${rule.name}${uncarried.length > 0 ? `; not carried: ${uncarried.join(', ')}` : ''}`);
    out.push(
      `listen rule_${rule.listen_port}`,
      `    bind :::${ports} v4v6`,
      `    balance ${STRATEGIES[rule.strategy]}`,
    );
    if (rule.max_connections !== null) out.push(`    maxconn ${rule.max_connections}`);
    if (rule.max_new_connections_per_second !== null)
      out.push(`    rate-limit sessions ${rule.max_new_connections_per_second}`);
    if (rule.source_address !== null) out.push(`    source ${rule.source_address}`);
    out.push(...sourceLines(rule).map((line) => `    ${line}`));
    const check = rule.health_check;
    if (check) out.push(`    timeout check ${check.timeout_ms}ms`);
    for (const [i, server] of targets.entries()) {
      const options = [
        ...(rule.weights ? [`weight ${rule.weights[i]}`] : []),
        ...(rule.proxy_protocol === 'v1' ? ['send-proxy'] : rule.proxy_protocol === 'v2' ? ['send-proxy-v2'] : []),
        ...(check ? [`check inter ${check.interval_seconds}s fall ${check.fall} rise ${check.rise}`] : []),
      ];
      out.push(`    server t${i + 1} ${[server, ...options].join(' ')}`);
    }
  }
  return `${out.join('\n')}\n`;
}

/** A target as a server address (a shifted range as a port offset); `!why` when it cannot be one. */
function serverOf(rule: RuleFields, target: string): string {
  const range = /-(\d{1,5})$/.exec(target);
  const split = splitHostPort(range ? target.slice(0, range.index) : target);
  if (!split) return `!its target ${target} is no host:port`;
  if (rule.listen_port_end === null) return targetOf(split.host, split.port);
  const offset = split.port - rule.listen_port;
  return `${targetOf(split.host, 0).replace(/:0$/, '')}${offset === 0 ? '' : `:${offset > 0 ? '+' : ''}${offset}`}`;
}
