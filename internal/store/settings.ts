// SQL for settings: one row per key that differs from its default, the value as JSON.

import type { Database } from './database.ts';

export class SettingsStore {
  private readonly allStmt;
  private readonly putStmt;
  private readonly removeStmt;

  constructor(db: Database) {
    this.allStmt = db.prepare('SELECT key, value FROM settings');
    this.putStmt = db.prepare(
      'INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value',
    );
    this.removeStmt = db.prepare('DELETE FROM settings WHERE key = ?');
  }

  all(): Record<string, unknown> {
    const rows = this.allStmt.all() as { key: string; value: string }[];
    return Object.fromEntries(rows.map((row) => [row.key, JSON.parse(row.value)]));
  }

  put(key: string, value: unknown): void {
    this.putStmt.run(key, JSON.stringify(value));
  }

  remove(key: string): void {
    this.removeStmt.run(key);
  }
}
