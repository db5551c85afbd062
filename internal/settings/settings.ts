// The typed set of settings: each key's schema, default and meaning. PATCH validates
// against this table, GET shows every key, and the API reference is generated from it.

import type { TargetPolicy } from '../domain/rules.ts';
import { createHash } from 'node:crypto';
import { DEFAULT_SWITCHING } from '../domain/tunnels.ts';
import { masterOrigin, masterUrl } from '../schema/net.ts';
import { roles } from '../auth/principal.ts';
import { scopes } from '../auth/scopes.ts';
import type { SecretBox } from '../crypto/box.ts';
import { providerUrlProblem } from '../oidc/fetch.ts';
import {
  array,
  boolean,
  integer,
  nullable,
  object,
  oneOf,
  optional,
  string,
  type FieldError,
  type Infer,
  type Schema,
} from '../schema/schema.ts';
import type { Store } from '../store/store.ts';

interface Definition<T> {
  schema: Schema<T>;
  default: T;
  /** Changing it needs `*`: it redirects installs or weakens a protection. */
  guarded: boolean;
  /** A secret: kept sealed, written but never shown (GET says whether one is set, as `<key>_set`). */
  sealed?: boolean;
}

const GUARDED = ' Changing it needs the scope *.';

function setting(min: number, max: number, fallback: number, description: string, guarded = false): Definition<number> {
  return {
    schema: integer({ min, max, description: guarded ? description + GUARDED : description }),
    default: fallback,
    guarded,
  };
}

function text(fallback: string, schema: Schema<string>): Definition<string> {
  return {
    schema: { ...schema, json: { ...schema.json, description: `${schema.json.description}${GUARDED}` } },
    default: fallback,
    guarded: true,
  };
}

function choice<const V extends string>(fallback: V, values: readonly V[], description: string): Definition<V> {
  return { schema: oneOf(values, { description: description + GUARDED }), default: fallback, guarded: true };
}

/** Who signs in by the provider and is not a user yet is created as the first entry whose group they are in says. */
const provisioningEntry = object(
  {
    group: string({
      min: 1,
      max: 200,
      description: 'A value of the groups claim (oidc_groups_claim), or * for anyone the provider signs in.',
    }),
    role: oneOf(roles, { description: "The new user's role." }),
    plan_id: optional(nullable(integer({ min: 1, max: 2 ** 53 - 1, description: "A tenant's plan." })), null),
    scopes: optional(array(oneOf(scopes), { max: scopes.length, unique: true, description: 'Their scopes.' }), []),
  },
  { name: 'OidcProvisioning' },
);
export type ProvisioningEntry = Infer<typeof provisioningEntry>;

/** Why `value` may not be oidc_issuer, or null. */
function issuerProblem(value: string): string | null {
  if (value === '') return null;
  const problem = providerUrlProblem(value);
  if (problem) return problem;
  const url = new URL(value);
  return url.search || url.hash ? 'must have no query or fragment' : null;
}

/**
 * Services an install must not replace: the system's own (remote access, init, logging, time, the network and its
 * firewall, containers) and the master's. Installing writes the unit file and restarts the service of that name.
 */
// prettier-ignore
const SYSTEM_UNITS = new RegExp(
  `^(${[
    'ssh.*', 'sshd.*', 'systemd-.*', 'dbus.*', 'getty.*', 'user.*', 'cron', 'crond', 'anacron', 'atd', 'rsyslog',
    'syslog.*', 'journald', 'udev.*', 'polkit.*', 'network.*', 'networking', 'wpa_supplicant', 'ifup.*',
    'resolvconf', 'nftables', 'iptables', 'ip6tables', 'ufw', 'firewalld', 'apparmor', 'auditd', 'chrony.*', 'ntp.*',
    'docker.*', 'containerd.*', 'snapd.*', 'cloud-init.*', 'sudo', 'login', 'emergency', 'rescue', 'reboot',
    'poweroff', 'halt', 'shutdown', 'portplane-master',
  ].join('|')})$`,
);

