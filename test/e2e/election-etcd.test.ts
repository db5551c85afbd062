// The election on a real etcd process (one member; election.test.ts beside it runs masters on three): one leader at
// a time, the epoch raised in the election's own transaction, a leader that cannot renew its lease taking no write
// before another can lead, and who may take over when the leader is gone.

import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test, { type TestContext } from 'node:test';
import { Election, type Standing } from '../../internal/election/election.ts';
import { Etcd, EtcdUnavailable } from '../../internal/election/etcd.ts';
import { silentLogger } from '../../internal/log/log.ts';
import { etcdCertificates, etcdCluster, etcdMissing, etcdProxy } from '../etcd.ts';
import { until } from '../net.ts';

const skip = etcdMissing() ?? false;
const own: Standing = { epoch: 1, generation: null, seq: null, source: true };
const copyAt = (seq: number, epoch = 2): Standing => ({ epoch, generation: 'g', seq, source: false });
let prefixes = 0;

/** Masters named `names` on a cluster prefix of their own, their leases granted. */
async function electionsOf(t: TestContext, endpoints: string[], names: string[]): Promise<Election[]> {
  const prefix = `/test${++prefixes}`;
  const elections = names.map(
    (name) =>
      new Election({
        etcd: new Etcd({ endpoints }),
        prefix,
        me: { url: `https://${name}.example:8443`, pin: null },
        log: silentLogger,
      }),
  );
  for (const election of elections) {
    await election.start();
    t.after(() => election.stop());
  }
  return elections;
}

test('one master takes the leader key, and the epoch is raised in the same transaction', { skip }, async (t) => {
  const { endpoints } = await etcdCluster(t, 1);
  const [a, b] = await electionsOf(t, endpoints, ['a', 'b']);
  const [won, lost] = await Promise.all([a!.campaign(own), b!.campaign(own)]);
  assert.deepEqual(
    [won, lost].filter((epoch) => epoch !== null),
    [2],
    'exactly one of two at once wins',
  );
  const leader = won !== null ? a! : b!;
  assert.equal(leader.holds(), true);
  assert.deepEqual(await b!.leader(), {
    url: leader === a ? 'https://a.example:8443' : 'https://b.example:8443',
    pin: null,
    epoch: 2,
  });
  // The next election raises it past both etcd's epoch and the candidate's own.
  await leader.stop();
  const other = leader === a ? b! : a!;
  assert.equal(await other.campaign(copyAt(1, 7)), 8);
});

test('a leader cut from etcd takes no write before another master can lead', { skip, timeout: 30_000 }, async (t) => {
  const { endpoints } = await etcdCluster(t, 1);
  const proxy = await etcdProxy(t, endpoints[0]!);
  const prefix = `/cut${++prefixes}`;
  const make = (name: string, via: string) =>
    new Election({
      etcd: new Etcd({ endpoints: [via] }),
      prefix,
      me: { url: `https://${name}:1`, pin: null },
      log: silentLogger,
    });
  const [a, b] = [make('a', proxy.url), make('b', endpoints[0]!)];
  for (const election of [a, b]) {
    await election.start();
    t.after(() => election.stop());
  }
  assert.equal(await a.campaign(own), 2);
  proxy.cut();
  const cutAt = Date.now();
  let stoppedAt = 0;
  const newLeader = await until(
    'another master elected',
    async () => {
      if (stoppedAt === 0 && !a.holds()) stoppedAt = Date.now();
      return (await b.campaign(own)) !== null && Date.now();
    },
    20_000,
  );
  assert.ok(
    stoppedAt > 0 && stoppedAt < newLeader,
    `stopped after ${stoppedAt - cutAt} ms, the other led after ${newLeader - cutAt} ms`,
  );
  t.diagnostic(`cut: writes stopped after ${stoppedAt - cutAt} ms; another led after ${newLeader - cutAt} ms`);
  // Mended, the old leader learns its lease expired, and leads no more.
  proxy.mend();
  await until('the old leader knowing it lost', () => !a.isLeader, 10_000);
  assert.equal(a.holds(), false);
});

