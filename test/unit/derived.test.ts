import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { test } from 'node:test';
import { ruleFieldsOf, type OwnedRuleFields, type RuleFields } from '../../internal/domain/rules.ts';
import { derivations, installDerived } from '../../internal/store/derived.ts';
import { notReplicated, ownTables } from '../../internal/store/replication.ts';
import { openStore } from '../../internal/store/store.ts';
import { trigger, type Derivation } from '../../internal/store/trigger.ts';
import { NO_CONTROLS } from '../helpers.ts';

const AT = '2026-11-23T10:00:00Z';
const MOVED = '2031-02-03T04:05:06Z';

function installedTriggers(path: string): Map<string, string> {
  const raw = new DatabaseSync(path, { readOnly: true });
  try {
    const rows = raw.prepare("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").all() as {
      name: string;
      sql: string;
    }[];
    return new Map(rows.map((row) => [row.name, row.sql]));
  } finally {
    raw.close();
  }
}

function definedTriggers(wanted: readonly Derivation[] = derivations()): Map<string, string> {
  return new Map(wanted.flatMap((d) => d.triggers.map((t) => [t.name, t.sql] as const)));
}

/** A data dir with a node and two rules (one with a quota), its store open; `time` is the store's clock. */
function withRules(t: { after: (fn: () => void) => void }, time?: () => string) {
  const dir = mkdtempSync(join(tmpdir(), 'portplane-derived-'));
  const store = openStore(dir, { secretFields: new Set(), time });
  t.after(() => store.close());
  const none = { auth: 'none' as const, sealed: null };
  const node = { name: 'n', host: 'n.example', ssh_port: 22, ssh_user: 'root', tags: [] };
  const ids = store.write(() => {
    const nodeId = store.nodes.insert(node, none, () => randomBytes(32), AT).id;
    const owner = store.users.insert({ username: 'owner', password_hash: 'x', scopes: [], disabled: false }, AT).id;
    const rule = (name: string, port: number, quota: RuleFields['quota']) =>
      ruleFieldsOf({
        ...NO_CONTROLS,
        name,
        owner_id: owner,
        node_id: nodeId,
        tunnel_id: null,
        protocol: 'tcp',
        listen_port: port,
        listen_port_end: null,
        targets: ['192.0.2.1:80'],
        strategy: 'round_robin',
        weights: null,
        forwarding: 'auto',
        enabled: true,
        quota,
      });
    const quota = { bytes: 1000, period: 'day' as const, direction: 'both' as const, reset_day: 1, reset_hour: 0 };
    const rules = [rule('plain', 1000, null), rule('metered', 1001, quota)] as OwnedRuleFields[];
    return store.rules.insertAll(rules, AT).map((r) => r.id);
  });
  return { dir, store, ids, path: join(dir, 'master.db') };
}

test('the triggers a database opens with are exactly their one definition, whatever it held before', async (t) => {
  const { store, path, ids } = withRules(t);
  await store.committed();
  assert.deepEqual(installedTriggers(path), definedTriggers());
  // What an older master left: a tally trigger of another text, a trigger nobody defines any more, a stale tally.
  const raw = new DatabaseSync(path);
  raw.exec(`DROP TRIGGER owner_tallies_update;
    CREATE TRIGGER owner_tallies_update AFTER UPDATE ON rules BEGIN SELECT 1; END;
    CREATE TRIGGER gone_long_ago AFTER DELETE ON users BEGIN SELECT 1; END;
    UPDATE owner_tallies SET rules = 40;`);
  raw.close();
  store.close();
  const reopened = openStore(join(path, '..'), { secretFields: new Set() });
  t.after(() => reopened.close());
  assert.deepEqual(installedTriggers(path), definedTriggers());
  assert.deepEqual(ownerTallies(path), [{ owner: 1, rules: ids.length }], 'counted anew');
  for (const id of ids) assert.deepEqual(JSON.parse(reopened.rules.json(id)!.json), reopened.rules.find(id));
});

/** Each owner's count of rules, as the tally the triggers keep says. */
function ownerTallies(path: string): { owner: number; rules: number }[] {
  const raw = new DatabaseSync(path, { readOnly: true });
  try {
    const rows = raw.prepare('SELECT rowid AS owner, rules FROM owner_tallies ORDER BY rowid').all();
    return rows.map((row) => ({ owner: Number(row.owner), rules: Number(row.rules) }));
  } finally {
    raw.close();
  }
}

