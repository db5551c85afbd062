// Agent bundles' operations: the master keeps the bundles it may hand its agents, each verified against the release
// keys it was given when uploaded (agents verify again against their own before they run one).

import type { KeyObject } from 'node:crypto';
import { DomainError, notFound, validationFailed } from '../errors/errors.ts';
import { BundleRefused, verifyBundle, type BundleSignature } from '../release/signature.ts';
import type { AgentBundle } from '../store/bundles.ts';
import { checkIfMatch } from './etag.ts';
import type { Change, WriteDeps } from './write.ts';

/** How many bundles the master keeps (each is a few hundred KiB in the database, and in every backup). */
export const MAX_BUNDLES = 10;

/** Inside a transaction: keeps `bundle` once its signature verifies. Throws `conflict`, `validation_failed`. */
export function addBundle(
  app: WriteDeps,
  change: Change,
  bundle: Buffer,
  signature: BundleSignature,
  trusted: readonly KeyObject[],
): AgentBundle {
  if (trusted.length === 0)
    throw new DomainError(
      'conflict',
      'this master has no release key to verify bundles with: start it with --release-key',
    );
  let version: string;
  try {
    version = verifyBundle(bundle, signature, trusted);
  } catch (error) {
    if (!(error instanceof BundleRefused)) throw error;
    throw validationFailed([{ pointer: '#/signature', detail: `the bundle is refused: ${error.message}` }]);
  }
  if (app.store.bundles.list().length >= MAX_BUNDLES)
    throw new DomainError('conflict', `the master keeps at most ${MAX_BUNDLES} bundles: delete one first`);
  const facts = { version, sha256: signature.sha256, size: bundle.length, key_id: signature.key };
  const added = app.store.bundles.insert(facts, JSON.stringify(signature), bundle, app.timestamp());
  change.audit({ action: 'bundle.create', resource: 'bundle', resource_id: added.id, changes: { after: facts } });
  return added;
}

/** Inside a transaction. Throws `not_found`, `precondition_failed` (a bundle's ETag is its one version, 1). */
export function removeBundle(app: WriteDeps, change: Change, id: number, ifMatch?: string): void {
  const current = app.store.bundles.find(id);
  if (!current) throw notFound('bundle', id);
  checkIfMatch(ifMatch, 1);
  const underWay = app.store.rollouts.underWay();
  if (underWay?.version === current.version)
    throw new DomainError('conflict', `rollout ${underWay.id} is taking ${current.version} to nodes: abort it first`);
  app.store.bundles.delete(id);
  change.audit({ action: 'bundle.delete', resource: 'bundle', resource_id: id, changes: { before: current } });
}
