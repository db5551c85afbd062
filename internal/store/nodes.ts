// SQL for nodes. SSH credentials are stored sealed (see crypto/box.ts) and never leave
// this module except to the installer; the agent token is stored as a hash.

import type { SortSql, nodeSorts } from '../domain/sorts.ts';
import type { Database } from './database.ts';
import { FilterBound, FilteredCount, FilteredQuery, KeysetQueries, type SortedPage } from './filters.ts';
import { unlessTaken } from './errors.ts';
import { safeCount } from './counts.ts';
import type { JsonPage } from './page.ts';
import { Rendered, type View } from './rendered.ts';
import { versionOrder } from '../release/signature.ts';
import type { Vitals } from '../domain/vitals.ts';
import type { NodeStatus } from '../domain/nodes.ts';

/**
 * Which nodes' agents are linked now, and when each was last heard: kept in memory by the agent links (SyncHub), never
 * persisted, so that what a node shows is true whatever the database held before a restart or a restore.
 */
export interface Presence {
  /** When the node's agent was last heard (RFC 3339), while it is linked; undefined otherwise. */
  heardAt(nodeId: number): string | undefined;
  /** Calls `fn` with a node whose link opened or closed, or whose agent was heard. */
  onPresenceChange(fn: (nodeId: number) => void): void;
}

/** No agent linked: a connection without agent links (a worker thread's, a command's). */
const NOBODY_LINKED: Presence = { heardAt: () => undefined, onPresenceChange: () => undefined };

/**
 * A node's status as shown: an install running shows first; otherwise a linked agent makes it online, and a node
 * recorded online whose agent is not linked now is offline. The stored status is what the installer and the last link
 * event recorded.
 */
function shownStatus(stored: NodeStatus, linked: boolean): NodeStatus {
  if (stored === 'installing') return stored;
  if (linked) return 'online';
  return stored === 'online' ? 'offline' : stored;
}

// The SQL of what a row shows, by the functions NodeStore defines: the stored columns and the agent links together.
const STATUS = 'node_status(id, status)';
const LAST_SEEN = 'node_seen(id, last_seen_at)';
export type SshAuth = 'none' | 'key' | 'password';

/** What a node's agent last said of the kernel path. */
export interface KernelPath {
  available: boolean;
  reason: string | null;
  /** Since the agent started: how often something else removed or changed its table (which it wrote back). */
  drifts?: number;
  last_drift_at?: string | null;
  /** The devices flowtables offload connections on: what is offloaded is not counted. */
  flow_offload?: string[];
}

export interface Node {
  id: number;
  name: string;
  host: string;
  ssh_port: number;
  ssh_user: string;
  ssh_auth: SshAuth;
  tags: string[];
  status: NodeStatus;
  status_detail: string | null;
  agent_version: string | null;
  /** The newest agent version the master carries a signed bundle of, if newer than its agent's. */
  upgrade_available: string | null;
  /** The ids of the release keys its agent said it trusts when it last linked (sha256/...); empty: none. */
  agent_release_keys: string[];
  /** What its agent last said of the kernel path (null until an agent that knows of it linked). */
  kernel_path: KernelPath | null;
  /** The bundle its agent's supervisor last went back from, for crash-looping after its soak; null: none. */
  agent_fell_back: FellBack | null;
  last_seen_at: string | null;
  config_version: number;
  traffic: { bytes_in: number; bytes_out: number };
  install: { started_at: string | null; finished_at: string | null; log_tail: string | null };
  /** How the node was doing at its agent's last report (null until one reported). */
  vitals: Vitals | null;
  version: number;
  created_at: string;
  updated_at: string;
}

/** An agent that went back from a bundle that crash-looped: which, to which, how it died, and when it was said. */
export interface FellBack {
  from_version: string;
  to_version: string;
  exits: number;
  within_seconds: number;
  at: string;
}

export interface NodeFields {
  name: string;
  host: string;
  ssh_port: number;
  ssh_user: string;
  tags: string[];
}

/** A sealed SSH credential, or 'keep' to leave the stored one as it is. */
export type SshSecret = { auth: SshAuth; sealed: Buffer | null } | 'keep';

interface Row extends Omit<
  Node,
  'tags' | 'agent_release_keys' | 'traffic' | 'install' | 'kernel_path' | 'agent_fell_back' | 'vitals'
