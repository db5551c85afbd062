// SQL for tunnels: an encrypted link from an entry node to one exit node or several, each listening on its port
// (claimed like a rule's port on that node). Each end has a key pair the master issued (private keys sealed by the
// caller) and reports how it stands; the tunnel's status combines them. The first exit lives in `tunnels` (its
// exit_node_id, listen_port and via are the tunnel's, as before there were several), the others in `tunnel_exits`.

import type { SortSql, tunnelSorts } from '../domain/sorts.ts';
import type { Database } from './database.ts';
import { FilterBound, FilteredCount, FilteredQuery, KeysetQueries, type SortedPage } from './filters.ts';
import { renderedRows, type Rendered } from './rendered.ts';
import { unlessTaken } from './errors.ts';
import { PortStore } from './ports.ts';
import { portTaken } from './rules.ts';
import type { JsonPage } from './page.ts';
import type { ExitReport, ExitStrategy, SwitchReason, TunnelStatus, TunnelTransport } from '../domain/tunnels.ts';

/** One exit as written: its node, the port it listens on, and for transport ws the URL the entry dials it through. */
export interface ExitFields {
  node_id: number;
  listen_port: number;
  via: string | null;
}

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
  /** The exits past the first, in order. */
  more_exits: ExitFields[];
  exit_strategy: ExitStrategy;
  /** What exits connect to when the entry probes them (host:port); null: the first rule's target. */
  probe_target: string | null;
}

/** One exit as the API shows it: where it listens, how it stands, and what the entry measured of it. */
export interface TunnelExitView extends ExitFields, TunnelEndView {
  rtt_ms: number | null;
  loss_percent: number | null;
  probe_ms: number | null;
  probe_failed: boolean;
  score_ms: number | null;
  chosen: boolean;
}

/** The entry's choice among the exits as it reports it, with its last move. */
export interface ExitChoiceReport {
  exits: ExitReport[];
  chosen: number | null;
  switched: {
    from: number | null;
    to: number | null;
    reason: SwitchReason;
    from_score_ms: number | null;
    to_score_ms: number | null;
  } | null;
}

/** How one end sees the tunnel: pending until it reports after the tunnel's last change. */
export interface TunnelEndView {
  status: TunnelStatus;
  last_error: string | null;
  reported_at: string | null;
}

