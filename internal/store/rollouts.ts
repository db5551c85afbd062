// SQL for rollouts: a bundle version taken to a set of nodes in waves, and where each of those nodes stands.

import type { Database } from './database.ts';
import type { RolloutNodeState, RolloutState } from '../domain/rollouts.ts';

/** A wave's size as given: a count of nodes, or a share of all of them ("25%"). */
export type WaveSize = number | string;

export interface Rollout {
  id: number;
  version: string;
  state: RolloutState;
  /** Why it halted (the node that failed its gate, and how), or was aborted; null otherwise. */
  reason: string | null;
  waves: WaveSize[];
  gate_seconds: number;
  /** How long, past its gate, a node's new agent must stay linked, applied and healthy before it passes. */
  soak_seconds: number;
  pause_seconds: number;
  /** The wave under way (0: the first), and when it began. */
  wave: number;
  wave_started_at: string;
  /** When every node of the wave under way passed its gate; the next starts pause_seconds later. */
  wave_passed_at: string | null;
  /** How many of its nodes stand where. */
  nodes: Record<RolloutNodeState, number>;
  revision: number;
  created_at: string;
  updated_at: string;
}

export interface RolloutNode {
  rollout_id: number;
  node_id: number;
  wave: number;
  state: RolloutNodeState;
  /** The agent version it ran when the rollout was made. */
  from_version: string | null;
  detail: string | null;
  /** How many of its rules had a target down when it was told to upgrade: its gate wants no more after. */
  unhealthy_before: number | null;
  started_at: string | null;
  /** When its new agent was first found linked, applied and healthy: its soak began (null before). */
  soaking_since: string | null;
  /** The link its soak began on (SyncHub.linkOf). */
  soak_link: number | null;
  finished_at: string | null;
}

interface RolloutRow extends Omit<Rollout, 'waves' | 'nodes'> {
  waves: string;
  nodes: string;
}

const COLUMNS = `id, version, state, reason, waves, gate_seconds, soak_seconds, pause_seconds, wave, wave_started_at,
  wave_passed_at,
  revision,
  created_at, updated_at, (SELECT json_object(
    'waiting', count(*) FILTER (WHERE state = 'waiting'), 'upgrading', count(*) FILTER (WHERE state = 'upgrading'),
    'passed', count(*) FILTER (WHERE state = 'passed'), 'failed', count(*) FILTER (WHERE state = 'failed'))
    FROM rollout_nodes WHERE rollout_id = rollouts.id) AS nodes`;
const NODE_COLUMNS =
  'rollout_id, node_id, wave, state, from_version, detail, unhealthy_before, started_at, soaking_since, soak_link, ' +
  'finished_at';

const toRollout = (row: RolloutRow): Rollout => ({
  ...row,
  waves: JSON.parse(row.waves) as WaveSize[],
  nodes: JSON.parse(row.nodes) as Rollout['nodes'],
});

export class RolloutStore {
  private readonly byId;
  private readonly pageStmt;
  private readonly countStmt;
  private readonly underWayStmt;
  private readonly insertStmt;
  private readonly insertNodeStmt;
  private readonly setStateStmt;
  private readonly setWaveStmt;
  private readonly nodePageStmt;
  private readonly waveNodesStmt;
  private readonly setNodeStmt;
  private readonly soakStmt;
  private readonly retryStmt;
  private readonly pruneStmt;
  private readonly upgradingStmt;
  private readonly unhealthyStmt;

  constructor(db: Database) {
    this.byId = db.prepare(`SELECT ${COLUMNS} FROM rollouts WHERE id = ?`);
    this.pageStmt = db.prepare(`SELECT ${COLUMNS} FROM rollouts WHERE id < ? ORDER BY id DESC LIMIT ?`);
    this.countStmt = db.prepare('SELECT count(*) AS n FROM rollouts');
    this.underWayStmt = db.prepare(`SELECT ${COLUMNS} FROM rollouts WHERE state IN ('running', 'paused')`);
    this.insertStmt = db.prepare(`INSERT INTO rollouts (version, state, waves, gate_seconds, soak_seconds,
      pause_seconds, wave_started_at, created_at, updated_at) VALUES (:version, 'running', :waves, :gate_seconds,
      :soak_seconds, :pause_seconds, :at, :at, :at) RETURNING id`);
    this.insertNodeStmt = db.prepare(`INSERT INTO rollout_nodes (rollout_id, node_id, wave, state, from_version)
      VALUES (?, ?, ?, 'waiting', (SELECT agent_version FROM nodes WHERE id = ?))`);
    this.setStateStmt = db.prepare(`UPDATE rollouts SET state = :state, reason = :reason, revision = revision + 1,
      updated_at = :at WHERE id = :id`);
    this.setWaveStmt = db.prepare(`UPDATE rollouts SET wave_started_at = CASE WHEN wave = :wave THEN wave_started_at
      ELSE :at END, wave = :wave, wave_passed_at = :passed, updated_at = :at WHERE id = :id`);
    this.nodePageStmt = db.prepare(`SELECT ${NODE_COLUMNS} FROM rollout_nodes WHERE rollout_id = ? AND node_id > ?
      ORDER BY node_id LIMIT ?`);
    this.waveNodesStmt = db.prepare(`SELECT ${NODE_COLUMNS} FROM rollout_nodes
      WHERE rollout_id = ? AND wave = ? AND state IN ('waiting', 'upgrading', 'failed')
      ORDER BY state = 'waiting', node_id LIMIT ?`);
    this.setNodeStmt = db.prepare(`UPDATE rollout_nodes SET state = :state, detail = :detail,
      unhealthy_before = coalesce(:unhealthy, unhealthy_before), started_at = coalesce(:started, started_at),
      soaking_since = CASE WHEN :started IS NULL THEN soaking_since END, finished_at = :finished
      WHERE rollout_id = :rollout AND node_id = :node`);
    this.soakStmt = db.prepare(
      'UPDATE rollout_nodes SET soaking_since = ?, soak_link = ? WHERE rollout_id = ? AND node_id = ?',
    );
    this.retryStmt = db.prepare(`UPDATE rollout_nodes SET state = 'waiting', detail = NULL, started_at = NULL,
      soaking_since = NULL, finished_at = NULL WHERE rollout_id = ? AND state = 'failed'`);
    this.pruneStmt = db.prepare(`DELETE FROM rollouts WHERE state NOT IN ('running', 'paused') AND id NOT IN
      (SELECT id FROM rollouts ORDER BY id DESC LIMIT ?)`);
    this.upgradingStmt = db.prepare(`SELECT rollout_id FROM rollout_nodes
      WHERE node_id = ? AND state = 'upgrading' AND rollout_id = ?`);
    this.unhealthyStmt = db.prepare(`SELECT count(*) AS n FROM rules
      WHERE node_id = ? AND json_extract(health, '$.status') IN ('degraded', 'down')`);
  }