/** System folders, and what is under them, that an install must not write into. */
// prettier-ignore
const SYSTEM_DIRS = [
  '/bin', '/boot', '/dev', '/etc', '/lib', '/lib32', '/lib64', '/libx32', '/proc', '/run', '/sbin', '/sys', '/tmp',
  '/usr/bin', '/usr/sbin', '/usr/lib', '/usr/lib32', '/usr/lib64', '/usr/libexec', '/usr/include', '/usr/share',
  '/usr/src', '/usr/local/bin', '/usr/local/sbin', '/usr/local/lib', '/usr/local/etc', '/usr/local/share',
  '/var/tmp', '/var/log', '/var/run', '/var/lock', '/var/spool', '/var/cache', '/var/mail', '/var/backups',
];

function installDirProblem(dir: string): string | null {
  const parts = dir.split('/').slice(1);
  if (parts.includes('..') || parts.includes('.')) return 'must not contain . or ..';
  if (parts.length < 2) return 'must be a folder of its own, two levels deep at least (as /opt/portplane)';
  const system = SYSTEM_DIRS.find((root) => dir === root || dir.startsWith(`${root}/`));
  return system ? `must not be in ${system}, a folder of the system` : null;
}

/** The most standbys agents are told of. */
export const MAX_STANDBYS = 7;

/** The standby masters a setting lists (see standby_masters), each an address and a pin or none. */
export function standbysOf(value: string): { url: string; pin: string | null }[] {
  return value
    .split(',')
    .map((entry) => entry.trim())
    .filter((entry) => entry !== '')
    .map((entry) => {
      const [url = '', pin = null] = entry.split(/\s+/);
      return { url: masterOrigin(url) ?? url, pin };
    });
}

/** Why a standby_masters value is not one, or null. */
function standbysProblem(value: string): string | null {
  const standbys = standbysOf(value);
  if (standbys.length > MAX_STANDBYS) return `must list at most ${MAX_STANDBYS} standbys`;
  for (const { url, pin } of standbys) {
    if (masterOrigin(url) === null) return `'${url.slice(0, 80)}' is not http(s)://HOST[:PORT]`;
    if (pin !== null && !/^sha256\/[A-Za-z0-9+/]{43}=$/.test(pin)) return `'${pin.slice(0, 60)}' is not a key pin`;
    if (pin !== null && !url.startsWith('https:')) return `${url} has a pin: give it as https://`;
  }
  return null;
}

