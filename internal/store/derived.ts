// What triggers keep: data derived from the tables (tallies, an index of names, the event journal, port claims,
// tags), each defined once, beside the TypeScript it mirrors, and installed whenever the master's
// database opens.
// Migrations make tables and move data; they no longer carry trigger bodies. A definition whose text differs from the
// trigger installed (or one not installed yet) replaces it, and what it keeps is rebuilt from the tables in the same
// transaction, so no row shows what an older definition made of it.
//
// Triggers stamp what they write with the master's clock, `app_time()`, a function every connection of ours defines
// (Database does): one change, one time, in the audit log and the journal alike. A connection that writes these
// tables without it (a sqlite3 shell) is refused with "no such function: app_time".

import { eventDerivations } from './events.ts';
import { nodeTagDerivation, ruleTagDerivation } from './tag-index.ts';
import { portClaimDerivation } from './ports.ts';
import { ruleDerivations } from './rule-view.ts';
import { vitalsDerivations } from './vitals.ts';
import { tunnelPathDerivations } from './tunnel-paths.ts';
import type { Derivation, Trigger } from './trigger.ts';

/** Every derivation, in the order they are installed. */
export function derivations(): readonly Derivation[] {
  return [
    ...ruleDerivations,
    ...eventDerivations,
    ...vitalsDerivations,
    ...tunnelPathDerivations,
    nodeTagDerivation,
    ruleTagDerivation,
    portClaimDerivation,
  ];
}

/** What installing found: the derivations it (re)installed and rebuilt, and the triggers it dropped as unknown. */
export interface Installed {
  replaced: string[];
  dropped: string[];
}

interface Connection {
  exec(sql: string): void;
  prepare(sql: string): { all(...params: never[]): unknown[] };
}

/** Inside a write transaction on `db`: drops every trigger (a migration that rebuilds a table runs without them). */
export function dropTriggers(db: Connection): void {
  const rows = db.prepare("SELECT name FROM sqlite_master WHERE type = 'trigger'").all() as { name: string }[];
  for (const { name } of rows) db.exec(`DROP TRIGGER ${name}`);
}

/**
 * Inside a write transaction on `db`: makes the database's triggers exactly `wanted`, replacing any whose text differs
 * (and rebuilding what it keeps), creating those missing, dropping those no definition names.
 */
export function installDerived(db: Connection, wanted: readonly Derivation[] = derivations()): Installed {
  const rows = db.prepare("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").all() as Trigger[];
  const installed = new Map(rows.map((row) => [row.name, row.sql]));
  const names = new Set(wanted.flatMap((d) => d.triggers.map((t) => t.name)));
  const dropped = [...installed.keys()].filter((name) => !names.has(name));
  for (const name of dropped) db.exec(`DROP TRIGGER ${name}`);
  const replaced: string[] = [];
  for (const derivation of wanted) {
    if (derivation.triggers.every((t) => installed.get(t.name) === t.sql)) continue;
    for (const t of derivation.triggers) {
      db.exec(`DROP TRIGGER IF EXISTS ${t.name}`);
      db.exec(t.sql);
    }
    if (derivation.rebuild) db.exec(derivation.rebuild);
    replaced.push(derivation.name);
  }
  return { replaced, dropped };
}
