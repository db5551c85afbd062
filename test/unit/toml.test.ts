// Our TOML reader beside a reference one (smol-toml): the same value for generated documents and hand-written ones,
// and a refusal where the reference refuses, each naming its line.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parse as reference, stringify } from 'smol-toml';
import { lineOf, parseToml, TomlError, type TomlTable } from '../../internal/formats/toml.ts';

/** A plain copy: what both parsers made, compared as JSON would carry it. */
const plain = (value: unknown): unknown => JSON.parse(JSON.stringify(value));

/** A generator of values and tables in the subset read, from a seed (the same seed, the same document). */
function generator(seed: number) {
  let state = seed >>> 0 || 1;
  const next = () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) / 2 ** 32;
  };
  const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)]!;
  const key = () => pick(['listen', 'remote', 'a-b', 'x_1', 'with space', 'ünï', 'dotted.key', '"q"', '9']);
  const text = () =>
    pick(['', 'plain', 'tab\there', 'quote " and \\ back', 'line\nbreak', 'ünïcödé ✓', "it's", '#not a comment']);
  const value = (depth: number): unknown => {
    const kind = pick(depth > 2 ? ['s', 'i', 'f', 'b'] : ['s', 'i', 'f', 'b', 'a', 't']);
    if (kind === 's') return text();
    if (kind === 'i') return pick([0, 1, -7, 65535, 2 ** 40, -(2 ** 31)]);
    if (kind === 'f') return pick([0.5, -1.25, 3e10, 1.5e-7]);
    if (kind === 'b') return next() < 0.5;
    if (kind === 'a') return Array.from({ length: Math.floor(next() * 4) }, () => value(depth + 1));
    return table(depth + 1);
  };
  const table = (depth: number): Record<string, unknown> =>
    Object.fromEntries(Array.from({ length: 1 + Math.floor(next() * 4) }, () => [key(), value(depth)]));
  return { table, next };
}

test('generated documents read as the reference reads them', () => {
  for (let seed = 1; seed <= 400; seed++) {
    const { table, next } = generator(seed);
    const document: Record<string, unknown> = table(0);
    // Arrays of tables, as realm's [[endpoints]].
    if (next() < 0.5) document.endpoints = Array.from({ length: 1 + Math.floor(next() * 3) }, () => table(1));
    const text = stringify(document);
    assert.deepEqual(plain(parseToml(text)), plain(reference(text)), `seed ${seed}:\n${text}`);
  }
});

const HAND_WRITTEN = `
# realm, as its docs write it
[log]
level = "warn" # trailing comment
output = '/var/log/realm.log'

[network]
no_tcp = false
use_udp = true
tcp_timeout = 1_000

[[endpoints]]
listen = "0.0.0.0:5000"
remote = "1.1.1.1:443"
extra_remotes = [
  "1.1.1.2:443",  # a comment inside
  "1.1.1.3:443",
]
balance = "roundrobin: 4, 2, 1"
network = { send_proxy = true, send_proxy_version = 1 }

[[endpoints]]
listen = "[::]:5001"
remote = "example.com:80"
site."a.b".c = 0x1F
multi = """
first \\
  second"""
raw = '''C:\\path\\'''
floats = [1.0, -2e3, inf, -inf]
`;

test('a hand-written realm config reads as the reference reads it, with the line of each key', () => {
  const ours = parseToml(HAND_WRITTEN);
  assert.deepEqual(plain(ours), plain(reference(HAND_WRITTEN)));
  const endpoints = ours.endpoints as TomlTable[];
  assert.equal(lineOf(endpoints[0]!), 12);
  assert.equal(lineOf(endpoints[0]!, 'balance'), 19);
  assert.equal(lineOf(endpoints[1]!, 'remote'), 24);
  assert.equal(lineOf(ours.network as TomlTable, 'use_udp'), 9);
});

test('what is not TOML (or not read here) is refused with its line, as the reference refuses it', () => {
  const cases: [string, number][] = [
    ['a = 1\na = 2', 2],
    ['[t]\nx = 1\n[t]', 3],
    ['a = "open', 1],
    ['a = [1, 2', 1],
    ['a = 1 b = 2', 1],
    ['a = { b = 1 }\n[a]', 2],
    ['a = 0x', 1],
    ['x = 1__0', 1],
    ['x = "\\q"', 1],
    ['[[t]]\n[t]', 2],
    ['a.b = 1\na = 2', 2],
    ['= 1', 1],
  ];
  for (const [text, line] of cases) {
    assert.throws(() => reference(text), Error, `the reference refuses ${JSON.stringify(text)}`);
    assert.throws(
      () => parseToml(text),
      (error: unknown) => error instanceof TomlError && error.line === line,
      JSON.stringify(text),
    );
  }
});

test('dates and times, which no config read here holds, are refused with their line', () => {
  assert.throws(() => parseToml('\n\nwhen = 1979-05-27'), /^Error: line 3: dates and times are not read here/);
});

test('nesting is bounded', () => {
  assert.throws(() => parseToml(`a = ${'['.repeat(100)}${']'.repeat(100)}`), /nested more than 64 deep/);
});
