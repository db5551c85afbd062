import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { test } from 'node:test';
import { NodeStore, type NodeFields } from '../../internal/store/nodes.ts';
import { Generation } from '../../internal/store/page.ts';
import { openDatabase, openStore, type Store } from '../../internal/store/store.ts';
import { TokenStore } from '../../internal/store/tokens.ts';
import { TunnelStore } from '../../internal/store/tunnels.ts';
import { UserStore } from '../../internal/store/users.ts';
import { EVERY_RULE, RuleStore } from '../../internal/store/rules.ts';
import { AuditStore, EVERY_ENTRY } from '../../internal/store/audit.ts';
import { SECRET_FIELDS } from '../../internal/domain/secret-fields.ts';
import { ruleFieldsOf } from '../../internal/domain/rules.ts';
import { NO_CONTROLS } from '../helpers.ts';

const AT = '2026-11-23T10:00:00Z';
const fields = (name: string): NodeFields => ({
  name,
  host: `${name}.example`,
  ssh_port: 22,
  ssh_user: 'root',
  tags: ['a'],
});

/** Another process's connection: like every writer of these tables it gives the journal's triggers a clock. */
function outsideConnection(dir: string): DatabaseSync {
  const outside = new DatabaseSync(join(dir, 'master.db'));
  outside.function('app_time', () => AT);
  return outside;
}

/** A store with two nodes joined by a tunnel and a rule through it; `fresh` reads a node as a new connection would. */
function setUp(t: { after: (fn: () => void) => void }) {
  const dir = mkdtempSync(join(tmpdir(), 'portplane-views-'));
  const store = openStore(dir, { secretFields: SECRET_FIELDS });
  const other = openDatabase(join(dir, 'master.db'));
  t.after(() => {
    other.close();
    store.close();
  });
  const none = { auth: 'none' as const, sealed: null };
  const [entry, exit] = store.write(() => [
    store.nodes.insert(fields('entry'), none, () => randomBytes(32), AT).id,
    store.nodes.insert(fields('exit'), none, () => randomBytes(32), AT).id,
  ]) as [number, number];
  const owner = store.write(
    () => store.users.insert({ username: 'owner', password_hash: 'x', scopes: [], disabled: false }, AT).id,
  );
  const rule = store.write(() => {
    const tunnel = store.tunnels.insert(
      {
        name: 't',
        owner_id: owner,
        entry_node_id: entry,
        exit_node_id: exit,
        listen_port: 7000,
        transport: 'tls',
        via: null,
        more_exits: [],
        exit_strategy: 'failover',
        probe_target: null,
      },
      AT,
    );
    return store.rules.insert(
      {
        name: 'r',
        owner_id: owner,
        node_id: entry,
        tunnel_id: tunnel.id,
        protocol: 'tcp',
        listen_port: 8000,
        listen_port_end: null,
        targets: ['10.0.0.1:80'],
        strategy: 'round_robin',
        weights: null,
        forwarding: 'auto',
        enabled: true,
        ...NO_CONTROLS,
      },
      AT,
    ).id;
  });
  const fresh = (id: number) => new NodeStore(other).json(id);
  return { dir, store, other, entry, exit, rule, fresh };
}

/** Each change, and whether it shows in the node's JSON (an agent token and the config version do not). */
function changes(store: Store, entry: number, exit: number, rule: number): [string, () => void, boolean][] {
  const { nodes } = store;
  return [
    ['an update', () => nodes.update(entry, { ...fields('entry'), host: 'moved.example' }, 'keep', AT), true],
    ['the link going online', () => nodes.setLink(entry, 'online', null, '1.2.3', AT), true],
    ['a status detail', () => nodes.setStatusDetail(entry, 'applying'), true],
    ['the agent heard from', () => nodes.seen(entry, '2026-11-23T10:05:00Z'), true],
    ['an install starting', () => nodes.installStarted(exit, 'connecting', AT), true],
    ['install progress', () => nodes.installProgress(exit, 'copying', 'copied the agent\n'), true],
    ['an install ending', () => nodes.installFinished(exit, 'online', null, AT), true],
    ['a new agent token', () => nodes.setAgentTokenHash(entry, randomBytes(32)), false],
    ['a config change', () => nodes.bumpConfig(exit), false],
    [
      'traffic through the tunnel (both ends count)',
      () => store.traffic.record(rule, entry, 1_800_000_000, 5, 7),
      true,
    ],
    [
      'a statement no store method makes',
      () => store.db.prepare("UPDATE nodes SET host = 'raw.example' WHERE id = ?").run(exit),
      true,
    ],
  ];
}