> {
  tags: string;
  agent_release_keys: string;
  kernel_path: string | null;
  agent_fell_back: string | null;
  vitals: string | null;
  bytes_in: number;
  bytes_out: number;
  install_started_at: string | null;
  install_finished_at: string | null;
  install_log: string | null;
}

/**
 * The newest agent version the master carries a bundle of, when it is newer than the node's agent (ten bundles at
 * most; version_order makes versions comparable as text).
 */
const UPGRADE = `(SELECT version FROM agent_bundles WHERE version_order(version) > version_order(nodes.agent_version)
  ORDER BY version_order(version) DESC LIMIT 1)`;

/**
 * A node's config version, in a table of its own (migration 40): every rule written bumps it, and the session recording
 * a primary's commits for standbys keeps each row it changes whole (a node's, with its install log). A node never
 * bumped has none: version 1.
 */
const CONFIG_VERSION = 'coalesce((SELECT version FROM node_configs WHERE node_id = nodes.id), 1)';

const COLUMNS = `id, name, host, ssh_port, ssh_user, ssh_auth, tags, ${STATUS} AS status, status_detail, agent_version,
  ${UPGRADE} AS upgrade_available, agent_release_keys, kernel_path, agent_fell_back, ${LAST_SEEN} AS last_seen_at,
  ${CONFIG_VERSION} AS config_version,
  ${safeCount('bytes_in')} AS bytes_in, ${safeCount('bytes_out')} AS bytes_out, install_started_at,
    install_finished_at, install_log, vitals, version, created_at, updated_at`;

/** How much of an install's log a node keeps: the end, where the outcome is. */
export const INSTALL_LOG_BYTES = 8192;

function toNode({
  tags,
  agent_release_keys,
  kernel_path,
  agent_fell_back,
  vitals,
  bytes_in,
  bytes_out,
  install_started_at,
  install_finished_at,
  install_log,
  ...row
}: Row): Node {
  return {
    ...row,
    tags: JSON.parse(tags) as string[],
    agent_release_keys: JSON.parse(agent_release_keys) as string[],
    kernel_path: kernel_path === null ? null : (JSON.parse(kernel_path) as Node['kernel_path']),
    agent_fell_back: agent_fell_back === null ? null : (JSON.parse(agent_fell_back) as FellBack),
    traffic: { bytes_in, bytes_out },
    install: { started_at: install_started_at, finished_at: install_finished_at, log_tail: install_log },
    vitals: vitals === null ? null : (JSON.parse(vitals) as Vitals),
  };
}

/** A node as the API shows it, built by SQLite; must match the API's nodeView (tested). */
const NODE_JSON = `json_object('id', id, 'name', name, 'host', host, 'ssh_port', ssh_port, 'ssh_user', ssh_user,
  'ssh_auth', ssh_auth,
  'tags', json(tags), 'status', ${STATUS}, 'status_detail', status_detail, 'agent_version', agent_version,
    'upgrade_available', ${UPGRADE}, 'agent_release_keys', json(agent_release_keys),
    'kernel_path', json(kernel_path), 'agent_fell_back', json(agent_fell_back), 'last_seen_at', ${LAST_SEEN},
  'traffic', json_object('bytes_in', ${safeCount('bytes_in')}, 'bytes_out', ${safeCount('bytes_out')}),
  'install', json_object('started_at', install_started_at, 'finished_at', install_finished_at, 'log_tail', install_log),
  'vitals', json(vitals), 'version', version, 'created_at', created_at, 'updated_at', updated_at)`;

/** Each list filter's condition on `nodes` (see FilteredQuery). */
export const NODE_FILTERS = {
  // A tenant's plan: the nodes it names, and those carrying one of its tags (a JSON {ids, tags}).
  // (Tags through their index, node_tag_index: a node's own tags read for each node grew with the fleet.)
  granted: `(nodes.id IN (SELECT value FROM json_each(:granted, '$.ids'))
    OR nodes.id IN (SELECT node_id FROM node_tag_index
      WHERE tag IN (SELECT value FROM json_each(:granted, '$.tags'))))`,
  status: `${STATUS} = :status`,
  tag: 'nodes.id IN (SELECT node_id FROM node_tag_index WHERE tag = :tag)',
  q: '(instr(lower(name), lower(:q)) > 0 OR instr(lower(host), lower(:q)) > 0)',
};

