// The API reference's example of each format reads into the rule its caption names, with nothing left unmapped.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { importFormats, translate } from '../../internal/formats/formats.ts';

test("each format's example in the API reference reads as the reference says", () => {
  const doc = readFileSync('docs/api.intro.md', 'utf8');
  const examples = doc.slice(doc.indexOf('One example per format'));
  const blocks = [...examples.matchAll(/```\w+\n([\s\S]*?)```\n(?:\((\w[\w -]*): `([\w-]+)`)?/g)].slice(0, 6);
  const formats = ['realm', 'gost', 'nodepass', 'iptables', 'nftables', 'haproxy'] as const;
  assert.deepEqual([...formats].sort(), [...importFormats].sort(), 'an example for every format read');
  for (const [i, format] of formats.entries()) {
    const [, source, , named] = blocks[i]!;
    const read = translate({ format, node: 'edge-1', peer_node: null, source: source! });
    const name = named ?? /^# realm: (\S+)/m.exec(source!)?.[1];
    assert.deepEqual(
      read.rules.map((rule) => (rule as { name: string }).name),
      [name],
      format,
    );
    assert.deepEqual(read.unmapped, [], format);
  }
});