export const definitions = {
  session_ttl_seconds: setting(60, 31_536_000, 43_200, 'Lifetime of a login session token, in seconds.', true),
  login_max_failures: setting(
    1,
    1000,
    5,
    'Failed logins per username within login_window_seconds before each further attempt must wait, longer each ' +
      'time (429).',
    true,
  ),
  login_max_failures_per_address: setting(
    1,
    100_000,
    20,
    'Failed logins per client address within login_window_seconds before further attempts are refused (429).',
    true,
  ),
  login_window_seconds: setting(10, 86_400, 900, 'Window over which failed logins are counted, in seconds.', true),
  write_budget_per_minute: setting(
    0,
    1_000_000,
    1200,
    'Writes (non-GET requests) one user may make per minute, over all its tokens and sessions; 0 turns the budget off.',
    true,
  ),
  audit_retention_days: setting(1, 36_500, 90, 'Audit entries older than this are pruned, in days.', true),
  traffic_retention_days: setting(
    1,
    36_500,
    730,
    'Traffic and node vitals older than this are deleted, whatever their resolution, in days.',
    true,
  ),
  history_minutes_hours: setting(
    1,
    8760,
    24,
    'Traffic and node vitals are kept a point a minute for this long, then an hour at a time, in hours.',
    true,
  ),
  history_hours_days: setting(
    1,
    3650,
    35,
    'Traffic and node vitals are kept a point an hour for this long, then a day at a time (until ' +
      'traffic_retention_days), in days.',
    true,
  ),
  agent_report_interval_seconds: setting(1, 3600, 10, 'How often agents report traffic, in seconds.'),
  write_wait_seconds: setting(
    1,
    300,
    15,
    'How long a write waits in line while an import or batch is being written (one at most: writes waiting go ' +
      'before the next) before it is refused with 503 and Retry-After, having changed nothing, in seconds.',
    true,
  ),
  sync_wait_seconds: setting(
    0,
    60,
    5,
    'How long a sync request waits for the node to acknowledge before answering 202, in seconds.',
  ),
  tcp_idle_timeout_seconds: setting(
    10,
    604_800,
    3600,
    'Agents end a TCP connection that carried no byte either way for this long, in seconds (the relay closes it, ' +
      'the kernel path forgets it).',
    true,
  ),
  srv_ttl_min_seconds: setting(
    1,
    3600,
    5,
    "Agents keep a rule's SRV records at least this long, whatever their TTL says, in seconds (see " +
      'srv_ttl_max_seconds).',
  ),
  srv_ttl_max_seconds: setting(
    1,
    86_400,
    300,
    "Agents read a rule's SRV records again after their TTL, and at the latest after this long, in seconds; the " +
      'lower bound wins where the two cross.',
  ),
  tunnel_round_seconds: setting(
    1,
    60,
    DEFAULT_SWITCHING.round_seconds,
    "How often a tunnel's entry measures each exit, in seconds: a PING of each session and, with several exits or a " +
      'probe target, a probe through each exit (a round). Loss is counted over the last 12 PINGs.',
  ),
  tunnel_switch_rounds: setting(
    1,
    100,
    DEFAULT_SWITCHING.rounds,
    'Rounds in a row a better exit must stay better before the entry moves new connections to it (lowest_latency), ' +
      'or an earlier exit must stay up before they go back to it (failover). A chosen exit down is left at once.',
  ),
  tunnel_switch_gain_ms: setting(
    0,
    10_000,
    DEFAULT_SWITCHING.gain_ms,
    "How much lower, in ms, a better exit's score must be than the chosen one's to count as better (lowest_latency); " +
      'tunnel_switch_gain_percent must hold too.',
  ),
  tunnel_switch_gain_percent: setting(
    0,
    100,
    DEFAULT_SWITCHING.gain_percent,
    "How much lower, in percent of the chosen exit's score, a better exit's must be (lowest_latency); " +
      'tunnel_switch_gain_ms must hold too.',
  ),
  tunnel_switch_cooldown_seconds: setting(
    0,
    86_400,
    DEFAULT_SWITCHING.cooldown_seconds,
    "How long after the entry's choice of exit last moved it may move again for a gain, in seconds (a chosen exit " +
      'down is left at once).',
  ),
  totp_required: setting(
    0,
    2,
    0,
    "Whom a second factor is required of: 0, nobody (each user's choice); 1, every holder of the scope *; 2, " +
      'everyone. A user it requires who has none signs in to a session without scopes, good only for enrolling one ' +
      '(POST /api/auth/totp, then its confirm), and signs in again with a code.',
    true,
  ),
  allow_local_rule_targets: setting(
    0,
    1,
    0,
    "1 lets operators' rules target what is local to their node (localhost, loopback and link-local addresses such " +
      "as cloud metadata, the node's own host) and the master; 0 refuses such targets, and agents refuse to dial any " +
      "name that resolves to one. A tenant's rule never reaches them, whatever this says.",
    true,
  ),
  allow_local_channel_targets: setting(
    0,
    1,
    0,
    '1 lets alert channels send to what is local to the master (a receiver on its loopback or link) and to the ' +
      'master itself; 0 refuses such addresses, as written and as resolved at each delivery.',
    true,
  ),
  max_connections_per_source: setting(
    1,
    100_000,
    256,
    'Open TCP connections, and UDP sessions, one client address may hold on one rule; agents close further ' +
      'connections at once and drop datagrams that would open further sessions, on the relay and in the kernel.',
    true,
  ),
  install_dir: text(
    '/opt/portplane',
    string({
      min: 2,
      max: 200,
      pattern: /^(\/[A-Za-z0-9._-]+)+$/,
      refine: installDirProblem,
      patternHint: 'must be an absolute path of letters, digits and . _ -',
      description:
        'Where install-ssh puts the agent (and, if the node has no Node.js, a runtime) on a node: a folder of its ' +
        "own, two levels deep at least, in none of the system's folders (/etc, /usr, /var/log, /tmp, ...).",
    }),
  ),
  install_service_name: text(
    'portplane-agent',
    string({
      min: 1,
      max: 64,
      pattern: /^[a-z0-9][a-z0-9_.-]*$/,
      refine: (name) =>
        SYSTEM_UNITS.test(name)
          ? 'names a service of the system (ssh, systemd-*, dbus, cron, ...): choose another'
          : null,
      patternHint: 'must be lower-case letters, digits and _ . -',
      description: "Name of the systemd service install-ssh creates on a node; not one of the system's own.",
    }),
  ),
  tls_next_pin: text(
    '',
    string({
      min: 0,
      max: 52,
      pattern: /^(sha256\/[A-Za-z0-9+/]{43}=)?$/,
      patternHint: 'must be empty or sha256/<base64 of 32 bytes>',
      description:
        'The pin of the key the master will serve next, announced to every connected agent so it accepts that ' +
        "key after the switch (see Rotating the master's key). Empty: none.",
    }),
  ),
  standby_masters: text(
    '',
    string({
      min: 0,
      max: 2000,
      refine: (value) => standbysProblem(value),
      description:
        "The standby masters' addresses, comma-separated, each with its key pin after a space where it serves its " +
        'own certificate (`https://192.0.2.2:8443 sha256/...`). Every agent is told them with its config and tries ' +
        'them when it loses its master, so an install or reinstall need not list them. Empty: none.',
    }),
  ),
  replication_mode: text(
    'async',
    string({
      min: 4,
      max: 5,
      pattern: /^(async|sync)$/,
      patternHint: 'must be async or sync',
      description:
        'async: a write is answered once committed here, and a standby takes it within moments (its lag says how ' +
        'far behind it may be). sync: a write is answered only once a standby holds it too, so a promotion loses no ' +
        'write that was answered, unless the standby did not answer within replication_sync_timeout_seconds: then ' +
        'the primary goes on alone, and says so (health), until the standby is in step again.',
    }),
  ),
  replication_sync_timeout_seconds: setting(
    1,
    3600,
    10,
    'In sync mode, how long a write waits for a standby to hold it before the primary goes on alone.',
    true,
  ),
  install_master_url: text(
    '',
    masterUrl({
      allowEmpty: true,
      description:
        'The address installed agents dial (an install naming another needs *); empty: the address the install ' +
        'request was sent to, unless the master serves plain HTTP behind a proxy (--insecure-http), where installs ' +
        'then refuse until it is set.',
    }),
  ),
  public_url: text(
    '',
    masterUrl({
      allowEmpty: true,
      description:
        'The address people open the console at (http(s)://HOST[:PORT]): where the identity provider sends a ' +
        "sign-in back to (its redirect URI is this with /api/auth/oidc/callback) and passkeys' origin (their RP id " +
        'is its host, which must be a name: passkeys are off while it is empty or an IP address).',
    }),
  ),
  oidc_issuer: text(
    '',
    string({
      min: 0,
      max: 300,
      refine: issuerProblem,
      description:
        "The organisation's OpenID provider, as its ID tokens name it (iss; its discovery document is read from " +
        '/.well-known/openid-configuration under it); https, or http on loopback. Empty: sign-in by a provider is off.',
    }),
  ),
  oidc_client_id: text(
    '',
    string({
      min: 0,
      max: 200,
      pattern: /^[\x21-\x7e]*$/,
      patternHint: 'must be visible ASCII',
      description: 'The client id the provider knows the master by.',
    }),
  ),
  oidc_client_secret: {
    schema: string({
      min: 0,
      max: 1024,
      secret: true,
      description:
        "The client's secret at the provider: kept sealed, never shown (GET answers oidc_client_secret_set); empty: " +
        'none (a public client, PKCE alone).' +
        GUARDED,
    }),
    default: '',
    guarded: true,
    sealed: true,
  },
  oidc_scopes: text(
    'openid email profile',
    string({
      min: 6,
      max: 300,
      pattern: /^[\x21\x23-\x5b\x5d-\x7e]+( [\x21\x23-\x5b\x5d-\x7e]+)*$/,
      patternHint: 'must be scope names separated by single spaces',
      refine: (value) => (value.split(' ').includes('openid') ? null : 'must include openid'),
      description:
        'The scopes asked of the provider, openid among them; with offline_access the provider gives a refresh ' +
        'token, which is how the master asks it again, every oidc_check_seconds, whether the user may still sign in.',
    }),
  ),
  oidc_username_claim: choice(
    'sub',
    ['sub', 'email'],
    "The claim whose value is the user's username: sub (the provider's id of them), or email (taken only with " +
      'email_verified true).',
  ),
  oidc_groups_claim: text(
    'groups',
    string({
      min: 1,
      max: 100,
      pattern: /^[A-Za-z0-9_:./-]+$/,
      patternHint: 'must be letters, digits and _ : . / -',
      description: 'The claim listing the groups a user is in (an array of strings), read by oidc_provisioning.',
    }),
  ),
  oidc_provisioning: {
    schema: array(provisioningEntry, {
      max: 50,
      description:
        'Who signs in by the provider without being a user yet, and as what: the first entry whose group is in ' +
        'their groups claim (or is *) creates them with its role, plan and scopes; none matching, or an empty list, ' +
        'refuses them. A user, once created, is changed only by operators.' +
        GUARDED,
    }),
    default: [] as ProvisioningEntry[],
    guarded: true,
  },
  oidc_name: text(
    'your organisation',
    string({
      min: 1,
      max: 60,
      pattern: /^[^\x00-\x1f\x7f]+$/,
      patternHint: 'must be printable',
      description: 'What the console\'s button calls the provider: "Sign in with <this>".',
    }),
  ),
  oidc_check_seconds: setting(
    15,
    3600,
    60,
    'How often the master asks the provider, with its refresh token, whether a session it opened may go on: one ' +
      'it refuses ends at once, one it cannot answer for 15 minutes ends too. A session the provider gave no ' +
      'refresh token for ends when its access token does.',
    true,
  ),
  password_login: choice(
    'everyone',
    ['everyone', 'operators', 'nobody'],
    'Who may sign in with a password: everyone; operators, only holders of * (a way in while the provider is down: ' +
      'everyone else signs in by the provider or a passkey); nobody.',
  ),
} satisfies Record<string, Definition<number> | Definition<string> | Definition<ProvisioningEntry[]>>;