test('with a standby chosen in sync mode, only it or the leader back may take over', { skip }, async (t) => {
  const { endpoints } = await etcdCluster(t, 1);
  const [leader, chosen, other] = await electionsOf(t, endpoints, ['leader', 'chosen', 'other']);
  assert.equal(await leader!.campaign(own), 2);
  await leader!.designate('https://chosen.example:8443');
  assert.equal(leader!.current(), 'https://chosen.example:8443');
  // Another standby, further along than the chosen one says it is, still may not.
  await other!.publish(copyAt(90));
  await chosen!.publish(copyAt(80));
  await leader!.stop();
  assert.match((await other!.mayNotLead(copyAt(90))) ?? '', /only https:\/\/chosen\.example:8443/);
  assert.equal(await chosen!.mayNotLead(copyAt(80)), null);
  assert.equal(await chosen!.campaign(copyAt(80)), 3);
});

test('with none chosen, the furthest of the masters that answer may lead', { skip }, async (t) => {
  const { endpoints } = await etcdCluster(t, 1);
  const [leader, ahead, behind, oldEpoch] = await electionsOf(t, endpoints, ['leader', 'ahead', 'behind', 'old']);
  assert.equal(await leader!.campaign(own), 2);
  await ahead!.publish(copyAt(50));
  await behind!.publish(copyAt(40));
  await oldEpoch!.publish({ epoch: 1, generation: null, seq: null, source: true });
  await leader!.stop();
  assert.match((await behind!.mayNotLead(copyAt(40))) ?? '', /ahead\.example:8443 holds more/);
  assert.match((await oldEpoch!.mayNotLead({ ...own, epoch: 1 })) ?? '', /holds more/);
  assert.equal(await ahead!.mayNotLead(copyAt(50)), null);
  // A master's own database of the latest epoch holds all of it: it goes before any copy.
  assert.equal(await behind!.mayNotLead({ epoch: 2, generation: null, seq: null, source: true }), null);
});

test('a master that no longer leads cannot choose a standby', { skip }, async (t) => {
  const { endpoints } = await etcdCluster(t, 1);
  const [a, b] = await electionsOf(t, endpoints, ['a', 'b']);
  await assert.rejects(a!.designate('https://b.example:8443'), /no longer leads/);
  assert.equal(await a!.campaign(own), 2);
  await a!.stop();
  assert.equal(await b!.campaign(own), 3);
  await assert.rejects(a!.designate('https://b.example:8443'), /no longer leads/);
});

test(
  'over TLS, a master reaches etcd with its CA and client certificate, and without the certificate not at all',
  { skip, timeout: 30_000 },
  async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'portplane-etcd-tls-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const files = etcdCertificates(dir);
    const { endpoints } = await etcdCluster(t, 1, files);
    assert.match(endpoints[0]!, /^https:/);
    const [ca, cert, key] = [files.ca, files.clientCert, files.clientKey].map((file) => readFileSync(file));
    const prefix = `/tls${++prefixes}`;
    const me = { url: 'https://a.example:8443', pin: null };
    const trusted = new Election({ etcd: new Etcd({ endpoints, ca, cert, key }), prefix, me, log: silentLogger });
    await trusted.start();
    t.after(() => trusted.stop());
    assert.equal(await trusted.campaign(own), 2);
    assert.deepEqual(await trusted.leader(), { ...me, epoch: 2 });
    // No client certificate: etcd refuses the handshake; no CA: this master refuses etcd's certificate.
    for (const etcd of [new Etcd({ endpoints, ca }), new Etcd({ endpoints, cert, key })])
      await assert.rejects(new Election({ etcd, prefix, me, log: silentLogger }).leader(), EtcdUnavailable);
  },
);