test('a changed definition replaces its triggers and rebuilds the rows it keeps, in one transaction', async (t) => {
  const { store, ids, path } = withRules(t);
  store.close();
  const changed = derivations().map((d) =>
    d.name !== 'owner_tallies'
      ? d
      : {
          ...d,
          triggers: [trigger('owner_tallies_insert', 'AFTER INSERT ON rules BEGIN SELECT 1; END')],
          rebuild: 'DELETE FROM owner_tallies; INSERT INTO owner_tallies (rowid, rules) VALUES (1, 99)',
        },
  );
  const raw = new DatabaseSync(path);
  t.after(() => raw.close());
  const install = (wanted?: readonly Derivation[]) => {
    raw.exec('BEGIN IMMEDIATE');
    const installed = installDerived(raw, wanted);
    raw.exec('COMMIT');
    return installed;
  };
  const dropped = ['owner_tallies_delete', 'owner_tallies_update'];
  assert.deepEqual(install(changed), { replaced: ['owner_tallies'], dropped });
  assert.deepEqual(ownerTallies(path), [{ owner: 1, rules: 99 }]);
  assert.deepEqual(install(changed), { replaced: [], dropped: [] }, 'an installed definition is left alone');
  assert.deepEqual(install(), { replaced: ['owner_tallies'], dropped: [] });
  assert.deepEqual(ownerTallies(path), [{ owner: 1, rules: ids.length }], 'counted by the one definition again');
});

test('what triggers journal is stamped with the clock the store was given, not SQLite’s', async (t) => {
  const { store, ids } = withRules(t, () => MOVED);
  const [first] = store.events.page({
    after: 0,
    limit: 10,
    resources: '["rule", "node"]',
    types: null,
    node_id: null,
    resource_id: null,
  });
  assert.equal(first?.at, MOVED);
  assert.ok(ids.length > 0);
});

const RECORDED =
  'what a primary records for its standbys is every table but those a copy derives, which have no primary key';

test(RECORDED, async (t) => {
  const { store, ids, path } = withRules(t);
  const raw = new DatabaseSync(path, { readOnly: true });
  t.after(() => raw.close());
  const rows = raw.prepare("SELECT name, sql FROM sqlite_master WHERE type = 'table'").all();
  const tables = (rows as { name: string; sql: string }[]).filter((table) => !table.name.startsWith('sqlite_'));
  const keyed = (table: string) =>
    raw.prepare('SELECT 1 FROM pragma_table_info(?) WHERE pk > 0').get(table) !== undefined;
  // FTS5 keeps its index in tables of its own, with keys: recorded, and passed over where a copy applies a change.
  const fts = tables.filter((table) => table.sql.startsWith('CREATE VIRTUAL TABLE')).map((table) => table.name);
  const ftsOwn = (table: string) => fts.some((name) => table === name || table.startsWith(`${name}_`));
  const derived = tables.filter((table) => notReplicated(table.name) && !ownTables.has(table.name));
  assert.deepEqual(
    derived.filter((table) => !ftsOwn(table.name) && keyed(table.name)).map((table) => table.name),
    [],
    'a derived table with a primary key would be recorded',
  );
  assert.deepEqual(
    tables.filter((table) => !notReplicated(table.name) && !keyed(table.name)).map((table) => table.name),
    [],
    'a replicated table without a primary key would never reach a copy',
  );

  // What one write records: a rule renamed, disabled, given away and moved to a range of ports, its node retagged
  // (every derivation's table).
  const sessions = store.recordJob();
  store.write(() => {
    store.db
      .prepare(
        `UPDATE rules SET name = 'renamed', enabled = 0, owner_id = NULL, protocol = 'tcp+udp', listen_port = 2000,
          listen_port_end = 2099 WHERE id = ?`,
      )
      .run(ids[0]!);
    store.db.prepare(`UPDATE nodes SET tags = '["eu"]'`).run();
  });
  await store.committed();
  const recorded = new Set<string>();
  const copy = new DatabaseSync(':memory:');
  copy.applyChangeset(sessions.take(), { filter: (table) => (recorded.add(table), false) });
  copy.close();
  sessions.close();
  assert.deepEqual(
    [...recorded].filter((table) => !ftsOwn(table)).sort(),
    ['audit_log', 'events', 'nodes', 'rules'].filter((table) => recorded.has(table)),
  );
  assert.ok(recorded.has('rules') && recorded.has('nodes'));

  // A rule written bumps its node's config version: a narrow row of its own, not the node's whole row each time.
  const bumps = store.recordJob();
  const nodeId = store.rules.find(ids[1]!)!.node_id;
  const before = store.nodes.find(nodeId)!.config_version;
  store.write(() => store.nodes.bumpConfig(nodeId));
  await store.committed();
  assert.equal(store.nodes.find(nodeId)!.config_version, before + 1);
  const bumped = new Set<string>();
  const other = new DatabaseSync(':memory:');
  other.applyChangeset(bumps.take(), { filter: (table) => (bumped.add(table), false) });
  other.close();
  bumps.close();
  assert.deepEqual([...bumped], ['node_configs']);
});

