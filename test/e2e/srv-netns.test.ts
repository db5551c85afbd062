// SRV targets through an agent on both paths, against a real DNS server whose answers change: the node is a network
// namespace whose /etc/netns/NAME/resolv.conf names a dnsmasq in it, the targets another namespace, the client and
// the master this one. Each target says who it is, so a reply tells where a connection went. Needs root, `ip netns`,
// `nft` and dnsmasq; skips with the reason otherwise.

import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { test, type TestContext } from 'node:test';
import { nodeOf, ruleOf, startAgent } from '../agents.ts';
import { Dnsmasq, dnsmasqMissing } from '../dnsmasq.ts';
import { call, node, rule, startMaster } from '../helpers.ts';
import { until } from '../net.ts';
import { ip, namespaces, nftUnavailable, veth } from '../netns.ts';

const tag = `${process.pid % 100_000}`;
const NODE = `ps${tag}n`;
const TARGET = `ps${tag}t`;
const NODE_ADDRESS = '10.217.1.2';
const TARGET_ADDRESS = '10.217.3.2';

function network(t: TestContext): void {
  namespaces(t, [NODE, TARGET]);
  veth(`${NODE}h`, null, '10.217.1.1/30', `${NODE}m`, NODE, `${NODE_ADDRESS}/30`);
  veth(`${NODE}t`, NODE, '10.217.3.1/24', `${TARGET}n`, TARGET, `${TARGET_ADDRESS}/24`);
  execFileSync('ip', ['netns', 'exec', NODE, 'sysctl', '-qw', 'net.ipv4.ip_forward=1']);
  ip('netns', 'exec', TARGET, 'ip', 'route', 'add', 'default', 'via', '10.217.3.1');
  // What `ip netns exec` puts in place of /etc/resolv.conf for what runs in the node's namespace.
  const etc = `/etc/netns/${NODE}`;
  mkdirSync(etc, { recursive: true });
  writeFileSync(`${etc}/resolv.conf`, 'nameserver 127.0.0.1\n');
  t.after(() => rmSync(etc, { recursive: true, force: true }));
}

/** Servers in the target namespace answering each chunk with `NAME:chunk`: A on 7007, B on 7008. */
async function whoServers(t: TestContext): Promise<void> {
  const script = `
    import { createServer } from 'node:net';
    for (const [name, port] of [['A', 7007], ['B', 7008]])
      createServer((s) => s.on('error', () => s.destroy()).on('data', (d) => s.write(name + ':' + d)))
        .listen(port, '${TARGET_ADDRESS}');
    console.log('ready');`;
  const child = spawn('ip', ['netns', 'exec', TARGET, process.execPath, '--input-type=module', '-e', script], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  t.after(() => child.kill('SIGKILL'));
  await once(child.stdout!, 'data');
}

/** A connection to the node's `port` that says `word` and hears who answered; kept open for more. */
async function ask(port: number, word: string, socket?: Socket): Promise<{ who: string; socket: Socket }> {
  const open = socket ?? connect({ host: NODE_ADDRESS, port });
  open.on('error', () => undefined);
  if (!socket) await once(open, 'connect');
  open.write(word);
  const [reply] = (await Promise.race([
    once(open, 'data'),
    new Promise((_, reject) => setTimeout(() => reject(new Error(`no answer on ${port}`)), 3000)),
  ])) as [Buffer];
  const [who, echoed] = reply.toString().split(':');
  assert.equal(echoed, word);
  return { who: who!, socket: open };
}

test(
  'a rule whose target is an SRV name goes where its records say, on the kernel path and the relay; when the ' +
    'records change, new connections follow them within the TTL and open ones stay where they are',
  async (t) => {
    const reason = nftUnavailable(`${NODE}-probe`) ?? dnsmasqMissing();
    if (reason) return t.skip(reason);
    network(t);
    await whoServers(t);
    const dns = new Dnsmasq(t, {
      namespace: NODE,
      ttl: 1,
      srv: [{ name: '_who._tcp.pp.test', target: 'who.pp.test', port: 7007 }],
      hosts: { 'who.pp.test': TARGET_ADDRESS },
    });
    await dns.start();
    const m = await startMaster(t, { host: '0.0.0.0', insecureHttp: true });
    const patched = await call(m.url, 'PATCH', '/api/settings', {
      token: m.admin,
      body: { srv_ttl_min_seconds: 1, srv_ttl_max_seconds: 2 },
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    const edge = await node(m, 'edge', { host: NODE_ADDRESS });
    startAgent(t, `http://10.217.1.1:${new URL(m.url).port}`, edge.agent_token, {
      within: ['ip', 'netns', 'exec', NODE],
      listenHost: '0.0.0.0',
      extraArgs: ['--insecure-http', '--forwarding', 'auto'],
    });
    await until('the agent online', async () => (await nodeOf(m, edge.id)).status === 'online');
    const target = '_who._tcp.pp.test';
    const kernel = (await rule(m, { node_id: edge.id, listen_port: 7100, targets: [target] })).body;
    const relay = (await rule(m, { node_id: edge.id, listen_port: 7101, targets: [target], forwarding: 'relay' })).body;
    const applied = await until('both rules applied', async () => {
      const [k, r] = [await ruleOf(m, kernel.id), await ruleOf(m, relay.id)];
      return k.sync.state === 'applied' && r.sync.state === 'applied' && [k, r];
    });
    assert.deepEqual(
      applied.map((shown) => shown.sync.applied_path),
      ['kernel', 'relay'],
    );

    const held = [await ask(7100, 'one'), await ask(7101, 'one')];
    assert.deepEqual(
      held.map((h) => h.who),
      ['A', 'A'],
    );
    t.after(() => held.forEach((h) => h.socket.destroy()));

    await dns.start({ srv: [{ name: '_who._tcp.pp.test', target: 'who.pp.test', port: 7008 }] });
    const started = Date.now();
    await until(
      'new connections on both paths to go to B',
      async () => {
        const answers = await Promise.all([7100, 7101].map((port) => ask(port, 'two').catch(() => null)));
        answers.forEach((answer) => answer?.socket.destroy());
        return answers.every((answer) => answer?.who === 'B');
      },
      10_000,
    );
    const moved = Date.now() - started;
    assert.ok(moved < 6000, `followed the records in ${moved} ms (TTL 1 s, kept at most 2 s)`);
    for (const h of held) assert.equal((await ask(0, 'three', h.socket)).who, 'A', 'an open connection stays');
    assert.deepEqual(
      [(await ruleOf(m, kernel.id)).sync.applied_path, (await ruleOf(m, relay.id)).sync.state],
      ['kernel', 'applied'],
    );

    // The name gone (NXDOMAIN is an answer, unlike a nameserver away): both rules fail saying so.
    await dns.start({ srv: [] });
    const failed = await until(
      'the rules to say their target no longer resolves',
      async () => {
        const shown = [await ruleOf(m, kernel.id), await ruleOf(m, relay.id)];
        return shown.every((r) => r.sync.error?.code === 'target_unresolvable') && shown;
      },
      10_000,
    );
    assert.match(failed[0].sync.error.detail, /^none of _who\._tcp\.pp\.test resolves on the node \(/);
  },
);
