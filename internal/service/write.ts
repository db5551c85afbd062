// The write path: one transaction with its audit entries (and a request's Idempotency-Key marked used), the nodes
// whose config it changed told only after the commit, and dry runs that do the same work and roll it back. Every
// operation of the service layer writes through here, whoever asks: a request, a worker thread's job, the master's
// own clock.

import { grants, type Scope } from '../auth/scopes.ts';
import type { TargetPolicy } from '../domain/rules.ts';
import { DomainError, validationFailed } from '../errors/errors.ts';
import type { LicenseView } from '../license/license.ts';
import type { MasterMetrics } from '../metrics/metrics.ts';
import type { FieldError } from '../schema/schema.ts';
import type { Settings } from '../settings/settings.ts';
import type { Actor, AuditInput } from '../store/audit.ts';
import type { SecretBox } from '../crypto/box.ts';
import type { IdempotencySlot } from '../store/idempotency.ts';
import type { Store } from '../store/store.ts';
import type { Role } from '../auth/principal.ts';
import type { SyncHub } from '../sync/hub.ts';
import { WritesBusy } from '../errors/storage.ts';

type AuditEntryInput = Omit<AuditInput, 'status' | 'action'> & { action?: string };

/**
 * What changed between two versions of a record, over `keys`: only the keys that differ,
 * before and after, as the audit log shows an update.
 */
export function diff<T>(before: T, after: T, keys: readonly (keyof T)[]): { before: Partial<T>; after: Partial<T> } {
  const changed = keys.filter((key) => JSON.stringify(before[key]) !== JSON.stringify(after[key]));
  return {
    before: Object.fromEntries(changed.map((key) => [key, before[key]])) as Partial<T>,
    after: Object.fromEntries(changed.map((key) => [key, after[key]])) as Partial<T>,
  };
}

/**
 * Thrown out of an item that failed after writing while a bulk write ran its items without
 * savepoints (`Change` with `itemsTogether`): the whole work is redone with one savepoint per item.
 */
class RedoItemByItem extends Error {}

/** What every write needs: the store, and the master's clock as stored (see WriteDeps.timestamp). */
export type WriteBase = Pick<WriteDeps, 'store' | 'timestamp'>;

/**
 * What an operation writes with: the store, the key that seals secrets, the master's clock and the policies in force.
 * Enough to run in a worker thread (an import), on a connection of its own, where there is no sync hub or agent link.
 */
export interface WriteDeps {
  store: Store;
  box: SecretBox;
  /** The master's clock as stored (RFC 3339, seconds): what every row and audit entry of the write is stamped with. */
  timestamp(): string;
  licenseView(): LicenseView;
  /** Which targets operators' rules may have now (a tenant's: see ownerPolicy). */
  targetPolicy(): TargetPolicy;
  /** Where alert channels may send now. */
  channelPolicy(): TargetPolicy;
}

/** What the master adds to commit writes itself: how long a write may wait its turn, whom to tell, what to count. */
export interface Committer extends WriteDeps {
  settings: Settings;
  sync: SyncHub;
  metrics: MasterMetrics;
}

/** One change a write made, as audited. */
export interface Changed {
  action: string;
  resource: string;
  resource_id: number | null;
}

/** What a write's mark keeps of what it changed, at most. */
const MAX_CHANGED = 100;

/** Ids in order as spans of consecutive ones, [first, last]. */
export function spansOf(ids: readonly number[]): [number, number][] {
  const spans: [number, number][] = [];
  for (const id of ids) {
    const last = spans.at(-1);
    if (last && id === last[1] + 1) last[1] = id;
    else spans.push([id, id]);
  }
  return spans;
}

/** Collects what a write did: audit entries are written at once, node changes announced after commit. */
export class Change {
  readonly nodes = new Set<number>();
  /** What was done, as audited: what a retry with the request's Idempotency-Key is told if its answer was lost. */
  readonly done: Changed[] = [];
  /** With `createsAsOne`: what was created, kept for `auditCreates`, in order. */
  private readonly created: { action: string; resource: string; id: number }[] = [];

  constructor(
    private readonly app: WriteBase,
    private readonly requester: Requester,
    /**
     * `attempt` runs without a savepoint: a domain error met after the attempt wrote something means
     * RedoItemByItem.
     */
    readonly itemsTogether = false,
    /** Creations are not audited one by one but, by `auditCreates`, as one entry per kind (an import's). */
    private readonly createsAsOne = false,
  ) {}

