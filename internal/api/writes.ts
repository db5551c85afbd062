// Helpers for handlers that write: one transaction with its audit entries, notifying the
// sync hub only after the commit, and dry runs that do the same work and roll it back.

import type { ApiError } from '../http/problem.ts';
import type { FieldError } from '../schema/schema.ts';
import type { AuditInput } from '../store/audit.ts';
import type { App } from './app.ts';
import type { Ctx } from './route.ts';

/** Collects what a write did: audit entries are written at once, node changes announced after commit. */
export class Effects {
  readonly nodes = new Set<number>();

  constructor(
    private readonly app: App,
    private readonly ctx: Pick<Ctx<unknown, unknown>, 'actor'>,
  ) {}

  audit(entry: Omit<AuditInput, 'status'>): void {
    this.app.store.audit.record(this.ctx.actor, { ...entry, status: 'success' }, this.app.timestamp());
  }

  /** Runs `fn` so that a throw undoes only what `fn` did (see `Database.savepoint`). */
  attempt<T>(fn: () => T): T {
    const nodes = new Set(this.nodes);
    try {
      return this.app.store.db.savepoint(fn);
    } catch (error) {
      this.nodes.clear();
      for (const id of nodes) this.nodes.add(id);
      throw error;
    }
  }

  /** Marks a node's desired config as changed (bumps its version inside the transaction). */
  touchNode(nodeId: number): void {
    if (this.nodes.has(nodeId)) return;
    this.nodes.add(nodeId);
    this.app.store.nodes.bumpConfig(nodeId);
  }
}

class DryRun<T> {
  constructor(readonly result: T) {}
}

/**
 * Runs `fn` in one write transaction. With `dryRun`, everything is checked and done, then
 * rolled back, so a preview fails exactly where the real call would.
 */
export function transact<T>(app: App, ctx: Pick<Ctx<unknown, unknown>, 'actor'>, fn: (effects: Effects) => T, dryRun = false): T {
  const effects = new Effects(app, ctx);
  try {
    const result = app.store.write(() => {
      const value = fn(effects);
      if (dryRun) throw new DryRun(value);
      return value;
    });
    const nodes = [...effects.nodes];
    app.store.db.afterCommit(() => {
      for (const nodeId of nodes) app.sync.configChanged(nodeId);
    });
    return result;
  } catch (error) {
    if (error instanceof DryRun) return error.result as T;
    throw error;
  }
}

/**
 * An item's error as field errors under `prefix` (e.g. `#/rules/7`): its own field errors
 * re-rooted, or for a conflict the field that collided (the port, or the name).
 */
export function fieldErrorsUnder(prefix: string, error: ApiError): FieldError[] {
  if (error.options.errors) return error.options.errors.map((e) => ({ pointer: prefix + e.pointer.slice(1), detail: e.detail }));
  const extra = error.options.extra ?? {};
  const field = 'conflicting_rule_id' in extra || 'conflicting_tunnel_id' in extra ? '/listen_port' : 'conflicting_id' in extra ? '/name' : '';
  return [{ pointer: prefix + field, detail: error.detail }];
}
