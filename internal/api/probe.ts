// Diagnostics from a node: can it reach a rule's targets, or a host:port, and how fast? The node's agent tries each
// target as its relays would (a TCP connect; for UDP a datagram, and whether anything or an ICMP error comes back),
// under the same target restrictions as rules, and the master answers what it said. Bounded in count and time, and
// audited with what was found.

import { DomainError, validationFailed, notFound } from '../errors/errors.ts';
import { MAX_PROBE_TARGETS, probeProtocols, type ProbeResult } from '../domain/link.ts';
import { targetRefusal } from '../domain/rules.ts';
import { parseTarget, target } from '../schema/net.ts';
import { object, oneOf, optional } from '../schema/schema.ts';
import type { App } from './app.ts';
import { record } from './common.ts';
import { type Ctx, idParam, ok, operation, operations, type Reply } from './route.ts';
import { transact } from '../service/write.ts';

/** How long a node tries each target (all at once). */
const PROBE_TIMEOUT_MS = 3000;
/** How long the master waits for the node's answer beyond that. */
const ANSWER_GRACE_MS = 2000;

const probeSchema = record(
  'ProbeAnswer',
  {
    node_id: { type: 'integer', description: "The node that tried: the rule's own, or its tunnel's exit." },
    protocol: { type: 'string', enum: [...probeProtocols] },
    checked_at: { type: 'string', format: 'date-time' },
    results: {
      type: 'array',
      maxItems: MAX_PROBE_TARGETS,
      items: {
        type: 'object',
        required: ['target', 'reachable', 'ms', 'error'],
        properties: {
          target: { type: 'string' },
          reachable: {
            type: ['boolean', 'null'],
            description: 'null: a UDP target that sent nothing back (UDP cannot tell silence from loss).',
          },
          ms: { type: ['integer', 'null'], description: 'TCP: the connect; UDP: until the answer.' },
          error: {
            type: ['string', 'null'],
            description: 'Why not: an error code (ECONNREFUSED, EHOSTUNREACH, ENOTFOUND), timeout, no answer.',
          },
        },
        additionalProperties: false,
      },
    },
  },
  'What the node found, a result per target in order.',
);

/** Asks `nodeId` to try `targets`; throws `conflict` when the node is offline, `bad_gateway` when it did not answer. */
async function probeFrom(app: App, nodeId: number, protocol: 'tcp' | 'udp', targets: string[]) {
  const results: ProbeResult[] | null = await app.sync.probe(
    nodeId,
    { protocol, targets, timeout_ms: PROBE_TIMEOUT_MS },
    PROBE_TIMEOUT_MS + ANSWER_GRACE_MS,
  );
  if (results) return { node_id: nodeId, protocol, checked_at: app.timestamp(), results };
  if (!app.sync.isConnected(nodeId))
    throw new DomainError('conflict', `node ${nodeId} is offline: its agent must be linked to try anything`);
  throw new DomainError('bad_gateway', `node ${nodeId} did not answer within ${PROBE_TIMEOUT_MS + ANSWER_GRACE_MS} ms`);
}

async function checkRule(ctx: Ctx<undefined, {}>): Promise<Reply> {
  const id = idParam(ctx);
  const rule = ctx.app.store.rules.find(id);
  if (!rule) throw notFound('rule', id);
  // Through a tunnel, the exit node dials the targets.
  const nodeId =
    rule.tunnel_id === null ? rule.node_id : (ctx.app.store.tunnels.find(rule.tunnel_id)?.exit_node_id ?? rule.node_id);
  const answer = await probeFrom(ctx.app, nodeId, rule.protocol === 'udp' ? 'udp' : 'tcp', rule.targets);
  await transact(ctx.app, ctx, (change) =>
    change.audit({ action: 'rule.check', resource: 'rule', resource_id: id, changes: { after: answer } }),
  );
  return ok({ rule_id: id, ...answer });
}

const probeInput = object(
  {
    target: target(),
    protocol: optional(oneOf(probeProtocols), 'tcp'),
  },
  { name: 'ProbeInput' },
);

async function probeNode(ctx: Ctx<{ target: string; protocol: 'tcp' | 'udp' }, {}>): Promise<Reply> {
  const id = idParam(ctx);
  const node = ctx.app.store.nodes.find(id);
  if (!node) throw notFound('node', id);
  const refusal = targetRefusal(parseTarget(ctx.body.target)!.host, node.host, ctx.app.targetPolicy());
  if (refusal) throw validationFailed([{ pointer: '#/target', detail: refusal }]);
  const answer = await probeFrom(ctx.app, id, ctx.body.protocol, [ctx.body.target]);
  await transact(ctx.app, ctx, (change) =>
    change.audit({ action: 'node.probe', resource: 'node', resource_id: id, changes: { after: answer } }),
  );
  return ok(answer);
}

export const probeOperations = operations({
  checkRule: operation({
    action: 'rule.check',
    summary: "Ask a rule's node whether it can reach each of the rule's targets",
    description:
      `The node (through a tunnel, its exit) tries every target at once, as its relays would and under the same ` +
      `target restrictions: a TCP connect, or for a UDP rule a datagram and whether anything (or an ICMP error) ` +
      `comes back; each within ${PROBE_TIMEOUT_MS} ms. 409 when the node is offline, 502 when it does not answer.`,
    responses: { 200: { description: 'What the node found', schema: probeSchema } },
    handler: checkRule,
  }),
  probeNode: operation({
    action: 'node.probe',
    summary: 'Ask a node whether it can reach a host:port',
    description:
      'As a rule check, for one target of your choosing, which must be one a rule on this node could have ' +
      '(422 otherwise: the node itself, its link, the master, unless allow_local_targets).',
    body: probeInput,
    responses: { 200: { description: 'What the node found', schema: probeSchema } },
    handler: probeNode,
  }),
});
