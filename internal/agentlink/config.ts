// The config a node's agent is sent: its rules and its ends of tunnels as the wire carries them, with what the master
// says of the fleet (its epoch and promotion, the settings agents apply, the standbys to follow), and the rules the
// agent is too old to apply, each with what it would need.

import type { SecretBox } from '../crypto/box.ts';
import {
  beyondAgent,
  MASTER_READS,
  TUNNEL_EXITS,
  TUNNEL_WS,
  type ConfigMessage,
  type TunnelEnd,
} from '../domain/link.ts';
import { controlDefaults, forwardRuleOf, type Control, type ForwardRule, type Rule } from '../domain/rules.ts';
import { standbysOf, type Settings } from '../settings/settings.ts';
import type { Store } from '../store/store.ts';
import { pinOf } from '../tls/pin.ts';

/** What a config is made of. */
export interface ConfigSource {
  readonly store: Store;
  readonly settings: Settings;
  /** Opens the tunnels' private keys, sealed at rest, to hand each node its own. */
  readonly box: SecretBox;
  /** This master's promotion statement for its epoch (see tls/promotion.ts); null before any, or without a TLS key. */
  readonly promotion: () => string | null;
}

/** The controls a config carries (tags are the master's own). */
type WireControl = Exclude<Control, 'tags'>;
type WireRule = Omit<ForwardRule, WireControl | 'weights' | 'listen_port_end' | 'local_targets'> &
  Partial<Pick<ForwardRule, WireControl | 'weights' | 'listen_port_end' | 'local_targets'>>;

/**
 * A rule as a config carries it: a control at its default is left out, as the agent fills it in. A config of 200,000
 * rules is that much smaller, and a rule with none of the controls reads as it did to agents older than them.
 */
function wireRule(rule: ForwardRule): WireRule {
  const wire: WireRule = { ...rule };
  for (const [name, fallback] of Object.entries(controlDefaults)) {
    const key = name as WireControl;
    // Every default is an empty list or a single value: no need to serialise each of 200,000 rules' controls.
    const value = wire[key];
    if (Array.isArray(fallback) ? Array.isArray(value) && value.length === 0 : value === fallback) delete wire[key];
  }
  // Targets all alike, as for agents older than weights; one port, as for agents older than ranges; local targets as
  // the config says, as for agents older than per-rule target policies.
  if (wire.weights === null) delete wire.weights;
  if (wire.local_targets) delete wire.local_targets;
  if (wire.listen_port_end === null) delete wire.listen_port_end;
  return wire;
}

/**
 * Node `nodeId`'s config for an agent that can do `features`, and the rules left out of it as beyond that agent (each
 * with what it needs); undefined once the node is gone.
 */
export function configFor(
  app: ConfigSource,
  nodeId: number,
  features: ReadonlySet<string>,
): { config: Omit<ConfigMessage, 'rules'> & { rules: WireRule[] }; beyond: [number, string][] } | undefined {
  const { store, settings } = app;
  const node = store.nodes.find(nodeId);
  if (!node) return undefined;
  const forward = forwardingOf(app);
  const beyond: [number, string][] = [];
  const tunnelsBeyond = new Map<number, string>();
  const config: Omit<ConfigMessage, 'rules'> & { rules: WireRule[] } = {
    type: 'config',
    epoch: store.epoch.current(),
    promotion: app.promotion(),
    version: node.config_version,
    report_interval_seconds: settings.get('agent_report_interval_seconds'),
    tcp_idle_timeout_seconds: settings.get('tcp_idle_timeout_seconds'),
    master_reads: [...MASTER_READS],
    srv_ttl_min_seconds: settings.get('srv_ttl_min_seconds'),
    srv_ttl_max_seconds: settings.get('srv_ttl_max_seconds'),
    max_connections_per_source: settings.get('max_connections_per_source'),
    allow_local_targets: settings.get('allow_local_rule_targets') === 1,
    next_master_pin: settings.get('tls_next_pin') || null,
    masters: standbysOf(settings.get('standby_masters')),
    rules: [],
    tunnels: tunnelEnds(app, nodeId, features, forward, beyond, tunnelsBeyond),
  };
  for (const rule of store.rules.forNode(nodeId)) {
    const carried = forward(rule);
    const needs =
      (rule.tunnel_id === null ? undefined : tunnelsBeyond.get(rule.tunnel_id)) ?? beyondAgent(carried, features);
    if (needs === null) config.rules.push(wireRule(carried));
    else beyond.push([rule.id, needs]);
  }
  return { config, beyond };
}

/**
 * What a config says of each rule: its fields, and for a tenant's rule where operators' may reach local targets,
 * that it may not (a tenant's role looked up once a config).
 */
