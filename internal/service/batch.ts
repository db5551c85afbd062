// Batches: many items in one transaction, each answered on its own, in request order, never with a bare count; a dry
// run does the same work and rolls it back. Deletes and updates go item by item; creates are all or none. The
// batcher (a worker thread with a connection of its own) runs them, so the event loop answers live requests meanwhile.

import { DomainError, validationFailed } from '../errors/errors.ts';
import type { FieldError } from '../schema/schema.ts';
import { ruleFieldsOf, type RuleFields } from '../domain/rules.ts';
import { removeNode } from './nodes.ts';
import { insertRule, pushRules, removeRule, updateRule } from './rules.ts';
import { removeTunnel } from './tunnels.ts';
import {
  fieldErrorsUnder,
  writeInSteps,
  type Change,
  type Committer,
  type JobDone,
  type Requester,
  type WriteDeps,
  type WriteJob,
} from './write.ts';

export type Outcome =
  | 'deleted'
  | 'created'
  | 'updated'
  | 'applied'
  | 'pending'
  | 'failed'
  | 'not_found'
  | 'conflict'
  | 'invalid'
  | 'forbidden';

export interface ItemResult {
  id?: number | null;
  index?: number;
  outcome: Outcome;
  error?: { code: string; detail: string; errors?: FieldError[] };
}

const OUTCOME_OF: Partial<Record<string, Outcome>> = {
  not_found: 'not_found',
  conflict: 'conflict',
  precondition_failed: 'conflict',
  validation_failed: 'invalid',
  license_limit: 'invalid',
  insufficient_scope: 'forbidden',
  not_granted: 'forbidden',
};

/** An item's failure as its result; anything unexpected is not an item's fault and propagates. */
function failed(base: Omit<ItemResult, 'outcome'>, error: unknown): ItemResult {
  const outcome = error instanceof DomainError ? OUTCOME_OF[error.code] : undefined;
  if (!(error instanceof DomainError) || !outcome) throw error;
  const detail: ItemResult['error'] = { code: error.code, detail: error.detail };
  if (error.facts.errors) detail.errors = error.facts.errors;
  return { ...base, outcome, error: detail };
}

type PerItem = (app: WriteDeps, job: BatchJob, change: Change, id: number) => ItemResult;

/** A batch of deletes or updates by id, to run where the app's batcher runs it (`runBatch`). */
export interface BatchJob extends WriteJob {
  operation: 'deleteNodes' | 'deleteRules' | 'deleteTunnels' | 'updateRules' | 'createRules';
  /** Deletes and updates: the items, by id. */
  ids: number[];
  /** Deletes: also delete what depends on each item. */
  cascade: boolean;
  /** Updates: what to change in each rule. */
  changes: Partial<RuleFields>;
  /** Creates: the rules, all or none. */
  rules: RuleFields[];
}

function deleting(
  action: string,
  remove: (app: WriteDeps, job: BatchJob, change: Change, id: number) => void,
): PerItem {
  return (app, job, change, id) => {
    try {
      change.attempt(() => remove(app, job, change, id));
      return { id, outcome: 'deleted' };
    } catch (error) {
      const result = failed({ id }, error);
      if (result.outcome === 'forbidden') {
        const scope = (error as DomainError).facts.requiredScope;
        change.denied({
          action,
          resource: action.split('.')[0]!,
          resource_id: id,
          changes: { required_scope: scope },
        });
      }
      return result;
    }
  };
}

function updating(app: WriteDeps, job: BatchJob, change: Change, id: number): ItemResult {
  try {
    const current = app.store.rules.find(id);
    if (!current)
      return { id, outcome: 'not_found', error: { code: 'not_found', detail: `rule ${id} does not exist` } };
    change.attempt(() => updateRule(app, change, id, { ...ruleFieldsOf(current), ...job.changes }));
    return { id, outcome: 'updated' };
  } catch (error) {
    return failed({ id }, error);
  }
}