  find(id: number): Rollout | undefined {
    const row = this.byId.get(id) as RolloutRow | undefined;
    return row && toRollout(row);
  }

  /** Newest first, ids below `beforeId`. */
  page(beforeId: number, limit: number): Rollout[] {
    return (this.pageStmt.all(beforeId, limit + 1) as unknown as RolloutRow[]).map(toRollout);
  }

  count(): number {
    return Number((this.countStmt.get() as { n: number }).n);
  }

  /** The rollout running or paused, if one is (there is at most one). */
  underWay(): Rollout | undefined {
    const row = this.underWayStmt.get() as RolloutRow | undefined;
    return row && toRollout(row);
  }

  /** Inside a write: a running rollout of `waves` (node ids, each wave's in order). Returns its id. */
  insert(
    fields: Pick<Rollout, 'version' | 'waves' | 'gate_seconds' | 'soak_seconds' | 'pause_seconds'>,
    waves: number[][],
    at: string,
  ): number {
    const { version, gate_seconds, soak_seconds, pause_seconds } = fields;
    const params = { version, gate_seconds, soak_seconds, pause_seconds, waves: JSON.stringify(fields.waves), at };
    const { id } = this.insertStmt.get(params) as { id: number };
    waves.forEach((nodes, wave) => {
      for (const node of nodes) this.insertNodeStmt.run(id, node, wave, node);
    });
    return Number(id);
  }

  setState(id: number, state: RolloutState, reason: string | null, at: string): void {
    this.setStateStmt.run({ id, state, reason, at });
  }

  setWave(id: number, wave: number, passed: string | null, at: string): void {
    this.setWaveStmt.run({ id, wave, passed, at });
  }

  /** Its nodes, by node id, after `afterNode`. */
  nodePage(id: number, afterNode: number, limit: number): RolloutNode[] {
    return this.nodePageStmt.all(id, afterNode, limit + 1) as unknown as RolloutNode[];
  }

  /** The nodes of `wave` not passed yet, at most `limit`: those upgrading or failed first, then by node id. */
  unfinished(id: number, wave: number, limit: number): RolloutNode[] {
    return this.waveNodesStmt.all(id, wave, limit) as unknown as RolloutNode[];
  }

  setNode(
    rolloutId: number,
    nodeId: number,
    change: Pick<RolloutNode, 'state' | 'detail'> & { unhealthy?: number; started?: string; finished: string | null },
  ): void {
    this.setNodeStmt.run({
      rollout: rolloutId,
      node: nodeId,
      state: change.state,
      detail: change.detail,
      unhealthy: change.unhealthy ?? null,
      started: change.started ?? null,
      finished: change.finished,
    });
  }

  /** Inside a write: the node's new agent passed its gate at `at` on link `link`, and soaks from then on. */
  startSoak(rolloutId: number, nodeId: number, at: string, link: number): void {
    this.soakStmt.run(at, link, rolloutId, nodeId);
  }

  /** Its failed nodes wait to be tried again (a halted rollout resumed). */
  retryFailed(id: number): void {
    this.retryStmt.run(id);
  }

  /** Whether the node is upgrading in rollout `rolloutId`. */
  isUpgrading(nodeId: number, rolloutId: number): boolean {
    return this.upgradingStmt.get(nodeId, rolloutId) !== undefined;
  }

  /** How many of the node's rules have a checked target down (degraded or down). */
  unhealthyRules(nodeId: number): number {
    return Number((this.unhealthyStmt.get(nodeId) as { n: number }).n);
  }

  /** Deletes finished rollouts but the newest `kept`. */
  prune(kept: number): number {
    return Number(this.pruneStmt.run(kept).changes);
  }
}