function forwardingOf({ store, settings }: ConfigSource): (rule: Rule) => ForwardRule {
  if (settings.get('allow_local_rule_targets') !== 1) return forwardRuleOf;
  const tenants = new Map<number, boolean>();
  const isTenant = (owner: number) => {
    let tenant = tenants.get(owner);
    if (tenant === undefined) tenants.set(owner, (tenant = store.users.find(owner)?.role === 'tenant'));
    return tenant;
  };
  return (rule) => (isTenant(rule.owner_id) ? { ...forwardRuleOf(rule), local_targets: false } : forwardRuleOf(rule));
}

/** What a rule through a tunnel of transport ws needs of the agents at its ends. */
const WS_NEEDED = 'a tunnel inside a WebSocket (transport ws)';
/** What a rule through a tunnel of several exits needs of the agent at its entry. */
const EXITS_NEEDED = 'a tunnel of several exits';

/**
 * The node's part of each of its tunnels: its own key pair, the other end's pin, and at the exit the rules (those
 * its agent can apply: the others go to `beyond`). An agent that cannot run a tunnel's transport is sent no end of it
 * (its id goes to `tunnelsBeyond` with why, and the rules through it to `beyond`), nor the entry of several exits to an
 * agent that runs one. Transport, via and a tenant's hold on local addresses go only where they differ from what
 * agents older than them did; exits, strategy, switching and probe target only to agents that know them.
 */
function tunnelEnds(
  { store, box, settings }: ConfigSource,
  nodeId: number,
  features: ReadonlySet<string>,
  forward: (rule: Rule) => ForwardRule,
  beyond: [number, string][],
  tunnelsBeyond: Map<number, string>,
): TunnelEnd[] {
  const ends: TunnelEnd[] = [];
  const switching = {
    round_seconds: settings.get('tunnel_round_seconds'),
    rounds: settings.get('tunnel_switch_rounds'),
    gain_ms: settings.get('tunnel_switch_gain_ms'),
    gain_percent: settings.get('tunnel_switch_gain_percent'),
    cooldown_seconds: settings.get('tunnel_switch_cooldown_seconds'),
  };
  for (const row of store.tunnels.endsOf(nodeId)) {
    const entry = row.entry_node_id === nodeId;
    const rules = entry ? [] : store.rules.forTunnel(row.id).map(forward);
    const exits = entry ? store.tunnels.entryExits(row.id) : [];
    const needs =
      row.transport === 'ws' && !features.has(TUNNEL_WS)
        ? WS_NEEDED
        : exits.length > 1 && !features.has(TUNNEL_EXITS)
          ? EXITS_NEEDED
          : null;
    if (needs !== null) {
      tunnelsBeyond.set(row.id, needs);
      for (const rule of rules) beyond.push([rule.id, needs]);
      continue;
    }
    const end = {
      id: row.id,
      role: entry ? 'entry' : 'exit',
      host: entry ? row.exit_host : null,
      port: row.listen_port,
      cert: entry ? row.entry_cert : row.exit_cert,
      key: box.open(entry ? row.entry_key : row.exit_key),
      peer_pin: pinOf(entry ? row.exit_cert : row.entry_cert),
      rules: rules
        .filter((rule) => {
          const needs = beyondAgent(rule, features);
          if (needs !== null) beyond.push([rule.id, needs]);
          return needs === null;
        })
        // local_targets only where false, and source_address where set, as agents older than them read the rest.
        .map(({ id, protocol, targets, strategy, weights, enabled, local_targets, source_address }) => ({
          ...{ id, protocol, targets, strategy, weights, enabled },
          ...(local_targets ? {} : { local_targets }),
          ...(source_address === null ? {} : { source_address }),
        })) as TunnelEnd['rules'],
    } as TunnelEnd;
    if (row.transport !== 'tls') end.transport = row.transport;
    if (row.via !== null) end.via = row.via;
    const named = exits.some((exit) => exit.via !== null) || (!entry && row.probe_target !== null);
    if (named && store.users.find(row.owner_id)?.role === 'tenant') end.local_targets = false;
    // Only to agents that know several exits and probes, as older ones refuse a field they do not know.
    if (features.has(TUNNEL_EXITS)) {
      end.probe_target = row.probe_target;
      if (entry) {
        end.exits = exits.map(({ node_id, host, listen_port, via, exit_cert }) => ({
          ...{ node_id, host, port: listen_port, peer_pin: pinOf(exit_cert), via },
        }));
        end.exit_strategy = row.exit_strategy;
        end.switching = switching;
      }
    }
    ends.push(end);
  }
  return ends;
}
