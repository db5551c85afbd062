// A node's vitals on the wire (domain/vitals.ts): how it was doing at its agent's last report, as GET /api/nodes and
// GET /api/nodes/{id} show it.

import { timestamp } from './common.ts';

export const vitalsSchema = {
  type: ['object', 'null'],
  description:
    "How the node was doing at its agent's last report (every agent_report_interval_seconds); null until one " +
    'reported. History: GET /api/nodes/{id}/vitals.',
  required: ['at', 'cpu_percent', 'load', 'memory', 'interfaces', 'network', 'agent'],
  properties: {
    at: timestamp,
    cpu_percent: { type: ['number', 'null'], description: 'Of all CPUs since the previous report.' },
    load: { type: 'array', items: { type: 'number' }, description: 'The 1, 5 and 15 minute load averages.' },
    memory: {
      type: 'object',
      required: ['total_bytes', 'available_bytes'],
      properties: { total_bytes: { type: 'integer' }, available_bytes: { type: 'integer' } },
      additionalProperties: false,
    },
    interfaces: {
      type: 'array',
      description: 'Bytes received and sent by each network interface since the node booted.',
      items: {
        type: 'object',
        required: ['name', 'rx_bytes', 'tx_bytes'],
        properties: { name: { type: 'string' }, rx_bytes: { type: 'integer' }, tx_bytes: { type: 'integer' } },
        additionalProperties: false,
      },
    },
    addresses: {
      type: 'array',
      items: { type: 'string' },
      description:
        "The node's own IP addresses, but loopback and link-local ones: what a rule's source_address may be. " +
        'Absent from agents older than it.',
    },
    network: {
      type: 'object',
      description: 'Bytes a second over every interface but lo since the previous report (null for the first).',
      required: ['rx_bytes_per_second', 'tx_bytes_per_second'],
      properties: {
        rx_bytes_per_second: { type: ['number', 'null'] },
        tx_bytes_per_second: { type: ['number', 'null'] },
      },
      additionalProperties: false,
    },
    agent: {
      type: 'object',
      required: ['version', 'uptime_seconds'],
      properties: {
        version: { type: ['string', 'null'] },
        uptime_seconds: { type: 'integer' },
        faults: {
          type: 'object',
          description:
            "Faults the agent's data plane contained since it started, by where (tcp_relay, udp_relay, probe, " +
            'health_check, tunnel_entry, tunnel_exit): each ended only its own connection, session, probe or ' +
            "check, and is in the agent's log. Absent from masters and agents older than it.",
          additionalProperties: { type: 'integer' },
        },
        relay: {
          type: 'object',
          description:
            'How many threads the agent relays on (`threads`: each listens on every port of the rules it carries ' +
            'straight to their targets, and the kernel spreads new clients over them), how many it was asked for ' +
            '(`asked`: --relay-workers, by default the cores, at most 4) and why fewer (`reason`: a Node.js older ' +
            'than 22.12, a thread that ended). Absent from agents older than it.',
          required: ['threads', 'asked', 'reason'],
          properties: {
            threads: { type: 'integer' },
            asked: { type: 'integer' },
            reason: { type: ['string', 'null'] },
          },
          additionalProperties: false,
        },
      },
      additionalProperties: false,
    },
  },
  additionalProperties: false,
};