export type SettingKey = keyof typeof definitions;
export type SettingValues = { [K in SettingKey]: (typeof definitions)[K]['default'] };

export const settingKeys = Object.keys(definitions) as SettingKey[];

/** The settings kept sealed and never shown. */
const sealedKeys = settingKeys.filter((key) => (definitions[key] as Definition<unknown>).sealed);
type SealedKey = 'oidc_client_secret';

/** What GET shows: every setting but a secret, which shows only whether one is set. */
export type ShownSettings = Omit<SettingValues, SealedKey> & { [K in `${SealedKey}_set`]: boolean };

/** The settings agents receive with their config, so a change is pushed to every connected agent. */
export const agentKeys: readonly SettingKey[] = [
  'agent_report_interval_seconds',
  'tcp_idle_timeout_seconds',
  'srv_ttl_min_seconds',
  'srv_ttl_max_seconds',
  'tunnel_round_seconds',
  'tunnel_switch_rounds',
  'tunnel_switch_gain_ms',
  'tunnel_switch_gain_percent',
  'tunnel_switch_cooldown_seconds',
  'max_connections_per_source',
  'allow_local_rule_targets',
  'tls_next_pin',
  'standby_masters',
];

/** The settings that only a holder of `*` may change. */
export const guardedKeys = settingKeys.filter((key) => definitions[key].guarded);

