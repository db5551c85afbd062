// A standby master's copy of its primary's database (store/replication.ts, replication/follower.ts) against a real
// primary: seeded from a snapshot taken while it writes, then changed by every change it commits, in order, and
// compared with it table by table; a change corrupted or out of order on the way, and a write through another
// connection (an import), make the copy seed itself anew and end equal.

import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { createServer, request, type IncomingMessage, type ServerResponse } from 'node:http';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { DatabaseSync } from 'node:sqlite';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test, { describe, type TestContext } from 'node:test';
import { start } from '../../cmd/master/start.ts';
import { silentLogger, streamLogger } from '../../internal/log/log.ts';
import { Follower } from '../../internal/replication/follower.ts';
import { CHANGES_TYPE, decodeChanges, encodeChanges, type ChangesPage } from '../../internal/replication/wire.ts';
import {
  ADMIN_PASSWORD,
  assertProblem,
  call,
  mintToken,
  node,
  plainConfig,
  rule,
  ruleBodies,
  startMaster,
  type Running,
  type StartOptions,
} from '../helpers.ts';
import { freePort, tcpEcho, tcpRoundTrip, until } from '../net.ts';
import { agentInProcess, nodeOf } from '../agents.ts';
import { fill, smallDisk } from '../disk.ts';
import { link as rawLink } from '../rawlink.ts';
import { masterCommand } from '../bundled.ts';
import { openEvents } from '../sse.ts';