/** The values of a filter's conditions, as the queries bind them. */
function conditionsOf(filter: Pick<NodeFilter, 'granted' | 'status' | 'tag' | 'q'>) {
  return {
    granted: filter.granted ? JSON.stringify(filter.granted) : null,
    status: filter.status,
    tag: filter.tag,
    q: filter.q,
  };
}

export interface NodeFilter {
  afterId: number;
  limit: number;
  /** Only the nodes a plan grants (by id, or one of its tags); null: every node. */
  granted?: { ids: readonly number[]; tags: readonly string[] } | null;
  status: string | null;
  tag: string | null;
  q: string | null;
  /** Also count every match (JsonPage.total). */
  count?: boolean;
  /** Another order than by id (then afterId is not used). */
  sorted?: SortedPage;
}

/** What lists of nodes sort by, as SQL: each key then id. */
export const NODE_SORTS: SortSql<typeof nodeSorts> = {
  id: 'id',
  name: 'name COLLATE NOCASE',
  status: STATUS,
  traffic: '(bytes_in + bytes_out)',
};

/**
 * How much rendered JSON `NodeStore.json` keeps by default, in characters: by size, not count,
 * as a node's JSON carries the tail of its install log (up to INSTALL_LOG_BYTES, which a node
 * fills with its installer's output). 10,000 nodes without logs take about 4 MiB.
 */
const RENDERED_CHARS = 16 * 1024 * 1024;

export class NodeStore {
  // The JSON of nodes read lately (see rendered.ts), for GETs and pages alike; a node's entry also goes when its
  // agent links, unlinks or is heard, since its status and last_seen_at show that.
  private readonly rendered: Rendered;
  private readonly byId;
  private readonly existsStmt;
  private readonly byName;
  private readonly listQuery;
  private readonly countQuery;
  /** What the filters in use may read (see FilterBound). */
  readonly bound;
  private readonly sortedQueries;
  private readonly pageQuery;
  private readonly taggedQuery;
  private readonly insertStmt;
  private readonly nextIdStmt;
  private readonly updateStmt;
  private readonly deleteConfigStmt;
  private readonly deleteStmt;
  private readonly countStmt;
  private readonly byStatusStmt;
  private readonly grantedByStatusStmt;
  private readonly bumpStmt;
  private readonly secretStmt;
  private readonly tokenStmt;
  private readonly setTokenStmt;
  private readonly linkStmt;
  private readonly interruptedStmt;
  private readonly unlinkedStmt;
  private readonly detailStmt;
  private readonly kernelPathStmt;
  private readonly fellBackStmt;
  private readonly seenStmt;
  private readonly installStartStmt;
  private readonly installLogStmt;
  private readonly installEndStmt;

