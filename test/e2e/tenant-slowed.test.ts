// A tenant's allowance spent with past "slow", measured in real time: their rule runs at the slowed rate, and an
// operator's rule on the same node does not.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { call, rule } from '../helpers.ts';
import { countingSink, flood, freePort, tcpRoundTrip, until } from '../net.ts';
import { edgeWorld, MiB, sent, tenant, theirRule } from '../tenancy.ts';

const SLOWED =
  "past a 1 MiB allowance with slow to 256 KiB/s, the tenant's rule runs within 10% of that rate, and an " +
  "operator's rule on the same node is not slowed";

test(SLOWED, async (t) => {
  const world = await edgeWorld(t);
  if (typeof world === 'string') return t.skip(world);
  const { m, edge: n, host, targetHost } = world;
  const [theirs, ours] = [await countingSink(t, targetHost), await countingSink(t, targetHost)];
  const [theirPort, ourPort] = [await freePort(), await freePort()];
  const slowTo = 256 * 1024;
  const customer = await tenant(m, {
    node_ids: [n.id],
    port_ranges: [String(theirPort)],
    traffic: { bytes: MiB, period: 'month', past: 'slow', slow_to: slowTo },
  });
  const made = await theirRule(m, customer.token, { node_id: n.id, listen_port: theirPort, targets: [theirs.target] });
  const operators = await rule(m, { node_id: n.id, listen_port: ourPort, targets: [ours.target] });
  await sent(m, customer.token, made.body.id);
  await sent(m, m.admin, operators.body.id);
  const me = (await call(m.url, 'GET', '/api/auth/me', { token: customer.token })).body;
  assert.deepEqual([me.usage.traffic.used_bytes, me.usage.traffic.spent], [0, false]);

  // 2 MiB at full speed spend the allowance; the master, counting the node's reports, slows every rule of theirs.
  await tcpRoundTrip(theirPort, Buffer.alloc(2 * MiB, 7), host).catch(() => undefined);
  const slowed = await until('the allowance to be spent and the rule slowed on its node', async () => {
    const current = (await call(m.url, 'GET', `/api/rules/${made.body.id}`, { token: customer.token })).body;
    return current.plan_limits?.bandwidth_limit === slowTo && current.sync.state === 'applied' && current;
  });
  assert.equal(slowed.state, 'active');
  assert.equal(slowed.sync.applied_path, 'relay');
  const usage = (await call(m.url, 'GET', `/api/users/${customer.id}`, { token: m.admin })).body.usage;
  assert.ok(usage.traffic.spent && usage.traffic.used_bytes >= MiB, JSON.stringify(usage));
  const audit = await call(m.url, 'GET', '/api/audit-logs?action=user.allowance_exceeded', { token: customer.token });
  assert.equal(audit.body.items.length, 1, 'the tenant reads what happened to their account');

  theirs.restart();
  ours.restart();
  const senders = [flood(host, theirPort), flood(host, theirPort), flood(host, ourPort)];
  await new Promise((resolve) => setTimeout(resolve, 4600));
  for (const socket of senders) socket.destroy();
  const [slow, fast] = [theirs.within(4000), ours.within(4000)];
  t.diagnostic(`tenant's rule: ${(slow / MiB).toFixed(2)} MiB in 4 s; operator's: ${(fast / MiB).toFixed(1)} MiB`);
  const expected = 4 * slowTo;
  assert.ok(Math.abs(slow - expected) <= expected * 0.1, `${slow} bytes in 4 s, where 256 KiB/s makes ${expected}`);
  assert.ok(fast > 20 * expected, `the operator's rule moved ${fast} bytes in 4 s: slowed with the tenant's`);
});
