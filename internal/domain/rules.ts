// What a forwarding rule is, for every part that handles one: the store keeps it, the API
// shows it, the master sends its forwarding part to a node, the agent applies it.

import { canonicalAddress, isSrvName, isUnroutable, localKind } from '../schema/net.ts';
import type { FieldError } from '../schema/schema.ts';
import type { AllowHours } from './hours.ts';
import type { Quota, QuotaDirection, QuotaUsage } from './quota.ts';
import { holds } from './plans.ts';
import { counted, kernelPorts, portCount, rangeErrors, RELAY_RANGE_PORTS } from './ranges.ts';

export const protocols = ['tcp', 'udp', 'tcp+udp'] as const;
export type Protocol = (typeof protocols)[number];
export type Transport = 'tcp' | 'udp';

/** The transports a rule of `protocol` listens on, TCP first. */
export function transportsOf(protocol: Protocol): Transport[] {
  return protocol === 'tcp+udp' ? ['tcp', 'udp'] : [protocol];
}

/** Whether a rule of `protocol` carries `transport`. */
export function carries(protocol: Protocol, transport: Transport): boolean {
  return protocol === transport || protocol === 'tcp+udp';
}
/**
 * How a rule's connections spread over its targets: in turn, at random, to the first up (failover), by the client's
 * address (source_hash: a client keeps its target while that target is up), to the target with the fewest open
 * connections (least_conn), or to the one its health checks reached fastest (lowest_latency).
 */
export const strategies = ['round_robin', 'random', 'failover', 'source_hash', 'least_conn', 'lowest_latency'] as const;
export type Strategy = (typeof strategies)[number];
/** The strategies that honour per-target weights. */
export const weighted: readonly Strategy[] = ['round_robin', 'random', 'source_hash'];
/** The largest weight a target may have. */
export const MAX_WEIGHT = 100;
export const syncStates = ['pending', 'applied', 'failed'] as const;
export type SyncState = (typeof syncStates)[number];
/** How a rule may be carried: `auto` lets the node choose (the kernel where it can), `relay` keeps it in user space. */
export const forwardings = ['auto', 'relay'] as const;
export type Forwarding = (typeof forwardings)[number];
/** What a node sends a rule's target first on each TCP connection: nothing, or the client's address (PROXY v1/v2). */
export const proxyProtocols = ['none', 'v1', 'v2'] as const;
export type ProxyProtocol = (typeof proxyProtocols)[number];
/**
 * Whether a rule forwards: active, disabled by its writer, or stopped by the master: past its expires_at, its quota
 * spent for the period (until the period starts over, or the quota is raised), or held by its tenant owner's account
 * or plan (see Hold).
 */
export const ruleStates = ['active', 'disabled', 'expired', 'quota_exceeded', ...holds] as const;
export type RuleState = (typeof ruleStates)[number];
/** How a node checks a rule's targets: a TCP connect to each, every interval; down after `fall` failures in a row, up
 * again after `rise` successes. */
export interface HealthCheck {
  interval_seconds: number;
  timeout_ms: number;
  fall: number;
  rise: number;
}
export const targetStates = ['unknown', 'up', 'down'] as const;
export type TargetState = (typeof targetStates)[number];
/** How a target stands by its node's checks. */
export interface TargetHealth {
  target: string;
  status: TargetState;
  /** Why the last check failed (a code such as ECONNREFUSED, or timeout); null after a success. */
  error: string | null;
  checked_at: string | null;
}
/**
 * How a rule's targets stand as a whole: up (every one up), degraded (some down), down (every one down: clients are
 * refused at once) or unknown (not checked yet).
 */
export const healthStates = ['unknown', 'up', 'degraded', 'down'] as const;
export type HealthState = (typeof healthStates)[number];
export interface RuleHealth {
  status: HealthState;
  targets: TargetHealth[];
}

/** How a rule's targets stand as a whole. */
export function healthOf(targets: TargetHealth[]): RuleHealth {
  const down = targets.filter((t) => t.status === 'down').length;
  const up = targets.filter((t) => t.status === 'up').length;
  const status: HealthState =
    targets.length > 0 && down === targets.length
      ? 'down'
      : down > 0
        ? 'degraded'
        : up === targets.length
          ? 'up'
          : 'unknown';
  return { status, targets };
}

/** How a node carried a rule it applied. */
export const paths = ['kernel', 'relay'] as const;
export type Path = (typeof paths)[number];