  constructor(db: Database, presence: Presence = NOBODY_LINKED, renderedLimit = RENDERED_CHARS) {
    db.defineFunction('node_status', (id, stored) =>
      shownStatus(stored as NodeStatus, presence.heardAt(Number(id)) !== undefined),
    );
    db.defineFunction('node_seen', (id, stored) => presence.heardAt(Number(id)) ?? stored);
    db.defineFunction('version_order', (version) => (typeof version === 'string' ? versionOrder(version) : null));
    const renderStmt = db.prepare(
      `SELECT id, version, ${NODE_JSON} AS json FROM nodes WHERE id IN (SELECT value FROM json_each(?))`,
    );
    this.rendered = new Rendered({
      db,
      table: 'nodes',
      renderMany: (ids) => renderStmt.all(ids) as unknown as (View & { id: number })[],
      limitChars: renderedLimit,
    });
    presence.onPresenceChange((id) => this.rendered.forget(id));
    // Every node shows whether the bundles the master carries hold a newer agent.
    db.onTableChange('agent_bundles', () => this.rendered.clear());
    this.byId = db.prepare(`SELECT ${COLUMNS} FROM nodes WHERE id = ?`);
    this.existsStmt = db.prepare('SELECT 1 FROM nodes WHERE id = ?');
    this.byName = db.prepare(`SELECT ${COLUMNS} FROM nodes WHERE name = ?`);
    this.listQuery = new FilteredQuery(
      db,
      `SELECT ${COLUMNS} FROM nodes WHERE id > :after {filters} ORDER BY id LIMIT :limit`,
      NODE_FILTERS,
    );
    this.pageQuery = new FilteredQuery(
      db,
      'SELECT id FROM nodes WHERE id > :after {filters} ORDER BY id LIMIT :limit + 1',
      NODE_FILTERS,
    );
    // A tag's page walks the tag's index in id order, as far as the page goes (its condition in pageQuery makes SQLite
    // list every node of the tag first: 2.2 ms a page where 10,000 carry it). The other filters still apply.
    this.taggedQuery = new FilteredQuery(
      db,
      `SELECT nodes.id FROM node_tag_index t JOIN nodes ON nodes.id = t.node_id
        WHERE t.tag = :tagged AND t.node_id > :after {filters} ORDER BY t.node_id LIMIT :limit + 1`,
      NODE_FILTERS,
    );
    this.countQuery = new FilteredCount(db, 'SELECT count(*) AS n FROM nodes WHERE 1 {filters}', NODE_FILTERS);
    this.bound = new FilterBound(db, 'nodes', 'nodes', NODE_FILTERS);
    this.sortedQueries = new KeysetQueries(db, { select: 'id', from: 'nodes', id: 'id' }, NODE_SORTS, this.bound);
    this.insertStmt = db.prepare(`INSERT INTO nodes (id, name, host, ssh_port, ssh_user, ssh_auth, ssh_secret, tags,
        agent_token_hash, created_at, updated_at)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`);
    // AUTOINCREMENT: past every id the table ever held, recorded whenever one is inserted.
    this.nextIdStmt = db.prepare(
      `SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'nodes'), 0) + 1 AS id`,
    );
    this.updateStmt =
      db.prepare(`UPDATE nodes SET name = :name, host = :host, ssh_port = :ssh_port, ssh_user = :ssh_user, tags = :tags,
        ssh_auth = CASE WHEN :keep THEN ssh_auth ELSE :ssh_auth END,
        ssh_secret = CASE WHEN :keep THEN ssh_secret ELSE :ssh_secret END,
        version = version + 1, updated_at = :at
      WHERE id = :id`);
    this.deleteConfigStmt = db.prepare('DELETE FROM node_configs WHERE node_id = ?');
    this.deleteStmt = db.prepare('DELETE FROM nodes WHERE id = ?');
    this.countStmt = db.prepare('SELECT count(*) AS n FROM nodes');
    this.byStatusStmt = db.prepare(`SELECT ${STATUS} AS status, count(*) AS n FROM nodes GROUP BY 1`);
    this.grantedByStatusStmt = db.prepare(
      `SELECT ${STATUS} AS status, count(*) AS n FROM nodes WHERE ${NODE_FILTERS.granted} GROUP BY 1`,
    );
    this.bumpStmt = db.prepare(
      `INSERT INTO node_configs (node_id, version) VALUES (?, 2)
        ON CONFLICT (node_id) DO UPDATE SET version = version + 1 RETURNING version AS config_version`,
    );
    this.secretStmt = db.prepare('SELECT ssh_auth, ssh_secret FROM nodes WHERE id = ?');
    this.tokenStmt = db.prepare('SELECT agent_token_hash FROM nodes WHERE id = ?');
    this.setTokenStmt = db.prepare('UPDATE nodes SET agent_token_hash = ? WHERE id = ?');
    // An install running keeps its status and detail: its agent links and unlinks as it is replaced.
    this.linkStmt = db.prepare(`UPDATE nodes SET
        status = CASE WHEN status = 'installing' THEN status ELSE :status END,
        status_detail = CASE WHEN status = 'installing' THEN status_detail ELSE :detail END,
        last_seen_at = :at, agent_version = coalesce(:agent_version, agent_version),
        agent_release_keys = coalesce(:release_keys, agent_release_keys) WHERE id = :id`);
    this.interruptedStmt = db.prepare(`UPDATE nodes SET status = 'install_failed', status_detail = :detail,
        install_finished_at = :at, install_log = substr(coalesce(install_log, '') || :line, -${INSTALL_LOG_BYTES})
      WHERE status = 'installing'`);
    this.unlinkedStmt = db.prepare(`UPDATE nodes SET status = 'offline', status_detail = :detail
      WHERE status = 'online' RETURNING id`);
    this.detailStmt = db.prepare('UPDATE nodes SET status_detail = ? WHERE id = ?');
    this.kernelPathStmt = db.prepare('UPDATE nodes SET kernel_path = ? WHERE id = ? AND kernel_path IS NOT ?');
    this.fellBackStmt = db.prepare('UPDATE nodes SET agent_fell_back = ? WHERE id = ?');
    this.seenStmt = db.prepare('UPDATE nodes SET last_seen_at = ? WHERE id = ?');
    this.installStartStmt =
      db.prepare(`UPDATE nodes SET status = 'installing', status_detail = ?, install_started_at = ?,
      install_finished_at = NULL, install_log = '' WHERE id = ?`);
    this.installLogStmt = db.prepare(`UPDATE nodes SET status_detail = :detail,
      install_log = substr(coalesce(install_log, '') || :line, -${INSTALL_LOG_BYTES}) WHERE id = :id`);
    this.installEndStmt = db.prepare(
      'UPDATE nodes SET status = :status, status_detail = :detail, install_finished_at = :at WHERE id = :id',
    );
  }

