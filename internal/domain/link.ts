// Every message of the agent link, as a type and a runtime schema. Both ends check what they
// receive against these before using it: nothing on either side is cast. The framing (lines
// of JSON) is in agentlink/wire.ts; the protocol is described in docs/agent-protocol.md.

import { cidr, host, ipAddress, isSrvName, target, webSocketUrl } from '../schema/net.ts';
import { exitStrategies, MAX_TUNNEL_EXITS, switchReasons, transports } from './tunnels.ts';
import { knownZone, weekdays } from './hours.ts';
import {
  array,
  boolean,
  dateTime,
  integer,
  nullable,
  number,
  object,
  oneOf,
  optional,
  string,
  type Infer,
} from '../schema/schema.ts';
import { quotaDirections } from './quota.ts';
import {
  forwardings,
  MAX_WEIGHT,
  paths,
  protocols,
  proxyProtocols,
  ruleErrorCodes,
  strategies,
  targetStates,
  type ForwardRule,
} from './rules.ts';
import { ID_RANGE } from '../schema/ids.ts';
import { BUNDLE_VERSION } from '../release/signature.ts';
import { MAX_STATEMENT_BYTES } from '../tls/promotion.ts';

/** Most entries in one `applied` or `traffic` message; the agent splits longer lists. */
export const MAX_ENTRIES = 500;

/** Most address blocks in a rule's allow_sources, and in its deny_sources. */
export const MAX_SOURCES = 256;
/** The bounds of a rule's bandwidth_limit, in bytes a second: 1 KiB/s to 100 GiB/s. */
export const MIN_BANDWIDTH = 1024;
export const MAX_BANDWIDTH = 100 * 2 ** 30;
/** The highest max_connections a rule may ask for. */
export const MAX_RULE_CONNECTIONS = 1_000_000;
/** The highest max_new_connections_per_second a rule may ask for. */
export const MAX_NEW_CONNECTIONS_PER_SECOND = 1_000_000;
/** The most addresses of its own a node reports. */
export const MAX_ADDRESSES = 256;
/** A count: a whole number from 0 that JavaScript holds exactly. */
export const COUNT = integer({ min: 0, max: Number.MAX_SAFE_INTEGER });
const ID = integer(ID_RANGE);
export const PIN = string({ min: 51, max: 51, pattern: /^sha256\/[A-Za-z0-9+/]{43}=$/ });
const PEM = string({
  min: 1,
  max: 8192,
  pattern: /^-----BEGIN [A-Z ]+-----\n[A-Za-z0-9+/=\n]+-----END [A-Z ]+-----\n?$/,
});

/** How a rule bound to a tunnel reaches the exit node, which dials its targets. */
const exitRule = object({
  id: ID,
  protocol: oneOf(protocols),
  targets: array(target({ srv: true }), { min: 1, max: 16 }),
  strategy: oneOf(strategies),
  /** Absent from masters older than weights. */
  weights: optional(nullable(array(integer({ min: 1, max: MAX_WEIGHT }), { min: 1, max: 16 })), null),
  enabled: boolean(),
  /** As a rule's (see ForwardRule.local_targets). */
  local_targets: optional(boolean(), true),
  /** As a rule's; absent from masters older than it. */
  source_address: optional(nullable(ipAddress('The address to dial from.')), null),
});

/**
 * One end of a tunnel this node takes part in, with the key pair the master issued it and
 * the pin of the other end's key. The entry dials `host:port` (transport ws: a WebSocket to
 * `via`, or to `host:port` without one); the exit listens on `port` and serves `rules`.
 * `transport` and `via` are absent from masters older than them; an agent that does not name
 * link feature `tunnel_ws` is sent no ws end (see TUNNEL_WS).
 */
