// SQL for tunnels: an encrypted link from an entry node to an exit node, which listens on
// `listen_port` (claimed like a rule's port on the exit node). Each end has a key pair the
// master issued (private keys sealed by the caller) and reports how it stands; the tunnel's
// status combines the two.

import type { SortSql, tunnelSorts } from '../domain/sorts.ts';
import type { Database } from './database.ts';
import { FilterBound, FilteredCount, FilteredQuery, KeysetQueries, type SortedPage } from './filters.ts';
import { renderedRows, type Rendered } from './rendered.ts';
import { unlessTaken } from './errors.ts';
import { PortStore } from './ports.ts';
import { portTaken } from './rules.ts';
import type { JsonPage } from './page.ts';
import type { TunnelStatus, TunnelTransport } from '../domain/tunnels.ts';

export interface TunnelFields {
  name: string;
  /** The user it belongs to. */
  owner_id: number;
  entry_node_id: number;
  exit_node_id: number;
  listen_port: number;
  transport: TunnelTransport;
  /** Transport ws: the WebSocket URL the entry dials instead of the exit's port; null: the exit's port. */
  via: string | null;
}

/** How one end sees the tunnel: pending until it reports after the tunnel's last change. */
export interface TunnelEndView {
  status: TunnelStatus;
  last_error: string | null;
  reported_at: string | null;
}

export interface Tunnel extends TunnelFields {
  id: number;
  status: TunnelStatus;
  /** The session's round trip as the entry measured it, while the entry reports it up. */
  rtt_ms: number | null;
  /** The share of the entry's last PINGs (a minute's) that got no answer, while the entry reports it up. */
  loss_percent: number | null;
  ends: { entry: TunnelEndView; exit: TunnelEndView };
  version: number;
  created_at: string;
  updated_at: string;
}

/** Each end's certificate, and its private key as sealed by the caller. */
export interface TunnelKeys {
  exit_cert: string;
  exit_key: Uint8Array;
  entry_cert: string;
  entry_key: Uint8Array;
}

/** What a node needs to run its end of a tunnel. */
export interface TunnelEndRow extends TunnelKeys {
  id: number;
  entry_node_id: number;
  exit_node_id: number;
  listen_port: number;
  exit_host: string;
  owner_id: number;
  transport: TunnelTransport;
  via: string | null;
}

interface Row extends TunnelFields {
  id: number;
  status: TunnelStatus;
  entry_status: TunnelStatus;
  entry_error: string | null;
  entry_reported_at: string | null;
  exit_status: TunnelStatus;
  exit_error: string | null;
  exit_reported_at: string | null;
  rtt_us: number | null;
  loss_percent: number | null;
  version: number;
  created_at: string;
  updated_at: string;
}

function toTunnel(row: Row): Tunnel {
  return {
    id: row.id,
    name: row.name,
    owner_id: row.owner_id,
    entry_node_id: row.entry_node_id,
    exit_node_id: row.exit_node_id,
    listen_port: row.listen_port,
    transport: row.transport,
    via: row.via,
    status: row.status,
    rtt_ms: row.rtt_us === null ? null : Math.round(row.rtt_us / 10) / 100,
    loss_percent: row.loss_percent,
    ends: {
      entry: { status: row.entry_status, last_error: row.entry_error, reported_at: row.entry_reported_at },
      exit: { status: row.exit_status, last_error: row.exit_error, reported_at: row.exit_reported_at },
    },
    version: row.version,
    created_at: row.created_at,
    updated_at: row.updated_at,
  };
}

const COLUMNS = `id, name, owner_id, entry_node_id, exit_node_id, listen_port, transport, via, status, entry_status,
  entry_error, entry_reported_at, exit_status, exit_error, exit_reported_at, rtt_us, loss_percent, version, created_at,
  updated_at`;
/** Both ends up: up; either down: down; otherwise one has not reported since the last change. */
const COMBINED_STATUS = `CASE WHEN entry_status = 'up' AND exit_status = 'up' THEN 'up'
  WHEN entry_status = 'down' OR exit_status = 'down' THEN 'down' ELSE 'pending' END`;
const ENDS_PENDING = `status = 'pending', entry_status = 'pending', entry_error = NULL, entry_reported_at = NULL,
  exit_status = 'pending', exit_error = NULL, exit_reported_at = NULL, rtt_us = NULL, loss_percent = NULL`;