test('port claims follow every write of rules and tunnels, as a rebuild from the tables makes them', async (t) => {
  const { store, ids } = withRules(t);
  const claims = () =>
    store.db.prepare('SELECT node_id, protocol, port, rule_id, tunnel_id FROM port_claims ORDER BY 1, 2, 3').all();
  const rebuilt = () => {
    const kept = claims();
    const rebuild = derivations().find((d) => d.name === 'port_claims')!.rebuild!;
    store.write(() => rebuild.split(';').forEach((sql) => store.db.prepare(sql).run()));
    return [kept, claims()] as const;
  };
  const [plain, metered] = ids as [number, number];
  const node = (name: string) =>
    store.write(() => {
      const none = { auth: 'none' as const, sealed: null };
      const fields = { name, host: `${name}.example`, ssh_port: 22, ssh_user: 'root', tags: [] };
      return store.nodes.insert(fields, none, () => randomBytes(32), AT).id;
    });
  const [first, second, third] = [store.rules.find(plain)!.node_id, node('second'), node('third')];
  const owner = store.rules.find(plain)!.owner_id!;
  const tunnel = store.write(
    () =>
      store.tunnels.insert(
        {
          name: 't',
          owner_id: owner,
          entry_node_id: first,
          exit_node_id: second,
          listen_port: 40000,
          transport: 'tls',
          via: null,
          more_exits: [],
          exit_strategy: 'failover',
          probe_target: null,
        },
        AT,
      ).id,
  );
  const run = (sql: string, ...params: number[]) => store.write(() => store.db.prepare(sql).run(...params));
  const steps: [string, () => unknown][] = [
    ['made', () => undefined],
    [
      'a range of both protocols',
      () =>
        run("UPDATE rules SET protocol = 'tcp+udp', listen_port = 1100, listen_port_end = 1110 WHERE id = ?", plain),
    ],
    [
      'moved to another node',
      () => run('UPDATE rules SET node_id = ?, listen_port = 1105 WHERE id = ?', second, plain),
    ],
    ['renamed only', () => run("UPDATE rules SET name = 'other' WHERE id = ?", plain)],
    ['to udp alone', () => run("UPDATE rules SET protocol = 'udp' WHERE id = ?", plain)],
    ['the tunnel moved', () => store.write(() => store.tunnels.movePort(tunnel, second, 40001, AT))],
    [
      'a second exit added',
      () =>
        store.write(() => {
          const { exits: _, ...fields } = store.tunnels.find(tunnel)!;
          const more_exits = [{ node_id: third, listen_port: 40002, via: null }];
          store.tunnels.update(tunnel, { ...fields, more_exits }, AT, new Set([third]));
        }),
    ],
    ['the second exit moved', () => store.write(() => store.tunnels.movePort(tunnel, third, 40003, AT))],
    ['a rule deleted', () => run('DELETE FROM rules WHERE id = ?', metered)],
    ['the tunnel deleted', () => store.write(() => store.tunnels.delete(tunnel))],
  ];
  for (const [step, write] of steps) {
    write();
    const [kept, made] = rebuilt();
    assert.deepEqual(kept, made, step);
    assert.ok(step !== 'made' || kept.length === 3, 'two rules and a tunnel, a port each');
  }
  assert.equal(claims().length, 6, 'ports 1105-1110 of udp, on the second node');
});
