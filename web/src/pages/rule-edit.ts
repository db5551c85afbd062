// A rule's create and edit form, in the page's dialog: every field the API takes, and a lost update (a 412, someone
// changed the rule meanwhile) offered to reload.

import { api, ApiError, type Schema } from '../api.ts';
import { field, form, h, input, listOf, localFromUtc, select, utcFromLocal } from '../dom.ts';
import type { PageCtx } from '../main.ts';
import { hoursText, parseHours } from '../hours.ts';

type Rule = Schema<'Rule'>;

/** What a rule may be put on: the nodes, and the tunnels the person may read. */
export interface Choices {
  nodes: { id: number; name: string }[];
  tunnels: { id: number; name: string }[];
}

/** The create or edit form in a dialog; editing sends If-Match, so a change made meanwhile is a 412. */
export async function editRule(ctx: PageCtx, dialog: HTMLDialogElement, choices: Choices, id: number | null) {
  const { nodes, tunnels } = choices;
  let rule: Rule | null = null;
  let etag: string | null = null;
  if (id !== null) {
    const answer = await api<Rule>('GET', `/api/rules/${id}`);
    rule = answer.data;
    etag = answer.etag;
  }
  const c = {
    name: input('name', { value: rule?.name ?? '', required: true }),
    node_id: h(
      'select',
      { name: 'node_id' },
      nodes.map((n) => h('option', { value: n.id, selected: n.id === rule?.node_id }, n.name)),
    ),
    protocol: select('protocol', ['tcp', 'udp', 'tcp+udp'], rule?.protocol),
    listen_port: input('listen_port', { type: 'number', min: 1, max: 65535, value: rule?.listen_port ?? '' }),
    listen_port_end: input('listen_port_end', {
      type: 'number',
      min: 1,
      max: 65535,
      value: rule?.listen_port_end ?? '',
    }),
    targets: h('textarea', { name: 'targets', rows: 3 }, (rule?.targets ?? []).join('\n')),
    strategy: select(
      'strategy',
      ['round_robin', 'random', 'failover', 'source_hash', 'least_conn', 'lowest_latency'],
      rule?.strategy,
    ),
    weights: input('weights', { autocomplete: 'off', value: (rule?.weights ?? []).join(', ') }),
    preserve_source: input('preserve_source', { type: 'checkbox', checked: rule?.preserve_source ?? false }),
    forwarding: select('forwarding', ['auto', 'relay'], rule?.forwarding),
    tunnel_id: h(
      'select',
      { name: 'tunnel_id' },
      h('option', { value: '' }, 'Direct (no tunnel)'),
      tunnels.map((t) => h('option', { value: t.id, selected: t.id === rule?.tunnel_id }, t.name)),
    ),
    enabled: input('enabled', { type: 'checkbox', checked: rule?.enabled ?? true }),
    tags: input('tags', { autocomplete: 'off', value: (rule?.tags ?? []).join(', ') }),
    allow_sources: h('textarea', { name: 'allow_sources', rows: 2 }, (rule?.allow_sources ?? []).join('\n')),
    deny_sources: h('textarea', { name: 'deny_sources', rows: 2 }, (rule?.deny_sources ?? []).join('\n')),
    max_connections: input('max_connections', { type: 'number', min: 1, value: rule?.max_connections ?? '' }),
    source_address: input('source_address', { autocomplete: 'off', value: rule?.source_address ?? '' }),
    allow_hours: input('allow_hours', { autocomplete: 'off', value: hoursText(rule?.allow_hours) }),
    max_new_connections_per_second: input('max_new_connections_per_second', {
      type: 'number',
      min: 1,
      value: rule?.max_new_connections_per_second ?? '',
    }),
    expires_at: input('expires_at', { type: 'datetime-local', value: localFromUtc(rule?.expires_at ?? null) }),
    proxy_protocol: select('proxy_protocol', ['none', 'v1', 'v2'], rule?.proxy_protocol),
    bandwidth_limit: input('bandwidth_limit', { type: 'number', min: 1024, value: rule?.bandwidth_limit ?? '' }),
    quota_bytes: input('quota_bytes', { type: 'number', min: 1, value: rule?.quota?.bytes ?? '' }),
    quota_period: select('quota_period', ['month', 'day', 'none'], rule?.quota?.period),
    quota_direction: select('quota_direction', ['both', 'in', 'out'], rule?.quota?.direction),
    quota_reset_day: input('quota_reset_day', {
      type: 'number',
      min: 1,
      max: 28,
      value: rule?.quota?.reset_day ?? 1,
    }),
    health_interval: input('health_interval', {
      type: 'number',
      min: 1,
      max: 3600,
      value: rule?.health_check?.interval_seconds ?? '',
    }),
    quota_reset_hour: input('quota_reset_hour', {
      type: 'number',
      min: 0,
      max: 23,
      value: rule?.quota?.reset_hour ?? 0,
    }),
  };
  const title = rule ? `Edit rule ${rule.name}` : 'New rule';
  const reload = h('button', { type: 'button', hidden: true }, 'Load the current version');
  reload.addEventListener('click', () => void editRule(ctx, dialog, choices, id));
  const editor = form(
    { method: 'dialog' },
    [
      reload,
      field('Name', c.name),
      field('Node', c.node_id),
      field('Protocol', c.protocol),
      field('Listen port', c.listen_port),
      field('Last port of a range', c.listen_port_end, 'Up to 10,000 ports; empty: the listen port alone'),
      field('Targets', c.targets, 'host:port, one per line; for a range also host:first-last, as many ports'),
      field('Strategy', c.strategy, 'lowest_latency needs a health check'),
      field('Weights', c.weights, 'One per target, comma-separated (3, 1); empty: all alike'),
      field('Forwarding', c.forwarding, 'auto: in the kernel where the node can; relay: always in user space'),
      field('Tunnel', c.tunnel_id),
      field('Enabled', c.enabled),
      field('Tags', c.tags, 'Comma-separated'),
      field('Allowed sources', c.allow_sources, 'Address blocks (192.0.2.0/24), one per line; empty: everyone'),
      field('Denied sources', c.deny_sources, 'Refused even when allowed'),
      field('Most connections at once', c.max_connections, "Empty: the node's own limit"),
      field('Most new connections a second', c.max_new_connections_per_second, 'TCP and UDP together; empty: any'),
      field('Expires', c.expires_at, 'Your local time; empty: never'),
      field('Allowed hours', c.allow_hours, 'Europe/Berlin: mon-fri 08:00-18:00; sat 10:00-14:00. Empty: always'),
      field('PROXY protocol', c.proxy_protocol, "Sends targets the client's address (TCP)"),
      field('Keep the client address', c.preserve_source, 'Kernel only: targets must route replies via the node'),
      field('Connect from', c.source_address, "One of the node's addresses (its vitals list them); empty: any"),
      field('Bandwidth (bytes/s)', c.bandwidth_limit, 'Each way, shared by all connections; empty: unlimited'),
      field('Health check every (s)', c.health_interval, 'A TCP connect; targets down are skipped. Empty: none'),
      field('Quota (bytes)', c.quota_bytes, 'Per period; empty: none. Spent, the rule stops until the period ends'),
      field('Quota period', c.quota_period),
      field('Quota counts', c.quota_direction, 'in: client to target; out: back; both'),
      field('Quota resets on day', c.quota_reset_day, 'Of the month (UTC)'),
      field('Quota resets at hour', c.quota_reset_hour, 'UTC'),
      h(
        'div',
        { class: 'buttons' },
        h('button', { type: 'submit' }, rule ? 'Save' : 'Create'),
        h('button', { type: 'button', onclick: () => dialog.close() }, 'Cancel'),
      ),
    ],
    async () => {
      const body = {
        name: c.name.value,
        node_id: Number(c.node_id.value),
        protocol: c.protocol.value,
        listen_port: c.listen_port.value === '' ? null : Number(c.listen_port.value),
        listen_port_end: c.listen_port_end.value === '' ? null : Number(c.listen_port_end.value),
        targets: c.targets.value
          .split('\n')
          .map((t) => t.trim())
          .filter(Boolean),
        strategy: c.strategy.value,
        weights: c.weights.value.trim() === '' ? null : listOf(c.weights.value).map(Number),
        forwarding: c.forwarding.value,
        tunnel_id: c.tunnel_id.value === '' ? null : Number(c.tunnel_id.value),
        enabled: c.enabled.checked,
        tags: listOf(c.tags.value),
        allow_sources: listOf(c.allow_sources.value),
        deny_sources: listOf(c.deny_sources.value),
        max_connections: c.max_connections.value === '' ? null : Number(c.max_connections.value),
        max_new_connections_per_second:
          c.max_new_connections_per_second.value === '' ? null : Number(c.max_new_connections_per_second.value),
        expires_at: utcFromLocal(c.expires_at.value),
        proxy_protocol: c.proxy_protocol.value,
        preserve_source: c.preserve_source.checked,
        source_address: c.source_address.value.trim() === '' ? null : c.source_address.value.trim(),
        bandwidth_limit: c.bandwidth_limit.value === '' ? null : Number(c.bandwidth_limit.value),
        allow_hours: parseHours(c.allow_hours.value),
        // The check's other settings are kept as they are (or their defaults).
        health_check:
          c.health_interval.value === ''
            ? null
            : { ...rule?.health_check, interval_seconds: Number(c.health_interval.value) },
        quota:
          c.quota_bytes.value === ''
            ? null
            : {
                bytes: Number(c.quota_bytes.value),
                period: c.quota_period.value,
                direction: c.quota_direction.value,
                reset_day: Number(c.quota_reset_day.value),
                reset_hour: Number(c.quota_reset_hour.value),
              },
      };
      try {
        if (rule) await api('PUT', `/api/rules/${rule.id}`, { body, ifMatch: etag });
        else await api('POST', '/api/rules', { body });
      } catch (error) {
        if (error instanceof ApiError && error.status === 412) {
          reload.hidden = false;
          throw new ApiError({
            ...error.problem,
            detail:
              'Someone changed this rule after you opened it, so nothing was saved. ' +
              'Load the current version and make your change again.',
          });
        }
        throw error;
      }
      dialog.close();
      ctx.say(rule ? `Saved ${body.name}` : `Created ${body.name}`);
      await ctx.reload();
    },
  );
  dialog.replaceChildren(h('h2', { id: 'rule-dialog-title' }, title), editor);
  if (!dialog.open) dialog.showModal();
  c.name.focus();
}
