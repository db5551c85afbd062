import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { ruleFieldsOf, type OwnedRuleFields } from '../../internal/domain/rules.ts';
import { openStore } from '../../internal/store/store.ts';
import { NO_CONTROLS } from '../helpers.ts';

const AT = '2026-11-23T10:00:00Z';
/** Text JSON escapes, and text it must not: quotes, a backslash, controls, separators, other scripts, a pair. */
const HOSTILE = 'q"uo\\te\n\t\u0001\u001f\u007f\u2028\u2029</script>é中😀';

const EVERY_STATE =
  "a page SQLite renders is, byte for byte, the rules' JSON as a write answers it: whatever text their writers " +
  'chose, in every state and with every field set';

test(EVERY_STATE, (t) => {
  const store = openStore(mkdtempSync(join(tmpdir(), 'portplane-view-')), { secretFields: new Set() });
  t.after(() => store.close());
  const ids = store.write(() => {
    const none = { auth: 'none' as const, sealed: null };
    const node = { name: 'n', host: 'n.example', ssh_port: 22, ssh_user: 'root', tags: [] };
    const nodeId = store.nodes.insert(node, none, () => randomBytes(32), AT).id;
    const owner = store.users.insert({ username: 'o', password_hash: 'x', scopes: [], disabled: false }, AT).id;
    const base = {
      ...NO_CONTROLS,
      owner_id: owner,
      node_id: nodeId,
      tunnel_id: null,
      protocol: 'tcp' as const,
      listen_port_end: null,
      targets: ['192.0.2.1:80', '[2001:db8::1]:443'],
      strategy: 'round_robin' as const,
      weights: null,
      forwarding: 'auto' as const,
      enabled: true,
    };
    const plain = { ...base, name: HOSTILE, listen_port: 1000 };
    const everything = {
      ...base,
      name: `${HOSTILE} 2`,
      listen_port: 2000,
      listen_port_end: 2010,
      protocol: 'tcp+udp' as const,
      strategy: 'failover' as const,
      weights: [3, 1],
      forwarding: 'relay' as const,
      tags: [HOSTILE, 'web'],
      allow_sources: ['10.0.0.0/8'],
      deny_sources: ['10.1.0.0/16'],
      max_connections: 50,
      bandwidth_limit: 1_000_000,
      max_new_connections_per_second: 20,
      expires_at: '2027-01-01T00:00:00Z',
      proxy_protocol: 'v2' as const,
      quota: { bytes: 10 ** 9, period: 'month' as const, direction: 'both' as const, reset_day: 3, reset_hour: 4 },
      health_check: { interval_seconds: 5, timeout_ms: 1000, fall: 3, rise: 2 },
      preserve_source: true,
      source_address: HOSTILE,
      allow_hours: { zone: 'Europe/Berlin', windows: [{ days: ['mon' as const], from: '08:00', to: '18:00' }] },
    };
    const disabled = { ...base, name: 'off', listen_port: 3000, enabled: false };
    const made = store.rules.insertAll(
      [
        plain,
        everything,
        disabled,
        { ...plain, name: 'held', listen_port: 4000 },
        { ...plain, name: 'x', listen_port: 5000 },
        { ...plain, name: 'gone', listen_port: 6000, expires_at: '2026-01-01T00:00:00Z' },
      ].map((fields) => ruleFieldsOf(fields) as OwnedRuleFields),
      AT,
    );
    const [a, b, , d, e] = made.map((rule) => rule.id) as [number, number, number, number, number];
    store.rules.setSync(a, nodeId, 'failed', { code: 'port_in_use', detail: HOSTILE }, AT);
    store.rules.hold(d, {
      held: 'not_granted',
      max_connections: 5,
      bandwidth_limit: null,
      max_new_connections_per_second: 1,
    });
    store.rules.hold(e, {
      held: null,
      max_connections: null,
      bandwidth_limit: 100,
      max_new_connections_per_second: null,
    });
    store.rules.update(b, ruleFieldsOf(everything) as OwnedRuleFields, AT, true);
    store.rules.setSync(b, nodeId, 'applied', null, AT, 'relay', HOSTILE);
    store.rules.expire(AT);
    return made.map((rule) => rule.id);
  });
  const rules = ids.map((id) => store.rules.find(id)!);
  assert.deepEqual(
    rules.map((rule) => rule.state),
    ['active', 'quota_exceeded', 'disabled', 'not_granted', 'active', 'expired'],
  );
  assert.deepEqual(
    [rules[0]!.sync.error?.detail, rules[1]!.sync.relayed_because, rules[1]!.source_address, rules[3]!.plan_limits],
    [HOSTILE, HOSTILE, HOSTILE, { max_connections: 5, bandwidth_limit: null, max_new_connections_per_second: 1 }],
  );
  const filter = { owner_id: null, node_id: null, tunnel_id: null, enabled: null, protocol: null, tag: null };
  const page = store.rules.page({
    ...filter,
    q: null,
    sync_state: null,
    state: null,
    port: null,
    afterId: 0,
    limit: 10,
  });
  assert.equal(page.items, JSON.stringify(rules));
  for (const rule of rules) assert.equal(store.rules.json(rule.id)!.json, JSON.stringify(rule));
});
