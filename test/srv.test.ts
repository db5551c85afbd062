// SRV targets on loopback: the DNS client against a real dnsmasq (records, TTL, NXDOMAIN, a silent server, an
// answer too long for UDP) and against answers crafted to break it; the records as a rule's targets, by priority
// and weight; and what the API takes. Through an agent on both paths, with the answers changing:
// e2e/srv-netns.test.ts.

import assert from 'node:assert/strict';
import { createSocket } from 'node:dgram';
import { once } from 'node:events';
import { describe, test, type TestContext } from 'node:test';
import { AgentState } from '../internal/agent/state.ts';
import { expansion, SrvTargets } from '../internal/forward/srv.ts';
import { resolveSrv, systemNameservers } from '../internal/relay/dns.ts';
import { TargetPicker } from '../internal/relay/targets.ts';
import { Dnsmasq, dnsmasqMissing } from './dnsmasq.ts';
import { call, node, rule, startMaster } from './helpers.ts';
import { freePort } from './net.ts';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A UDP server answering each question with what `answer` makes of it (its bytes); null: silence. */
async function fakeServer(t: TestContext, answer: (query: Buffer) => Buffer | null): Promise<string> {
  const socket = createSocket('udp4');
  socket.on('message', (query, from) => {
    const reply = answer(query);
    if (reply) socket.send(reply, from.port, from.address);
  });
  socket.bind(0, '127.0.0.1');
  await once(socket, 'listening');
  t.after(() => socket.close());
  return `127.0.0.1:${socket.address().port}`;
}

/** A reply to `query` with its header's id, the question copied, and `records` (raw) as answers. */
function reply(query: Buffer, records: Buffer[], flags = 0x8180): Buffer {
  const header = Buffer.from(query.subarray(0, 12));
  header.writeUInt16BE(flags, 2);
  header.writeUInt16BE(records.length, 6);
  return Buffer.concat([header, query.subarray(12), ...records]);
}

/** An SRV answer record for the question's name (a pointer to offset 12), its target given as raw name bytes. */
function srvRecord(target: Buffer, port = 80, ttl = 60): Buffer {
  const head = Buffer.alloc(2 + 10 + 6);
  head.writeUInt16BE(0xc00c, 0);
  head.writeUInt16BE(33, 2);
  head.writeUInt16BE(1, 4);
  head.writeUInt32BE(ttl, 6);
  head.writeUInt16BE(6 + target.length, 10);
  head.writeUInt16BE(10, 12);
  head.writeUInt16BE(5, 14);
  head.writeUInt16BE(port, 16);
  return Buffer.concat([head, target]);
}

const name = (text: string) =>
  Buffer.concat([
    ...text.split('.').map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l)])),
    Buffer.from([0]),
  ]);