  exists(id: number): boolean {
    return this.existsStmt.get(id) !== undefined;
  }

  find(id: number): Node | undefined {
    const row = this.byId.get(id) as Row | undefined;
    return row && toNode(row);
  }

  findByName(name: string): Node | undefined {
    const row = this.byName.get(name) as Row | undefined;
    return row && toNode(row);
  }

  list(filter: NodeFilter): Node[] {
    const rows = this.listQuery.all({
      after: filter.afterId,
      limit: filter.limit,
      ...conditionsOf(filter),
    }) as unknown as Row[];
    return rows.map(toNode);
  }

  /** The ids of the nodes `filter` matches, in order, up to one past its limit: what a batch selects by filter. */
  idsMatching(filter: Omit<NodeFilter, 'afterId' | 'count' | 'sorted'>): number[] {
    this.bound.check(conditionsOf(filter));
    const rows = this.pageQuery.all({ after: 0, limit: filter.limit, ...conditionsOf(filter) }) as unknown as {
      id: number;
    }[];
    return rows.map((row) => row.id);
  }

  /** The page of `filter` as JSON text, for answering lists without building objects. */
  page(filter: NodeFilter): JsonPage {
    const conditions = conditionsOf(filter);
    this.bound.check(conditions);
    const total = filter.count ? this.countQuery.total(conditions) : undefined;
    if (filter.sorted) {
      const { ids, lastKey } = this.sortedQueries.ids(filter.sorted, filter.limit, conditions);
      return { ...this.rendered.pageOf(ids, filter.limit), lastKey, total };
    }
    const params = { after: filter.afterId, limit: filter.limit, ...conditions };
    const rows =
      conditions.tag === null
        ? this.pageQuery.all(params)
        : this.taggedQuery.all({ ...params, tag: null, tagged: conditions.tag });
    const ids = (rows as unknown as { id: number }[]).map((row) => row.id);
    return { ...this.rendered.pageOf(ids, filter.limit), total };
  }

  /** One node as JSON text, with its version for the ETag. */
  json(id: number): View | undefined {
    return this.rendered.get(id);
  }

  /**
   * Throws `conflict` when the name is taken. `agentTokenHash` is given the new node's id, which its agent token
   * names: the row goes in with both at once.
   */
  insert(
    fields: NodeFields,
    secret: { auth: SshAuth; sealed: Buffer | null },
    agentTokenHash: (id: number) => Buffer,
    at: string,
  ): Node {
    return unlessTaken(
      `the node name '${fields.name}'`,
      () => this.findByName(fields.name)?.id,
      () => {
        const { name, host, ssh_port, ssh_user, tags } = fields;
        const id = (this.nextIdStmt.get() as { id: number }).id;
        this.insertStmt.run(
          id,
          name,
          host,
          ssh_port,
          ssh_user,
          secret.auth,
          secret.sealed,
          JSON.stringify(tags),
          agentTokenHash(id),
          at,
          at,
        );
        // What the table's defaults make of a new row (an import inserts 10,000: reading each back cost a third).
        return {
          id,
          name,
          host,
          ssh_port,
          ssh_user,
          ssh_auth: secret.auth,
          tags: [...tags],
          status: 'new',
          status_detail: null,
          agent_version: null,
          upgrade_available: null,
          agent_release_keys: [],
          kernel_path: null,
          agent_fell_back: null,
          last_seen_at: null,
          config_version: 1,
          traffic: { bytes_in: 0, bytes_out: 0 },
          install: { started_at: null, finished_at: null, log_tail: null },
          vitals: null,
          version: 1,
          created_at: at,
          updated_at: at,
        };
      },
    );
  }