export interface Tunnel extends Omit<TunnelFields, 'more_exits'> {
  id: number;
  status: TunnelStatus;
  /** The session's round trip as the entry measured it, while the entry reports it up. */
  rtt_ms: number | null;
  /** The share of the entry's last PINGs (a minute's) that got no answer, while the entry reports it up. */
  loss_percent: number | null;
  ends: { entry: TunnelEndView; exit: TunnelEndView };
  /** Every exit in order, the first being exit_node_id's. */
  exits: TunnelExitView[];
  exit_node_ids: number[];
  exit_ports: number[];
  exit_vias: (string | null)[];
  /** The exit the entry sends new connections to, why, and since when; null until it says. */
  chosen_exit_node_id: number | null;
  chosen_because: string | null;
  chosen_at: string | null;
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

/** What a node needs to run its end of a tunnel (at an exit: that exit's node, port, via and keys). */
export interface TunnelEndRow extends TunnelKeys {
  id: number;
  entry_node_id: number;
  exit_node_id: number;
  listen_port: number;
  exit_host: string;
  owner_id: number;
  transport: TunnelTransport;
  via: string | null;
  exit_strategy: ExitStrategy;
  probe_target: string | null;
}

/** An exit as its entry dials it. */
export interface EntryExitRow {
  node_id: number;
  host: string;
  listen_port: number;
  via: string | null;
  exit_cert: string;
}

/** An exit past the first as stored. */
interface MoreExitRow extends ExitFields {
  status: TunnelStatus;
  last_error: string | null;
  reported_at: string | null;
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
  /** JSON: MoreExitRow[] in order. */
  more_exits_json: string;
  /** JSON: ExitReport[], as the entry last reported. */
  exit_paths: string | null;
  chosen_exit_node_id: number | null;
  chosen_because: string | null;
  chosen_at: string | null;
  version: number;
  created_at: string;
  updated_at: string;
}

const ms = (us: number | null) => (us === null ? null : Math.round(us / 10) / 100);

function toTunnel(row: Row): Tunnel {
  const more = JSON.parse(row.more_exits_json) as MoreExitRow[];
  const paths = new Map(
    ((row.exit_paths ? JSON.parse(row.exit_paths) : []) as ExitReport[]).map((p) => [p.node_id, p]),
  );
  const first: MoreExitRow = {
    node_id: row.exit_node_id,
    listen_port: row.listen_port,
    via: row.via,
    status: row.exit_status,
    last_error: row.exit_error,
    reported_at: row.exit_reported_at,
  };
  const exits = [first, ...more].map((exit): TunnelExitView => {
    const path = paths.get(exit.node_id);
    return {
      ...exit,
      rtt_ms: ms(path?.rtt_us ?? null),
      loss_percent: path?.loss_percent ?? null,
      probe_ms: ms(path?.probe_us ?? null),
      probe_failed: path?.probe_failed ?? false,
      score_ms: path?.score_ms ?? null,
      chosen: row.chosen_exit_node_id === exit.node_id,
    };
  });
  return {
    id: row.id,
    name: row.name,
    owner_id: row.owner_id,
    entry_node_id: row.entry_node_id,
    exit_node_id: row.exit_node_id,
    listen_port: row.listen_port,
    transport: row.transport,
    via: row.via,
    exit_strategy: row.exit_strategy,
    probe_target: row.probe_target,
    status: row.status,
    rtt_ms: ms(row.rtt_us),
    loss_percent: row.loss_percent,
    ends: {
      entry: { status: row.entry_status, last_error: row.entry_error, reported_at: row.entry_reported_at },
      exit: { status: row.exit_status, last_error: row.exit_error, reported_at: row.exit_reported_at },
    },
    exits,
    exit_node_ids: exits.map((exit) => exit.node_id),
    exit_ports: exits.map((exit) => exit.listen_port),
    exit_vias: exits.map((exit) => exit.via),
    chosen_exit_node_id: row.chosen_exit_node_id,
    chosen_because: row.chosen_because,
    chosen_at: row.chosen_at,
    version: row.version,
    created_at: row.created_at,
    updated_at: row.updated_at,
  };
}

const COLUMNS = `id, name, owner_id, entry_node_id, exit_node_id, listen_port, transport, via, exit_strategy,
  probe_target, status, entry_status, entry_error, entry_reported_at, exit_status, exit_error, exit_reported_at, rtt_us,
  loss_percent, exit_paths, chosen_exit_node_id, chosen_because, chosen_at, version, created_at, updated_at,
  (SELECT json_group_array(json_object('node_id', node_id, 'listen_port', listen_port, 'via', via, 'status', status,
      'last_error', error, 'reported_at', reported_at))
    FROM (SELECT * FROM tunnel_exits e WHERE e.tunnel_id = tunnels.id ORDER BY position)) AS more_exits_json`;
/** Every exit of every tunnel, the first from `tunnels`, as rows of tunnel_id, position and the exit's columns. */
export const ALL_EXITS = `(SELECT id AS tunnel_id, 0 AS position, exit_node_id AS node_id, listen_port, via, exit_cert,
    exit_key FROM tunnels
  UNION ALL SELECT tunnel_id, position, node_id, listen_port, via, exit_cert, exit_key FROM tunnel_exits)`;
/** The entry and an exit up: up; the entry or every exit down: down; otherwise some have not reported since then. */
const COMBINED_STATUS = `CASE
  WHEN entry_status = 'up' AND (exit_status = 'up'
    OR EXISTS (SELECT 1 FROM tunnel_exits e WHERE e.tunnel_id = tunnels.id AND e.status = 'up')) THEN 'up'
  WHEN entry_status = 'down' OR (exit_status = 'down'
    AND NOT EXISTS (SELECT 1 FROM tunnel_exits e WHERE e.tunnel_id = tunnels.id AND e.status <> 'down')) THEN 'down'
  ELSE 'pending' END`;
const ENDS_PENDING = `status = 'pending', entry_status = 'pending', entry_error = NULL, entry_reported_at = NULL,
  exit_status = 'pending', exit_error = NULL, exit_reported_at = NULL, rtt_us = NULL, loss_percent = NULL,
  exit_paths = NULL`;
/** The tunnels node :node_id is an exit of past the first. */
const MORE_EXITS_OF = 'SELECT tunnel_id FROM tunnel_exits WHERE node_id = :node_id';

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
  node_id: `(entry_node_id = :node_id OR exit_node_id = :node_id OR id IN (${MORE_EXITS_OF}))`,
  status: 'status = :status',
  q: 'instr(lower(name), lower(:q)) > 0',
};