test("a node's JSON read again after any change to it is what a fresh read of the database shows", async (t) => {
  const { store, entry, exit, rule, fresh } = setUp(t);
  for (const [what, change, visible] of changes(store, entry, exit, rule)) {
    const before = [store.nodes.json(entry), store.nodes.json(exit)];
    store.write(change);
    await store.committed();
    assert.deepEqual(store.nodes.json(entry), fresh(entry), `entry node after ${what}`);
    assert.deepEqual(store.nodes.json(exit), fresh(exit), `exit node after ${what}`);
    if (what.startsWith('traffic'))
      for (const id of [entry, exit]) assert.match(store.nodes.json(id)!.json, /"bytes_in":5,"bytes_out":7/);
    if (visible) assert.notDeepEqual([store.nodes.json(entry), store.nodes.json(exit)], before, `${what} shows`);
  }
  store.nodes.json(entry);
  store.write(() => {
    store.rules.delete(rule);
    store.tunnels.delete(store.tunnels.idsOfNode(entry)[0]!);
    store.nodes.delete(entry);
  });
  await store.committed();
  assert.equal(store.nodes.json(entry), undefined, 'a deleted node is gone');
});

test('a change that is rolled back leaves the node as it was read', async (t) => {
  const { store, entry, fresh } = setUp(t);
  const before = store.nodes.json(entry);
  assert.throws(() =>
    store.write(() => {
      store.nodes.setLink(entry, 'online', null, '9.9.9', AT);
      assert.match(store.nodes.json(entry)!.json, /9\.9\.9/, 'the write sees its own change');
      throw new Error('undo');
    }),
  );
  await store.committed();
  assert.deepEqual(store.nodes.json(entry), before);
  assert.deepEqual(store.nodes.json(entry), fresh(entry));
});

test('during a long write a node reads as last committed, and as changed once the long write commits', async (t) => {
  const { store, entry, fresh } = setUp(t);
  const before = store.nodes.json(entry);
  let changed!: () => void;
  const inside = new Promise<void>((resolve) => (changed = resolve));
  const long = store.db.longWrite(async (step) => {
    store.nodes.update(entry, { ...fields('entry'), host: 'during.example' }, 'keep', AT);
    changed();
    let turn: Promise<void> | null = null;
    while (!turn) turn = step();
    await turn;
  });
  await inside;
  assert.deepEqual(store.nodes.json(entry), before, 'the long write is not committed yet');
  await long;
  assert.match(store.nodes.json(entry)!.json, /during\.example/);
  assert.deepEqual(store.nodes.json(entry), fresh(entry));
});

test('once another connection wrote while this one held its writes (an import), nodes read as committed', async (t) => {
  const { store, other, entry, exit, fresh } = setUp(t);
  await store.committed();
  // Kept now, as read while nothing was uncommitted.
  for (const id of [entry, exit]) store.nodes.json(id);
  await store.db.holdWrites(async () => {
    other.write(() => other.prepare("UPDATE nodes SET host = 'imported.example'").run());
    await other.committed();
  });
  for (const id of [entry, exit]) {
    assert.match(store.nodes.json(id)!.json, /imported\.example/);
    assert.deepEqual(store.nodes.json(id), fresh(id));
  }
});