  /**
   * With `createsAsOne`: audits what was created as one entry per kind of resource (its action, resource_id null, the
   * count and spans of ids in `changes`), which the audit log lists for each id it names.
   */
  auditCreates(): void {
    const kinds = new Map<string, { action: string; ids: number[] }>();
    for (const { action, resource, id } of this.created) {
      const kind = kinds.get(resource) ?? { action, ids: [] };
      kind.ids.push(id);
      kinds.set(resource, kind);
    }
    for (const [resource, { action, ids }] of kinds) {
      const spans = spansOf(ids);
      const changes = { created: ids.length, ids: spans };
      this.app.store.audit.recordSpanning(
        this.requester.actor,
        { action, resource, resource_id: null, status: 'success', changes },
        spans,
        this.app.timestamp(),
      );
    }
    this.created.length = 0;
  }

  /** Records what was done; the action is the route's unless the entry names another (a cascade's). */
  audit(entry: AuditEntryInput): void {
    this.auditAll([entry]);
  }

  /** `audit` for many entries, in order. */
  auditAll(entries: readonly AuditEntryInput[]): void {
    const done = entries.map((entry) => ({ action: this.actionOf(entry), ...entry, status: 'success' as const }));
    const one = (entry: (typeof done)[number]) =>
      this.createsAsOne && entry.action.endsWith('.create') && typeof entry.resource_id === 'number';
    for (const { action, resource, resource_id } of done.filter(one))
      this.created.push({ action, resource, id: resource_id! });
    const alone = this.createsAsOne ? done.filter((entry) => !one(entry)) : done;
    if (alone.length > 0) this.app.store.audit.recordAll(this.requester.actor, alone, this.app.timestamp());
    for (const { action, resource, resource_id } of done.slice(0, MAX_CHANGED - this.done.length))
      this.done.push({ action, resource, resource_id: resource_id ?? null });
  }

  /** Records an attempt that failed on its own terms (a wrong password). */
  failed(entry: AuditEntryInput): void {
    this.app.store.audit.record(
      this.requester.actor,
      { action: this.actionOf(entry), ...entry, status: 'failed' },
      this.app.timestamp(),
    );
  }

  /** Records an attempt the caller's scopes did not allow (after the attempt's own changes are undone). */
  denied(entry: AuditEntryInput): void {
    this.app.store.audit.record(
      this.requester.actor,
      { action: this.actionOf(entry), ...entry, status: 'denied' },
      this.app.timestamp(),
    );
  }

  private actionOf(entry: AuditEntryInput): string {
    const action = entry.action ?? this.requester.action;
    if (!action) throw new Error('an audit entry needs an action, and this route declares none');
    return action;
  }

  /**
   * For a side effect beyond the route's own scope (a cascade, say): throws
   * `insufficient_scope` naming `scope` unless the caller holds it.
   */
  requireScope(scope: Scope, because: string): void {
    if (!grants(this.requester.caller.scopes, scope)) throw missingScope(scope, because);
  }

  /** Who the write is for. */
  get caller(): Caller {
    return this.requester.caller;
  }

  /**
   * Who owns what is written with `ownerId` (a rule's or tunnel's owner_id as given; `current`, its owner now, for a
   * change): null keeps the owner, or makes the caller the owner of what is new. Giving it to another user needs
   * users:write. Throws `insufficient_scope`, and `validation_failed` for a user that does not exist.
   */
  ownerFor(ownerId: number | null, current: number | null): number {
    const owner = ownerId ?? current ?? this.requester.caller.userId;
    if (owner === (current ?? this.requester.caller.userId)) return owner;
    this.requireScope('users:write', `owner_id gives it to user ${owner}`);
    if (!this.app.store.users.find(owner))
      throw validationFailed([{ pointer: '#/owner_id', detail: `user ${owner} does not exist` }]);
    return owner;
  }

  /** Runs one item's `fn` so that a throw undoes only what `fn` did (see `Database.savepoint`). */
  attempt<T>(fn: () => T): T {
    return this.itemsTogether ? this.withoutSavepoint(fn, true) : this.inSavepoint(fn);
  }

  /**
   * `attempt` for the work of several items at once: while items run without savepoints, any domain error means
   * RedoItemByItem, since only one by one can it be told whose it is.
   */
  attemptTogether<T>(fn: () => T): T {
    return this.itemsTogether ? this.withoutSavepoint(fn, false) : this.inSavepoint(fn);
  }

  private inSavepoint<T>(fn: () => T): T {
    // Touched nodes and what was done only ever grow, in order: what `fn` added is what came after `before`.
    const before = this.nodes.size;
    const done = this.done.length;
    const created = this.created.length;
    try {
      return this.app.store.db.savepoint(fn);
    } catch (error) {
      for (const id of [...this.nodes].slice(before)) this.nodes.delete(id);
      this.done.length = done;
      this.created.length = created;
      throw error;
    }
  }