export const tunnelEnd = object({
  id: ID,
  role: oneOf(['entry', 'exit']),
  host: nullable(host("The exit node's address, for the entry.")),
  port: integer({ min: 1, max: 65535 }),
  cert: PEM,
  key: PEM,
  peer_pin: PIN,
  rules: array(exitRule, { max: 200_000 }),
  transport: optional(oneOf(transports), 'tls'),
  via: optional(nullable(webSocketUrl('The WebSocket URL the entry dials, for transport ws.')), null),
  /**
   * For what the tunnel's owner names (the entry's `via`s, the exit's probe target), as a rule's targets (see
   * ForwardRule.local_targets): false for a tenant's tunnel.
   */
  local_targets: optional(boolean(), true),
  /**
   * The entry's: every exit in the tunnel's order (host, port, peer_pin and via above are the first's), from masters
   * that know several exits, to agents of link feature `tunnel_exits`; absent: the one exit above.
   */
  exits: optional(
    nullable(
      array(
        object({
          node_id: ID,
          host: host("The exit node's address."),
          port: integer({ min: 1, max: 65535 }),
          peer_pin: PIN,
          via: nullable(webSocketUrl('The WebSocket URL to dial this exit through, for transport ws.')),
        }),
        { min: 1, max: MAX_TUNNEL_EXITS },
      ),
    ),
    null,
  ),
  exit_strategy: optional(oneOf(exitStrategies), 'failover'),
  /** How the entry measures its exits and when it moves between them (see tunnel/choice.ts); absent: defaults. */
  switching: optional(
    nullable(
      object({
        round_seconds: integer({ min: 1, max: 60 }),
        rounds: integer({ min: 1, max: 100 }),
        gain_ms: integer({ min: 0, max: 10_000 }),
        gain_percent: integer({ min: 0, max: 100 }),
        cooldown_seconds: integer({ min: 0, max: 86_400 }),
      }),
    ),
    null,
  ),
  /** What the exit connects to when the entry probes it (host:port); absent or null: its first TCP rule's target. */
  probe_target: optional(nullable(target()), null),
});
export type TunnelEnd = Infer<typeof tunnelEnd>;

const TIME = /^([01][0-9]|2[0-3]):[0-5][0-9]$/;
const ZONE = /^[A-Za-z0-9_+/-]{1,64}$/;

/**
 * A rule's allow_hours (domain/hours.ts), and its bounds. The API takes only a zone its runtime knows (`knownZone`);
 * the wire takes any zone name (`checkZone` false), as a node's runtime may know fewer zones than the master's: the
 * agent fails that rule alone (zone_unknown) rather than refusing the whole config.
 */
function allowHoursSchema(checkZone: boolean) {
  return object(
    {
      zone: string({
        min: 1,
        max: 64,
        pattern: ZONE,
        patternHint: 'must be an IANA time zone name, such as Europe/Berlin or UTC',
        description:
          'An IANA time zone (Europe/Berlin, America/New_York, UTC): the wall clock the windows are read on.',
        refine: (zone) =>
          !checkZone || knownZone(zone) ? null : 'must be an IANA time zone, such as Europe/Berlin or UTC',
      }),
      windows: array(
        object({
          days: array(oneOf(weekdays), {
            min: 1,
            max: 7,
            unique: true,
            description: 'The days a window starts on.',
          }),
          from: string({ max: 5, pattern: TIME, patternHint: 'must be HH:MM, from 00:00 to 23:59' }),
          to: string({
            max: 5,
            description:
              "HH:MM, or 24:00 for the day's end; before from: the next day's (the window runs past midnight).",
            refine: (to) => (TIME.test(to) || to === '24:00' ? null : 'must be HH:MM, from 00:00 to 24:00'),
          }),
        }),
        { min: 1, max: 16 },
      ),
    },
    {
      name: checkZone ? 'AllowHours' : undefined,
      description:
        'When the rule takes new clients, on the wall clock of zone (its daylight saving included): a client outside ' +
        'every window is refused at once and counted in traffic.refused; connections open when a window ends go on. ' +
        'Needs the relay. null: always.',
    },
  );
}
export const allowHours = allowHoursSchema(true);
const allowHoursOnWire = allowHoursSchema(false);