/** What a rule's writer chooses. */
export interface RuleFields {
  name: string;
  /** The user it belongs to; null in what a writer gives: the writer (a new rule), or its owner as it is (a change). */
  owner_id: number | null;
  node_id: number;
  tunnel_id: number | null;
  protocol: Protocol;
  listen_port: number;
  /** The last port of a range from listen_port (inclusive); null: listen_port alone. */
  listen_port_end: number | null;
  targets: string[];
  strategy: Strategy;
  /** Each target's share of new connections, parallel to targets; null: all alike. */
  weights: number[] | null;
  /** How the rule may be carried on its node: auto (the kernel where the node can) or relay. */
  forwarding: Forwarding;
  enabled: boolean;
  tags: string[];
  /** Client address blocks that may connect; empty: every address (but the denied). */
  allow_sources: string[];
  /** Client address blocks refused; these win over allow_sources. */
  deny_sources: string[];
  /** Open TCP connections plus UDP sessions the rule carries at once; null: the node's own limit. */
  max_connections: number | null;
  /** Bytes a second each way, shared by all of the rule's connections; null: as fast as they go. */
  bandwidth_limit: number | null;
  /** New TCP connections plus new UDP sessions the rule takes a second (a burst of as many); null: no limit. */
  max_new_connections_per_second: number | null;
  /** When the rule stops forwarding (state expired); null: never. */
  expires_at: string | null;
  proxy_protocol: ProxyProtocol;
  /** How much the rule may carry per period; null: no limit. */
  quota: Quota | null;
  /** Checks of the targets, which skip those down; null: none (a target that refuses is failed over at once). */
  health_check: HealthCheck | null;
  /** Whether targets see the client's own address (no source NAT: their replies must route back through the node). */
  preserve_source: boolean;
  /** The node's address its connections to the targets come from (its tunnel's exit node's); null: as routing picks. */
  source_address: string | null;
  /** When, on one zone's wall clock, the rule takes new clients; null: always. */
  allow_hours: AllowHours | null;
}

/** A rule's controls as a rule without them has them: what the API fills in, and what a node's config leaves out. */
export const controlDefaults: {
  tags: string[];
  allow_sources: string[];
  deny_sources: string[];
  max_connections: null;
  bandwidth_limit: null;
  max_new_connections_per_second: null;
  expires_at: null;
  proxy_protocol: 'none';
  quota: null;
  health_check: null;
  preserve_source: false;
  source_address: null;
  allow_hours: null;
} = {
  tags: [],
  allow_sources: [],
  deny_sources: [],
  max_connections: null,
  bandwidth_limit: null,
  max_new_connections_per_second: null,
  expires_at: null,
  proxy_protocol: 'none',
  quota: null,
  health_check: null,
  preserve_source: false,
  source_address: null,
  allow_hours: null,
} satisfies Partial<RuleFields>;

/** The controls of a rule (what limits it, beyond where it listens and sends). */
export type Control = keyof typeof controlDefaults;

/** A rule's fields as the store writes them: its owner known. */
export type OwnedRuleFields = RuleFields & { owner_id: number };

/** The fields a rule's writer sets, each once: what create, replace, import and batch update copy. */
export const ruleFieldNames = [
  'name',
  'owner_id',
  'node_id',
  'tunnel_id',
  'protocol',
  'listen_port',
  'listen_port_end',
  'targets',
  'strategy',
  'weights',
  'forwarding',
  'enabled',
  ...(Object.keys(controlDefaults) as Control[]),
] as const satisfies readonly (keyof RuleFields)[];

/** The writable fields of `from` (a rule, or input that has them), and nothing else. */
export function ruleFieldsOf(from: RuleFields): RuleFields {
  return Object.fromEntries(ruleFieldNames.map((name) => [name, from[name]])) as unknown as RuleFields;
}