describe('SRV targets', { concurrency: 4 }, () => {
  test('dnsmasq answers records with priority, weight, port and host, and the TTL it was given', async (t) => {
    const missing = dnsmasqMissing();
    if (missing) return t.skip(missing);
    const port = await freePort();
    const dns = new Dnsmasq(t, {
      port,
      ttl: 42,
      srv: [
        { name: '_game._tcp.pp.test', target: 'a.pp.test', port: 25565, priority: 10, weight: 60 },
        { name: '_game._tcp.pp.test', target: 'b.pp.test', port: 25566, priority: 20, weight: 0 },
      ],
      hosts: { 'a.pp.test': '192.0.2.1', 'b.pp.test': '192.0.2.2' },
    });
    await dns.start();
    const server = `127.0.0.1:${port}`;
    const answer = await resolveSrv('_game._tcp.pp.test', [server]);
    assert.equal(answer.ttl, 42);
    assert.deepEqual(
      answer.records.sort((a, b) => a.priority - b.priority),
      [
        { priority: 10, weight: 60, port: 25565, target: 'a.pp.test' },
        { priority: 20, weight: 0, port: 25566, target: 'b.pp.test' },
      ],
    );
    assert.deepEqual(await resolveSrv('_none._tcp.pp.test', [server]).then((a) => a.records), []);
    // A server that does not answer is passed over for the next.
    const silent = await fakeServer(t, () => null);
    const started = Date.now();
    assert.equal((await resolveSrv('_game._tcp.pp.test', [silent, server])).records.length, 2);
    assert.ok(Date.now() - started >= 1900, 'the silent server was waited for, then the next asked');
  });

  test('an answer too long for UDP is asked for again over TCP, and every record comes', async (t) => {
    const missing = dnsmasqMissing();
    if (missing) return t.skip(missing);
    const port = await freePort();
    const hosts: Record<string, string> = {};
    const srv = Array.from({ length: 40 }, (_, i) => {
      const target = `a-rather-long-host-name-number-${i}.pp.test`;
      hosts[target] = `192.0.2.${i + 1}`;
      return { name: '_many._tcp.pp.test', target, port: 1000 + i };
    });
    const dns = new Dnsmasq(t, { port, srv, hosts });
    await dns.start();
    const answer = await resolveSrv('_many._tcp.pp.test', [`127.0.0.1:${port}`]);
    assert.equal(answer.records.length, 40);
  });

  test('crafted answers fail the lookup and nothing else: loops, overruns, forged ids, another question', async (t) => {
    const loop = Buffer.from([0xc0, 0x00]);
    const cases: [string, (query: Buffer) => Buffer | null, RegExp][] = [
      ['a name pointing at itself', (q) => reply(q, [srvRecord(Buffer.from([0xc0, q.length + 18]))]), /points/],
      ['a pointer forwards', (q) => reply(q, [srvRecord(Buffer.from([0xc3, 0xff]))]), /points/],
      ['a record past the end', (q) => reply(q, [srvRecord(name('x.test')).subarray(0, 14)]), /past/],
      ['a label past the end', (q) => reply(q, [srvRecord(Buffer.from([63, 1, 2]))]), /label|past/],
      ['an error code', (q) => reply(q, [], 0x8182), /error 2/],
      ['a query, not an answer', (q) => reply(q, [], 0x0100), /not an answer/],
      ['a pointer into the header', (q) => reply(q, [srvRecord(loop)]), /into the header/],
    ];
    for (const [what, answer, error] of cases) {
      const server = await fakeServer(t, answer);
      await assert.rejects(resolveSrv('_x._tcp.pp.test', [server]), error, what);
    }
    // Servers that cannot be asked (a broadcast address, a closed port) fail the lookup, in time, and nothing else.
    for (const server of ['255.255.255.255', '127.0.0.1:1'])
      await assert.rejects(resolveSrv('_x._tcp.pp.test', [server]), /EACCES|ECONNREFUSED/, server);
    // A forged answer (another id) is not taken; the real one after it is.
    const server = await fakeServer(t, (q) => {
      const forged = reply(q, [srvRecord(name('evil.test'))]);
      forged.writeUInt16BE((q.readUInt16BE(0) + 1) & 0xffff, 0);
      return Buffer.concat([forged]);
    });
    await assert.rejects(resolveSrv('_x._tcp.pp.test', [server]), /did not answer/);
    const other = await fakeServer(t, (q) => {
      const asked = Buffer.from(q);
      asked[13] = asked[13]! ^ 0x20; // another name, one letter off
      return reply(asked, [srvRecord(name('evil.test'))]);
    });
    await assert.rejects(resolveSrv('_x._tcp.pp.test', [other]), /another question/);
  });

  test("resolv.conf's nameservers, at most three, and loopback when it names none", () => {
    const dir = mkdtempSync(join(tmpdir(), 'portplane-resolv-'));
    const file = join(dir, 'resolv.conf');
    writeFileSync(file, '# a comment\nsearch x\nnameserver 10.0.0.1\nnameserver fe80::1%eth0\nnameserver 1.1.1.1\n');
    writeFileSync(join(dir, 'more'), 'nameserver not-an-address\n');
    assert.deepEqual(systemNameservers(file), ['10.0.0.1', 'fe80::1', '1.1.1.1']);
    assert.deepEqual(systemNameservers(join(dir, 'more')), ['127.0.0.1']);
    assert.deepEqual(systemNameservers(join(dir, 'absent')), ['127.0.0.1']);
  });

  test('records become targets by priority then weight; the picker spreads over the lowest priority up', () => {
    const records = [
      { priority: 20, weight: 5, port: 3, target: 'c.test' },
      { priority: 10, weight: 0, port: 2, target: 'b.test' },
      { priority: 10, weight: 30, port: 1, target: 'a.test' },
      { priority: 10, weight: 9, port: 0, target: 'zero-port.test' },
    ];
    const expanded = expansion(records);
    assert.deepEqual(expanded, {
      targets: ['a.test:1', 'b.test:2', 'c.test:3'],
      weights: [30, 1, 5],
      tiers: [10, 10, 20],
    });
    // What a nameserver answers is no more trusted than any peer: hosts that are no host are passed over, and at most
    // as many records as a rule may have targets are kept, the first in order.
    const hostile = Array.from({ length: 40 }, (_, i) => ({ priority: i, weight: 0, port: 1, target: `h${i}.test` }));
    hostile.unshift(
      { priority: 0, weight: 9, port: 1, target: 'a host' },
      { priority: 0, weight: 9, port: 1, target: 'x:y' },
    );
    const kept = expansion(hostile).targets;
    assert.deepEqual(
      kept,
      hostile.slice(2, 18).map((r) => `${r.target}:1`),
    );
    const targets = expanded.targets.map((t) => ({ host: t.split(':')[0]!, port: Number(t.split(':')[1]) }));
    let down = new Set<number>();
    const health = { isDownAt: (i: number) => down.has(i), fastest: () => null };
    const picker = new TargetPicker(targets, 'round_robin', expanded.weights, () => health, expanded.tiers);
    const firsts = Array.from({ length: 31 }, () => picker.order()[0]!.host);
    assert.equal(firsts.filter((h) => h === 'a.test').length, 30, 'weighted 30 to 1 within priority 10');
    assert.equal(firsts.filter((h) => h === 'c.test').length, 0, 'priority 20 waits');
    const order = picker.order().map((t) => t.host);
    assert.deepEqual([...order.slice(0, 2)].sort(), ['a.test', 'b.test'], 'priority 10 first, either way round');
    assert.equal(order[2], 'c.test', 'priority 20 last, failed over to');
    down = new Set([0, 1]);
    assert.deepEqual(
      picker.order().map((t) => t.host),
      ['c.test'],
    );
  });

  test('records read are kept in the state dir: restarted with the nameserver away, a rule has them', async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'portplane-srv-state-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const rules = [{ id: 1, targets: ['_x._tcp.pp.test'], weights: null }];
    const before = new SrvTargets(
      () => ({ minSeconds: 1, maxSeconds: 1 }),
      async () => ({ records: [{ priority: 0, weight: 0, port: 7, target: 'a.test' }], ttl: 1 }),
    );
    before.keepIn(new AgentState(dir));
    assert.deepEqual((await before.expand(rules))[0]!.targets, ['a.test:7']);
    before.close();
    const away = async (): Promise<never> => {
      throw new Error('the nameserver is away');
    };
    const after = new SrvTargets(() => ({ minSeconds: 1, maxSeconds: 1 }), away);
    after.keepIn(new AgentState(dir));
    assert.deepEqual((await after.expand(rules))[0]!.targets, ['a.test:7'], 'what was read before the restart');
    after.close();
    // A name no rule uses any more is forgotten on disk too.
    const again = new SrvTargets(() => ({ minSeconds: 1, maxSeconds: 1 }), away);
    again.keepIn(new AgentState(dir));
    await again.expand([]);
    again.close();
    const last = new SrvTargets(() => ({ minSeconds: 1, maxSeconds: 1 }), away);
    last.keepIn(new AgentState(dir));
    assert.deepEqual((await last.expand(rules))[0]!.targets, ['_x._tcp.pp.test'], 'nothing kept: no records');
    last.close();
  });

  test('an answer that changes on a later read calls onChange once; one that fails keeps what was had', async () => {
    let answer: () => Promise<{
      records: { priority: number; weight: number; port: number; target: string }[];
      ttl: number;
    }>;
    answer = async () => ({ records: [{ priority: 0, weight: 0, port: 7, target: 'a.test' }], ttl: 1 });
    const srv = new SrvTargets(
      () => ({ minSeconds: 1, maxSeconds: 1 }),
      () => answer(),
    );
    let changes = 0;
    srv.onChange = () => changes++;
    const rules = [{ id: 1, targets: ['_x._tcp.pp.test'], weights: null }];
    assert.deepEqual((await srv.expand(rules))[0]!.targets, ['a.test:7']);
    answer = async () => {
      throw new Error('the nameserver is away');
    };
    await new Promise((resolve) => setTimeout(resolve, 1300));
    assert.equal(changes, 0);
    assert.deepEqual((await srv.expand(rules))[0]!.targets, ['a.test:7'], 'kept while the nameserver is away');
    answer = async () => ({ records: [{ priority: 0, weight: 0, port: 8, target: 'b.test' }], ttl: 1 });
    await new Promise((resolve) => setTimeout(resolve, 1300));
    assert.equal(changes, 1);
    assert.deepEqual((await srv.expand(rules))[0]!.targets, ['b.test:8']);
    srv.close();
  });

  test("the API takes an SRV name as a rule's only target, without weights or a range", async (t) => {
    const m = await startMaster(t);
    const n = await node(m, 'edge');
    const made = await rule(m, { node_id: n.id, listen_port: 7100, targets: ['_minecraft._tcp.example.com'] });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    assert.deepEqual(made.body.targets, ['_minecraft._tcp.example.com']);
    for (const [body, pointer] of [
      [{ targets: ['_a._tcp.example.com', '10.0.0.1:80'] }, '#/targets'],
      [{ targets: ['_a._tcp.example.com'], weights: [2] }, '#/weights'],
      [{ targets: ['_a._tcp.example.com'], listen_port: 7200, listen_port_end: 7201 }, '#/listen_port_end'],
      [{ targets: ['_a._tcp'] }, '#/targets/0'],
      [{ targets: ['_a._tcp.example.com:80'] }, '#/targets/0'],
      [{ targets: ['__._tcp.example.com'] }, '#/targets/0'],
    ] as const) {
      const refused = await call(m.url, 'POST', '/api/rules', {
        token: m.admin,
        body: { name: 'r', node_id: n.id, protocol: 'tcp', listen_port: 7101, ...body },
      });
      assert.equal(refused.status, 422, JSON.stringify(body));
      assert.ok(
        refused.body.errors.some((e: { pointer: string }) => e.pointer === pointer),
        `${JSON.stringify(body)}: ${JSON.stringify(refused.body.errors)}`,
      );
    }
  });
});
