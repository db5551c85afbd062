// Every reader of another tool's config, given hostile text (its fixture cut short, bytes changed, nesting deep,
// lines long), either reads it or says which line is not its format: nothing else is thrown.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { SourceError } from '../../internal/formats/foreign.ts';
import { translate, type ImportFormat } from '../../internal/formats/formats.ts';

const FIXTURES: Record<ImportFormat, string> = {
  realm: 'realm/edge.toml',
  gost: 'gost/edge.json',
  nodepass: 'nodepass/edge.txt',
  iptables: 'iptables/edge.rules',
  nftables: 'nftables/edge.json',
  haproxy: 'haproxy/edge.cfg',
};

/** A generator of mutations of `text` from a seed (the same seed, the same mutations). */
function mutations(text: string, seed: number): string[] {
  let state = seed;
  const next = () => (state = (state * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31;
  const at = () => Math.floor(next() * text.length);
  const noise = ['\0', '"', "'", '[', ']', '{', '}', ':', '=', '\n', '#', '\\', '-', '!', '\u2028', '\uFFFF'];
  return [
    text.slice(0, at()),
    text.slice(at()),
    Array.from(text, (char) => (next() < 0.02 ? noise[Math.floor(next() * noise.length)] : char)).join(''),
    `${text.slice(0, at())}${'['.repeat(5000)}${text.slice(at())}`,
    `${text.slice(0, at())}${'{"a":'.repeat(2000)}${text.slice(at())}`,
    `${text}\n${'x'.repeat(200_000)}`,
    text.replace(/\d+/g, () => String(Math.floor(next() * 2 ** 40))),
  ];
}

test('hostile configs are read or refused with their line, never anything else thrown', () => {
  for (const [format, fixture] of Object.entries(FIXTURES) as [ImportFormat, string][]) {
    const text = readFileSync(`test/fixtures/${fixture}`, 'utf8');
    for (let seed = 1; seed <= 60; seed++)
      for (const source of mutations(text, seed))
        try {
          translate({ format, node: 'edge', peer_node: 'peer', source });
        } catch (error) {
          assert.ok(error instanceof SourceError, `${format}, seed ${seed}: ${(error as Error).stack}`);
          assert.ok(Number.isInteger(error.line) && error.line >= 1, `${format}: line ${error.line}`);
        }
  }
});
