// A rule's controls on the wire (domain/rules.ts controlDefaults): who may use it, how many at once and how often, how
// fast and how much, until when, and what its targets are told; each validated, with the default a control left out
// takes. The rest of a rule, and what it is read as, is in rule-schema.ts.

import { cidr, ipAddress } from '../schema/net.ts';
import { array, boolean, dateTime, integer, nullable, object, oneOf, optional } from '../schema/schema.ts';
import { proxyProtocols } from '../domain/rules.ts';
import { quotaDirections, quotaPeriods } from '../domain/quota.ts';
import {
  allowHours,
  healthCheck,
  MAX_BANDWIDTH,
  MAX_NEW_CONNECTIONS_PER_SECOND,
  MAX_RULE_CONNECTIONS,
  MAX_SOURCES,
  MIN_BANDWIDTH,
} from '../domain/link.ts';
import { tagList } from './common.ts';

export const ruleControls = {
  tags: optional(tagList, []),
  allow_sources: optional(
    array(cidr(), {
      max: MAX_SOURCES,
      unique: true,
      description:
        'Clients whose address is in one of these blocks may connect; empty: every client. The node closes a ' +
        'refused TCP connection at once and drops a refused datagram, and counts both in traffic.refused.',
    }),
    [],
  ),
  deny_sources: optional(
    array(cidr(), {
      max: MAX_SOURCES,
      unique: true,
      description: 'Clients whose address is in one of these blocks are refused, also when allow_sources has them.',
    }),
    [],
  ),
  max_connections: optional(
    nullable(
      integer({
        min: 1,
        max: MAX_RULE_CONNECTIONS,
        description:
          'Open TCP connections plus UDP sessions the rule carries at once; one more is refused (counted in ' +
          "traffic.refused). null: the node's own limit (10,000 a listener).",
      }),
    ),
    null,
  ),
  bandwidth_limit: optional(
    nullable(
      integer({
        min: MIN_BANDWIDTH,
        max: MAX_BANDWIDTH,
        description:
          "Bytes a second each way (client to target, and back), shared by all of the rule's connections and " +
          "sessions; null: unlimited. A token bucket: after a quiet spell up to an eighth of a second's worth " +
          '(at least 16 KiB) goes at once. TCP waits for it; UDP datagrams beyond it are dropped. Needs the relay.',
      }),
    ),
    null,
  ),
  max_new_connections_per_second: optional(
    nullable(
      integer({
        min: 1,
        max: MAX_NEW_CONNECTIONS_PER_SECOND,
        description:
          'New TCP connections plus new UDP sessions the rule takes a second, together, with a burst of as many ' +
          'after a quiet second; past it a TCP connection is reset at once and a new UDP session dropped (counted ' +
          'in traffic.refused). null: no limit. On the kernel path each protocol of a tcp+udp rule has it.',
      }),
    ),
    null,
  ),
  expires_at: optional(
    nullable(
      dateTime({
        description:
          'When the rule stops forwarding, as if disabled, and shows state expired; null: never. The node ' +
          'stops it at that time itself, and the master within a second. A later time (or null) starts it again.',
      }),
    ),
    null,
  ),
  quota: optional(
    nullable(
      object(
        {
          bytes: integer({
            min: 1,
            max: Number.MAX_SAFE_INTEGER,
            description: 'Bytes the rule may carry per period, counted as direction says.',
          }),
          period: optional(
            oneOf(quotaPeriods, {
              description: 'When the count starts over: every day, every month, or never (none).',
            }),
            'month',
          ),
          direction: optional(
            oneOf(quotaDirections, {
              description: 'Which bytes count: in (client to target), out (back to the client), or both.',
            }),
            'both',
          ),
          reset_day: optional(
            integer({ min: 1, max: 28, description: 'The day of the month a monthly period starts (UTC).' }),
            1,
          ),
          reset_hour: optional(
            integer({ min: 0, max: 23, description: 'The hour (UTC) a daily or monthly period starts.' }),
            0,
          ),
        },
        {
          name: 'Quota',
          description:
            'When the period has used it up, the master disables the rule (state quota_exceeded, audited as ' +
            'rule.quota_exceeded); setting enabled true again is 409 until the period starts over (which enables ' +
            'it again) or bytes is raised past quota_usage.used_bytes. The node holds the rule to it by itself ' +
            'too, ending its connections when spent, so a master away does not let it run over.',
        },
      ),
    ),
    null,
  ),
  health_check: optional(nullable(healthCheck), null),
  preserve_source: optional(
    boolean({
      description:
        "Targets see the client's own address: the node rewrites the destination only, never the source. Their " +
        'replies must then route back through the node (the node is their gateway, or a route to the clients ' +
        'goes through it). Needs the kernel path: a node that cannot carry the rule there fails it ' +
        '(kernel_unsupported). Refused (422) with whatever keeps a rule on the relay: a tunnel, forwarding relay, ' +
        'bandwidth_limit, quota, proxy_protocol, least_conn, several targets without a health_check.',
    }),
    false,
  ),
  proxy_protocol: optional(
    oneOf(proxyProtocols, {
      description:
        "v1 or v2: each TCP connection to a target starts with a PROXY protocol header carrying the client's " +
        'address and port and the address it connected to (the target must expect it). TCP only: UDP is ' +
        'forwarded without one. Needs the relay: a rule with it is never carried by the kernel.',
    }),
    'none',
  ),
  source_address: optional(
    nullable(
      ipAddress(
        "The node's address its connections to the targets come from, for a node with several (through a tunnel, " +
          "the exit node's). The master checks it against the addresses the node's agent reports (vitals.addresses); " +
          'the agent fails the rule with source_unavailable where it has no such address. Connections to targets ' +
          'of the other address family fail. null: as the routing table picks. Not with preserve_source.',
      ),
    ),
    null,
  ),
  allow_hours: optional(nullable(allowHours), null),
};