  /** Throws `conflict` when the name is taken. */
  update(id: number, fields: NodeFields, secret: SshSecret, at: string): Node {
    return unlessTaken(
      `the node name '${fields.name}'`,
      () => this.findByName(fields.name)?.id,
      () => {
        const keep = secret === 'keep';
        this.updateStmt.run({
          ...fields,
          id,
          tags: JSON.stringify(fields.tags),
          keep: Number(keep),
          ssh_auth: keep ? null : secret.auth,
          ssh_secret: keep ? null : secret.sealed,
          at,
        });
        return this.find(id)!;
      },
    );
  }

  delete(id: number): void {
    this.deleteConfigStmt.run(id);
    this.deleteStmt.run(id);
  }

  count(): number {
    return (this.countStmt.get() as { n: number }).n;
  }

  /** How many nodes there are (of those a plan grants, given its grants) by status. */
  countByStatus(granted?: NodeFilter['granted']): Record<string, number> {
    const rows = granted ? this.grantedByStatusStmt.all({ granted: JSON.stringify(granted) }) : this.byStatusStmt.all();
    return Object.fromEntries((rows as { status: string; n: number }[]).map((row) => [row.status, row.n]));
  }

  /** Marks the node's desired configuration as changed; returns its new version. */
  bumpConfig(id: number): number {
    return (this.bumpStmt.get(id) as { config_version: number }).config_version;
  }

  agentTokenHash(id: number): Uint8Array | undefined {
    return (this.tokenStmt.get(id) as { agent_token_hash: Uint8Array } | undefined)?.agent_token_hash;
  }

  setAgentTokenHash(id: number, hash: Buffer): void {
    this.setTokenStmt.run(hash, id);
  }

  /**
   * Records the agent link's state: online with its version and the ids of the release keys it trusts (null: as
   * before), or offline with why.
   */
  setLink(
    id: number,
    status: NodeStatus,
    detail: string | null,
    agentVersion: string | null,
    at: string,
    releaseKeys: readonly string[] | null = null,
  ): void {
    const release_keys = releaseKeys && JSON.stringify(releaseKeys);
    this.linkStmt.run({ id, status, detail, agent_version: agentVersion, release_keys, at });
  }

  /**
   * For a master starting, before any agent links: nodes recorded online are offline until their agent links again
   * (returned, for their tunnels), and installs the last master left running are install_failed.
   */
  afterRestart(at: string): number[] {
    const interrupted = 'interrupted: the master stopped during the install; install again';
    this.interruptedStmt.run({ detail: interrupted, at, line: `[${at}] failed: ${interrupted}\n` });
    const unlinked = this.unlinkedStmt.all({ detail: 'the master restarted; waiting for the agent to link again' });
    return unlinked.map((row) => Number(row.id));
  }

  setStatusDetail(id: number, detail: string): void {
    this.detailStmt.run(detail, id);
  }

  /** Records what the node's agent said of the kernel path; the same again writes nothing. */
  setKernelPath(id: number, kernel: KernelPath): void {
    const json = JSON.stringify(kernel);
    this.kernelPathStmt.run(json, id, json);
  }

  /** Records what the node's agent's supervisor said it went back from (see FellBack). */
  setFellBack(id: number, fellBack: FellBack): void {
    this.fellBackStmt.run(JSON.stringify(fellBack), id);
  }

  /** Records that the node's agent was heard from at `at`. */
  seen(id: number, at: string): void {
    this.seenStmt.run(at, id);
  }

  installStarted(id: number, detail: string, at: string): void {
    this.installStartStmt.run(detail, at, id);
  }

  /** Appends to the install log (keeping its last INSTALL_LOG_BYTES) and shows `detail` as the node's status detail. */
  installProgress(id: number, detail: string, line: string): void {
    this.installLogStmt.run({ id, detail, line });
  }

  installFinished(id: number, status: NodeStatus, detail: string | null, at: string): void {
    this.installEndStmt.run({ id, status, detail, at });
  }

  sealedSecret(id: number): { auth: SshAuth; sealed: Uint8Array | null } | undefined {
    const row = this.secretStmt.get(id) as { ssh_auth: SshAuth; ssh_secret: Uint8Array | null } | undefined;
    return row && { auth: row.ssh_auth, sealed: row.ssh_secret };
  }
}