const perItem: Record<Exclude<BatchJob['operation'], 'createRules'>, PerItem> = {
  deleteNodes: deleting('node.delete', (app, job, change, id) => removeNode(app, change, id, job.cascade)),
  deleteRules: deleting('rule.delete', (app, _job, change, id) => removeRule(app, change, id)),
  deleteTunnels: deleting('tunnel.delete', (app, job, change, id) => removeTunnel(app, change, id, job.cascade)),
  updateRules: updating,
};

function answer(status: number, body: unknown, nodes: number[]): JobDone {
  return { status, json: Buffer.from(JSON.stringify(body)), nodes };
}

/** Runs a batch on `app`'s own connection, item by item in one transaction: the work of the batcher's worker thread. */
export async function runBatch(app: WriteDeps, job: BatchJob): Promise<JobDone> {
  if (job.operation === 'createRules') return createAll(app, job);
  const each = perItem[job.operation];
  const { result, nodes } = await writeInSteps(
    app,
    job.requester,
    (change, inSteps) => inSteps(job.ids, (id) => each(app, job, change, id)),
    job.dryRun,
  );
  return answer(200, { dry_run: job.dryRun, results: result }, nodes);
}

/** Creates the job's rules, all or none: any problem is a 422 with every item's result, and nothing is created. */
async function createAll(app: WriteDeps, job: BatchJob): Promise<JobDone> {
  const { result: results, nodes } = await writeInSteps(
    app,
    job.requester,
    async (change, inSteps) => {
      const errors: FieldError[] = [];
      const batchIndex = new Map<number, number>();
      const out: ItemResult[] = await inSteps(job.rules, (fields, index) => {
        try {
          const rule = change.attempt(() => insertRule(app, change, fields));
          batchIndex.set(rule.id, index);
          return { index, id: rule.id, outcome: 'created' as const };
        } catch (error) {
          const result = failed({ index, id: null }, error);
          if (error instanceof DomainError) {
            // A port taken by an earlier rule of this batch is named by its place here: it has no id for the caller.
            const held = error.facts.conflict?.kind === 'port' ? error.facts.conflict : undefined;
            const earlier = held?.ruleId != null ? batchIndex.get(held.ruleId) : undefined;
            const detail =
              held && earlier !== undefined
                ? `port ${held.port}/${held.protocol} on node ${held.nodeId} is taken by #/rules/${earlier}`
                : undefined;
            errors.push(...fieldErrorsUnder(`#/rules/${index}`, error).map((e) => (detail ? { ...e, detail } : e)));
          }
          return result;
        }
      });
      if (errors.length > 0) {
        const invalid = out.filter((r) => r.outcome !== 'created').length;
        const aborted = out.map((r) =>
          r.outcome === 'created'
            ? {
                index: r.index,
                id: null,
                outcome: 'invalid' as const,
                error: { code: 'aborted', detail: 'not created: other items failed' },
              }
            : r,
        );
        const failure = validationFailed(
          errors,
          `${invalid} of ${out.length} rules cannot be created; nothing was created`,
        );
        throw new DomainError(failure.code, failure.detail, { errors, data: { results: aborted } });
      }
      return out;
    },
    job.dryRun,
  );
  if (job.dryRun) return answer(200, { dry_run: true, results: results.map((r) => ({ ...r, id: null })) }, nodes);
  return answer(201, { dry_run: false, results }, nodes);
}

/**
 * Pushes the rules of `ids` their nodes' config and waits (sync_wait_seconds in all) for the nodes to acknowledge;
 * answers per rule: applied, pending, failed (with the node's error) or not_found.
 */
export async function syncEach(app: Committer, requester: Requester, ids: number[]): Promise<ItemResult[]> {
  const synced = await pushRules(app, requester, ids);
  return ids.map((id) => {
    const rule = synced.get(id);
    if (!rule) return { id, outcome: 'not_found', error: { code: 'not_found', detail: `rule ${id} does not exist` } };
    if (rule.sync.state === 'failed')
      return { id, outcome: 'failed', error: rule.sync.error ?? { code: 'failed', detail: 'the node gave no reason' } };
    return { id, outcome: rule.sync.state };
  });
}