/** A rule as it stands: its fields, what its node last reported, and the bytes it carried. */
export interface Rule extends RuleFields {
  id: number;
  owner_id: number;
  state: RuleState;
  /** What the quota's period has used; null without a quota. */
  quota_usage: QuotaUsage | null;
  /**
   * What its tenant owner's plan holds the rule to, where it holds it at all: its caps (which reach rules written
   * before them) and, past a `slow` allowance, the slow rate. A node enforces the lower of these and the rule's own.
   */
  plan_limits: PlanLimits | null;
  /** How the targets stand by the node's checks; null without a health_check. */
  health: RuleHealth | null;
  sync: {
    state: SyncState;
    error: { code: string; detail: string } | null;
    applied_at: string | null;
    /** How the node carries it, once applied; null before, or from an agent older than the kernel path. */
    applied_path: Path | null;
    /** Why the relay carries it rather than the kernel, as the node said; null otherwise. */
    relayed_because: string | null;
  };
  /** Bytes relayed, and connections and datagrams turned away by allow_sources, deny_sources or max_connections. */
  traffic: { bytes_in: number; bytes_out: number; refused: number };
  version: number;
  created_at: string;
  updated_at: string;
}

/**
 * Problems with how a rule's fields go together (each alone is valid), as field errors under `prefix` (`#/rules/3`).
 */
export function combinationErrors(fields: RuleFields, prefix = '#'): FieldError[] {
  const errors: FieldError[] = [];
  const at = (field: keyof RuleFields, detail: string) => errors.push({ pointer: `${prefix}/${field}`, detail });
  if (fields.tunnel_id !== null && fields.health_check !== null)
    at('health_check', 'is for direct rules: through a tunnel, the exit node dials the targets');
  if (fields.weights !== null) {
    if (fields.weights.length !== fields.targets.length)
      at('weights', `has ${fields.weights.length} weights for ${fields.targets.length} targets: one per target`);
    else if (!weighted.includes(fields.strategy))
      at('weights', `are for the strategies ${weighted.join(', ')}, not ${fields.strategy}`);
  }
  const srv = fields.targets.findIndex(isSrvName);
  if (srv >= 0) {
    if (fields.targets.length > 1)
      at('targets', "has an SRV name with other targets: an SRV name is a rule's only target, its records the rest");
    if (fields.weights !== null) at('weights', "are an SRV name's records' own: leave weights null");
    if (fields.listen_port_end !== null) at('listen_port_end', 'is for rules whose targets give their ports');
  }
  if (fields.strategy === 'lowest_latency' && fields.health_check === null)
    at('strategy', 'lowest_latency needs a health_check: its connect times are what it goes by');
  fields.allow_hours?.windows.forEach((window, i) => {
    if (window.from === window.to)
      errors.push({ pointer: `${prefix}/allow_hours/windows/${i}/to`, detail: 'is its from: an empty window' });
  });
  if (fields.preserve_source && fields.source_address !== null)
    at('source_address', "is the node's address to connect from, and preserve_source keeps the client's: not both");
  const relayed = fields.preserve_source && relayOnlyReason(fields);
  if (relayed)
    at('preserve_source', `needs the kernel path (the relay connects from the node's own address), but ${relayed}`);
  for (const error of rangeErrors(fields))
    errors.push({
      pointer: `${prefix}/${error.field}${error.index === undefined ? '' : `/${error.index}`}`,
      detail: error.detail,
    });
  const wide = portCount(fields) > RELAY_RANGE_PORTS && errors.length === 0 && relayOnlyReason(fields);
  if (wide)
    at(
      'listen_port_end',
      `makes a range of ${counted(portCount(fields))} ports, which only the kernel carries (the relay listens on ` +
        `at most ${counted(RELAY_RANGE_PORTS)} ports of a rule), but ${wide}`,
    );
  return errors;
}

/**
 * Why a node's relay must carry `rule` whatever the node is, or null when the kernel could: what the master can
 * tell before any node tries (preserve_source is refused with any of these), and what an agent says in
 * sync.relayed_because.
 */
export function relayOnlyReason(
  rule: Pick<
    RuleFields,
    | 'tunnel_id'
    | 'forwarding'
    | 'protocol'
    | 'listen_port'
    | 'listen_port_end'
    | 'bandwidth_limit'
    | 'proxy_protocol'
    | 'strategy'
    | 'targets'
    | 'health_check'
  > & { quota: object | null; allow_hours?: AllowHours | null },
): string | null {
  if (rule.tunnel_id !== null) return 'rules through a tunnel are carried by the relay';
  if (rule.forwarding === 'relay') return 'the rule asks for the relay';
  const controls = [
    rule.bandwidth_limit !== null ? 'bandwidth_limit' : '',
    // The kernel ends a TCP connection past the quota with a reset; it has no way to end a UDP flow it translates.
    rule.quota !== null && rule.protocol !== 'tcp' ? 'quota on UDP' : '',
    rule.proxy_protocol !== 'none' ? 'proxy_protocol' : '',
    // nftables reads meta hour on the node's clock as it stood when the table was written: no zone, no daylight saving.
    (rule.allow_hours ?? null) !== null ? 'allow_hours' : '',
  ].filter(Boolean);
  if (controls.length > 0) return `the relay enforces the rule's ${controls.join(', ')}`;
  if (rule.strategy === 'least_conn') return "least_conn: the kernel keeps no count of each target's connections";
  if (kernelPorts(rule) === null)
    return (
      "several targets whose ranges start elsewhere than the rule's, or targets of both forms: nftables' DNAT adds " +
      'no offset to a port'
    );
  if (rule.targets.length > 1 && rule.health_check === null)
    return (
      'several targets without a health_check: only the relay moves on to the next target when one does not ' +
      "answer (with a health_check, a target down leaves the kernel's map)"
    );
  return null;
}

