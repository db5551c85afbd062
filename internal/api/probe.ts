// Diagnostics from a node: can it reach a rule's targets, or a host:port, and how fast? The node's agent tries each
// target as its relays would (a TCP connect; for UDP a datagram, and whether anything or an ICMP error comes back),
// under the same target restrictions as rules, and the master answers what it said. Bounded in count and time, and
// audited with what was found.

import { MAX_PROBE_TARGETS, probeProtocols } from '../domain/link.ts';
import { target } from '../schema/net.ts';
import { object, oneOf, optional } from '../schema/schema.ts';
import { checkTargets, PROBE_TIMEOUT_MS, probeTarget } from '../service/probe.ts';
import { record } from './common.ts';
import { type Ctx, idParam, ok, operation, operations, type Reply } from './route.ts';

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

const probeInput = object(
  {
    target: target(),
    protocol: optional(oneOf(probeProtocols), 'tcp'),
  },
  { name: 'ProbeInput' },
);

async function checkRuleAnswer(ctx: Ctx<undefined, {}>): Promise<Reply> {
  const id = idParam(ctx);
  return ok({ rule_id: id, ...(await checkTargets(ctx.app, ctx, id)) });
}

async function probeNodeAnswer(ctx: Ctx<{ target: string; protocol: 'tcp' | 'udp' }, {}>): Promise<Reply> {
  return ok(await probeTarget(ctx.app, ctx, idParam(ctx), ctx.body.target, ctx.body.protocol));
}

export const probeOperations = operations({
  checkRule: operation({
    action: 'rule.check',
    tenants: true,
    summary: "Ask a rule's node whether it can reach each of the rule's targets",
    description:
      `The node (through a tunnel, its exit) tries every target at once, as its relays would and under the same ` +
      `target restrictions: a TCP connect, or for a UDP rule a datagram and whether anything (or an ICMP error) ` +
      `comes back; each within ${PROBE_TIMEOUT_MS} ms. 409 when the node is offline, 502 when it does not answer.`,
    responses: { 200: { description: 'What the node found', schema: probeSchema } },
    handler: checkRuleAnswer,
  }),
  probeNode: operation({
    action: 'node.probe',
    summary: 'Ask a node whether it can reach a host:port',
    description:
      'As a rule check, for one target of your choosing, which must be one a rule on this node could have ' +
      '(422 otherwise: the node itself, its link, the master, unless allow_local_rule_targets).',
    body: probeInput,
    responses: { 200: { description: 'What the node found', schema: probeSchema } },
    handler: probeNodeAnswer,
  }),
});