/** How a node checks a rule's targets (see HealthCheck), and its bounds. */
export const healthCheck = object(
  {
    interval_seconds: optional(integer({ min: 1, max: 3600, description: 'Seconds between checks of a target.' }), 5),
    timeout_ms: optional(
      integer({ min: 50, max: 60_000, description: 'How long a check waits for the connection.' }),
      2000,
    ),
    fall: optional(integer({ min: 1, max: 10, description: 'Failed checks in a row that mark a target down.' }), 3),
    rise: optional(integer({ min: 1, max: 10, description: 'Good checks in a row that mark it up again.' }), 2),
  },
  { name: 'HealthCheck' },
);

/** Master to agent: the node's whole desired config. */
export const configMessage = object({
  type: oneOf(['config']),
  /** The master's epoch (see master_epoch): absent from masters older than standbys. */
  epoch: optional(integer({ min: 1, max: 2 ** 31 })),
  /**
   * The master's statement that it is the primary of that epoch, signed with its TLS key (tls/promotion.ts): what the
   * agent shows an older primary, which believes it only by a pin it holds. Absent or null before any promotion.
   */
  promotion: optional(nullable(string({ min: 1, max: MAX_STATEMENT_BYTES })), null),
  version: COUNT,
  report_interval_seconds: integer({ min: 1, max: 3600 }),
  tcp_idle_timeout_seconds: integer({ min: 1, max: 604_800 }),
  /** How long SRV answers are kept at least and at most (see SrvBounds); absent from masters older than them. */
  srv_ttl_min_seconds: optional(integer({ min: 1, max: 3600 })),
  /**
   * The fields of agents' messages this master reads beyond what the oldest masters did (MASTER_READS): an agent sends
   * such a field only to a master that names it, as an older one ends a link on a field it does not know. Absent from
   * masters older than the list.
   */
  master_reads: optional(array(string({ min: 1, max: 64 }), { max: 32 }), []),
  srv_ttl_max_seconds: optional(integer({ min: 1, max: 86_400 })),
  max_connections_per_source: integer({ min: 1, max: 100_000 }),
  /**
   * Whether rules may reach what is local to the node (the master's allow_local_rule_targets), but those that say
   * `local_targets: false`; absent: they may not.
   */
  allow_local_targets: optional(boolean(), false),
  next_master_pin: nullable(PIN),
  /** The standby masters agents are to try when they lose theirs; absent from masters older than standbys. */
  masters: optional(array(object({ url: string({ min: 8, max: 300 }), pin: nullable(PIN) }), { max: 8 }), []),
  rules: array(
    object({
      id: ID,
      protocol: oneOf(protocols),
      listen_port: integer({ min: 1, max: 65535 }),
      /** Absent from masters older than port ranges. */
      listen_port_end: optional(nullable(integer({ min: 1, max: 65535 })), null),
      targets: array(target({ ranges: true, srv: true }), { min: 1, max: 16 }),
      strategy: oneOf(strategies),
      /** Absent from masters older than weights. */
      weights: optional(nullable(array(integer({ min: 1, max: MAX_WEIGHT }), { min: 1, max: 16 })), null),
      enabled: boolean(),
      tunnel_id: nullable(ID),
      /** Absent from masters older than the kernel path. */
      forwarding: optional(oneOf(forwardings), 'auto'),
      /** These six are absent from masters older than rule controls. */
      allow_sources: optional(array(cidr(), { max: MAX_SOURCES }), []),
      deny_sources: optional(array(cidr(), { max: MAX_SOURCES }), []),
      max_connections: optional(nullable(integer({ min: 1, max: MAX_RULE_CONNECTIONS })), null),
      bandwidth_limit: optional(nullable(integer({ min: MIN_BANDWIDTH, max: MAX_BANDWIDTH })), null),
      /** Absent from masters older than it. */
      max_new_connections_per_second: optional(
        nullable(integer({ min: 1, max: MAX_NEW_CONNECTIONS_PER_SECOND })),
        null,
      ),
      expires_at: optional(nullable(dateTime()), null),
      proxy_protocol: optional(oneOf(proxyProtocols), 'none'),
      /** How the node checks the rule's targets; absent from masters older than health checks. */
      health_check: optional(nullable(healthCheck), null),
      /** Absent from masters older than preserve_source. */
      preserve_source: optional(boolean(), false),
      /** Absent from masters older than it. */
      source_address: optional(nullable(ipAddress('The address to dial from.')), null),
      /** Absent from masters older than it. */
      allow_hours: optional(nullable(allowHoursOnWire), null),
      /** False: a tenant's rule, which never reaches what is local to the node (see ForwardRule.local_targets). */
      local_targets: optional(boolean(), true),
      /** The rule's quota as the node enforces it (see ForwardQuota); absent from masters older than quotas. */
      quota: optional(
        nullable(
          object({
            bytes: integer({ min: 1, max: Number.MAX_SAFE_INTEGER }),
            direction: oneOf(quotaDirections),
            period_start: dateTime(),
            used: COUNT,
          }),
        ),
        null,
      ),
    }),
    { max: 200_000 },
  ),
  /** Absent from masters older than tunnels. */
  tunnels: optional(array(tunnelEnd, { max: 10_000 }), []),
});
export type ConfigMessage = Infer<typeof configMessage>;

