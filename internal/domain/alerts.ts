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
  const status = first!.status === 'resolved' ? 'resolved' : 'FIRING';
  return `[portplane] ${status}: ${first!.summary}${rest.length > 0 ? ` (and ${rest.length} more)` : ''}`;
}

/** A notification as plain text, for a chat or a mail: one line per alert. */
export function payloadText(payload: NotificationPayload): string {
  if (!('alerts' in payload.data)) return `portplane: ${payload.data.message}`;
  const lines = payload.data.alerts.map((notice) => {
    const mark = notice.status === 'resolved' ? 'RESOLVED' : notice.repeat ? 'STILL FIRING' : 'FIRING';
    return `${mark} [${notice.alert_rule.name}] ${notice.summary}`;
  });
  return ['portplane alerts:', ...lines].join('\n');
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
export const channelTypes = ['webhook', 'telegram', 'email'] as const;
export type ChannelType = (typeof channelTypes)[number];

/** How an alert stands: pending its for_seconds, firing, or clearing through its damping. */
export const alertStates = ['pending', 'firing', 'clearing'] as const;
export type AlertState = (typeof alertStates)[number];

/** How a notification's delivery to a channel stands. */
export const deliveryStates = ['pending', 'sent', 'failed'] as const;
export type DeliveryState = (typeof deliveryStates)[number];

/** How many resources one rule follows at once: the first by id; the rest wait for these to clear. */
export const MAX_FINDINGS = 1000;
