// What a tunnel is written as: its nodes (an entry, one exit or several), ports, transport and how it picks an exit.

import { TUNNEL_PORTS } from '../domain/link.ts';
import { exitStrategies, MAX_TUNNEL_EXITS, transports } from '../domain/tunnels.ts';
import { ID_RANGE } from '../schema/ids.ts';
import { target, webSocketUrl } from '../schema/net.ts';
import { array, integer, nullable, object, oneOf, optional, string, type Infer } from '../schema/schema.ts';
import { OWNER_DESCRIPTION } from './common.ts';

const VIA =
  'Transport ws: the WebSocket URL the entry dials instead of the exit itself, a reverse proxy or CDN that passes it ' +
  "on to the exit's listen_port (ws:// or wss://, whose certificate is checked against the entry node's CAs). Null: " +
  "the exit's own port.";

export const tunnelInput = object(
  {
    name: string({
      min: 1,
      max: 64,
      pattern: /^[A-Za-z0-9][A-Za-z0-9._-]*$/,
      patternHint: 'must start with a letter or digit and contain only letters, digits and . _ -',
    }),
    owner_id: optional(nullable(integer({ ...ID_RANGE, description: OWNER_DESCRIPTION })), null),
    entry_node_id: integer({ ...ID_RANGE, description: 'The node where traffic enters the tunnel.' }),
    exit_node_id: optional(
      nullable(
        integer({
          ...ID_RANGE,
          description: 'The node that dials the targets: the first of exit_node_ids, which may be given instead.',
        }),
      ),
      null,
    ),
    exit_node_ids: optional(
      nullable(
        array(integer(ID_RANGE), {
          min: 1,
          max: MAX_TUNNEL_EXITS,
          unique: true,
          description:
            'The exit nodes in order (failover prefers the earlier), each differing from the entry node. Absent: ' +
            'exit_node_id alone.',
        }),
      ),
      null,
    ),
    exit_strategy: optional(
      oneOf(exitStrategies, {
        description:
          'Which exit new connections go to: failover, the first that is up (back to an earlier one once it has ' +
          'been up for tunnel_switch_rounds); lowest_latency, the one the entry measures best, moved only on a ' +
          'lasting gain (see "Paths"). Connections already open stay where they are.',
      }),
      'failover',
    ),
    listen_port: optional(
      nullable(
        integer({
          min: 1,
          max: 65535,
          description:
            `Where the first exit node listens for the entry node. Absent or null: kept on update, otherwise chosen ` +
            `by the master from ${TUNNEL_PORTS.min}-${TUNNEL_PORTS.max}.`,
        }),
      ),
      null,
    ),
    exit_ports: optional(
      nullable(
        array(nullable(integer({ min: 1, max: 65535 })), {
          min: 1,
          max: MAX_TUNNEL_EXITS,
          description: 'Where each exit listens, in the order of exit_node_ids; a null as listen_port absent.',
        }),
      ),
      null,
    ),
    transport: optional(
      oneOf(transports, {
        description:
          'tls: mutually authenticated TLS over TCP to the exit. ws: the same TLS inside a WebSocket, which an HTTP ' +
          'reverse proxy or a CDN in front of the exit can carry (see "Paths" in the API reference).',
      }),
      'tls',
    ),
    via: optional(nullable(webSocketUrl(VIA)), null),
    exit_vias: optional(
      nullable(
        array(nullable(webSocketUrl(VIA)), {
          min: 1,
          max: MAX_TUNNEL_EXITS,
          description: "Each exit's via, in the order of exit_node_ids (via is the first's).",
        }),
      ),
      null,
    ),
    probe_target: optional(
      nullable(
        target({
          what:
            'What every exit connects to when its entry probes it, once a round (a TCP connect, then closed): the ' +
            "exit's path to where its rules go, which the choice adds to the round trip. Null: the first target of " +
            'the first enabled TCP rule through the tunnel. A tunnel of one exit with none is not probed. ',
        }),
      ),
      null,
    ),
  },
  {
    name: 'TunnelInput',
    ignore: [
      ...['id', 'status', 'rtt_ms', 'loss_percent', 'ends', 'exits', 'chosen_exit_node_id', 'chosen_because'],
      ...['chosen_at', 'version', 'created_at', 'updated_at'],
    ],
  },
);
export type TunnelInput = Infer<typeof tunnelInput>;