/** Master to agent: messages of the link that write were dropped, past its budget (agentlink/server.ts). */
export const overBudgetMessage = object({ type: oneOf(['over_budget']), detail: string({ max: 500 }) });

/**
 * What a rule may ask of its agent beyond what every agent can do, and what asks it. An agent names those it can do
 * when it links (X-Agent-Features); one that names none is older than the list and can do those that came before it
 * (UNNAMED_FEATURES). A feature added later is listed here, and an agent older than it is not sent a rule that
 * needs it: the rule fails with `agent_outdated` (never a config the agent would refuse whole, or misread), at the
 * rule's node and at its tunnel's exit alike.
 */
export const agentFeatures: Record<string, { needed: (rule: ForwardRule) => boolean; what: string }> = {
  port_ranges: { needed: (rule) => rule.listen_port_end !== null, what: 'a port range (listen_port_end)' },
  weights: { needed: (rule) => rule.weights !== null, what: 'weighted targets (weights)' },
  preserve_source: { needed: (rule) => rule.preserve_source, what: "the client's address kept (preserve_source)" },
  balancing: {
    needed: (rule) => ['source_hash', 'least_conn', 'lowest_latency'].includes(rule.strategy),
    what: 'source_hash, least_conn and lowest_latency balancing',
  },
  target_policy: {
    needed: (rule) => !rule.local_targets,
    what: "a tenant's rule held off local targets while operators' may reach them",
  },
  new_connection_rate: {
    needed: (rule) => rule.max_new_connections_per_second !== null,
    what: 'a rate of new connections (max_new_connections_per_second)',
  },
  allow_hours: {
    needed: (rule) => rule.allow_hours !== null,
    what: 'times of the week it takes new clients (allow_hours)',
  },
  source_address: {
    needed: (rule) => rule.source_address !== null,
    what: 'an address to connect from (source_address)',
  },
  srv_targets: {
    needed: (rule) => rule.targets.some(isSrvName),
    what: 'a target of DNS SRV records (_service._proto.name)',
  },
};
export const AGENT_FEATURES = Object.keys(agentFeatures);
/**
 * What an agent may say it can do of the link itself, beside rules' features: `soak`, its supervisor keeps an upgrade
 * on trial through a soak (see upgradeMessage); `tunnel_ws`, it runs tunnels of transport ws; `tunnel_exits`, tunnels
 * of several exits and probes.
 */
export const LINK_FEATURES = ['soak', 'tunnel_ws', 'tunnel_exits'];
/** What agents may send this master beyond the oldest masters' messages (see configMessage.master_reads). */
export const MASTER_READS = [
  'vitals.addresses',
  'vitals.relay',
  'tunnel_status.loss_percent',
  'tunnel_status.exits',
  'live',
] as const;
export type MasterRead = (typeof MASTER_READS)[number];

