// What a derivation is made of (see derived.ts): a leaf module, so that the stores defining them import no installer.

export interface Trigger {
  name: string;
  /** The whole CREATE TRIGGER statement, as sqlite_master keeps it. */
  sql: string;
}

/** Triggers that keep one thing, and how to make that thing anew from the tables when they change. */
export interface Derivation {
  name: string;
  triggers: readonly Trigger[];
  /** Rebuilds what the triggers keep, from the tables (none: nothing to rebuild, as for a journal). */
  rebuild?: string;
  /**
   * The tables it writes, when what it writes follows from the rows alone (no clock, no sequence): a standby's copy
   * keeps its triggers and derives them itself from the changes it takes, which need not carry them (replication.ts).
   */
  derivedOnCopies?: readonly string[];
}

/** The trigger `name` whose statement goes on with `definition` (`AFTER INSERT ON t BEGIN ... END`). */
export function trigger(name: string, definition: string): Trigger {
  return { name, sql: `CREATE TRIGGER ${name} ${definition}` };
}