test('while another connection writes (an import) nodes read are kept as committed, and read anew after', async (t) => {
  const { dir, store, other, entry, fresh } = setUp(t);
  await store.committed();
  // A change nothing tells this connection about: a node kept shows none of it, one read from the database does.
  const outside = outsideConnection(dir);
  t.after(() => outside.close());
  await store.db.holdWrites(async () => {
    const during = store.nodes.json(entry);
    outside.prepare("UPDATE nodes SET host = 'unseen.example'").run();
    assert.deepEqual(store.nodes.json(entry), during, 'read while writes were held, it was kept');
    other.write(() => other.prepare("UPDATE nodes SET host = 'imported.example'").run());
    await other.committed();
  });
  assert.match(store.nodes.json(entry)!.json, /imported\.example/);
  assert.deepEqual(store.nodes.json(entry), fresh(entry));
});

test('what is kept is bounded by its size: the nodes read longest ago go first, the newest is kept', async (t) => {
  const { dir, store, entry, exit } = setUp(t);
  const [third, fourth] = store.write(() =>
    ['third', 'fourth'].map(
      (name) => store.nodes.insert(fields(name), { auth: 'none', sealed: null }, () => randomBytes(32), AT).id,
    ),
  ) as [number, number];
  await store.committed();
  const size = (id: number) => store.nodes.json(id)!.json.length;
  // Room for three; reading a fourth drops the oldest (down to three quarters of the room, so that room is not made
  // anew for every node read).
  const nodes = new NodeStore(store.db, undefined, 3 * Math.max(...[entry, exit, third, fourth].map(size)));
  const none = new NodeStore(store.db, undefined, size(entry) - 1);
  for (const id of [entry, exit, third, fourth]) nodes.json(id);
  none.json(entry);
  // Another process's write is not seen as it happens: it shows only where nothing was kept.
  const outside = outsideConnection(dir);
  t.after(() => outside.close());
  outside.prepare("UPDATE nodes SET host = 'elsewhere.example'").run();
  assert.doesNotMatch(nodes.json(fourth)!.json, /elsewhere\.example/, 'the newest is still kept');
  assert.match(nodes.json(entry)!.json, /elsewhere\.example/, 'the oldest was dropped, so it is read again');
  assert.match(none.json(entry)!.json, /elsewhere\.example/, 'a node larger than the bound is never kept');
});

test(
  'rules and audit entries, by id and in pages, read after any change as a fresh read of the database ' + 'shows',
  async (t) => {
    const { store, other, entry, rule } = setUp(t);
    // Made anew for each read, so that nothing they keep could be stale: what the database holds now.
    const freshRules = () => new RuleStore(other);
    const freshAudit = () => new AuditStore(other, SECRET_FIELDS);
    const page = (rules: RuleStore) => rules.page({ afterId: 0, limit: 50, ...EVERY_RULE });
    const auditPage = (audit: AuditStore) =>
      audit.page({ beforeId: Number.MAX_SAFE_INTEGER, limit: 50, ...EVERY_ENTRY });
    const actor = { actor_type: 'system' as const, actor_id: null, actor_name: 'system', ip: null, request_id: null };
    const current = store.rules.find(rule)!;
    const ruleFields = { ...ruleFieldsOf(current), owner_id: current.owner_id, listen_port: 8000 };
    const changes: [string, () => void][] = [
      ['an update', () => store.rules.update(rule, { ...ruleFields, name: 'renamed', listen_port: 8001 }, AT)],
      ['a sync result with its path', () => store.rules.setSync(rule, entry, 'applied', null, AT, 'relay')],
      ['traffic', () => store.traffic.record(rule, entry, 1_800_000_000, 5, 7)],
      ['pending again', () => store.rules.markPending(rule)],
      [
        'a statement no store method makes',
        () => store.db.prepare("UPDATE rules SET name = 'raw' WHERE id = ?").run(rule),
      ],
      [
        'an audit entry',
        () =>
          store.audit.record(
            actor,
            { action: 'x.y', resource: 'x', resource_id: 1, status: 'success', changes: { a: 1 } },
            AT,
          ),
      ],
      ['audit entries pruned', () => store.audit.prune('2099-01-01T00:00:00Z')],
    ];
    for (const [what, change] of changes) {
      // Read first, so that what is kept is what a change must drop.
      store.rules.json(rule);
      page(store.rules);
      auditPage(store.audit);
      store.write(change);
      await store.committed();
      assert.deepEqual(store.rules.json(rule), freshRules().json(rule), `the rule after ${what}`);
      assert.deepEqual(page(store.rules), page(freshRules()), `the rules page after ${what}`);
      assert.deepEqual(auditPage(store.audit), auditPage(freshAudit()), `the audit page after ${what}`);
    }
    assert.match(store.rules.json(rule)!.json, /"name":"raw"/);
    store.write(() => store.rules.delete(rule));
    await store.committed();
    assert.equal(store.rules.json(rule), undefined, 'a deleted rule is gone');
    assert.equal(page(store.rules).items, '[]');
  },
);