/** What lists of tunnels select by (a batch's filter too); null: any. */
export interface TunnelFilter {
  owner_id: number | null;
  node_id: number | null;
  status: string | null;
  q: string | null;
}

/** What lists of tunnels sort by, as SQL: each key then id. */
export const TUNNEL_SORTS: SortSql<typeof tunnelSorts> = {
  id: 'id',
  name: 'name COLLATE NOCASE',
  status: 'status',
  listen_port: 'listen_port',
};

/** Each list filter's condition on `tunnels` (see FilteredQuery). */
export const TUNNEL_FILTERS = {
  owner_id: 'owner_id = :owner_id',
  node_id: '(entry_node_id = :node_id OR exit_node_id = :node_id)',
  status: 'status = :status',
  q: 'instr(lower(name), lower(:q)) > 0',
};

export class TunnelStore {
  // The JSON of tunnels read lately (see rendered.ts), for pages.
  private readonly rendered: Rendered;
  private readonly ports: PortStore;
  private readonly byId;
  private readonly byName;
  private readonly listQuery;
  private readonly countQuery;
  /** What the filters in use may read (see FilterBound). */
  readonly bound;
  private readonly sortedQueries;
  private readonly pageQuery;
  private readonly insertStmt;
  private readonly updateStmt;
  private readonly pickedStmt;
  private readonly movePortStmt;
  private readonly deleteStmt;
  private readonly idsByNodeStmt;
  private readonly byStatusStmt;
  private readonly ownedByStatusStmt;
  private readonly keysStmt;
  private readonly keylessStmt;
  private readonly endsStmt;
  private readonly reportStmts;
  private readonly nodeDownStmt;
  private readonly combineStmt;

