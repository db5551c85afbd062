// iptables-save's output read into rules (nat.ts makes them): each DNAT of the nat table's PREROUTING chain with its
// protocol, port or port range, the sources it matches (-s, ! -s) and the spread of a statistic match; MASQUERADE
// and SNAT of POSTROUTING for how targets see clients. Everything else (filter rules, other chains, matches a rule
// has no setting for) is listed with its line.

import type { Strategy } from '../domain/rules.ts';
import { ANY_ADDRESS, SourceError, targetOf, type ForeignConfig, type Unmapped } from './foreign.ts';
import { natRules, type Dnat, type SourceNat } from './nat.ts';

/** One -A line's words, quotes honoured (a comment's text), and what it matched. */
interface Entry {
  line: number;
  chain: string;
  words: string[];
}

/** The words of a line as iptables-save quotes them. */
function words(text: string, line: number): string[] {
  const out: string[] = [];
  const pattern = /"((?:[^"\\]|\\.)*)"|(\S+)/g;
  for (const match of text.matchAll(pattern))
    out.push(match[1] !== undefined ? match[1].replace(/\\(.)/g, '$1') : match[2]!);
  if (out.length > 400) throw new SourceError(line, 'a rule of more than 400 words');
  return out;
}

/** The tables and their -A entries, in order; throws SourceError when it is no iptables-save output. */
function tablesOf(source: string, unmapped: Unmapped[]): Map<string, Entry[]> {
  const tables = new Map<string, Entry[]>();
  let table: string | null = null;
  for (const [i, raw] of source.split(/\r?\n/).entries()) {
    const line = i + 1;
    const text = raw.trim();
    if (text === '' || text.startsWith('#')) continue;
    if (text.startsWith('*')) {
      table = text.slice(1);
      tables.set(table, tables.get(table) ?? []);
    } else if (text === 'COMMIT') table = null;
    else if (table === null) throw new SourceError(line, `${text.slice(0, 40)} is outside a table (*nat ... COMMIT)`);
    else if (text.startsWith(':')) {
      const policy = text.slice(1).split(/\s+/)[1];
      if (policy !== '-' && policy !== 'ACCEPT')
        unmapped.push({ line, construct: text, why: `the ${table} table's policies are the node's own firewall` });
    } else if (text.startsWith('-A ')) {
      const all = words(text, line);
      tables.get(table)!.push({ line, chain: all[1] ?? '', words: all.slice(2) });
    } else throw new SourceError(line, `${text.slice(0, 40)} is no iptables-save line`);
  }
  return tables;
}

/** An entry's options: each flag and its values, in order (negations as `!flag`). */
function optionsOf(entry: Entry): [string, string[]][] {
  const options: [string, string[]][] = [];
  let negated = false;
  for (const word of entry.words) {
    if (word === '!') negated = true;
    else if (word.startsWith('-')) {
      options.push([negated ? `!${word}` : word, []]);
      negated = false;
    } else if (options.length > 0) options.at(-1)![1].push(word);
  }
  return options;
}

const PORT = /^(\d{1,5})(?::(\d{1,5}))?$/;

function readDnat(entry: Entry, unmapped: Unmapped[]): Dnat | null {
  const list = (construct: string, why: string) => unmapped.push({ line: entry.line, construct, why });
  let protocol: 'tcp' | 'udp' | null = null;
  let ports: [number, number] | null = null;
  let to: string | null = null;
  const sources: string[] = [];
  const denied: string[] = [];
  let spread: Strategy | null = null;
  for (const [flag, values] of optionsOf(entry)) {
    const value = values.join(' ');
    if (flag === '-p' || flag === '--protocol') {
      if (value !== 'tcp' && value !== 'udp') return (list(`-p ${value}`, 'rules forward TCP and UDP'), null);
      protocol = value;
    } else if (flag === '--dport' || flag === '--destination-port') {
      const found = PORT.exec(value);
      if (!found) return (list(`--dport ${value}`, 'not a port or port range'), null);
      ports = [Number(found[1]), Number(found[2] ?? found[1])];
    } else if (flag === '--to-destination') to = value;
    else if (flag === '-s' || flag === '--source') sources.push(...value.split(','));
    else if (flag === '!-s' || flag === '!--source') denied.push(...value.split(','));
    else if (flag === '-m' || flag === '--match' || flag === '-j' || flag === '--jump') continue;
    else if (flag === '--mode') spread = value === 'nth' ? 'round_robin' : 'random';
    else if (flag === '--every' || flag === '--packet' || flag === '--probability') continue;
    else if (flag === '-d' || flag === '--destination') {
      if (!ANY_ADDRESS.has(value.replace(/\/(32|128|0)$/, '')))
        list(`-d ${value}`, 'rules listen on every address of their node: the address is dropped');
    } else if (flag === '--comment') continue;
    else list(`${flag}${value ? ` ${value}` : ''}`, 'no rule setting carries this match: the rule is read without it');
  }
  const whole = entry.words.join(' ');
  if (!protocol || !ports) return (list(whole, 'a DNAT without -p tcp|udp and --dport is no rule'), null);
  const destination = to && /^(\[[^\]]+\]|[^:[\]]+)(?::(\d{1,5})(?:-(\d{1,5}))?)?$/.exec(to);
  if (!destination) return (list(`--to-destination ${to ?? ''}`, 'not an address[:port[-port]]'), null);
  const host = destination[1]!.replace(/^\[|\]$/g, '');
  const [low, high] = [Number(destination[2] ?? ports[0]), Number(destination[3] ?? destination[2] ?? ports[1])];
  const span = ports[1] - ports[0];
  if (high - low !== span && !(destination[2] && !destination[3] && span === 0))
    return (list(`--to-destination ${to}`, 'a port range of another size than --dport'), null);
  const target = span === 0 ? targetOf(host, low) : `${targetOf(host, low)}-${high}`;
  return { line: entry.line, protocol, ports, target, targetHost: host, sources, denied, spread, weight: 1 };
}

/** The config as rules; throws SourceError when it is no iptables-save output. */
export function readIptables(source: string): ForeignConfig {
  const unmapped: Unmapped[] = [];
  const tables = tablesOf(source, unmapped);
  const dnats: Dnat[] = [];
  const nat: SourceNat = { byTarget: new Map(), all: false };
  for (const [table, entries] of tables)
    for (const entry of entries) {
      const jump = entry.words[entry.words.indexOf('-j') + 1];
      if (table === 'nat' && entry.chain === 'PREROUTING' && jump === 'DNAT') {
        const dnat = readDnat(entry, unmapped);
        if (dnat) dnats.push(dnat);
      } else if (table === 'nat' && entry.chain === 'POSTROUTING' && (jump === 'MASQUERADE' || jump === 'SNAT')) {
        const options = new Map(optionsOf(entry));
        const destination = options.get('-d')?.[0]?.replace(/\/(32|128)$/, '') ?? null;
        const to = options.get('--to-source')?.[0]?.replace(/:.*$/, '') ?? null;
        const kind = jump === 'MASQUERADE' ? 'masquerade' : 'snat';
        if (destination === null) nat.all = true;
        else nat.byTarget.set(destination, { kind, to });
      } else
        unmapped.push({
          line: entry.line,
          construct: `-A ${entry.chain} ${entry.words.join(' ')}`.slice(0, 200),
          why: table === 'nat' ? 'only DNAT in PREROUTING is a rule' : `the ${table} table is the node's own firewall`,
        });
    }
  return { rules: natRules('iptables', dnats, nat, unmapped), tunnels: [], unmapped };
}
