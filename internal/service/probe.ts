// Diagnostics from a node: can it reach a rule's targets, or a host:port, and how fast? The node's agent tries each
// target as its relays would, under the same target restrictions as rules; bounded in count and time, and audited
// with what was found.

import { isTenant, reaches } from './grants.ts';
import type { ProbeResult } from '../domain/link.ts';
import { targetRefusal } from '../domain/rules.ts';
import { DomainError, notFound, validationFailed } from '../errors/errors.ts';
import { parseTarget } from '../schema/net.ts';
import { transact, type Committer, type Requester } from './write.ts';

/** How long a node tries each target (all at once). */
export const PROBE_TIMEOUT_MS = 3000;
/** How long the master waits for the node's answer beyond that. */
const ANSWER_GRACE_MS = 2000;

/**
 * Asks `nodeId` to try `targets` as its config lets rules dial them (`localTargets` false: as a tenant's rule, held
 * off what is local to it); throws `conflict` when the node is offline, `bad_gateway` when it did not answer.
 */
async function probeFrom(
  app: Committer,
  nodeId: number,
  protocol: 'tcp' | 'udp',
  targets: string[],
  localTargets = true,
) {
  const results: ProbeResult[] | null = await app.sync.probe(
    nodeId,
    { protocol, targets, timeout_ms: PROBE_TIMEOUT_MS, local_targets: localTargets },
    PROBE_TIMEOUT_MS + ANSWER_GRACE_MS,
  );
  if (results) return { node_id: nodeId, protocol, checked_at: app.timestamp(), results };
  if (!app.sync.isConnected(nodeId))
    throw new DomainError('conflict', `node ${nodeId} is offline: its agent must be linked to try anything`);
  throw new DomainError('bad_gateway', `node ${nodeId} did not answer within ${PROBE_TIMEOUT_MS + ANSWER_GRACE_MS} ms`);
}

/**
 * Has the node that dials rule `id`'s targets (its own, or through a tunnel the chosen exit) try each of them, and
 * audits what it found. Throws `not_found`, `conflict` (the node offline), `bad_gateway` (no answer).
 */
export async function checkTargets(app: Committer, requester: Requester, id: number) {
  const rule = app.store.rules.find(id);
  if (!rule || !reaches(requester.caller, rule.owner_id)) throw notFound('rule', id);
  // Through a tunnel, the exit node dials the targets: of several, the one the entry sends new connections to.
  const tunnel = rule.tunnel_id === null ? undefined : app.store.tunnels.find(rule.tunnel_id);
  const nodeId = tunnel ? (tunnel.chosen_exit_node_id ?? tunnel.exit_node_id) : rule.node_id;
  const protocol = rule.protocol === 'udp' ? 'udp' : 'tcp';
  // As the rule's config says it (see ForwardRule.local_targets): false only where it narrows the node's.
  const heldOff = app.targetPolicy().allowLocal && isTenant(app, requester.caller, rule.owner_id);
  const answer = await probeFrom(app, nodeId, protocol, rule.targets, !heldOff);
  await transact(app, requester, (change) =>
    change.audit({ action: 'rule.check', resource: 'rule', resource_id: id, changes: { after: answer } }),
  );
  return answer;
}

/**
 * Has node `id` try `target` as a rule's relay would (refused as a rule's target would be), and audits what it found.
 * Throws `not_found`, `validation_failed`, `conflict` (the node offline), `bad_gateway` (no answer).
 */
export async function probeTarget(
  app: Committer,
  requester: Requester,
  id: number,
  target: string,
  protocol: 'tcp' | 'udp',
) {
  const node = app.store.nodes.find(id);
  if (!node) throw notFound('node', id);
  const refusal = targetRefusal(parseTarget(target)!.host, node.host, app.targetPolicy());
  if (refusal) throw validationFailed([{ pointer: '#/target', detail: refusal }]);
  const answer = await probeFrom(app, id, protocol, [target]);
  await transact(app, requester, (change) =>
    change.audit({ action: 'node.probe', resource: 'node', resource_id: id, changes: { after: answer } }),
  );
  return answer;
}