  constructor(db: Database) {
    this.ports = new PortStore(db);
    this.rendered = renderedRows<Row>(
      db,
      'tunnels',
      `SELECT ${COLUMNS} FROM tunnels WHERE id IN (SELECT value FROM json_each(?))`,
      (row) => ({ version: row.version, json: JSON.stringify(toTunnel(row)) }),
    );
    this.byId = db.prepare(`SELECT ${COLUMNS} FROM tunnels WHERE id = ?`);
    this.byName = db.prepare(`SELECT ${COLUMNS} FROM tunnels WHERE name = ?`);
    this.listQuery = new FilteredQuery(
      db,
      `SELECT ${COLUMNS} FROM tunnels WHERE id > :after {filters} ORDER BY id LIMIT :limit`,
      TUNNEL_FILTERS,
    );
    this.pageQuery = new FilteredQuery(
      db,
      'SELECT id FROM tunnels WHERE id > :after {filters} ORDER BY id LIMIT :limit + 1',
      TUNNEL_FILTERS,
    );
    this.countQuery = new FilteredCount(db, 'SELECT count(*) AS n FROM tunnels WHERE 1 {filters}', TUNNEL_FILTERS);
    this.bound = new FilterBound(db, 'tunnels', 'tunnels', TUNNEL_FILTERS);
    this.sortedQueries = new KeysetQueries(db, { select: 'id', from: 'tunnels', id: 'id' }, TUNNEL_SORTS, this.bound);
    this.insertStmt =
      db.prepare(`INSERT INTO tunnels (name, owner_id, entry_node_id, exit_node_id, listen_port, transport, via,
        created_at, updated_at)
      VALUES (:name, :owner_id, :entry_node_id, :exit_node_id, :listen_port, :transport, :via, :at, :at) RETURNING id`);
    this.pickedStmt = db.prepare('UPDATE tunnels SET port_picked = ? WHERE id = ?');
    this.movePortStmt = db.prepare(`UPDATE tunnels SET listen_port = :port, ${ENDS_PENDING}, version = version + 1,
      updated_at = :at WHERE id = :id AND port_picked = 1 RETURNING id`);
    this.updateStmt = db.prepare(`UPDATE tunnels SET name = :name, owner_id = :owner_id, entry_node_id = :entry_node_id,
        exit_node_id = :exit_node_id, listen_port = :listen_port, transport = :transport, via = :via, ${ENDS_PENDING},
        version = version + 1, updated_at = :at
      WHERE id = :id`);
    this.deleteStmt = db.prepare('DELETE FROM tunnels WHERE id = ?');
    this.idsByNodeStmt = db.prepare('SELECT id FROM tunnels WHERE entry_node_id = ?1 OR exit_node_id = ?1 ORDER BY id');
    this.byStatusStmt = db.prepare('SELECT status, count(*) AS n FROM tunnels GROUP BY status');
    this.ownedByStatusStmt = db.prepare('SELECT status, count(*) AS n FROM tunnels WHERE owner_id = ? GROUP BY status');
    this.keysStmt = db.prepare(`UPDATE tunnels SET exit_cert = :exit_cert, exit_key = :exit_key,
        entry_cert = :entry_cert, entry_key = :entry_key, ${ENDS_PENDING}
      WHERE id = :id`);
    this.keylessStmt = db.prepare('SELECT id FROM tunnels WHERE exit_key IS NULL OR entry_key IS NULL ORDER BY id');
    this.endsStmt = db.prepare(`SELECT t.id, t.entry_node_id, t.exit_node_id, t.listen_port, n.host AS exit_host,
        t.owner_id, t.transport, t.via, t.exit_cert, t.exit_key, t.entry_cert, t.entry_key
      FROM tunnels t JOIN nodes n ON n.id = t.exit_node_id
      WHERE (t.entry_node_id = ?1 OR t.exit_node_id = ?1) AND t.exit_key IS NOT NULL AND t.entry_key IS NOT NULL
      ORDER BY t.id`);
    this.reportStmts = {
      entry: db.prepare(`UPDATE tunnels SET entry_status = :status, entry_error = :error, entry_reported_at = :at,
          rtt_us = CASE WHEN :status = 'up' THEN :rtt_us END,
          loss_percent = CASE WHEN :status = 'up' THEN :loss_percent END
        WHERE id = :id AND entry_node_id = :node_id`),
      exit: db.prepare(`UPDATE tunnels SET exit_status = :status, exit_error = :error, exit_reported_at = :at
        WHERE id = :id AND exit_node_id = :node_id`),
    };
    this.nodeDownStmt = db.prepare(`UPDATE tunnels SET
        entry_status = CASE WHEN entry_node_id = :node_id THEN 'down' ELSE entry_status END,
        entry_error = CASE WHEN entry_node_id = :node_id THEN :error ELSE entry_error END,
        entry_reported_at = CASE WHEN entry_node_id = :node_id THEN :at ELSE entry_reported_at END,
        rtt_us = CASE WHEN entry_node_id = :node_id THEN NULL ELSE rtt_us END,
        loss_percent = CASE WHEN entry_node_id = :node_id THEN NULL ELSE loss_percent END,
        exit_status = CASE WHEN exit_node_id = :node_id THEN 'down' ELSE exit_status END,
        exit_error = CASE WHEN exit_node_id = :node_id THEN :error ELSE exit_error END,
        exit_reported_at = CASE WHEN exit_node_id = :node_id THEN :at ELSE exit_reported_at END
      WHERE entry_node_id = :node_id OR exit_node_id = :node_id`);
    this.combineStmt = db.prepare(`UPDATE tunnels SET status = ${COMBINED_STATUS}
      WHERE (:id IS NULL OR id = :id) AND (:node_id IS NULL OR entry_node_id = :node_id OR exit_node_id = :node_id)`);
  }

  find(id: number): Tunnel | undefined {
    const row = this.byId.get(id) as Row | undefined;
    return row && toTunnel(row);
  }

  findByName(name: string): Tunnel | undefined {
    const row = this.byName.get(name) as Row | undefined;
    return row && toTunnel(row);
  }

  /** Gives the tunnel's ends new key pairs; how they stood is forgotten until they report with the new keys. */
  setKeys(id: number, keys: TunnelKeys): void {
    this.keysStmt.run({ id, ...keys });
  }

  /** Tunnels that have no key pairs yet (made before tunnels forwarded). */
  keyless(): number[] {
    return (this.keylessStmt.all() as { id: number }[]).map((row) => row.id);
  }

  /** The tunnels the node is an end of, with what both ends need; the keys still sealed. */
  endsOf(nodeId: number): TunnelEndRow[] {
    return this.endsStmt.all(nodeId) as unknown as TunnelEndRow[];
  }

  /**
   * Records how the node's end of a tunnel stands; a tunnel the node is no end of is left
   * alone. The tunnel's status follows. The round trip is the entry's to tell. Call inside a write.
   */
  report(
    id: number,
    nodeId: number,
    view: { status: 'up' | 'down'; error: string | null; rtt_us: number | null; loss_percent: number | null },
    at: string,
  ): void {
    const params = { id, node_id: nodeId, status: view.status, error: view.error, at };
    this.reportStmts.entry.run({ ...params, rtt_us: view.rtt_us, loss_percent: view.loss_percent });
    this.reportStmts.exit.run(params);
    this.combineStmt.run({ id, node_id: null });
  }