test('tunnel, token and user pages read after any change as a fresh read of the database shows', async (t) => {
  const { store, other, entry, exit } = setUp(t);
  const fresh = {
    tunnels: () => new TunnelStore(other),
    tokens: () => new TokenStore(other, new Generation()),
    users: () => new UserStore(other, new Generation()),
  };
  const userPage = (users: UserStore) => users.page({ afterId: 0, limit: 50, q: null, disabled: null });
  const tunnelPage = (tunnels: TunnelStore) =>
    tunnels.page({ afterId: 0, limit: 50, owner_id: null, node_id: null, status: null, q: null });
  const tokenPage = (tokens: TokenStore) => tokens.page({ afterId: 0, limit: 50, userId: null });
  const tunnel = store.tunnels.idsOfNode(entry)[0]!;
  const owner = store.write(() =>
    store.users.insert({ username: 'ops', password_hash: 'x', scopes: ['*'], disabled: false }, AT),
  );
  const token = store.write(
    () =>
      store.tokens.insert(
        { kind: 'api', name: 'ci', user_id: owner.id, scopes: ['*'], secret_hash: randomBytes(32), expires_at: null },
        AT,
      ).id,
  );
  const changes: [string, () => void][] = [
    [
      'a tunnel update',
      () =>
        store.tunnels.update(
          tunnel,
          {
            name: 'moved',
            owner_id: store.tunnels.find(tunnel)!.owner_id,
            entry_node_id: entry,
            exit_node_id: exit,
            listen_port: 7001,
            transport: 'tls',
            via: null,
            more_exits: [],
            exit_strategy: 'failover',
            probe_target: null,
          },
          AT,
        ),
    ],
    [
      'an end reporting up',
      () => store.tunnels.report(tunnel, entry, { status: 'up', error: null, rtt_us: 1234, loss_percent: 0 }, AT),
    ],
    ['a raw tunnel statement', () => store.db.prepare("UPDATE tunnels SET name = 'raw' WHERE id = ?").run(tunnel)],
    ['a token used', () => store.tokens.touch(token, '2026-11-23T11:00:00Z')],
    [
      "the owner's new username",
      () =>
        store.users.update(
          owner.id,
          {
            username: 'ops-2',
            role: 'operator',
            plan_id: null,
            password_hash: null,
            scopes: ['*'],
            disabled: false,
            expires_at: null,
          },
          AT,
        ),
    ],
    ['a token deleted', () => store.tokens.delete(token)],
    ['a new password', () => store.users.setPassword(owner.id, 'y', AT)],
    ['a user deleted', () => store.users.delete(owner.id)],
  ];
  for (const [what, change] of changes) {
    // Read first, so that what is kept is what a change must drop.
    tunnelPage(store.tunnels);
    tokenPage(store.tokens);
    userPage(store.users);
    store.write(change);
    await store.committed();
    assert.deepEqual(tunnelPage(store.tunnels), tunnelPage(fresh.tunnels()), `the tunnels page after ${what}`);
    assert.deepEqual(tokenPage(store.tokens), tokenPage(fresh.tokens()), `the tokens page after ${what}`);
    assert.deepEqual(userPage(store.users), userPage(fresh.users()), `the users page after ${what}`);
  }
  assert.match(tunnelPage(store.tunnels).items, /"name":"raw".*"rtt_ms":1.23/);
});