// Most of these tests wait on clocks and sockets: they run side by side.
describe('replication', { concurrency: 4 }, () => {
  const ADMIN = { username: 'admin', password: ADMIN_PASSWORD };

  /** Every replicated or derived table's rows, in key order, of the database at `path`. */
  function tables(path: string): Record<string, unknown[]> {
    const db = new DatabaseSync(path, { readOnly: true });
    try {
      const names = db
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .all()
        .map((row) => String(row.name))
        // What a copy derives itself is compared too, but for the full-text index's pages (its own layout of the same).
        .filter((name) => !/^(sqlite_|rule_names)/.test(name) && name !== 'replication_position');
      // A table is keyed by its primary key, else by a unique key (the rowids of port claims are the order a copy
      // derived them in), else by its rowid (a rendered view's is the rule's id), compared too.
      const keyed = (name: string) =>
        db.prepare('SELECT 1 FROM pragma_table_info(?) WHERE pk > 0').get(name) !== undefined ||
        db.prepare('SELECT 1 FROM pragma_index_list(?) WHERE "unique" = 1').get(name) !== undefined;
      const rows = (name: string) => {
        const rowid = keyed(name) ? '' : 'rowid AS row_id, ';
        const count = db.prepare('SELECT count(*) AS n FROM pragma_table_info(?)').get(name)!.n as number;
        const columns = count + (rowid ? 1 : 0);
        const order = Array.from({ length: columns }, (_, i) => i + 1).join(', ');
        return db.prepare(`SELECT ${rowid}* FROM "${name}" ORDER BY ${order}`).all();
      };
      return Object.fromEntries(names.map((name) => [name, rows(name)]));
    } finally {
      db.close();
    }
  }

  async function follower(t: TestContext, m: Running, url = m.url) {
    const token = await mintToken(m, ['replication'], `standby-${Math.random()}`);
    const path = join(mkdtempSync(join(tmpdir(), 'portplane-replica-')), 'master.db');
    const f = new Follower({
      url,
      pin: null,
      token,
      path,
      log: process.env.DEBUG_FOLLOWER ? streamLogger(process.stderr) : silentLogger,
    });
    t.after(() => f.stop());
    return { f, path };
  }

  /** Steps the follower until its copy stands where the primary's record does, then compares them. */
  async function caughtUp(m: Running, f: Follower, path: string): Promise<void> {
    await m.app.store.db.committed();
    m.app.store.db.sealChanges();
    for (let i = 0; i < 20; i++) {
      const at = f.position();
      if (at && JSON.stringify(m.app.replicas.feed().after(at)) === '[]') break;
      await f.step();
    }
    assert.deepEqual(tables(path), tables(m.app.store.db.path));
  }

  /** A standby following `primary`, with the token it follows by (extra start options as startMaster takes). */
  async function standbyOf(t: TestContext, primary: Running, options: Omit<StartOptions, 'follow'> = {}) {
    const token = await mintToken(primary, ['replication'], 'standby');
    return { token, standby: await startMaster(t, { ...options, follow: { url: primary.url, token } }) };
  }

  /** Sets `settings` on master `m` as its admin; they must take. */
  async function setSettings(m: Running, settings: Record<string, unknown>): Promise<void> {
    const answer = await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: settings });
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
  }

  async function writeSome(m: Running, name: string) {
    const made = await node(m, name, { tags: ['eu'] });
    await rule(m, { node_id: made.id, listen_port: 20000 + Math.floor(Math.random() * 1000), name: `web-${name}` });
    await call(m.url, 'PATCH', '/api/settings', { token: m.admin, body: { sync_wait_seconds: 3 } });
    assert.equal((await call(m.url, 'DELETE', `/api/nodes/${made.id}?cascade=true`, { token: m.admin })).status, 204);
    await node(m, `${name}-kept`);
  }

  test('a primary lists its standbys: where each stands, how far behind, when it last asked', async (t) => {
    const primary = await startMaster(t);
    const none = await call(primary.url, 'GET', '/api/replication/standbys', { token: primary.admin });
    assert.deepEqual(none.body.items, [], 'none asked yet');
    assert.equal(none.body.position, null, 'no record kept before one asks');
    const { standby } = await standbyOf(t, primary);
    await writeSome(primary, 'listed');
    const listed = await until('the standby in step', async () => {
      const answer = await call(primary.url, 'GET', '/api/replication/standbys', { token: primary.admin });
      const [one] = answer.body.items;
      return one?.behind_changes === 0 && answer.body;
    });
    assert.equal(listed.mode, 'async');
    assert.equal(listed.items.length, 1);
    assert.equal(listed.items[0].lag_seconds, 0);
    assert.deepEqual(listed.items[0].position, listed.position);
    assert.ok(Date.now() - Date.parse(listed.items[0].last_asked_at) < 60_000);
    const onStandby = await call(standby.url, 'GET', '/api/replication/standbys', { token: primary.admin });
    assert.equal(onStandby.status, 503, 'a standby has none: it names its primary');
  });

  test('a copy seeded while the primary writes takes every change after, and ends equal table by table', async (t) => {
    const m = await startMaster(t);
    await writeSome(m, 'before');
    const { f, path } = await follower(t, m);
    await f.step();
    assert.equal(f.seeds, 1);
    await caughtUp(m, f, path);
    for (const name of ['one', 'two', 'three']) await writeSome(m, name);
    await caughtUp(m, f, path);
    assert.equal(f.seeds, 1, 'followed, not seeded again');
    assert.ok(f.lastChangeAt !== null);
  });

  test(
    'a change corrupted or out of order on the way makes the ' + 'copy seed itself anew, and it ends equal',
    async (t) => {
      const m = await startMaster(t);
      await writeSome(m, 'before');
      // Between the follower and the primary: spoils the next page of two changes or more as told.
      let spoil: ((page: ChangesPage) => void) | null = null;
      const proxy = createServer((req: IncomingMessage, res: ServerResponse) => {
        const upstream = request(new URL(req.url!, m.url), { headers: req.headers }, (answer) => {
          const chunks: Buffer[] = [];
          answer.on('data', (chunk: Buffer) => chunks.push(chunk));
          answer.on('end', () => {
            let body: Buffer = Buffer.concat(chunks);
            if (spoil && req.url!.startsWith('/api/replication/changes')) {
              const page = decodeChanges(body);
              if (page.changes.length > 1) {
                spoil(page);
                spoil = null;
                body = Buffer.concat(encodeChanges(page));
              }
            }
            res.writeHead(answer.statusCode!, { ...answer.headers, 'content-length': body.length }).end(body);
          });
        });
        req.pipe(upstream);
      }).listen(0, '127.0.0.1');
      await once(proxy, 'listening');
      t.after(() => proxy.close());
      const { f, path } = await follower(t, m, `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`);
      await f.step();

      const cases: [string, (page: ChangesPage) => void][] = [
        [
          'a byte of a change flipped',
          (page) => {
            const bytes = Buffer.from(page.changes[0]!.changeset);
            bytes[bytes.length - 1]! ^= 0xff;
            page.changes[0]!.changeset = bytes;
          },
        ],
        ['a change numbered out of order', (page) => (page.changes[0]!.seq += 1)],
        ['a change left out', (page) => page.changes.shift()],
      ];
      for (const [what, how] of cases) {
        const seeds = f.seeds;
        spoil = how;
        // Two changes at least (what is committed within a few milliseconds is sealed as one): one can be left out.
        await writeSome(m, what.replaceAll(' ', '-'));
        // Between transactions, checked in the same step: the master's own writes (its clock's) may have one open.
        await until('the changes sealed between transactions', () => {
          if (!m.app.store.db.settled) return false;
          m.app.store.db.sealChanges();
          return true;
        });
        const again = { token: m.admin, body: { sync_wait_seconds: 4 + f.seeds } };
        assert.equal((await call(m.url, 'PATCH', '/api/settings', again)).status, 200);
        await caughtUp(m, f, path);
        assert.equal(f.seeds, seeds + 1, `${what}: seeded anew`);
      }
    },
  );

  const OTHER_VERSION =
    'a primary that sends its changes in another form (another version) is named as such, and nothing applied';

  test(OTHER_VERSION, async (t) => {
    const m = await startMaster(t);
    await writeSome(m, 'before');
    // A primary of the version before: its changes as JSON, the changesets in base64.
    const older = createServer((req: IncomingMessage, res: ServerResponse) => {
      if (req.url!.startsWith('/api/replication/changes')) {
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"reseed":false,"changes":[]}');
        return;
      }
      request(new URL(req.url!, m.url), { headers: req.headers }, (answer) => {
        res.writeHead(answer.statusCode!, answer.headers);
        answer.pipe(res);
      }).end();
    }).listen(0, '127.0.0.1');
    await once(older, 'listening');
    t.after(() => older.close());
    const { f } = await follower(t, m, `http://127.0.0.1:${(older.address() as AddressInfo).port}`);
    await f.step();
    const seeded = f.position();
    await writeSome(m, 'after');
    await assert.rejects(f.step(), /sent its changes as application\/json, not .*: it runs another version/);
    assert.deepEqual(f.position(), seeded);
    assert.equal(f.seeds, 1, 'not seeded again: a new snapshot would not make it follow');
  });

  const WORKERS =
    'imports and batches, written by worker threads on connections of their own, reach the copy as changes of their ' +
    'own, dry runs as none; a write elsewhere that brings no record of itself makes the copy seed anew';

  test(WORKERS, async (t) => {
    const m = await startMaster(t);
    await writeSome(m, 'before');
    const { f, path } = await follower(t, m);
    await f.step();
    const edge = await node(m, 'edge');
    const post = (route: string, body: unknown) => call(m.url, 'POST', route, { token: m.admin, body });
    const made = await post('/api/rules/batch-create', { rules: ruleBodies(edge.id, 20) });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const ids = made.body.results.map((result: { id: number }) => result.id);
    await caughtUp(m, f, path);
    const position = f.position()!;
    assert.equal(
      (await post('/api/rules/batch-update?dry_run=true', { ids, changes: { enabled: false } })).status,
      200,
    );
    await caughtUp(m, f, path);
    assert.deepEqual(f.position(), position, 'a dry run is no change');
    assert.equal((await post('/api/rules/batch-update', { ids, changes: { enabled: false } })).status, 200);
    assert.equal((await post('/api/rules/batch-delete', { ids: ids.slice(0, 5) })).status, 200);
    const exported = await call(m.url, 'GET', '/api/export', { token: m.admin });
    const doc = { ...exported.body, nodes: [...exported.body.nodes, { ...exported.body.nodes[0], name: 'imported' }] };
    const imported = await post('/api/import', doc);
    assert.equal(imported.status, 200, JSON.stringify(imported.body));
    await caughtUp(m, f, path);
    assert.equal(f.seeds, 1, 'followed, not seeded again');

    const raw = new DatabaseSync(m.app.store.db.path);
    t.after(() => raw.close());
    raw.function('app_time', () => new Date().toISOString().slice(0, 19) + 'Z');
    await m.app.store.db.holdWrites(async () => raw.exec("UPDATE nodes SET name = 'renamed' WHERE name = 'imported'"));
    await caughtUp(m, f, path);
    assert.equal(f.seeds, 2);
  });

  const ONE_AT_A_TIME =
    'a copy of the whole database is made one at a time: standbys asking for a snapshot at once share one, and ' +
    'backups asked for at once share one archive, each audited';

  test(ONE_AT_A_TIME, async (t) => {
    const m = await startMaster(t);
    await writeSome(m, 'before');
    const token = await mintToken(m, ['replication'], 'standby');
    const db = m.app.store.db;
    const open = db.openSnapshot.bind(db);
    let opened = 0;
    db.openSnapshot = () => (opened++, open());
    const snapshots = await Promise.all(
      Array.from({ length: 4 }, () =>
        fetch(`${m.url}/api/replication/snapshot`, { headers: { authorization: `Bearer ${token}` } }),
      ),
    );
    assert.deepEqual(
      snapshots.map((answer) => answer.status),
      [200, 200, 200, 200],
    );
    assert.equal(opened, 1);
    assert.equal(new Set(snapshots.map((answer) => answer.headers.get('x-replication-position'))).size, 1);

    const backups = await Promise.all(
      Array.from({ length: 3 }, () =>
        fetch(`${m.url}/api/backup`, { headers: { authorization: `Bearer ${m.admin}` } }),
      ),
    );
    const archives = await Promise.all(backups.map(async (answer) => Buffer.from(await answer.arrayBuffer())));
    assert.ok(
      archives.every((archive) => archive.equals(archives[0]!)),
      'one archive for all three',
    );
    const audited = await call(m.url, 'GET', '/api/audit-logs?action=backup.download&limit=10', { token: m.admin });
    assert.equal(audited.body.items.length, 3);
  });

  test('the replication routes need the replication scope, and say where a follower stands', async (t) => {
    const m = await startMaster(t);
    const reader = await mintToken(m, ['nodes:read']);
    assertProblem(await call(m.url, 'GET', '/api/replication/snapshot', { token: reader }), 403, 'insufficient_scope');
    const token = await mintToken(m, ['replication'], 'standby');
    assertProblem(await call(m.url, 'GET', '/api/replication/changes', { token }), 400, 'invalid_query');
    const elsewhere = await call(m.url, 'GET', '/api/replication/changes?generation=other&after=3', { token });
    assert.equal(elsewhere.headers.get('content-type'), CHANGES_TYPE);
    assert.deepEqual(decodeChanges(Buffer.from(elsewhere.body)), { reseed: true, changes: [] });

    // A wait for changes outlives no revocation: the token deleted meanwhile gets 401, and no change.
    const position = m.app.replicas.feed().position;
    const query = `generation=${position.generation}&after=${position.seq}&wait_seconds=30`;
    const waiting = call(m.url, 'GET', `/api/replication/changes?${query}`, { token });
    const tokens = await call(m.url, 'GET', '/api/tokens?limit=100', { token: m.admin });
    const id = tokens.body.items.find((item: { name: string }) => item.name === 'standby').id;
    assert.equal((await call(m.url, 'DELETE', `/api/tokens/${id}`, { token: m.admin })).status, 204);
    assertProblem(await waiting, 401, 'unauthorized');
  });

  const STANDBY =
    'a master started with --follow serves reads of its copy as its primary changes, refuses writes and agent links ' +
    'naming the primary, and says where it stands';

  test(STANDBY, async (t) => {
    const primary = await startMaster(t);
    await writeSome(primary, 'before');
    const { standby } = await standbyOf(t, primary);
    // The primary's admin session, which the standby's copy holds as the primary does.
    const read = (path: string) => call(standby.url, 'GET', path, { token: primary.admin });
    await until('the node made before on the standby', async () => (await read('/api/nodes?q=before-kept')).body.items);

    const made = await node(primary, 'after', { tags: ['late'] });
    const shown = await until('the new node on the standby', async () => {
      const answer = await read(`/api/nodes/${made.id}`);
      return answer.status === 200 && answer.body;
    });
    assert.equal(shown.name, 'after');
    await call(primary.url, 'PATCH', '/api/settings', { token: primary.admin, body: { sync_wait_seconds: 9 } });
    await until('the setting on the standby', async () => (await read('/api/settings')).body.sync_wait_seconds === 9);
    // A token revoked at the primary stops working at the standby too.
    const reader = await mintToken(primary, ['nodes:read'], 'reader');
    await until('the token works at the standby', async () => {
      const answer = await call(standby.url, 'GET', '/api/nodes', { token: reader });
      return answer.status === 200;
    });
    const tokens = await call(primary.url, 'GET', '/api/tokens?limit=100', { token: primary.admin });
    const readerId = tokens.body.items.find((item: { name: string }) => item.name === 'reader').id;
    await call(primary.url, 'DELETE', `/api/tokens/${readerId}`, { token: primary.admin });
    await until('the revoked token refused at the standby', async () => {
      const answer = await call(standby.url, 'GET', '/api/nodes', { token: reader });
      return answer.status === 401;
    });

    const refused = await call(standby.url, 'POST', '/api/nodes', {
      token: primary.admin,
      body: { name: 'nope', host: '192.0.2.9' },
    });
    assertProblem(refused, 503, 'read_only');
    assert.equal(refused.body.primary, primary.url);
    assertProblem(await read('/api/replication/snapshot'), 503, 'read_only');
    const link = await rawLink({ url: standby.url }, 'mat_1_' + 'a'.repeat(43));
    assert.equal((link as { status: number }).status, 503);

    // Backups work on a standby too, and write nothing there (its store refuses any write but its follower's).
    const backup = await read('/api/backup');
    assert.equal(backup.status, 200);
    assert.equal(backup.headers.get('content-type'), 'application/x-tar');
    assert.throws(
      () => standby.app.store.write(() => undefined),
      (error: Error & { code?: string }) => error.code === 'read_only',
    );
    const health = (await call(standby.url, 'GET', '/api/health')).body;
    assert.equal(health.role, 'standby');
    assert.equal(health.replication.primary, primary.url);
    assert.equal(health.replication.seeds, 1);
    assert.match(health.replication.position, /^[0-9a-f-]{36}\/\d+$/);
    assert.equal((await call(primary.url, 'GET', '/api/health')).body.role, 'primary');
    const metrics = String((await read('/api/metrics')).body);
    assert.match(metrics, /^portplane_role\{role="standby"\} 1$/m);
    assert.match(metrics, /^portplane_epoch 1$/m);
    assert.match(metrics, /^portplane_replication_lag_seconds \d+$/m);
  });

  const CANNOT_APPLY =
    'a standby whose copy cannot apply (its disk full) says so in its health, with its real lag, and recovers';
  test(CANNOT_APPLY, async (t) => {
    const disk = smallDisk(t, 24);
    if (!disk) return t.skip('a small file system of its own needs root (tmpfs)');
    const primary = await startMaster(t);
    const { standby } = await standbyOf(t, primary, { dataDir: disk });
    const health = async () => {
      const answer = await call(standby.url, 'GET', '/api/health');
      return { code: answer.status, ...answer.body };
    };
    await until('the standby in step', async () => (await health()).code === 200);
    const free = fill(disk);
    const edge = await node(primary, 'edge');
    for (let i = 0; i < 20; i++)
      await rule(primary, { node_id: edge.id, listen_port: 30000 + i, name: `while-full-${i}-${'x'.repeat(60)}` });
    const failing = await until('the standby to say its copy does not apply', async () => {
      const now = await health();
      return now.code === 503 && now.replication.lag_seconds >= 2 && now;
    });
    assert.equal(failing.status, 'degraded');
    assert.match(failing.replication.error, /full/);
    assert.ok(failing.replication.failing_since);
    free();
    const recovered = await until('the standby to follow again', async () => {
      const now = await health();
      return now.code === 200 && now;
    });
    assert.deepEqual(
      [recovered.status, recovered.replication.error, recovered.replication.lag_seconds],
      ['ok', null, 0],
    );
  });

  const STANDBY_SESSIONS =
    "a person signs in to a standby with their password and reads; the session is the standby's own, and ends when " +
    'they sign out, when the primary disables them or changes their password, and with a promotion; its event stream ' +
    'tells what the copy takes';

  test(STANDBY_SESSIONS, async (t) => {
    const primary = await startMaster(t);
    const { standby } = await standbyOf(t, primary);
    const user = { username: 'viewer', password: 'viewer-password', scopes: ['nodes:read'] };
    const made = await call(primary.url, 'POST', '/api/users', { token: primary.admin, body: user });
    assert.equal(made.status, 201);
    const credentials = { username: user.username, password: user.password };
    const signIn = () => call(standby.url, 'POST', '/api/auth/login', { body: credentials });
    const session = await until('the user on the standby', async () => {
      const answer = await signIn();
      return answer.status === 200 && (answer.body.token as string);
    });
    const wrong = { username: 'viewer', password: 'not-the-password' };
    assertProblem(await call(standby.url, 'POST', '/api/auth/login', { body: wrong }), 401, 'unauthorized');
    const me = await call(standby.url, 'GET', '/api/auth/me', { token: session });
    assert.equal(me.body.user.username, 'viewer');
    assert.ok(me.body.token.id < 0, 'a session of its own, in no table');
    assert.equal((await call(standby.url, 'GET', '/api/nodes', { token: session })).status, 200);
    // Its event stream tells the primary's changes as the copy takes them.
    const stream = await openEvents(standby.url, session);
    t.after(() => stream.close());
    await stream.next((e) => e.event === 'ready');
    const later = await node(primary, 'later');
    const told = await stream.next((e) => e.event === 'node.created' && e.data.resource_id === later.id, 5000);
    assert.equal(told.data.data.name, 'later');
    const write = { token: session, body: { name: 'nope', host: '192.0.2.9' } };
    assertProblem(await call(standby.url, 'POST', '/api/nodes', write), 503, 'read_only');
    // A session the primary keeps ends there, not here.
    assertProblem(await call(standby.url, 'POST', '/api/auth/logout', { token: primary.admin }), 503, 'read_only');
    assert.equal((await call(standby.url, 'POST', '/api/auth/logout', { token: session })).status, 204);
    assertProblem(await call(standby.url, 'GET', '/api/auth/me', { token: session }), 401, 'unauthorized');

    // A new password at the primary ends the session here too.
    const before = (await signIn()).body.token as string;
    const atPrimary = (await call(primary.url, 'POST', '/api/auth/login', { body: credentials })).body.token as string;
    const change = { current_password: user.password, new_password: 'another-viewer-password' };
    assert.equal(
      (await call(primary.url, 'POST', '/api/auth/password', { token: atPrimary, body: change })).status,
      200,
    );
    await until('the session of the old password refused at the standby', async () => {
      return (await call(standby.url, 'GET', '/api/nodes', { token: before })).status === 401;
    });
    credentials.password = change.new_password;

    const again = (await signIn()).body.token as string;
    const disable = { token: primary.admin, body: { username: 'viewer', scopes: ['nodes:read'], disabled: true } };
    assert.equal((await call(primary.url, 'PUT', `/api/users/${made.body.id}`, disable)).status, 200);
    await until('the disabled user refused at the standby', async () => {
      return (await call(standby.url, 'GET', '/api/nodes', { token: again })).status === 401;
    });
    const admin = (await call(standby.url, 'POST', '/api/auth/login', { body: ADMIN })).body.token as string;
    assert.equal((await call(standby.url, 'POST', '/api/replication/promote', { token: admin })).status, 200);
    assertProblem(await call(standby.url, 'GET', '/api/auth/me', { token: admin }), 401, 'unauthorized');
    assert.equal((await call(standby.url, 'GET', '/api/auth/me', { token: primary.admin })).status, 200);
  });

  const PROMOTED =
    'a standby promoted serves writes as the primary of the next epoch, its copy whole again, and never follows a ' +
    'master of an older epoch after';

  test(PROMOTED, async (t) => {
    const primary = await startMaster(t);
    const before = await node(primary, 'before');
    const token = await mintToken(primary, ['replication'], 'standby');
    const dataDir = mkdtempSync(join(tmpdir(), 'portplane-standby-'));
    const standby = await startMaster(t, { follow: { url: primary.url, token }, dataDir });
    const at = (path: string, method = 'GET', body?: unknown) =>
      call(standby.url, method, path, { token: primary.admin, body });
    await until('the standby caught up', async () => (await at(`/api/nodes/${before.id}`)).status === 200);
    await primary.close();

    const promoted = await at('/api/replication/promote', 'POST');
    assert.equal(promoted.status, 200, JSON.stringify(promoted.body));
    assert.deepEqual(promoted.body, { role: 'primary', epoch: 2 });
    assertProblem(await at('/api/replication/promote', 'POST'), 409, 'conflict');
    const health = (await call(standby.url, 'GET', '/api/health')).body;
    assert.deepEqual([health.role, health.epoch, health.replication], ['primary', 2, null]);

    // Writes, and what triggers derive from them (a rule's view, the journal), work again; ids go on from the copy's.
    const after = await at('/api/nodes', 'POST', { name: 'after', host: '192.0.2.20' });
    assert.equal(after.status, 201, JSON.stringify(after.body));
    assert.ok(after.body.id > before.id);
    const made = await at('/api/rules', 'POST', {
      name: 'web',
      protocol: 'tcp',
      node_id: after.body.id,
      listen_port: 8080,
      targets: ['192.0.2.30:80'],
    });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    assert.equal((await at(`/api/rules/${made.body.id}`)).body.listen_port, 8080);
    assert.equal((await at('/api/rules?q=')).status, 200);
    const audit = await at('/api/audit-logs?action=replication.promote');
    assert.equal(audit.body.items[0].changes.after.epoch, 2);
    const events = await at('/api/events?after=0&types=master&limit=1&timeout_seconds=5');
    assert.match(String(events.body), /event: master\.promoted[\s\S]*"role":"primary","epoch":2/);

    // Started again with --follow, toward a master of epoch 1: it does not follow it, and loses nothing.
    await standby.close();
    const elsewhere = await startMaster(t);
    const other = await mintToken(elsewhere, ['replication'], 'standby');
    const again = await startMaster(t, { follow: { url: elsewhere.url, token: other }, dataDir });
    const halted = await until('the follower halted', async () => {
      const health = (await call(again.url, 'GET', '/api/health')).body;
      return health.replication.halted;
    });
    assert.match(halted, /this copy was promoted to epoch 2, and .* is of epoch 1/);
    const kept = await call(again.url, 'GET', `/api/nodes/${after.body.id}`, { token: primary.admin });
    assert.equal(kept.body.name, 'after');
  });

  const FAIL_OVER =
    'an agent given both masters links to the primary, follows a promoted standby within 15 s forwarding all along, ' +
    'and fences the old primary when it comes back';

  test(FAIL_OVER, async (t) => {
    const dataDir = mkdtempSync(join(tmpdir(), 'portplane-old-primary-'));
    const port = await freePort();
    const primary = await startMaster(t, { dataDir, port, localTargets: true });
    const edge = await node(primary, 'edge');
    const echo = await tcpEcho(t);
    const listen = await freePort();
    await rule(primary, { node_id: edge.id, listen_port: listen, targets: [`127.0.0.1:${echo}`] });
    const { standby } = await standbyOf(t, primary);
    // The primary knows its standby, which it names once fenced (an address no agent chose).
    await setSettings(primary, { standby_masters: standby.url });
    // The standby first: it refuses the link, naming the primary, which the agent tries next.
    const agent = await agentInProcess(t, `${standby.url},${primary.url}`, edge.agent_token);
    await until('the agent linked to the primary', async () => (await nodeOf(primary, edge.id)).status === 'online');
    // Linked is not yet applied: the rule's listener opens once its config arrives.
    await until('the rule forwarding', async () => {
      const echoed = await tcpRoundTrip(listen, Buffer.from('one')).catch(() => null);
      return echoed?.toString() === 'one';
    });

    await primary.close();
    const promoted = await call(standby.url, 'POST', '/api/replication/promote', { token: primary.admin });
    assert.equal(promoted.status, 200, JSON.stringify(promoted.body));
    const failedOver = Date.now();
    await until(
      'the agent linked to the promoted standby',
      async () => {
        const shown = await call(standby.url, 'GET', `/api/nodes/${edge.id}`, { token: primary.admin });
        return shown.body.status === 'online';
      },
      15_000,
    );
    t.diagnostic(`the agent linked to the new primary ${Date.now() - failedOver} ms after the promotion`);
    assert.equal((await tcpRoundTrip(listen, Buffer.from('two'))).toString(), 'two', 'forwarding never stopped');
    const sameRule = await call(standby.url, 'POST', '/api/rules', {
      token: primary.admin,
      body: {
        name: 'new',
        protocol: 'tcp',
        node_id: edge.id,
        listen_port: await freePort(),
        targets: ['192.0.2.1:80'],
      },
    });
    assert.equal(sameRule.status, 201);

    // The old primary comes back as it was, of the epoch before: it asks the standby it knows before it takes a write,
    // and is fenced from its start; the agent, when it tries it, says which epoch it heard.
    const old = await start(plainConfig(dataDir, port), silentLogger);
    t.after(() => old.close());
    const health = (await call(old.url, 'GET', '/api/health')).body;
    assert.equal(health.role, 'fenced');
    assert.deepEqual(health.fenced_by, { epoch: 2, primary: standby.url });
    await standby.close();
    const refused = await call(old.url, 'POST', '/api/nodes', {
      token: primary.admin,
      body: { name: 'late', host: '192.0.2.40' },
    });
    assertProblem(refused, 503, 'read_only');
    assert.match(refused.body.detail, new RegExp(`epoch 2 at ${standby.url} took over from this master`));
    assert.equal(refused.body.primary, standby.url);
    assert.match(agent.output.join(''), /linked to the master/);
  });

  const SYNC_MODE =
    'in sync mode a write is answered once a standby holds it; with none holding it in time, the primary goes on ' +
    'alone and says so';

  test(SYNC_MODE, async (t) => {
    const primary = await startMaster(t);
    const { token, standby } = await standbyOf(t, primary);
    await setSettings(primary, { replication_mode: 'sync', replication_sync_timeout_seconds: 1 });
    const edge = await node(primary, 'edge');
    for (let i = 0; i < 20; i++) {
      const made = (await rule(primary, { node_id: edge.id, listen_port: 20000 + i })).body;
      // Answered, so held: on the standby at once, not eventually.
      const seen = await call(standby.url, 'GET', `/api/rules/${made.id}`, { token: primary.admin });
      assert.equal(seen.status, 200, `rule ${i} answered before the standby held it`);
    }
    const health = async () => (await call(primary.url, 'GET', '/api/health')).body;
    const lapsed = async () => {
      const metrics = String((await call(primary.url, 'GET', '/api/metrics', { token: primary.admin })).body);
      return /^portplane_replication_sync_lapsed (\d)$/m.exec(metrics)![1];
    };
    assert.deepEqual([(await health()).replication_mode, (await health()).sync_lapsed_since], ['sync', null]);
    assert.equal(await lapsed(), '0');

    await standby.close();
    const started = Date.now();
    await rule(primary, { node_id: edge.id, listen_port: 21000 });
    assert.ok(Date.now() - started >= 1000, 'the write waited for the standby as long as the timeout');
    assert.ok((await health()).sync_lapsed_since);
    assert.equal(await lapsed(), '1');

    // A standby back in step ends the lapse: the first write it holds, and each after waits for it again.
    const back = await startMaster(t, { follow: { url: primary.url, token } });
    await rule(primary, { node_id: edge.id, listen_port: 21001 });
    await until('the lapse over', async () => (await health()).sync_lapsed_since === null);
    assert.equal(await lapsed(), '0');
    const made = (await rule(primary, { node_id: edge.id, listen_port: 21002 })).body;
    assert.equal((await call(back.url, 'GET', `/api/rules/${made.id}`, { token: primary.admin })).status, 200);

    // A promotion is answered without waiting out the timeout: the promoted master has no standby of its own yet.
    await setSettings(primary, { replication_sync_timeout_seconds: 60 });
    const promoted = await call(back.url, 'POST', '/api/replication/promote', { token: primary.admin });
    assert.equal(promoted.status, 200, JSON.stringify(promoted.body));
    assert.equal((await call(back.url, 'GET', '/api/health')).body.sync_lapsed_since, null);
  });

  const PROMOTED_WHILE_SERVING =
    'a standby promoted while its primary still serves (the watcher cut off from the primary, not the masters from ' +
    'each other) fences that primary within seconds: one master takes writes, the fenced one names it, its agents ' +
    'move to the new primary, and started again it is fenced from the start though no peer answers';
  test(PROMOTED_WHILE_SERVING, async (t) => {
    const dataDir = mkdtempSync(join(tmpdir(), 'portplane-fenced-'));
    const port = await freePort();
    const primary = await startMaster(t, { dataDir, port });
    const { standby } = await standbyOf(t, primary);
    await setSettings(primary, { standby_masters: standby.url });
    const edge = await node(primary, 'edge');
    await agentInProcess(t, `${primary.url},${standby.url}`, edge.agent_token);
    await until('the agent linked to the primary', async () => (await nodeOf(primary, edge.id)).status === 'online');
    // Promoted only once its copy holds the node: what async replication had not copied yet is not the point here.
    const held = () => call(standby.url, 'GET', `/api/nodes/${edge.id}`, { token: primary.admin });
    await until('the standby holding the node', async () => (await held()).status === 200);
    const promoted = await call(standby.url, 'POST', '/api/replication/promote', { token: primary.admin });
    assert.equal(promoted.status, 200, JSON.stringify(promoted.body));
    await until(
      'the old primary fenced',
      async () => (await call(primary.url, 'GET', '/api/health')).body.role === 'fenced',
      15_000,
    );
    assert.deepEqual((await call(primary.url, 'GET', '/api/health')).body.fenced_by, {
      epoch: 2,
      primary: standby.url,
    });
    const body = { name: 'after', host: '192.0.2.41' };
    const refused = await call(primary.url, 'POST', '/api/nodes', { token: primary.admin, body });
    assertProblem(refused, 503, 'read_only');
    assert.equal(refused.body.primary, standby.url);
    assert.equal((await call(standby.url, 'POST', '/api/nodes', { token: primary.admin, body })).status, 201);
    // Fenced, it cut its agents' links and refuses them, naming the new primary, where they link.
    await until('the agent linked to the new primary', async () => {
      return (
        (await call(standby.url, 'GET', `/api/nodes/${edge.id}`, { token: primary.admin })).body.status === 'online'
      );
    });
    const relink = (await rawLink(primary, edge.agent_token)) as { status: number; body: { primary: string } };
    assert.equal(relink.status, 503);
    assert.equal(relink.body.primary, standby.url);

    // The fence is kept in its database: started again while the new primary is down, it still takes no write.
    await standby.close();
    await primary.close();
    const again = await start(plainConfig(dataDir, port), silentLogger);
    t.after(() => again.close());
    assert.deepEqual((await call(again.url, 'GET', '/api/health')).body.fenced_by, { epoch: 2, primary: standby.url });
    assertProblem(await call(again.url, 'POST', '/api/nodes', { token: primary.admin, body }), 503, 'read_only');
  });

  test('master promote makes a stopped standby the primary of the next epoch', async (t) => {
    const primary = await startMaster(t);
    const before = await node(primary, 'before');
    const token = await mintToken(primary, ['replication'], 'standby');
    const dataDir = mkdtempSync(join(tmpdir(), 'portplane-standby-'));
    const standby = await startMaster(t, { follow: { url: primary.url, token }, dataDir });
    const seen = async () =>
      (await call(standby.url, 'GET', `/api/nodes/${before.id}`, { token: primary.admin })).status === 200;
    await until('the standby caught up', seen);
    await standby.close();
    await primary.close();

    const promoted = await masterCommand(['promote', '--data-dir', dataDir]);
    assert.equal(promoted.code, 0, promoted.stderr);
    assert.match(promoted.stdout, /the primary of epoch 2; start its master without --follow/);
    const serving = await startMaster(t, { dataDir });
    const health = (await call(serving.url, 'GET', '/api/health')).body;
    assert.deepEqual([health.role, health.epoch], ['primary', 2]);
    const after = await call(serving.url, 'POST', '/api/nodes', {
      token: serving.admin,
      body: { name: 'after', host: '192.0.2.21' },
    });
    assert.equal(after.status, 201);
  });

  const LEARNED =
    'an agent given only the primary learns the standbys from its config (standby_masters), and follows one ' +
    'promoted';

  test(LEARNED, async (t) => {
    const primary = await startMaster(t, { localTargets: true });
    const edge = await node(primary, 'edge');
    const { standby } = await standbyOf(t, primary);
    const set = await call(primary.url, 'PATCH', '/api/settings', {
      token: primary.admin,
      body: { standby_masters: standby.url },
    });
    assert.equal(set.status, 200, JSON.stringify(set.body));
    const bad = await call(primary.url, 'PATCH', '/api/settings', {
      token: primary.admin,
      body: { standby_masters: 'ftp://nowhere, https://192.0.2.9:8443 not-a-pin' },
    });
    assertProblem(bad, 422, 'validation_failed');
    const agent = await agentInProcess(t, primary.url, edge.agent_token);
    await until('the agent linked to the primary', async () => (await nodeOf(primary, edge.id)).status === 'online');
    await until(
      'the agent kept the standby it was told of',
      () =>
        existsSync(join(agent.stateDir, 'masters.json')) &&
        readFileSync(join(agent.stateDir, 'masters.json'), 'utf8').includes(standby.url),
    );

    await primary.close();
    assert.equal((await call(standby.url, 'POST', '/api/replication/promote', { token: primary.admin })).status, 200);
    await until(
      'the agent linked to the promoted standby',
      async () =>
        (await call(standby.url, 'GET', `/api/nodes/${edge.id}`, { token: primary.admin })).body.status === 'online',
      15_000,
    );
  });
});