/** The link feature of agents that carry a tunnel inside a WebSocket (transport ws). */
export const TUNNEL_WS = 'tunnel_ws';
/** The link feature of agents that run the entry of a tunnel of several exits, and answer probes at an exit. */
export const TUNNEL_EXITS = 'tunnel_exits';
/** What an agent that names no features can do: what agents did before they named it. */
export const UNNAMED_FEATURES = ['port_ranges', 'weights', 'preserve_source', 'balancing'];

/** What `rule` needs of an agent that can do only `features`, or null when it can apply it. */
export function beyondAgent(rule: ForwardRule, features: ReadonlySet<string>): string | null {
  for (const [name, feature] of Object.entries(agentFeatures))
    if (!features.has(name) && feature.needed(rule)) return feature.what;
  return null;
}

/** The largest agent bundle a master hands its agents, and its base64 length on the link. */
export const MAX_BUNDLE_BYTES = 16 * 1024 * 1024;

/**
 * Master to agent: run this bundle (a rollout's order). The agent runs it only if `signature` (a `.sig` file's JSON)
 * verifies against a release key of its own, and goes back to the bundle it runs now unless the new one links and
 * applies within `gate_seconds`, then stays running and linked for `soak_seconds` (sent only to an agent whose
 * supervisor soaks: link feature `soak`; absent, none).
 */
export const upgradeMessage = object({
  type: oneOf(['upgrade']),
  rollout_id: ID,
  version: string({ min: 5, max: 48 }),
  gate_seconds: integer({ min: 5, max: 3600 }),
  soak_seconds: optional(integer({ min: 0, max: 3600 }), 0),
  bundle: string({ min: 4, max: Math.ceil(MAX_BUNDLE_BYTES / 3) * 4 }),
  signature: string({ min: 2, max: 2000 }),
});
export type UpgradeMessage = Infer<typeof upgradeMessage>;

/**
 * Agent to master, once, when it links after its supervisor went back from a bundle that crash-looped past its soak
 * (`exits` in a row within `within_seconds`) to the one before (see Supervisor).
 */
export const fellBackMessage = object({
  type: oneOf(['fell_back']),
  from_version: string({ min: 5, max: 48, pattern: BUNDLE_VERSION }),
  exits: integer({ min: 1, max: 1000 }),
  within_seconds: integer({ min: 0, max: 86_400 }),
});
export type FellBackMessage = Infer<typeof fellBackMessage>;

/**
 * Agent to master: how an upgrade order went: refused (nothing was run), restarting (the new bundle starts), or
 * rolled_back (it did not link and apply in time: the previous one runs again). Success is the new agent linking.
 */
export const upgradeStates = ['refused', 'restarting', 'rolled_back'] as const;
export const upgradeStatusMessage = object({
  type: oneOf(['upgrade_status']),
  rollout_id: ID,
  state: oneOf(upgradeStates),
  detail: string({ max: 500 }),
});
export type UpgradeStatusMessage = Infer<typeof upgradeStatusMessage>;

/** Master to agent: traffic reports up to `seq` of `stream` are stored. */
export const trafficAckMessage = object({ type: oneOf(['traffic_ack']), stream: string({ min: 1, max: 64 }), seq: ID });

/** Agent to master: what it really did with config `version`. */
export const appliedMessage = object({
  type: oneOf(['applied']),
  version: COUNT,
  results: array(
    object({
      id: ID,
      state: oneOf(['applied', 'failed']),
      error: nullable(object({ code: oneOf(ruleErrorCodes), detail: string({ max: 500 }) })),
      /** How the node carries it; absent from agents older than the kernel path. */
      path: optional(oneOf(paths)),
      /** Carried by the relay: why not by the kernel; absent from older agents. */
      reason: optional(string({ max: 300 })),
    }),
    { max: MAX_ENTRIES },
  ),
  /** More `applied` messages for the same version follow (a long result list is split). */
  partial: optional(boolean(), false),
});
export type AppliedMessage = Infer<typeof appliedMessage>;

