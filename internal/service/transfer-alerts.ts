// Alert channels and alert rules in the export document: channels without their secrets, alert rules naming what
// they watch (nodes and tunnels by name, rules as node/protocol/port: a rule's name is not unique, its port is) and
// the channels they notify by name. An imported webhook gets a secret made (shown once in the results); an imported
// bot or mail login has none until one is set.

import type { FieldError } from '../schema/schema.ts';
import type { AlertRule, Channel } from '../store/alerts.ts';
import { EVERY_RULE } from '../store/rules.ts';
import type { Store } from '../store/store.ts';
import { insertAlertRule } from './alert-rules.ts';
import { insertChannel, type ChannelInput } from './channels.ts';
import type { AlertCondition } from '../domain/alerts.ts';
import type { Protocol } from '../domain/rules.ts';
import type { Change, WriteDeps } from './write.ts';

export type ExportedChannel = Omit<
  ChannelInput,
  'secret' | 'bot_token' | 'smtp_password' | 'webhook_url' | 'topic_url' | 'access_token'
>;

export interface ExportedAlertRule {
  name: string;
  condition: AlertCondition;
  threshold: number | null;
  /** Nodes by name. */
  nodes: string[];
  /** What it watches by name: nodes and tunnels by name, rules as `node/protocol/port`. */
  resources: string[];
  tags: string[];
  for_seconds: number;
  repeat_seconds: number | null;
  damping_seconds: number;
  /** Channels by name. */
  channels: string[];
  enabled: boolean;
}

/** Which kind of resource a condition watches. */
function watched(condition: AlertCondition): 'node' | 'rule' | 'tunnel' | null {
  if (['node_offline', 'agent_outdated', 'kernel_drift'].includes(condition)) return 'node';
  if (condition === 'tunnel_down') return 'tunnel';
  if (condition === 'license_expiring' || condition === 'certificate_expiring') return null;
  return 'rule';
}

/**
 * A channel as exported: its type's fields that are set, never its secret (nor a chat's host, which is read from its
 * secret address and goes with it).
 */
function exportedChannel(channel: Channel): ExportedChannel {
  const fields = Object.fromEntries(
    Object.entries(channel.config).filter(([key, value]) => value !== null && key !== 'host'),
  );
  return { name: channel.name, type: channel.type, ...fields };
}

/** The channels and alert rules of `store`, for an export in the same snapshot as `names` were read. */
export function exportAlerting(
  store: Store,
  names: { node(id: number): string | undefined; tunnel(id: number): string | undefined },
): { channels: ExportedChannel[]; alert_rules: ExportedAlertRule[] } {
  const all = Number.MAX_SAFE_INTEGER;
  const channels = store.channels.page(0, all);
  const channelNames = new Map(channels.map((c) => [c.id, c.name]));
  const ruleRef = (id: number) => {
    const rule = store.rules.find(id);
    return rule && `${names.node(rule.node_id)}/${rule.protocol}/${rule.listen_port}`;
  };
  const reference = (rule: AlertRule, id: number) => {
    const kind = watched(rule.condition);
    return kind === 'node' ? names.node(id) : kind === 'tunnel' ? names.tunnel(id) : ruleRef(id);
  };
  const present = (name: string | undefined): name is string => name !== undefined;
  return {
    channels: channels.map(exportedChannel),
    alert_rules: store.alertRules.page(0, all).map((rule) => ({
      name: rule.name,
      condition: rule.condition,
      threshold: rule.threshold,
      nodes: rule.selector.node_ids.map(names.node).filter(present),
      resources: rule.selector.resource_ids.map((id) => reference(rule, id)).filter(present),
      tags: rule.selector.tags,
      for_seconds: rule.for_seconds,
      repeat_seconds: rule.repeat_seconds,
      damping_seconds: rule.damping_seconds,
      channels: rule.channel_ids.map((id) => channelNames.get(id)).filter(present),
      enabled: rule.enabled,
    })),
  };
}

/** What importing one item did (as the import's results show each item). */
export interface AlertingImported {
  index: number;
  name: string;
  id: number | null;
  outcome: 'created' | 'exists' | 'invalid';
  /** A created webhook's signing secret, made by the master: shown only here. */
  secret?: string;
}

/** How an import finds what the document names, on the master or made earlier in the same import. */
export interface Lookups {
  node(name: string): number | undefined;
  tunnel(name: string): number | undefined;
}

/** Inside the import's write: each channel, then each alert rule; a name already taken is kept as it is (exists). */
export function importAlerting(
  app: WriteDeps,
  change: Change,
  channels: readonly ExportedChannel[],
  alertRules: readonly ExportedAlertRule[],
  lookups: Lookups,
  attempt: <T>(pointer: string, fn: () => T) => T | null,
  errors: FieldError[],
): { channels: AlertingImported[]; alert_rules: AlertingImported[] } {
  const channelResults = channels.map((input, index): AlertingImported => {
    const existing = app.store.channels.findByName(input.name);
    if (existing) return { index, name: input.name, id: existing.id, outcome: 'exists' };
    const made = attempt(`#/channels/${index}`, () => insertChannel(app, change, input, true));
    if (!made) return { index, name: input.name, id: null, outcome: 'invalid' };
    const shown = made.madeSecret === null ? {} : { secret: made.madeSecret };
    return { index, name: input.name, id: made.channel.id, outcome: 'created', ...shown };
  });
  const ruleResults = alertRules.map((input, index): AlertingImported => {
    const existing = app.store.alertRules.findByName(input.name);
    if (existing) return { index, name: input.name, id: existing.id, outcome: 'exists' };
    const before = errors.length;
    const resolve = (field: string, names: readonly string[], find: (name: string) => number | undefined) =>
      names.map((name, i) => {
        const id = find(name);
        if (id === undefined)
          errors.push({ pointer: `#/alert_rules/${index}/${field}/${i}`, detail: `${name} is unknown` });
        return id ?? 0;
      });
    const kind = watched(input.condition);
    const findResource =
      kind === 'node'
        ? lookups.node
        : kind === 'tunnel'
          ? lookups.tunnel
          : (ref: string) => ruleByRef(app.store, lookups, ref);
    const node_ids = resolve('nodes', input.nodes, lookups.node);
    const resource_ids = resolve('resources', input.resources, findResource);
    const channel_ids = resolve('channels', input.channels, (name) => app.store.channels.findByName(name)?.id);
    if (errors.length > before) return { index, name: input.name, id: null, outcome: 'invalid' };
    const { nodes: _n, resources: _r, channels: _c, tags, ...rest } = input;
    const made = attempt(`#/alert_rules/${index}`, () =>
      insertAlertRule(app, change, { ...rest, selector: { node_ids, resource_ids, tags }, channel_ids }),
    );
    return made
      ? { index, name: input.name, id: made.id, outcome: 'created' }
      : { index, name: input.name, id: null, outcome: 'invalid' };
  });
  return { channels: channelResults, alert_rules: ruleResults };
}

/** The rule a `node/protocol/port` reference names: the one listening on that port of that node, for that protocol. */
function ruleByRef(store: Store, lookups: Lookups, ref: string): number | undefined {
  const match = /^(.+)\/(tcp|udp|tcp\+udp)\/(\d+)$/.exec(ref);
  const nodeId = match && lookups.node(match[1]!);
  if (!match || nodeId === undefined || nodeId === null) return undefined;
  const [, , protocol, port] = match;
  const found = store.rules.list({ afterId: 0, limit: 10, ...EVERY_RULE, node_id: nodeId, port: Number(port) });
  return found.find((rule) => rule.protocol === (protocol as Protocol))?.id;
}
