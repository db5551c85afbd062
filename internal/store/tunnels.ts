// SQL for tunnels: an encrypted link from an entry node to an exit node, which listens on
// `listen_port` (claimed like a rule's port on the exit node).

import type { Database } from './database.ts';
import { unlessTaken } from './errors.ts';
import { PortStore } from './ports.ts';
import { portTaken } from './rules.ts';

export const tunnelStatuses = ['pending', 'up', 'down'] as const;
export type TunnelStatus = (typeof tunnelStatuses)[number];
export const transports = ['tls'] as const;
export type TunnelTransport = (typeof transports)[number];

export interface TunnelFields {
  name: string;
  entry_node_id: number;
  exit_node_id: number;
  listen_port: number;
  transport: TunnelTransport;
}

export interface Tunnel extends TunnelFields {
  id: number;
  status: TunnelStatus;
  version: number;
  created_at: string;
  updated_at: string;
}

export class TunnelStore {
  private readonly ports: PortStore;
  private readonly byId;
  private readonly byName;
  private readonly listStmt;
  private readonly insertStmt;
  private readonly updateStmt;
  private readonly deleteStmt;
  private readonly idsByNodeStmt;
  private readonly byStatusStmt;

  constructor(db: Database) {
    this.ports = new PortStore(db);
    this.byId = db.prepare('SELECT * FROM tunnels WHERE id = ?');
    this.byName = db.prepare('SELECT * FROM tunnels WHERE name = ?');
    this.listStmt = db.prepare(`SELECT * FROM tunnels
      WHERE id > :after
        AND (:node_id IS NULL OR entry_node_id = :node_id OR exit_node_id = :node_id)
        AND (:status IS NULL OR status = :status)
        AND (:q IS NULL OR instr(lower(name), lower(:q)) > 0)
      ORDER BY id LIMIT :limit`);
    this.insertStmt =
      db.prepare(`INSERT INTO tunnels (name, entry_node_id, exit_node_id, listen_port, transport, created_at,
        updated_at)
      VALUES (:name, :entry_node_id, :exit_node_id, :listen_port, :transport, :at, :at) RETURNING id`);
    this.updateStmt =
      db.prepare(`UPDATE tunnels SET name = :name, entry_node_id = :entry_node_id, exit_node_id = :exit_node_id,
        listen_port = :listen_port, transport = :transport, status = 'pending', version = version + 1, updated_at = :at
      WHERE id = :id`);
    this.deleteStmt = db.prepare('DELETE FROM tunnels WHERE id = ?');
    this.idsByNodeStmt = db.prepare('SELECT id FROM tunnels WHERE entry_node_id = ?1 OR exit_node_id = ?1 ORDER BY id');
    this.byStatusStmt = db.prepare('SELECT status, count(*) AS n FROM tunnels GROUP BY status');
  }

  find(id: number): Tunnel | undefined {
    return this.byId.get(id) as Tunnel | undefined;
  }

  findByName(name: string): Tunnel | undefined {
    return this.byName.get(name) as Tunnel | undefined;
  }

  list(filter: {
    afterId: number;
    limit: number;
    node_id: number | null;
    status: string | null;
    q: string | null;
  }): Tunnel[] {
    const { afterId, ...rest } = filter;
    return this.listStmt.all({ ...rest, after: afterId }) as unknown as Tunnel[];
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
    this.ports.claimForTunnel(id, fields.exit_node_id, fields.listen_port);
    return this.find(id)!;
  }

  /** Throws `conflict` when the name or the exit node's port is taken. */
  update(id: number, fields: TunnelFields, at: string): Tunnel {
    const holder = this.ports.holder(fields.exit_node_id, ['tcp'], fields.listen_port, { tunnel_id: id });
    if (holder) throw portTaken(holder, fields.listen_port);
    unlessTaken(
      `the tunnel name '${fields.name}'`,
      () => this.findByName(fields.name)?.id,
      () => this.updateStmt.run({ ...fields, id, at }),
    );
    this.ports.claimForTunnel(id, fields.exit_node_id, fields.listen_port);
    return this.find(id)!;
  }

  delete(id: number): void {
    this.deleteStmt.run(id);
  }

  idsOfNode(nodeId: number): number[] {
    return (this.idsByNodeStmt.all(nodeId) as { id: number }[]).map((row) => row.id);
  }

  countByStatus(): Record<string, number> {
    return Object.fromEntries(
      (this.byStatusStmt.all() as { status: string; n: number }[]).map((row) => [row.status, row.n]),
    );
  }
}