/** The part of a rule its node needs to forward it. */
export interface ForwardRule
  extends
    Pick<
      Rule,
      | 'id'
      | 'protocol'
      | 'listen_port'
      | 'listen_port_end'
      | 'targets'
      | 'strategy'
      | 'weights'
      | 'enabled'
      | 'tunnel_id'
      | 'forwarding'
    >,
    Pick<Rule, Exclude<Control, 'tags' | 'quota'>> {
  /** The rule's quota as its node enforces it; null without one. */
  quota: ForwardQuota | null;
  /**
   * False: the rule may not reach what is local to its node, whatever the config's allow_local_targets says (a
   * tenant's rule); true: as that says. Sent only when false.
   */
  local_targets: boolean;
}

/**
 * What a node needs to hold a rule to its quota: the limit, what counts, which period (a new start means the count
 * starts over) and what the master had counted of it when it sent this.
 */
export interface ForwardQuota {
  bytes: number;
  direction: QuotaDirection;
  period_start: string;
  used: number;
}

/** The limits a plan holds a rule to (see Rule.plan_limits); null where it sets none. */
export interface PlanLimits {
  max_connections: number | null;
  bandwidth_limit: number | null;
  max_new_connections_per_second: number | null;
}

function lowest(own: number | null, held: number | null | undefined): number | null {
  return own === null ? (held ?? null) : held == null ? own : Math.min(own, held);
}

/**
 * What the node is sent of `rule`: enabled only while the rule is active (not expired, its quota not spent, not held
 * by its owner's standing), with the lower of its own limits and its plan's.
 */
export function forwardRuleOf(rule: Rule): ForwardRule {
  return {
    id: rule.id,
    protocol: rule.protocol,
    listen_port: rule.listen_port,
    listen_port_end: rule.listen_port_end,
    targets: rule.targets,
    strategy: rule.strategy,
    weights: rule.weights,
    enabled: rule.state === 'active',
    tunnel_id: rule.tunnel_id,
    forwarding: rule.forwarding,
    allow_sources: rule.allow_sources,
    deny_sources: rule.deny_sources,
    max_connections: lowest(rule.max_connections, rule.plan_limits?.max_connections),
    bandwidth_limit: lowest(rule.bandwidth_limit, rule.plan_limits?.bandwidth_limit),
    max_new_connections_per_second: lowest(
      rule.max_new_connections_per_second,
      rule.plan_limits?.max_new_connections_per_second,
    ),
    expires_at: rule.expires_at,
    proxy_protocol: rule.proxy_protocol,
    health_check: rule.health_check,
    preserve_source: rule.preserve_source,
    source_address: rule.source_address,
    allow_hours: rule.allow_hours,
    local_targets: true,
    quota:
      rule.quota && rule.quota_usage
        ? {
            bytes: rule.quota.bytes,
            direction: rule.quota.direction,
            period_start: rule.quota_usage.period_started_at,
            used: rule.quota_usage.used_bytes,
          }
        : null,
  };
}

export const ruleErrorCodes = [
  'port_in_use',
  'bind_denied',
  'target_unresolvable',
  /** Sent by agents older than tunnels; kept so their acknowledgements still read. */
  'tunnel_not_supported',
  /** The rule names a tunnel the node's config does not carry. */
  'tunnel_missing',
  'listen_failed',
  /** The agent forwards in the kernel only (--forwarding kernel), and this rule cannot be carried there. */
  'kernel_unsupported',
  /** nftables refused the table this rule was part of. */
  'kernel_failed',
  /** The master did not send it: the node's agent is too old for what it asks (see agentFeatures in link.ts). */
  'agent_outdated',
  /** Its source_address is not an address of the node that dials its targets. */
  'source_unavailable',
  /** Its allow_hours names a time zone the node's runtime does not know (an older zone database than the master's). */
  'zone_unknown',
] as const;
export type RuleErrorCode = (typeof ruleErrorCodes)[number];