  private withoutSavepoint<T>(fn: () => T, oneItem: boolean): T {
    const { db } = this.app.store;
    const before = db.changeStatementsRun;
    try {
      return fn();
    } catch (error) {
      if (!(error instanceof DomainError)) throw error;
      // One item refused before it wrote anything (a missing id, say) fails alone, with nothing to undo.
      if (oneItem && db.changeStatementsRun === before) throw error;
      throw new RedoItemByItem();
    }
  }

  /** Marks a node's desired config as changed (bumps its version inside the transaction). */
  touchNode(nodeId: number): void {
    if (this.nodes.has(nodeId)) return;
    this.nodes.add(nodeId);
    this.app.store.nodes.bumpConfig(nodeId);
  }
}

/** Who a write is for: what their scopes allow, and as a tenant what they own and their plan grants. */
export interface Caller {
  readonly scopes: readonly Scope[];
  readonly userId: number;
  readonly role: Role;
  readonly planId: number | null;
}

/** Who asks for a write: who acts, with which scopes, the audit action, and the Idempotency-Key it marks used. */
export interface Requester {
  actor: Actor;
  /** Whose scopes side change are checked against; the master acting on its own has none to read. */
  readonly caller: Caller;
  /** The audit action entries record unless they name another. */
  action?: string;
  idempotency?: IdempotencySlot;
}

/** The same request's writes, recorded as done by `actor` (a login, before and after its caller is known). */
export function actingAs(requester: Requester, actor: Actor): Requester {
  return {
    actor,
    action: requester.action,
    idempotency: requester.idempotency,
    get caller() {
      return requester.caller;
    },
  };
}

/** The 403 for a side effect that needs `scope`; `required_scope` names it for scripts. */
export function missingScope(scope: Scope, because: string): DomainError {
  return new DomainError('insufficient_scope', `${because}, which needs the scope ${scope}`, { requiredScope: scope });
}

class DryRun<T> {
  constructor(readonly result: T) {}
}

/**
 * Runs `fn` in one write transaction, in its turn behind an import or batch being written (for write_wait_seconds at
 * most: see `Database.writeInTurn`), and resolves once it is committed; then the nodes whose config it changed are
 * told. The request's Idempotency-Key, if any, is marked as
 * used in the same transaction, so a retry never does the change twice. With `dryRun`, everything is checked and
 * done, then rolled back, so a preview fails exactly where the real call would.
 */
export async function transact<T>(
  app: Committer,
  requester: Requester,
  fn: (change: Change) => T,
  dryRun = false,
): Promise<T> {
  const change = new Change(app, requester);
  try {
    const result = await app.store.db.writeInTurn(
      () => {
        const value = fn(change);
        if (dryRun) throw new DryRun(value);
        reserveReplay(app, requester, change.done);
        return value;
      },
      app.settings.get('write_wait_seconds') * 1000,
    );
    for (const nodeId of change.nodes) app.sync.configChanged(nodeId);
    return result;
  } catch (error) {
    if (error instanceof DryRun) return error.result as T;
    if (error instanceof WritesBusy) app.metrics.writesRefusedBusy.inc();
    throw error;
  }
}

/**
 * `transact` for what the master writes at once on its own behalf (an agent's report): one write in the open
 * transaction, for a caller that knows writes are let through (see Database.whenWritable); the nodes whose config it
 * changed are told once it is committed.
 */
export function writeNow<T>(
  app: WriteBase & { sync: Pick<SyncHub, 'configChanged'> },
  requester: Requester,
  fn: (change: Change) => T,
): T {
  const change = new Change(app, requester);
  const result = app.store.write(() => fn(change));
  if (change.nodes.size > 0)
    app.store.db.afterCommit(() => {
      for (const nodeId of change.nodes) app.sync.configChanged(nodeId);
    });
  return result;
}

/**
 * Inside a write: marks the request's Idempotency-Key as used by a committed change, with what it changed, in the
 * change's own transaction (see IdempotencyStore.reserve): a master that stops before it keeps the answer still knows.
 */
function reserveReplay(app: WriteDeps, requester: Requester, done: readonly Changed[]): void {
  if (requester.idempotency) app.store.idempotency.reserve(requester.idempotency, app.timestamp(), done);
}

/** Maps items one by one, letting the API answer between them once a turn has run long enough. */
export type InSteps = <T, R>(items: readonly T[], fn: (item: T, index: number) => R) => Promise<R[]>;