export function defaults(): SettingValues {
  return Object.fromEntries(settingKeys.map((key) => [key, definitions[key].default])) as SettingValues;
}

/** The response schema: every key, required; a secret as whether it is set. */
export const settingsSchema = object(
  Object.fromEntries(
    settingKeys.map((key) =>
      sealedKeys.includes(key)
        ? [`${key}_set`, boolean({ description: `Whether ${key} is set (it is never shown).` })]
        : [key, definitions[key].schema],
    ),
  ) as { [K in keyof ShownSettings]: Schema<ShownSettings[K]> },
  { name: 'Settings', description: 'Every setting with its current value.' },
);

/** The merge-patch schema (RFC 7396): any subset of keys; null resets a key to its default. */
export const settingsPatchSchema = object(
  Object.fromEntries(
    settingKeys.map((key) => [key, optional(nullable(definitions[key].schema as Schema<unknown>))]),
  ) as {
    [K in SettingKey]: ReturnType<typeof optional<SettingValues[K] | null>>;
  },
  {
    name: 'SettingsPatch',
    description: 'A JSON merge patch: keys to change; null resets a key to its default.',
    minProperties: 1,
  },
);

/** `values` as GET shows them: a secret only as whether it is set. */
export function shownOf(values: SettingValues): ShownSettings {
  const shown: Record<string, unknown> = { ...values };
  for (const key of sealedKeys) {
    delete shown[key];
    shown[`${key}_set`] = values[key] !== '';
  }
  return shown as ShownSettings;
}