/** The columns of `tunnels` that `fields` sets, and nothing else it may carry. */
function columnsOf(fields: TunnelFields) {
  const { name, owner_id, entry_node_id, exit_node_id, listen_port, transport, via, exit_strategy, probe_target } =
    fields;
  return { name, owner_id, entry_node_id, exit_node_id, listen_port, transport, via, exit_strategy, probe_target };
}

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
  private readonly firstPickedStmt;
  private readonly movePortStmt;
  private readonly deleteStmt;
  private readonly idsByNodeStmt;
  private readonly byStatusStmt;
  private readonly ownedByStatusStmt;
  private readonly keysStmt;
  private readonly keylessStmt;
  private readonly endsStmt;
  private readonly entryExitsStmt;
  private readonly reportStmts;
  private readonly choiceStmt;
  private readonly nodeDownStmts;
  private readonly combineStmt;
  private readonly moreExits;

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
    this.insertStmt = db.prepare(`INSERT INTO tunnels (name, owner_id, entry_node_id, exit_node_id, listen_port,
        transport, via, exit_strategy, probe_target, created_at, updated_at)
      VALUES (:name, :owner_id, :entry_node_id, :exit_node_id, :listen_port, :transport, :via, :exit_strategy,
        :probe_target, :at, :at)
      RETURNING id`);
    this.pickedStmt = db.prepare('UPDATE tunnels SET port_picked = ? WHERE id = ?');
    this.firstPickedStmt = db.prepare('SELECT port_picked FROM tunnels WHERE id = ?');
    this.movePortStmt = db.prepare(`UPDATE tunnels SET listen_port = :port, ${ENDS_PENDING}, version = version + 1,
      updated_at = :at WHERE id = :id AND port_picked = 1 RETURNING id`);
    this.updateStmt = db.prepare(`UPDATE tunnels SET name = :name, owner_id = :owner_id, entry_node_id = :entry_node_id,
        exit_node_id = :exit_node_id, listen_port = :listen_port, transport = :transport, via = :via,
        exit_strategy = :exit_strategy, probe_target = :probe_target, ${ENDS_PENDING}, version = version + 1,
        updated_at = :at
      WHERE id = :id`);
    this.deleteStmt = db.prepare('DELETE FROM tunnels WHERE id = ?');
    this.idsByNodeStmt = db.prepare(`SELECT id FROM tunnels WHERE entry_node_id = :node_id OR exit_node_id = :node_id
      UNION ${MORE_EXITS_OF} ORDER BY 1`);
    this.byStatusStmt = db.prepare('SELECT status, count(*) AS n FROM tunnels GROUP BY status');
    this.ownedByStatusStmt = db.prepare('SELECT status, count(*) AS n FROM tunnels WHERE owner_id = ? GROUP BY status');
    this.keysStmt = db.prepare(`UPDATE tunnels SET exit_cert = :exit_cert, exit_key = :exit_key,
        entry_cert = :entry_cert, entry_key = :entry_key, ${ENDS_PENDING}
      WHERE id = :id`);
    this.keylessStmt = db.prepare('SELECT id FROM tunnels WHERE exit_key IS NULL OR entry_key IS NULL ORDER BY id');
    // The node's ends: as the entry (with the first exit's), or as any exit (with that exit's own).
    this.endsStmt = db.prepare(`SELECT t.id, t.entry_node_id, x.node_id AS exit_node_id, x.listen_port,
        n.host AS exit_host, t.owner_id, t.transport, x.via, x.exit_cert, x.exit_key, t.entry_cert, t.entry_key,
        t.exit_strategy, t.probe_target
      FROM ${ALL_EXITS} x JOIN tunnels t ON t.id = x.tunnel_id JOIN nodes n ON n.id = x.node_id
      WHERE (x.node_id = ?1 OR (t.entry_node_id = ?1 AND x.position = 0))
        AND t.entry_key IS NOT NULL AND t.exit_key IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM tunnel_exits e WHERE e.tunnel_id = t.id AND e.exit_key IS NULL)
      ORDER BY t.id`);
    this.entryExitsStmt = db.prepare(`SELECT x.node_id, n.host, x.listen_port, x.via, x.exit_cert
      FROM ${ALL_EXITS} x JOIN nodes n ON n.id = x.node_id WHERE x.tunnel_id = ? ORDER BY x.position`);
    this.reportStmts = {
      entry: db.prepare(`UPDATE tunnels SET entry_status = :status, entry_error = :error, entry_reported_at = :at,
          rtt_us = CASE WHEN :status = 'up' THEN :rtt_us END,
          loss_percent = CASE WHEN :status = 'up' THEN :loss_percent END
        WHERE id = :id AND entry_node_id = :node_id`),
      exit: db.prepare(`UPDATE tunnels SET exit_status = :status, exit_error = :error, exit_reported_at = :at
        WHERE id = :id AND exit_node_id = :node_id`),
      more: db.prepare(`UPDATE tunnel_exits SET status = :status, error = :error, reported_at = :at
        WHERE tunnel_id = :id AND node_id = :node_id`),
    };
    this.choiceStmt = db.prepare(`UPDATE tunnels SET exit_paths = :paths,
        chosen_exit_node_id = CASE WHEN :chosen IN (SELECT node_id FROM ${ALL_EXITS} WHERE tunnel_id = :id)
          THEN :chosen END,
        chosen_because = CASE WHEN :because IS NULL THEN chosen_because ELSE :because END,
        chosen_at = CASE WHEN :because IS NULL THEN chosen_at ELSE :at END
      WHERE id = :id AND entry_node_id = :node_id`);
    this.nodeDownStmts = [
      db.prepare(`UPDATE tunnels SET
        entry_status = CASE WHEN entry_node_id = :node_id THEN 'down' ELSE entry_status END,
        entry_error = CASE WHEN entry_node_id = :node_id THEN :error ELSE entry_error END,
        entry_reported_at = CASE WHEN entry_node_id = :node_id THEN :at ELSE entry_reported_at END,
        rtt_us = CASE WHEN entry_node_id = :node_id THEN NULL ELSE rtt_us END,
        loss_percent = CASE WHEN entry_node_id = :node_id THEN NULL ELSE loss_percent END,
        exit_status = CASE WHEN exit_node_id = :node_id THEN 'down' ELSE exit_status END,
        exit_error = CASE WHEN exit_node_id = :node_id THEN :error ELSE exit_error END,
        exit_reported_at = CASE WHEN exit_node_id = :node_id THEN :at ELSE exit_reported_at END
      WHERE entry_node_id = :node_id OR exit_node_id = :node_id`),
      db.prepare(`UPDATE tunnel_exits SET status = 'down', error = :error, reported_at = :at
        WHERE node_id = :node_id`),
    ];
    this.combineStmt = db.prepare(`UPDATE tunnels SET status = ${COMBINED_STATUS}
      WHERE (:id IS NULL OR id = :id) AND (:node_id IS NULL OR entry_node_id = :node_id OR exit_node_id = :node_id
        OR id IN (${MORE_EXITS_OF}))`);
    this.moreExits = {
      list: db.prepare(`SELECT node_id, listen_port, via, port_picked FROM tunnel_exits WHERE tunnel_id = ?
        ORDER BY position`),
      insert: db.prepare(`INSERT INTO tunnel_exits (tunnel_id, node_id, position, listen_port, port_picked, via)
        VALUES (:id, :node_id, :position, :listen_port, :port_picked, :via)`),
      // An exit kept where it listened keeps its keys and how it stands; one moved to another port is pending again.
      update: db.prepare(`UPDATE tunnel_exits SET position = :position, listen_port = :listen_port,
          port_picked = :port_picked, via = :via,
          status = CASE WHEN listen_port IS :listen_port AND via IS :via THEN status ELSE 'pending' END,
          error = CASE WHEN listen_port IS :listen_port AND via IS :via THEN error END,
          reported_at = CASE WHEN listen_port IS :listen_port AND via IS :via THEN reported_at END
        WHERE tunnel_id = :id AND node_id = :node_id`),
      delete: db.prepare('DELETE FROM tunnel_exits WHERE tunnel_id = ? AND node_id = ?'),
      keyless: db.prepare('SELECT node_id FROM tunnel_exits WHERE tunnel_id = ? AND exit_key IS NULL'),
      keys: db.prepare(`UPDATE tunnel_exits SET exit_cert = :cert, exit_key = :key, status = 'pending', error = NULL,
          reported_at = NULL
        WHERE tunnel_id = :id AND node_id = :node_id`),
      movePort: db.prepare(`UPDATE tunnel_exits SET listen_port = :port, status = 'pending', error = NULL,
          reported_at = NULL
        WHERE tunnel_id = :id AND node_id = :node_id AND port_picked = 1 RETURNING tunnel_id`),
      picked: db.prepare('SELECT port_picked FROM tunnel_exits WHERE tunnel_id = ? AND node_id = ?'),
      touch: db.prepare('UPDATE tunnels SET version = version + 1, updated_at = :at WHERE id = :id'),
    };
  }

  find(id: number): Tunnel | undefined {
    const row = this.byId.get(id) as Row | undefined;
    return row && toTunnel(row);
  }

  findByName(name: string): Tunnel | undefined {
    const row = this.byName.get(name) as Row | undefined;
    return row && toTunnel(row);
  }

  /** Gives the tunnel's entry and first exit new key pairs; how they stood is forgotten until they report again. */
  setKeys(id: number, keys: TunnelKeys): void {
    this.keysStmt.run({ id, ...keys });
  }

  /** The exits past the first of tunnel `id` that have no key pair yet (added since keys were issued). */
  keylessExits(id: number): number[] {
    return (this.moreExits.keyless.all(id) as { node_id: number }[]).map((row) => row.node_id);
  }

  /** Gives the exit at node `nodeId` (past the first) of tunnel `id` its key pair, the key sealed by the caller. */
  setExitKeys(id: number, nodeId: number, keys: { cert: string; key: Uint8Array }): void {
    this.moreExits.keys.run({ id, node_id: nodeId, ...keys });
  }

  /** Tunnels whose entry or first exit has no key pair (made before tunnels forwarded; later exits get theirs made). */
  keyless(): number[] {
    return (this.keylessStmt.all() as { id: number }[]).map((row) => row.id);
  }

  /** The tunnels the node is an end of, with what that end needs; the keys still sealed. */
  endsOf(nodeId: number): TunnelEndRow[] {
    return this.endsStmt.all(nodeId) as unknown as TunnelEndRow[];
  }

  /** Every exit of tunnel `id` as its entry dials it, in order. */
  entryExits(id: number): EntryExitRow[] {
    return this.entryExitsStmt.all(id) as unknown as EntryExitRow[];
  }

  /**
   * Records how the node's end of a tunnel stands; a tunnel the node is no end of is left alone. The tunnel's status
   * follows. The round trip, and what it measured of each exit and chose, are the entry's to tell (`choice`, from
   * entries that say; `because`: the words for a move of its choice, null when it did not move). Call inside a write.
   */
  report(
    id: number,
    nodeId: number,
    view: { status: 'up' | 'down'; error: string | null; rtt_us: number | null; loss_percent: number | null },
    at: string,
    choice?: { exits: ExitReport[]; chosen: number | null; because: string | null },
  ): void {
    const params = { id, node_id: nodeId, status: view.status, error: view.error, at };
    this.reportStmts.entry.run({ ...params, rtt_us: view.rtt_us, loss_percent: view.loss_percent });
    this.reportStmts.exit.run(params);
    this.reportStmts.more.run(params);
    if (choice)
      this.choiceStmt.run({
        id,
        node_id: nodeId,
        paths: JSON.stringify(choice.exits),
        chosen: choice.chosen,
        because: choice.because,
        at,
      });
    this.combineStmt.run({ id, node_id: null });
  }

  /** Marks the node's ends of all its tunnels down, saying why (its agent is gone). Call inside a write. */
  nodeDown(nodeId: number, error: string, at: string): void {
    for (const statement of this.nodeDownStmts) statement.run({ node_id: nodeId, error, at });
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

  /** Throws `conflict` when the name or an exit node's port is taken. */
  insert(fields: TunnelFields, at: string, picked: ReadonlySet<number> = new Set()): Tunnel {
    this.checkPorts(fields);
    const row = columnsOf(fields);
    const id = unlessTaken(
      `the tunnel name '${fields.name}'`,
      () => this.findByName(fields.name)?.id,
      () => (this.insertStmt.get({ ...row, at }) as { id: number }).id,
    );
    this.writeMoreExits(id, fields.more_exits, [...picked]);
    return this.find(id)!;
  }

  /** Throws `conflict` when the name or an exit node's port is taken. */
  update(id: number, fields: TunnelFields, at: string, picked: ReadonlySet<number> = new Set()): Tunnel {
    this.checkPorts(fields, id);
    const row = columnsOf(fields);
    unlessTaken(
      `the tunnel name '${fields.name}'`,
      () => this.findByName(fields.name)?.id,
      () => this.updateStmt.run({ ...row, id, at }),
    );
    this.writeMoreExits(id, fields.more_exits, [...picked]);
    return this.find(id)!;
  }

  /** Each exit's port must be free on its node, but for the tunnel's own claims. */
  private checkPorts(fields: TunnelFields, id?: number): void {
    for (const exit of [{ node_id: fields.exit_node_id, listen_port: fields.listen_port }, ...fields.more_exits]) {
      const holder = this.ports.holder(exit.node_id, ['tcp'], exit.listen_port, exit.listen_port, {
        ...(id === undefined ? {} : { tunnel_id: id }),
      });
      if (holder) throw portTaken(holder, exit.listen_port);
    }
  }

  /**
   * Makes the exits past the first `exits`, in order: one gone is deleted (its port claim with it), one kept keeps
   * its keys, a new one has none until the caller issues them (see keylessExits). `picked`: the nodes whose port the
   * master picked.
   */
  private writeMoreExits(id: number, exits: readonly ExitFields[], picked: readonly number[]): void {
    const before = new Set((this.moreExits.list.all(id) as { node_id: number }[]).map((row) => row.node_id));
    const wanted = new Set(exits.map((exit) => exit.node_id));
    for (const nodeId of before) if (!wanted.has(nodeId)) this.moreExits.delete.run(id, nodeId);
    exits.forEach((exit, index) => {
      const params = { id, ...exit, position: index + 1, port_picked: Number(picked.includes(exit.node_id)) };
      if (before.has(exit.node_id)) this.moreExits.update.run(params);
      else this.moreExits.insert.run(params);
    });
  }

  /** Records whether the master picked the tunnel's first exit's port (none was given). Call inside a write. */
  setPortPicked(id: number, picked: boolean): void {
    this.pickedStmt.run(Number(picked), id);
  }

  /** Whether the master picked the port of the first exit of tunnel `id`. */
  firstPortPicked(id: number): boolean {
    return (this.firstPickedStmt.get(id) as { port_picked: number } | undefined)?.port_picked === 1;
  }

  /** Whether the master picked the port of exit node `nodeId` (past the first) of tunnel `id`. */
  exitPortPicked(id: number, nodeId: number): boolean {
    return (this.moreExits.picked.get(id, nodeId) as { port_picked: number } | undefined)?.port_picked === 1;
  }

  /**
   * Moves the exit at node `nodeId` of a tunnel whose port there the master picked to `port`, that exit pending
   * again; false for a port that was given (it stays: whoever gave it decides). Call inside a write; the port must
   * be free in the master's books.
   */
  movePort(id: number, nodeId: number, port: number, at: string): boolean {
    const tunnel = this.find(id);
    if (!tunnel) return false;
    if (tunnel.exit_node_id === nodeId) return this.movePortStmt.get({ id, port, at }) !== undefined;
    if (this.moreExits.movePort.get({ id, node_id: nodeId, port }) === undefined) return false;
    this.moreExits.touch.run({ id, at });
    return true;
  }

  delete(id: number): void {
    this.deleteStmt.run(id);
  }

  /** The tunnels the node is an end of: their entry, or any of their exits. */
  idsOfNode(nodeId: number): number[] {
    return (this.idsByNodeStmt.all({ node_id: nodeId }) as { id: number }[]).map((row) => row.id);
  }

  /** How many tunnels there are (of one owner, given one) by status. */
  countByStatus(ownerId?: number): Record<string, number> {
    const rows = ownerId === undefined ? this.byStatusStmt.all() : this.ownedByStatusStmt.all(ownerId);
    return Object.fromEntries((rows as { status: string; n: number }[]).map((row) => [row.status, row.n]));
  }
}