/** What a node did with one rule of a config. */
export interface RuleResult {
  id: number;
  state: 'applied' | 'failed';
  error: { code: RuleErrorCode; detail: string } | null;
  /** How it is carried, once applied (absent from agents older than the kernel path). */
  path?: Path;
  /** Carried by the relay: why not by the kernel (absent from older agents). */
  reason?: string;
}

/** Bytes relayed for one rule: in from clients to targets, out back; and connections or datagrams refused. */
export interface RuleTraffic {
  id: number;
  bytes_in: number;
  bytes_out: number;
  /** Absent: none (and from agents older than rule controls). */
  refused?: number;
}

/**
 * Which targets a rule may have besides the network's: by default none that is the node itself (its loopback, its own
 * host), its link (link-local addresses, where clouds serve instance metadata), no address at all, or the master. The
 * setting allow_local_rule_targets (which needs *) allows them to operators' rules, never to a tenant's; agents hold
 * to the same when they dial, after resolving. Alert channels have a policy of their own (allow_local_channel_targets).
 */
export interface TargetPolicy {
  allowLocal: boolean;
  /** The names and addresses the master is known by (install_master_url's host). */
  masterHosts: readonly string[];
  /** The rule is a tenant's: local targets are refused whatever the setting (see ownerPolicy). */
  tenant?: boolean;
}

/** The policy of a rule its owner's role holds to: a tenant's never reaches local targets. */
export function ownerPolicy(policy: TargetPolicy, tenant: boolean): TargetPolicy {
  return tenant ? { ...policy, allowLocal: false, tenant } : policy;
}

/** Why a rule on the node at `nodeHost` may not reach `host` under `policy`, or null when it may. */
export function targetRefusal(host: string, nodeHost: string, policy: TargetPolicy): string | null {
  const kind = localKind(host);
  if (isUnroutable(kind)) return `${host} is a ${kind} address, which is no host to forward to`;
  const reason = localReason(host, nodeHost, policy);
  if (!reason) return null;
  return policy.tenant
    ? `${host} ${reason}; a tenant's rules never reach such targets`
    : `${host} ${reason}; rules reach such targets only with the setting allow_local_rule_targets (needs *)`;
}

/**
 * Names that are the host itself by convention (RFC 6761's .localhost, and what Debian's and others' /etc/hosts give
 * loopback), whatever a resolver elsewhere would make of them.
 */
const LOOPBACK_NAMES = new Set(['localhost', 'localhost.localdomain', 'ip6-localhost', 'ip6-loopback']);

/**
 * Why `host` is local to the node at `nodeHost` (null: to no node) or the master, which `policy` does not allow, or
 * null when it is not or the policy allows it: what a rule's target and an alert channel's address are held to.
 */
export function localReason(host: string, nodeHost: string | null, policy: TargetPolicy): string | null {
  if (policy.allowLocal) return null;
  const kind = localKind(host);
  const name = host.toLowerCase().replace(/\.$/, '');
  const spelt = spelling(host);
  return LOOPBACK_NAMES.has(name) || name.endsWith('.localhost')
    ? `names ${nodeHost === null ? 'the master' : 'the node'} itself`
    : kind
      ? `is a ${kind} address`
      : nodeHost !== null && spelt === spelling(nodeHost)
        ? 'is the node itself'
        : policy.masterHosts.some((master) => spelling(master) === spelt)
          ? 'is the master'
          : null;
}

/**
 * How a host is compared: an address in its one spelling ([::ffff:10.0.0.1] is 10.0.0.1), a name without case. Kept
 * for the hosts asked most (a node's and the master's, once per rule of an import of a million).
 */
function spelling(host: string): string {
  let spelt = spellings.get(host);
  if (spelt === undefined) {
    spelt = canonicalAddress(host) ?? host.toLowerCase();
    if (spellings.size >= SPELLINGS_KEPT) spellings.clear();
    spellings.set(host, spelt);
  }
  return spelt;
}

const SPELLINGS_KEPT = 4096;
const spellings = new Map<string, string>();
