// SQL for agent bundles: each version's bytes and the release key's signature of them, as uploaded.

import type { Database } from './database.ts';
import { unlessTaken } from './errors.ts';

export interface AgentBundle {
  id: number;
  version: string;
  sha256: string;
  size: number;
  /** The id of the release key that signed it. */
  key_id: string;
  created_at: string;
}

const COLUMNS = 'id, version, sha256, size, key_id, created_at';

export class BundleStore {
  private readonly listStmt;
  private readonly byId;
  private readonly byVersion;
  private readonly insertStmt;
  private readonly deleteStmt;
  private readonly bodyStmt;

  constructor(db: Database) {
    this.listStmt = db.prepare(`SELECT ${COLUMNS} FROM agent_bundles ORDER BY id`);
    this.byId = db.prepare(`SELECT ${COLUMNS} FROM agent_bundles WHERE id = ?`);
    this.byVersion = db.prepare(`SELECT ${COLUMNS} FROM agent_bundles WHERE version = ?`);
    this.insertStmt = db.prepare(`INSERT INTO agent_bundles (version, sha256, size, key_id, signature, body,
      created_at) VALUES (:version, :sha256, :size, :key_id, :signature, :body, :at) RETURNING ${COLUMNS}`);
    this.deleteStmt = db.prepare('DELETE FROM agent_bundles WHERE id = ?');
    this.bodyStmt = db.prepare('SELECT body, signature FROM agent_bundles WHERE id = ?');
  }

  /** Every bundle, without its bytes (the master keeps a few: MAX_BUNDLES). */
  list(): AgentBundle[] {
    return this.listStmt.all() as unknown as AgentBundle[];
  }

  find(id: number): AgentBundle | undefined {
    return this.byId.get(id) as AgentBundle | undefined;
  }

  findVersion(version: string): AgentBundle | undefined {
    return this.byVersion.get(version) as AgentBundle | undefined;
  }

  /** A bundle's bytes and its signature (JSON), for an agent to fetch. */
  contents(id: number): { body: Uint8Array; signature: string } | undefined {
    return this.bodyStmt.get(id) as { body: Uint8Array; signature: string } | undefined;
  }

  /** Inside a write. Throws `conflict` for a version there already. */
  insert(bundle: Omit<AgentBundle, 'id' | 'created_at'>, signature: string, body: Buffer, at: string): AgentBundle {
    return unlessTaken(
      `version ${bundle.version}`,
      () => this.findVersion(bundle.version)?.id,
      () => this.insertStmt.get({ ...bundle, signature, body, at }) as unknown as AgentBundle,
    );
  }

  delete(id: number): void {
    this.deleteStmt.run(id);
  }
}
