// What a notification says: the JSON every channel is sent (a webhook as is, a chat as text made from it), for
// alerts that fire or resolve, several at once to one channel in one message, and for a channel's test.

/** What an alert rule can watch (see the API reference, "Alerts"). */
export const alertConditions = [
  'node_offline',
  'agent_outdated',
  'agent_crashloop',
  'kernel_drift',
  'rule_sync_failed',
  'rule_degraded',
  'tunnel_down',
  'quota_percent',
  'quota_spent',
  'rule_expiring',
  'license_expiring',
  'certificate_expiring',
  'writes_refused',
] as const;
export type AlertCondition = (typeof alertConditions)[number];

/** One alert's turn, as notified. */
export interface AlertNotice {
  status: 'firing' | 'resolved';
  alert_rule: { id: number; name: string };
  condition: string;
  resource: string;
  resource_id: number;
  summary: string;
  /** Since when the condition has held (firing) or held (resolved). */
  since: string;
  /** A firing alert notified again while it holds (the rule's repeat_seconds). */
  repeat: boolean;
  resolved_at: string | null;
  /** The node it is on (a tunnel: its entry), by name as it was when notified; null for the master's own. */
  node?: { id: number; name: string } | null;
  /** Where the console shows it (public_url and the page); null while public_url is unset. */
  link?: string | null;
}

/** The body of every notification (Standard Webhooks' recommended shape: type, timestamp, data). */
export interface NotificationPayload {
  type: 'alert.notification' | 'channel.test';
  timestamp: string;
  data: { alerts: AlertNotice[] } | { channel: { id: number; name: string }; message: string };
}

export function alertPayload(notices: AlertNotice[], at: string): NotificationPayload {
  return { type: 'alert.notification', timestamp: at, data: { alerts: notices } };
}

export function testPayload(channel: { id: number; name: string }, at: string): NotificationPayload {
  const message = `a test of channel ${channel.name} from portplane`;
  return { type: 'channel.test', timestamp: at, data: { channel, message } };
}

/** A notification's subject, for a mail: its first alert, and how many more it tells. */
export function payloadSubject(payload: NotificationPayload): string {
  if (!('alerts' in payload.data)) return `[portplane] ${payload.data.message}`;
  const [first, ...rest] = payload.data.alerts;
  return `[portplane] ${markOf(first!)}: ${first!.summary}${rest.length > 0 ? ` (and ${rest.length} more)` : ''}`;
}

/** What an alert's turn is, as a word a reader sees first. */
export function markOf(notice: AlertNotice): string {
  return notice.status === 'resolved' ? 'RESOLVED' : notice.repeat ? 'STILL FIRING' : 'FIRING';
}

/** How long `ms` is, in the largest units that say it (at most two): "45 s", "12 min", "3 h 5 min", "2 d 4 h". */
export function spoken(ms: number): string {
  const seconds = Math.max(0, Math.round(ms / 1000));
  const units: [number, string][] = [
    [86_400, 'd'],
    [3_600, 'h'],
    [60, 'min'],
    [1, 's'],
  ];
  const first = units.findIndex(([size]) => seconds >= size);
  if (first < 0) return '0 s';
  const [size, name] = units[first]!;
  const parts = [`${Math.floor(seconds / size)} ${name}`];
  const next = units[first + 1];
  if (next && first < 3 && seconds % size >= next[0])
    parts.push(`${Math.floor((seconds % size) / next[0])} ${next[1]}`);
  return parts.join(' ');
}

/** A time as people read it in a message: "2026-12-07 07:12 UTC". */
export function readableTime(at: string): string {
  return `${at.slice(0, 10)} ${at.slice(11, 16)} UTC`;
}

/** Since when and how long, in words: "since 07:12 UTC, for 5 min" or "from 07:12 to 07:40 UTC (28 min)". */
export function durationOf(notice: AlertNotice, at: string): string {
  const since = Date.parse(notice.since);
  if (notice.status === 'resolved') {
    const until = notice.resolved_at ?? at;
    return `from ${readableTime(notice.since)} to ${readableTime(until)} (${spoken(Date.parse(until) - since)})`;
  }
  return `since ${readableTime(notice.since)}, for ${spoken(Date.parse(at) - since)}`;
}

/** A notification as plain text, for a mail or a chat: each alert with when, how long, where, and its link. */
export function payloadText(payload: NotificationPayload): string {
  if (!('alerts' in payload.data)) return `portplane: ${payload.data.message}`;
  const blocks = payload.data.alerts.map((notice) =>
    [
      `${markOf(notice)}: ${notice.summary}`,
      `  alert rule: ${notice.alert_rule.name} (${notice.condition})`,
      ...(notice.node ? [`  node: ${notice.node.name}`] : []),
      `  ${durationOf(notice, payload.timestamp)}`,
      ...(notice.link ? [`  open: ${notice.link}`] : []),
    ].join('\n'),
  );
  return [`portplane alerts at ${readableTime(payload.timestamp)}:`, ...blocks].join('\n\n');
}

/** Whether version `a` (major.minor.patch, any suffix ignored) is older than `b`; false when either is not one. */
export function olderVersion(a: string, b: string): boolean {
  const parts = (version: string) => /^v?(\d+)\.(\d+)\.(\d+)/.exec(version)?.slice(1).map(Number);
  const [x, y] = [parts(a), parts(b)];
  if (!x || !y) return false;
  for (let i = 0; i < 3; i++) if (x[i] !== y[i]) return x[i]! < y[i]!;
  return false;
}

/** The kinds of channel alerts leave by. */
export const channelTypes = ['webhook', 'telegram', 'email', 'slack', 'discord', 'teams', 'ntfy'] as const;
export type ChannelType = (typeof channelTypes)[number];

/** How an alert stands: pending its for_seconds, firing, or clearing through its damping. */
export const alertStates = ['pending', 'firing', 'clearing'] as const;
export type AlertState = (typeof alertStates)[number];

/** How a notification's delivery to a channel stands. */
export const deliveryStates = ['pending', 'sent', 'failed'] as const;
export type DeliveryState = (typeof deliveryStates)[number];

/** How many resources one rule follows at once: the first by id; the rest wait for these to clear. */
export const MAX_FINDINGS = 1000;