function same(a: unknown, b: unknown): boolean {
  return a === b || (typeof a === 'object' && JSON.stringify(a) === JSON.stringify(b));
}

/**
 * Current settings, cached in memory; the store holds only keys that differ from defaults, a secret sealed (its
 * value in memory is the plain one, for the master's own use).
 */
/**
 * Where a rule's targets or an alert channel may reach under the settings now: local addresses with the setting at 1,
 * and the master known by install_master_url's host.
 */
export function localPolicy(
  settings: Pick<Settings, 'get'>,
  setting: 'allow_local_rule_targets' | 'allow_local_channel_targets',
): TargetPolicy {
  const masterUrl = settings.get('install_master_url');
  return {
    allowLocal: settings.get(setting) === 1,
    masterHosts: masterUrl ? [new URL(masterUrl).hostname.replace(/^\[|\]$/g, '')] : [],
  };
}

export class Settings {
  private current: SettingValues;
  private shown: ShownSettings;

  constructor(
    private readonly store: Store,
    private readonly box: SecretBox,
  ) {
    this.current = this.load();
    this.shown = this.showing();
  }

  /** What GET shows: no secret. */
  get values(): Readonly<ShownSettings> {
    return this.shown;
  }

  get<K extends SettingKey>(key: K): SettingValues[K] {
    return this.current[key];
  }

  /** A content hash: equal settings have equal ETags, any change gives a new one (a secret's too). */
  etag(): string {
    const digest = createHash('sha256').update(JSON.stringify(this.current)).digest('base64url').slice(0, 16);
    return `"${digest}"`;
  }

  /**
   * Applies a validated merge patch; the caller runs it inside a write with its audit entry. A secret's change is
   * told as whether it is set, never as its value.
   */
  apply(patch: { [K in SettingKey]?: SettingValues[K] | null }): {
    changed: SettingKey[];
    before: Record<string, unknown>;
    after: Record<string, unknown>;
  } {
    const changed: SettingKey[] = [];
    const before: Record<string, unknown> = {};
    const after: Record<string, unknown> = {};
    for (const key of settingKeys) {
      const value = patch[key];
      if (value === undefined) continue;
      const next = value === null ? definitions[key].default : value;
      if (same(next, this.current[key])) continue;
      const sealed = sealedKeys.includes(key);
      changed.push(key);
      before[sealed ? `${key}_set` : key] = sealed ? this.current[key] !== '' : this.current[key];
      after[sealed ? `${key}_set` : key] = sealed ? next !== '' : next;
      if (value === null || same(next, definitions[key].default)) this.store.settings.remove(key);
      else this.store.settings.put(key, sealed ? Buffer.from(this.box.seal(next as string)).toString('base64') : next);
    }
    return { changed, before, after };
  }

  /** Re-reads the store; call after a write commits (or rolls back). */
  reload(): void {
    this.current = this.load();
    this.shown = this.showing();
  }

  private showing(): ShownSettings {
    return shownOf(this.current);
  }

  private load(): SettingValues {
    const stored = this.store.settings.all();
    const values = defaults();
    for (const key of settingKeys) {
      let raw = stored[key];
      if (raw !== undefined && sealedKeys.includes(key)) raw = this.unsealed(raw);
      const errors: FieldError[] = [];
      const value = (definitions[key].schema as Schema<unknown>).check(raw, '#', errors);
      // A stored value this version no longer accepts falls back to the default rather than
      // keeping the master from starting.
      if (raw !== undefined && errors.length === 0) Object.assign(values, { [key]: value });
    }
    return values;
  }

  /** A sealed secret's plain value; undefined (the default) for one that does not open under this master's key. */
  private unsealed(raw: unknown): string | undefined {
    if (typeof raw !== 'string') return undefined;
    try {
      return this.box.open(Buffer.from(raw, 'base64'));
    } catch {
      return undefined;
    }
  }
}
