import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { AgentState, type Damaged } from '../../internal/agent/state.ts';

test('traffic not reported yet survives a restart whole, refused connections included', () => {
  const dir = mkdtempSync(join(tmpdir(), 'portplane-state-'));
  const damaged: Damaged[] = [];
  const saved = {
    stream: 'stream-1',
    seq: 2,
    pending: [
      { stream: 'stream-1', seq: 2, at: 1_700_000_000, rules: [{ id: 4, bytes_in: 10, bytes_out: 20, refused: 3 }] },
    ],
    kernel: [{ id: 4, bytes_in: 100, bytes_out: 200, refused: 1 }],
  };
  new AgentState(dir).saveTraffic(saved);
  assert.deepEqual(new AgentState(dir, (d) => damaged.push(d)).loadTraffic(), saved);
  assert.deepEqual(damaged, [], 'nothing set aside');
});