  /** Marks the node's ends of all its tunnels down, saying why (its agent is gone). Call inside a write. */
  nodeDown(nodeId: number, error: string, at: string): void {
    this.nodeDownStmt.run({ node_id: nodeId, error, at });
    this.combineStmt.run({ id: null, node_id: nodeId });
  }

  list(filter: TunnelFilter & { afterId: number; limit: number }): Tunnel[] {
    const { afterId, ...rest } = filter;
    return (this.listQuery.all({ ...rest, after: afterId }) as unknown as Row[]).map(toTunnel);
  }

  /** The ids of the tunnels `filter` matches, in order, up to one past its limit: what a batch selects by filter. */
  idsMatching(filter: TunnelFilter & { limit: number }): number[] {
    this.bound.check(filter);
    const rows = this.pageQuery.all({ after: 0, ...filter }) as unknown as { id: number }[];
    return rows.map((row) => row.id);
  }

  /** The page of `filter` as JSON text: ids from SQLite, their JSON from the cache. */
  page(filter: TunnelFilter & { afterId: number; limit: number; count?: boolean; sorted?: SortedPage }): JsonPage {
    const { afterId, limit, count, sorted, ...conditions } = filter;
    this.bound.check(conditions);
    if (sorted) {
      const { ids, lastKey } = this.sortedQueries.ids(sorted, limit, conditions);
      const total = count ? this.countQuery.total(conditions) : undefined;
      return { ...this.rendered.pageOf(ids, limit), lastKey, total };
    }
    const ids = (this.pageQuery.all({ ...conditions, limit, after: afterId }) as unknown as { id: number }[]).map(
      (row) => row.id,
    );
    const total = count ? this.countQuery.total(conditions) : undefined;
    return { ...this.rendered.pageOf(ids, limit), total };
  }

  /** A free TCP port on the exit node within [min, max], for tunnels created without one. */
  freePort(exitNodeId: number, min: number, max: number): number | null {
    return this.ports.freeTcpPort(exitNodeId, min, max);
  }

  /** Throws `conflict` when the name or the exit node's port is taken. */
  insert(fields: TunnelFields, at: string): Tunnel {
    const holder = this.ports.holder(fields.exit_node_id, ['tcp'], fields.listen_port);
    if (holder) throw portTaken(holder, fields.listen_port);
    const id = unlessTaken(
      `the tunnel name '${fields.name}'`,
      () => this.findByName(fields.name)?.id,
      () => (this.insertStmt.get({ ...fields, at }) as { id: number }).id,
    );
    return this.find(id)!;
  }

  /** Throws `conflict` when the name or the exit node's port is taken. */
  update(id: number, fields: TunnelFields, at: string): Tunnel {
    const holder = this.ports.holder(fields.exit_node_id, ['tcp'], fields.listen_port, fields.listen_port, {
      tunnel_id: id,
    });
    if (holder) throw portTaken(holder, fields.listen_port);
    unlessTaken(
      `the tunnel name '${fields.name}'`,
      () => this.findByName(fields.name)?.id,
      () => this.updateStmt.run({ ...fields, id, at }),
    );
    return this.find(id)!;
  }

  /** Records whether the master picked the tunnel's port (none was given). Call inside a write. */
  setPortPicked(id: number, picked: boolean): void {
    this.pickedStmt.run(Number(picked), id);
  }

  /**
   * Moves a tunnel whose port the master picked to `port`, its ends pending again; false for a tunnel whose port was
   * given (it stays: whoever gave it decides). Call inside a write; the port must be free in the master's books.
   */
  movePort(id: number, port: number, at: string): boolean {
    return this.movePortStmt.get({ id, port, at }) !== undefined;
  }

  delete(id: number): void {
    this.deleteStmt.run(id);
  }

  idsOfNode(nodeId: number): number[] {
    return (this.idsByNodeStmt.all(nodeId) as { id: number }[]).map((row) => row.id);
  }

  /** How many tunnels there are (of one owner, given one) by status. */
  countByStatus(ownerId?: number): Record<string, number> {
    const rows = ownerId === undefined ? this.byStatusStmt.all() : this.ownedByStatusStmt.all(ownerId);
    return Object.fromEntries((rows as { status: string; n: number }[]).map((row) => [row.status, row.n]));
  }
}