/** Agent to master: bytes relayed per rule since the previous report. */
export const trafficMessage = object({
  type: oneOf(['traffic']),
  stream: string({ min: 1, max: 64, pattern: /^[A-Za-z0-9_-]+$/ }),
  seq: ID,
  at: COUNT,
  rules: array(
    object({
      id: ID,
      bytes_in: COUNT,
      bytes_out: COUNT,
      /** Absent from agents older than rule controls. */
      refused: optional(COUNT, 0),
    }),
    { max: MAX_ENTRIES },
  ),
});
export type TrafficMessage = Infer<typeof trafficMessage>;

/**
 * Agent to master, with each traffic report where the master reads `live`: what each rule carries now (open
 * connections and UDP flows) and its rates over the report's interval, in bytes a second; rules with none left out.
 * One round may come in several pieces (MAX_ENTRIES each), each naming the round: a new round replaces the last.
 */
export const liveMessage = object({
  type: oneOf(['live']),
  round: COUNT,
  rules: array(object({ id: ID, open: COUNT, rate_in: COUNT, rate_out: COUNT }), { max: MAX_ENTRIES }),
});
export type LiveMessage = Infer<typeof liveMessage>;

/** Agent to master: how the node's ends of its tunnels stand. */
export const tunnelStatusMessage = object({
  type: oneOf(['tunnel_status']),
  tunnels: array(
    object({
      id: ID,
      state: oneOf(['up', 'down']),
      error: nullable(string({ max: 500 })),
      rtt_us: nullable(integer({ min: 0, max: 600_000_000 })),
      /** The share of the entry's last PINGs unanswered; absent from agents older than it. */
      loss_percent: optional(nullable(number({ min: 0, max: 100 })), null),
      /** The entry's: how each exit stands, to masters that read it (`tunnel_status.exits`). */
      exits: optional(
        nullable(
          array(
            object({
              node_id: ID,
              state: oneOf(['up', 'down']),
              error: nullable(string({ max: 500 })),
              rtt_us: nullable(integer({ min: 0, max: 600_000_000 })),
              loss_percent: nullable(number({ min: 0, max: 100 })),
              probe_us: nullable(integer({ min: 0, max: 600_000_000 })),
              probe_failed: boolean(),
              score_ms: nullable(number({ min: 0, max: 10_000_000 })),
            }),
            { max: MAX_TUNNEL_EXITS },
          ),
        ),
        null,
      ),
      /** The entry's: the exit node new connections go to; null while none is up. */
      chosen: optional(nullable(ID), null),
      /** The entry's: its choice's last move, and why. */
      switched: optional(
        nullable(
          object({
            from: nullable(ID),
            to: nullable(ID),
            reason: oneOf(switchReasons),
            from_score_ms: nullable(number({ min: 0, max: 10_000_000 })),
            to_score_ms: nullable(number({ min: 0, max: 10_000_000 })),
            at: dateTime(),
          }),
        ),
        null,
      ),
    }),
    { max: MAX_ENTRIES },
  ),
});
export type TunnelStatusMessage = Infer<typeof tunnelStatusMessage>;

/** Agent to master: how the targets of the node's health-checked rules stand, after a change or a config. */
export const healthMessage = object({
  type: oneOf(['health']),
  rules: array(
    object({
      id: ID,
      targets: array(
        object({
          target: target({ ranges: true }),
          status: oneOf(targetStates),
          error: nullable(string({ max: 200 })),
          checked_at: nullable(dateTime()),
        }),
        { max: 16 },
      ),
    }),
    { max: MAX_ENTRIES },
  ),
});
export type HealthMessage = Infer<typeof healthMessage>;

/** Most targets one probe asks a node to try. */
export const MAX_PROBE_TARGETS = 16;
export const probeProtocols = ['tcp', 'udp'] as const;

/** Master to agent: try to reach these targets from the node, now, each at most `timeout_ms`, and say how it went. */
export const probeMessage = object({
  type: oneOf(['probe']),
  id: ID,
  protocol: oneOf(probeProtocols),
  targets: array(target(), { min: 1, max: MAX_PROBE_TARGETS }),
  timeout_ms: integer({ min: 50, max: 10_000 }),
  /** False: the targets may not be local to the node whatever the config says (see ForwardRule.local_targets). */
  local_targets: optional(boolean(), true),
});
export type ProbeMessage = Infer<typeof probeMessage>;

