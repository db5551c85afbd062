// Failover of masters elected through etcd: a three-member etcd cluster on loopback and three masters (each a
// process), in sync mode under four writers, the leader SIGKILLed 20 times (test/elected.ts's drill, which the
// end-to-end test runs with an agent too). The ceiling of a failover is the lease: a leader that dies keeps the key
// that long, and no standby may take it sooner.

import { TTL_SECONDS } from '../internal/election/election.ts';
import { cluster, killLeaders, quantile, type After } from '../test/elected.ts';
import { etcdCluster } from '../test/etcd.ts';
import { call } from '../test/helpers.ts';
import type { Row } from './row.ts';

const KILLS = 20;

export async function failover(record: (row: Row) => void): Promise<void> {
  const cleanups: (() => unknown)[] = [];
  const t: After = { after: (fn: () => unknown) => void cleanups.push(fn) } as After;
  try {
    const etcd = await etcdCluster(t, 3);
    const { masters, admin } = await cluster(t, [etcd.endpoints, etcd.endpoints, etcd.endpoints]);
    const paper = await call(masters[0]!.url, 'POST', '/api/nodes', {
      token: admin,
      body: { name: 'paper', host: '192.0.2.3' },
    });
    const drill = await killLeaders(t, masters, admin, paper.body.id, KILLS);
    const [p50, p99] = [quantile(drill.failovers, 0.5), quantile(drill.failovers, 0.99)];
    const lease = TTL_SECONDS * 1000;
    record({
      id: '18a',
      scenario: `failover through etcd: the leader SIGKILLed until a standby leads (${KILLS} kills, 4 writers, sync)`,
      value: p50,
      unit: 'ms',
      p50_ms: p50,
      p99_ms: p99,
      ceiling: lease,
      ratio: p50 / lease,
      target: 'p99 <= 10 s',
      met: p99 <= 10_000,
      note: `ceiling: the lease (${TTL_SECONDS} s), the least a dead leader keeps the key`,
    });
    record({
      id: '18b',
      scenario: `failover through etcd: acknowledged writes not on the last leader (${KILLS} kills)`,
      value: drill.lost.length,
      unit: 'writes',
      target: '0',
      met: drill.lost.length === 0,
      note: `of ${drill.acknowledged} acknowledged`,
    });
  } finally {
    for (const cleanup of cleanups.reverse()) await cleanup();
  }
}
