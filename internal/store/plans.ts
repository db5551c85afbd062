// Plans (domain/plans.ts): a row each, the lists and the allowance as JSON.

import type { Allowance, Plan, PlanFields } from '../domain/plans.ts';
import type { Database } from './database.ts';
import { unlessTaken } from './errors.ts';

interface PlanRow {
  id: number;
  name: string;
  node_ids: string;
  node_tags: string;
  port_ranges: string;
  max_rules: number | null;
  max_connections: number | null;
  bandwidth_limit: number | null;
  max_new_connections_per_second: number | null;
  traffic: string | null;
  version: number;
  created_at: string;
  updated_at: string;
}

function toPlan(row: PlanRow): Plan {
  return {
    id: row.id,
    name: row.name,
    node_ids: JSON.parse(row.node_ids) as number[],
    node_tags: JSON.parse(row.node_tags) as string[],
    port_ranges: JSON.parse(row.port_ranges) as string[],
    max_rules: row.max_rules,
    max_connections: row.max_connections,
    bandwidth_limit: row.bandwidth_limit,
    max_new_connections_per_second: row.max_new_connections_per_second,
    traffic: row.traffic === null ? null : (JSON.parse(row.traffic) as Allowance),
    version: row.version,
    created_at: row.created_at,
    updated_at: row.updated_at,
  };
}

function params(fields: PlanFields) {
  return {
    name: fields.name,
    node_ids: JSON.stringify(fields.node_ids),
    node_tags: JSON.stringify(fields.node_tags),
    port_ranges: JSON.stringify(fields.port_ranges),
    max_rules: fields.max_rules,
    max_connections: fields.max_connections,
    bandwidth_limit: fields.bandwidth_limit,
    max_new_connections_per_second: fields.max_new_connections_per_second,
    traffic: fields.traffic && JSON.stringify(fields.traffic),
  };
}

const COLUMNS = `id, name, node_ids, node_tags, port_ranges, max_rules, max_connections, bandwidth_limit,
  max_new_connections_per_second, traffic, version, created_at, updated_at`;

export class PlanStore {
  private readonly byId;
  private readonly byName;
  private readonly pageStmt;
  private readonly countStmt;
  private readonly insertStmt;
  private readonly updateStmt;
  private readonly deleteStmt;

  constructor(db: Database) {
    this.byId = db.prepare(`SELECT ${COLUMNS} FROM plans WHERE id = ?`);
    this.byName = db.prepare('SELECT id FROM plans WHERE name = ?');
    this.pageStmt = db.prepare(`SELECT ${COLUMNS} FROM plans WHERE id > ? ORDER BY id LIMIT ?`);
    this.countStmt = db.prepare('SELECT count(*) AS n FROM plans');
    this.insertStmt = db.prepare(`INSERT INTO plans (name, node_ids, node_tags, port_ranges, max_rules,
        max_connections, bandwidth_limit, max_new_connections_per_second, traffic, created_at, updated_at)
      VALUES (:name, :node_ids, :node_tags, :port_ranges, :max_rules, :max_connections, :bandwidth_limit,
        :max_new_connections_per_second, :traffic, :at, :at)
      RETURNING ${COLUMNS}`);
    this.updateStmt = db.prepare(`UPDATE plans SET name = :name, node_ids = :node_ids, node_tags = :node_tags,
        port_ranges = :port_ranges, max_rules = :max_rules, max_connections = :max_connections,
        bandwidth_limit = :bandwidth_limit, max_new_connections_per_second = :max_new_connections_per_second,
        traffic = :traffic, version = version + 1, updated_at = :at
      WHERE id = :id RETURNING ${COLUMNS}`);
    this.deleteStmt = db.prepare('DELETE FROM plans WHERE id = ?');
  }

  find(id: number): Plan | undefined {
    const row = this.byId.get(id) as PlanRow | undefined;
    return row && toPlan(row);
  }

  /** Up to `limit` + 1 plans after `afterId`, in id order (the one past the page says another follows). */
  page(afterId: number, limit: number): Plan[] {
    return (this.pageStmt.all(afterId, limit + 1) as unknown as PlanRow[]).map(toPlan);
  }

  count(): number {
    return Number((this.countStmt.get() as { n: number }).n);
  }

  /** Throws `conflict` when the name is taken. */
  insert(fields: PlanFields, at: string): Plan {
    return unlessTaken(
      `the plan name '${fields.name}'`,
      () => (this.byName.get(fields.name) as { id: number } | undefined)?.id,
      () => toPlan(this.insertStmt.get({ ...params(fields), at }) as unknown as PlanRow),
    );
  }

  /** Throws `conflict` when the name is another plan's. */
  update(id: number, fields: PlanFields, at: string): Plan {
    return unlessTaken(
      `the plan name '${fields.name}'`,
      () => (this.byName.get(fields.name) as { id: number } | undefined)?.id,
      () => toPlan(this.updateStmt.get({ ...params(fields), at, id }) as unknown as PlanRow),
    );
  }

  delete(id: number): void {
    this.deleteStmt.run(id);
  }
}