/**
 * `transact` for bulk work, run where nothing waits on the event loop for it (a worker thread's connection): one
 * transaction (`Database.longWrite`) in which `fn` goes through its items with `inSteps` and awaits nothing else;
 * nobody sees any of it until it is all committed, and a dry run rolls it all back. Returns `fn`'s result and the
 * nodes whose config changed, for the caller to announce once committed.
 *
 * Items first run without a savepoint each: in SQLite a savepoint copies every page an item
 * touches, a tenth of an import's time. Should an item fail, which fails the whole call, all
 * is undone and redone item by item, so that every item's outcome is reported as if alone.
 */
export async function writeInSteps<T>(
  app: WriteDeps,
  requester: Requester,
  fn: (change: Change, inSteps: InSteps) => Promise<T>,
  dryRun = false,
  createsAsOne = false,
): Promise<{ result: T; nodes: number[] }> {
  let change = new Change(app, requester, true, createsAsOne);
  const result = await app.store.db.longWrite(
    async (step, restart) => {
      const inSteps: InSteps = async (items, each) => {
        const results = [];
        for (const [index, item] of items.entries()) {
          results.push(each(item, index));
          const turnEnds = step();
          if (turnEnds) await turnEnds;
        }
        return results;
      };
      let result: T;
      try {
        result = await fn(change, inSteps);
      } catch (error) {
        if (!(error instanceof RedoItemByItem)) throw error;
        restart();
        change = new Change(app, requester, false, createsAsOne);
        result = await fn(change, inSteps);
      }
      change.auditCreates();
      if (!dryRun) reserveReplay(app, requester, change.done);
      return result;
    },
    { commit: !dryRun },
  );
  return { result, nodes: dryRun ? [] : [...change.nodes] };
}

/** A write run on another connection, a worker thread's: who asks, and the time and license it runs under. */
export interface WriteJob {
  requester: Requester;
  dryRun: boolean;
  /** The time every row and audit entry of the job is stamped with: it lands as one. */
  timestamp: string;
  license: LicenseView;
  targets: TargetPolicy;
  channels: TargetPolicy;
  /** Whether standbys follow the master: the job's connection records what it commits for them (see holdWrites). */
  recordChanges?: boolean;
}

/**
 * A job written: its response (status, and body as JSON encoded), the nodes whose config it changed, and with
 * `recordChanges` what it committed as one changeset (null: too large to carry, standbys seed anew).
 */
export interface JobDone {
  status: number;
  json: Buffer;
  nodes: number[];
  changes?: Uint8Array | null;
}

/** A job committed, as its worker answers: `finished` resolves once other writes may go on. */
export interface JobCommitted extends JobDone {
  finished: Promise<void>;
}

/**
 * Answers with what `run` committed of `job` on another connection. Other writes wait meanwhile (that connection holds
 * SQLite's write lock), and until it has finished; then the nodes whose config it changed are told, and standbys what
 * it committed.
 */
export async function committedElsewhere<Job extends WriteJob>(
  app: Committer,
  job: Job,
  run: (job: Job) => Promise<JobCommitted>,
): Promise<{ status: number; json: Buffer }> {
  const done = await app.store.db.holdWrites(
    () => run({ ...job, recordChanges: app.store.db.recording }),
    (committed) => committed.finished,
    (committed) => committed.changes ?? null,
  );
  for (const nodeId of done.nodes) app.sync.configChanged(nodeId);
  return { status: done.status, json: done.json };
}

/**
 * An item's error as field errors under `prefix` (e.g. `#/rules/7`): its own field errors
 * re-rooted, or for a conflict the field that collided (the port, or the name).
 */
export function fieldErrorsUnder(prefix: string, error: DomainError): FieldError[] {
  if (error.facts.errors)
    return error.facts.errors.map((e) => ({ pointer: prefix + e.pointer.slice(1), detail: e.detail }));
  const field = { port: '/listen_port', name: '/name', none: '' }[error.facts.conflict?.kind ?? 'none'];
  return [{ pointer: prefix + field, detail: error.detail }];
}

/**
 * Audits, in the next write's turn, an attempt `actor` was refused for its scopes (`changes` says which): outside any
 * transaction of the attempt's own, which wrote nothing.
 */
export function auditDenied(
  app: WriteDeps,
  actor: Actor,
  action: string,
  resourceId: number | null,
  changes: Record<string, unknown>,
): void {
  const at = app.timestamp();
  app.store.db.whenWritable(() =>
    app.store.write(() =>
      app.store.audit.record(
        actor,
        { action, resource: action.split('.')[0]!, resource_id: resourceId, status: 'denied', changes },
        at,
      ),
    ),
  );
}