/** How one target of a probe answered: reachable (null: a UDP target that said nothing), the time, why not. */
export const probeResult = object({
  target: target(),
  reachable: nullable(boolean()),
  ms: nullable(integer({ min: 0, max: 60_000 })),
  error: nullable(string({ max: 200 })),
});
export type ProbeResult = Infer<typeof probeResult>;

/** Agent to master: the results of probe `id`, a result per target in the order asked. */
export const probeResultMessage = object({
  type: oneOf(['probe_result']),
  id: ID,
  results: array(probeResult, { max: MAX_PROBE_TARGETS }),
});

/**
 * Where in an agent's data plane a fault can be contained (see relay/faults.ts): a relayed TCP connection, a UDP
 * session, a probe, a health check, a tunnel's entry or exit.
 */
export const faultSites = ['tcp_relay', 'udp_relay', 'probe', 'health_check', 'tunnel_entry', 'tunnel_exit'] as const;
export type FaultSite = (typeof faultSites)[number];

/** Where the master picks a tunnel's port on the exit node when none is given. */
export const TUNNEL_PORTS = { min: 40000, max: 49999 };

/** Most network interfaces a node reports the bytes of. */
export const MAX_INTERFACES = 64;

/** Agent to master, with each report interval: how the node is doing, and how long its agent has run. */
/** The relay's threads as an agent tells them (see vitalsMessage.relay). */
export const RELAY_THREADS = object({
  threads: integer({ min: 1, max: 64 }),
  asked: integer({ min: 1, max: 64 }),
  reason: nullable(string({ max: 300 })),
});

export type RelayThreading = Infer<typeof RELAY_THREADS>;

export const vitalsMessage = object({
  type: oneOf(['vitals']),
  /** Of all CPUs, since the previous vitals; null in the first. */
  cpu_percent: nullable(number({ min: 0, max: 100 })),
  /** The 1, 5 and 15 minute load averages. */
  load: array(number({ min: 0, max: 1_000_000 }), { min: 3, max: 3 }),
  memory_total_bytes: COUNT,
  memory_available_bytes: COUNT,
  /** Bytes received and sent by each interface since the node booted (Linux's /proc/net/dev). */
  interfaces: array(
    object({
      name: string({ min: 1, max: 15, pattern: /^[A-Za-z0-9_.:@-]+$/ }),
      rx_bytes: COUNT,
      tx_bytes: COUNT,
    }),
    { max: MAX_INTERFACES },
  ),
  uptime_seconds: COUNT,
  /** The node's own addresses, but loopback and link-local (what source_address may be); absent from older agents. */
  addresses: optional(array(ipAddress('An address of the node.'), { max: MAX_ADDRESSES }), []),
  /** Faults the agent's data plane contained since it started (each ended its own flow), by where; absent: none. */
  faults: optional(array(object({ site: oneOf(faultSites), count: COUNT }), { max: faultSites.length }), []),
  /** How many threads the relay runs on (see forward/relay-thread.ts), and why fewer than asked; absent: older. */
  relay: optional(RELAY_THREADS),
});
export type VitalsMessage = Infer<typeof vitalsMessage>;

/** Agent to master: which ways of forwarding the node can use, and why not; sent on linking and after each config. */
export const pathsMessage = object({
  type: oneOf(['paths']),
  kernel: object({
    available: boolean(),
    reason: nullable(string({ max: 500 })),
    // Since the agent started: how often something else removed or changed its table, which it wrote back; when last.
    // Absent from agents older than drift detection.
    drifts: optional(COUNT),
    last_drift_at: optional(nullable(dateTime())),
    // The devices flowtables offload connections on (the kernel's counters miss those); absent from older agents.
    flow_offload: optional(array(string({ min: 1, max: 64 }), { max: 64 })),
  }),
});
export type PathsMessage = Infer<typeof pathsMessage>;
