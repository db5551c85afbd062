// What the agent makes of the kernel's counters at each report: only what grew since the last report, kept with the
// reports so that a restart neither loses nor repeats a byte, and a counter that started over counted whole.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { addKernel } from '../../internal/agent/agent.ts';
import type { TrafficState } from '../../internal/agent/state.ts';

const counts = (entries: [number, number, number][]) =>
  new Map(entries.map(([id, bytes_in, bytes_out]) => [id, { bytes_in, bytes_out }]));

test('kernel counters are reported by what grew, whole when they started over, once when their rule went', () => {
  const traffic: TrafficState = { stream: 's', seq: 0, pending: [] };
  const none = new Set<number>();
  const table: [string, Parameters<typeof addKernel>, { id: number; bytes_in: number; bytes_out: number }[]][] = [
    [
      'the first read: all of it, with the relay bytes of the same rule',
      [
        [{ id: 1, bytes_in: 5, bytes_out: 6 }],
        { counts: counts([[1, 100, 50]]), removed: none, fresh: false },
        traffic,
      ],
      [{ id: 1, bytes_in: 105, bytes_out: 56 }],
    ],
    [
      'the next read: what grew',
      [
        [],
        {
          counts: counts([
            [1, 150, 70],
            [2, 10, 0],
          ]),
          removed: none,
          fresh: false,
        },
        traffic,
      ],
      [
        { id: 1, bytes_in: 50, bytes_out: 20 },
        { id: 2, bytes_in: 10, bytes_out: 0 },
      ],
    ],
    [
      'nothing grew: nothing to report',
      [
        [],
        {
          counts: counts([
            [1, 150, 70],
            [2, 10, 0],
          ]),
          removed: none,
          fresh: false,
        },
        traffic,
      ],
      [],
    ],
    [
      'a counter below what was reported started over (its table was made anew): counted whole',
      [
        [],
        {
          counts: counts([
            [1, 30, 10],
            [2, 10, 0],
          ]),
          removed: none,
          fresh: false,
        },
        traffic,
      ],
      [{ id: 1, bytes_in: 30, bytes_out: 10 }],
    ],
    [
      'a new table, even one that counted past what was reported: counted whole',
      [
        [],
        {
          counts: counts([
            [1, 200, 90],
            [2, 0, 0],
          ]),
          removed: none,
          fresh: true,
        },
        traffic,
      ],
      [{ id: 1, bytes_in: 200, bytes_out: 90 }],
    ],
    [
      'a rule taken out: its last count once, and it is forgotten',
      [
        [],
        {
          counts: counts([
            [1, 210, 90],
            [2, 0, 0],
          ]),
          removed: new Set([1]),
          fresh: false,
        },
        traffic,
      ],
      [{ id: 1, bytes_in: 10, bytes_out: 0 }],
    ],
  ];
  for (const [what, args, want] of table) {
    assert.deepEqual(addKernel(...args), want, what);
    // What was reported is kept with the reports: exactly the counters the read saw, but the rules taken out.
    const kept = [...args[1]!.counts].filter(([id]) => !args[1]!.removed.has(id)).map(([id, c]) => ({ id, ...c }));
    assert.deepEqual(traffic.kernel, kept, `${what}: what is kept`);
  }
  assert.deepEqual(addKernel([{ id: 3, bytes_in: 1, bytes_out: 1 }], null, traffic), [
    { id: 3, bytes_in: 1, bytes_out: 1 },
  ]);
});

test("the clients a rule's sources refused in the kernel are reported as they grow, beside its bytes", () => {
  const traffic: TrafficState = { stream: 's', seq: 0, pending: [] };
  const none = new Set<number>();
  const read = (refused: number, bytes: number) => ({
    counts: new Map([[7, { bytes_in: bytes, bytes_out: bytes, refused }]]),
    removed: none,
    fresh: false,
  });
  assert.deepEqual(addKernel([{ id: 7, bytes_in: 0, bytes_out: 0, refused: 1 }], read(3, 10), traffic), [
    { id: 7, bytes_in: 10, bytes_out: 10, refused: 4 },
  ]);
  assert.deepEqual(addKernel([], read(5, 10), traffic), [{ id: 7, bytes_in: 0, bytes_out: 0, refused: 2 }]);
  assert.deepEqual(addKernel([], read(5, 10), traffic), [], 'nothing grew');
  assert.deepEqual(traffic.kernel, [{ id: 7, bytes_in: 10, bytes_out: 10, refused: 5 }]);
});
