// Master configuration: flags over MASTER_* environment over defaults, validated up front.

import { MIN_PASSWORD } from '../../internal/auth/secrets.ts';
import type { Parsed } from '../../internal/runtime/cli.ts';
import { isLoopback, masterOrigin } from '../../internal/schema/net.ts';
import { PIN } from '../../internal/tls/pin.ts';

export interface MasterConfig {
  host: string;
  port: number;
  dataDir: string;
  /** The key that seals SSH credentials; null: secret.key in the data dir. */
  secretKeyPath: string | null;
  /** Path to the PEM public key that signs licenses; null: the built-in vendor key. */
  licenseKeyPath: string | null;
  /** Paths to the PEM public keys of the release keys agent bundles are signed with (more than one: a rotation). */
  releaseKeyPaths: string[];
  /** The `.sig` of the agent bundle this master carries, by a release key: the master then offers that bundle too. */
  agentSignaturePath: string | null;
  /** Password for the first admin; null: generate one and print it once. */
  adminPassword: string | null;
  /** The certificate and key to serve HTTPS with; null: the master's own off loopback, plain HTTP on it. */
  tls: { certPath: string; keyPath: string } | null;
  /** Serve plain HTTP off loopback (behind a TLS-terminating proxy). */
  insecureHttp: boolean;
  /** The primary this master is a standby of (its address, key pin, and a token with the replication scope). */
  follow: { url: string; pin: string | null; token: string } | null;
  /** Masters elected through etcd: its members, the cluster's key prefix, TLS to it, and this master's address. */
  etcd: EtcdConfig | null;
}

export interface EtcdConfig {
  endpoints: string[];
  prefix: string;
  caPath: string | null;
  certPath: string | null;
  keyPath: string | null;
  /** The address this master publishes for standbys and agents (--advertise). */
  advertise: string;
  /** A token with the replication scope, to follow whichever master leads; null: this master cannot follow. */
  token: string | null;
  /** Whether a leader at a plain http:// address off this machine may be followed (--follow-insecure). */
  followInsecure: boolean;
}

const TOKEN = /^mst_[A-Za-z0-9_-]{20,200}$/;

export type ParseResult = Parsed<MasterConfig>;

export const usage = `Usage: master [options]

Options:
  --listen HOST:PORT     where to serve the admin API (env MASTER_LISTEN, default 127.0.0.1:8080)
  --data-dir DIR         where the database and license live (env MASTER_DATA_DIR, default ./data)
  --secret-key FILE      the key that seals stored SSH credentials, made on first start (env
                         MASTER_SECRET_KEY, default DATA_DIR/secret.key); keep it outside the
                         data dir so that a copy of the data dir alone cannot unseal them
  --license-key FILE     PEM public key that signs licenses (env MASTER_LICENSE_KEY, default: built-in)
  --release-key FILE     PEM public key of the release key agent bundles are signed with (npm run release --
                         keygen); several, comma-separated, while a key is replaced (env MASTER_RELEASE_KEY)
  --agent-signature FILE the release's signature of the agent this master carries (npm run release -- sign
                         dist/agent.mjs): checked at start, and that agent is then kept among the bundles
                         rollouts take to nodes (env MASTER_AGENT_SIGNATURE)
  --tls-cert FILE        serve HTTPS with this PEM certificate (chain) ... (env MASTER_TLS_CERT)
  --tls-key FILE         ... and its PEM private key (env MASTER_TLS_KEY); reloaded on SIGHUP.
                         Without them the master serves plain HTTP on a loopback address and,
                         on any other, HTTPS with a certificate it makes once in DATA_DIR/tls
  --insecure-http        serve plain HTTP on a non-loopback address, for a TLS-terminating
                         proxy in front (env MASTER_INSECURE_HTTP=1)
  --follow URL           run as a standby of the primary at URL: keep a copy of its database, serve
                         reads of it, refuse writes (env MASTER_FOLLOW; MASTER_FOLLOW_TOKEN, a token of
                         the primary with the replication scope, and MASTER_FOLLOW_PIN, its key pin, if it
                         serves its own certificate)
  --follow-insecure      allow --follow toward a plain http:// primary that is not on this machine: the
                         replication token, which reads the whole database, then crosses the network in
                         clear (env MASTER_FOLLOW_INSECURE=1; --insecure-http does not allow it)
  --etcd URL[,URL...]    elect the primary among masters through etcd (v3, its JSON gateway) at these member
                         addresses: the leader serves writes and agents, the others follow it as standbys and
                         one takes over when it is gone (env MASTER_ETCD; needs --advertise)
  --etcd-prefix PREFIX   the cluster's keys in etcd (env MASTER_ETCD_PREFIX, default /portplane)
  --etcd-ca FILE         the CA etcd's certificates are checked by (env MASTER_ETCD_CA) ...
  --etcd-cert FILE       ... and this master's client certificate (env MASTER_ETCD_CERT) ...
  --etcd-key FILE        ... and its key (env MASTER_ETCD_KEY), for https:// members
  --advertise URL        with --etcd: this master's own address, which etcd tells standbys and agents when it
                         leads (env MASTER_ADVERTISE)
  --help                 show this help
  --version              show the version

Environment only:
  MASTER_ADMIN_PASSWORD  password of the first admin, created on first start (default: generated and printed once)
  MASTER_FOLLOW_TOKEN    with --follow: the primary's token with the replication scope; with --etcd, the leader's
                         (made on the first master, which leads alone), for the others to follow it
  MASTER_FOLLOW_PIN      with --follow: the primary's key pin (sha256/...), for its own certificate
`;

const FLAGS = {
  '--listen': 'MASTER_LISTEN',
  '--data-dir': 'MASTER_DATA_DIR',
  '--secret-key': 'MASTER_SECRET_KEY',
  '--license-key': 'MASTER_LICENSE_KEY',
  '--release-key': 'MASTER_RELEASE_KEY',
  '--agent-signature': 'MASTER_AGENT_SIGNATURE',
  '--tls-cert': 'MASTER_TLS_CERT',
  '--tls-key': 'MASTER_TLS_KEY',
  '--follow': 'MASTER_FOLLOW',
  '--etcd': 'MASTER_ETCD',
  '--etcd-prefix': 'MASTER_ETCD_PREFIX',
  '--etcd-ca': 'MASTER_ETCD_CA',
  '--etcd-cert': 'MASTER_ETCD_CERT',
  '--etcd-key': 'MASTER_ETCD_KEY',
  '--advertise': 'MASTER_ADVERTISE',
} as const;
/** Flags that take no value; their environment variable is on when it is 1 or true. */
const SWITCHES = { '--insecure-http': 'MASTER_INSECURE_HTTP', '--follow-insecure': 'MASTER_FOLLOW_INSECURE' } as const;

/** Splits `host:port`, `[v6]:port` or `:port`. Returns an error string when it is not one. */
export function parseListen(value: string): { host: string; port: number } | string {
  const match = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]]*)):(\d{1,5})$/.exec(value);
  const port = match ? Number(match[3]) : NaN;
  if (!match || port > 65535) return `--listen must be HOST:PORT (e.g. 127.0.0.1:8080 or [::1]:8080), got '${value}'`;
  return { host: match[1] ?? (match[2] || '0.0.0.0'), port };
}

export function parseConfig(argv: readonly string[], env: Record<string, string | undefined>): ParseResult {
  const values: Record<string, string | undefined> = {};
  for (const [flag, name] of Object.entries(FLAGS)) values[flag] = env[name];
  const switches: Record<string, boolean> = {};
  for (const [flag, name] of Object.entries(SWITCHES)) switches[flag] = /^(1|true)$/i.test(env[name] ?? '');
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--help' || arg === '-h') return { exit: 'help' };
    if (arg === '--version') return { exit: 'version' };
    if (Object.hasOwn(SWITCHES, arg)) {
      switches[arg] = true;
      continue;
    }
    const [flag, inline] = arg.includes('=')
      ? [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)]
      : [arg, undefined];
    if (!Object.hasOwn(FLAGS, flag)) return { error: `unknown option '${arg}' (see --help)` };
    const value = inline ?? argv[++i];
    if (value === undefined || value === '') return { error: `${flag} needs a value` };
    values[flag] = value;
  }
  const listen = parseListen(values['--listen'] ?? '127.0.0.1:8080');
  if (typeof listen === 'string') return { error: listen };
  const adminPassword = env.MASTER_ADMIN_PASSWORD || null;
  if (adminPassword !== null && adminPassword.length < MIN_PASSWORD) {
    return { error: `MASTER_ADMIN_PASSWORD must have at least ${MIN_PASSWORD} characters` };
  }
  const [certPath, keyPath] = [values['--tls-cert'], values['--tls-key']];
  if (Boolean(certPath) !== Boolean(keyPath)) return { error: '--tls-cert and --tls-key go together' };
  const insecureHttp = switches['--insecure-http']!;
  if (certPath && insecureHttp) return { error: '--insecure-http and --tls-cert contradict each other: choose one' };
  const follow = followOf(values['--follow'], env, switches['--follow-insecure']!);
  if (typeof follow === 'string') return { error: follow };
  const etcd = etcdOf(values, env, switches['--follow-insecure']!);
  if (typeof etcd === 'string') return { error: etcd };
  if (etcd && follow) return { error: '--etcd and --follow contradict each other: with etcd, the leader is followed' };
  return {
    config: {
      ...listen,
      dataDir: values['--data-dir'] ?? './data',
      secretKeyPath: values['--secret-key'] ?? null,
      licenseKeyPath: values['--license-key'] ?? null,
      releaseKeyPaths: (values['--release-key'] ?? '').split(',').filter((path) => path !== ''),
      agentSignaturePath: values['--agent-signature'] ?? null,
      adminPassword,
      tls: certPath && keyPath ? { certPath, keyPath } : null,
      insecureHttp,
      follow,
      etcd,
    },
  };
}

/** Whether a plain http:// address would cross the network (and what it carries travel in clear). */
const offMachine = (origin: string) => {
  const { protocol, hostname } = new URL(origin);
  return protocol === 'http:' && !isLoopback(hostname.replace(/^\[|\]$/g, ''));
};

/** Election through etcd, from --etcd and what goes with it, or why they are not one. */
function etcdOf(
  values: Record<string, string | undefined>,
  env: Record<string, string | undefined>,
  followInsecure: boolean,
): EtcdConfig | string | null {
  const given = values['--etcd'];
  const withIt = ['--etcd-prefix', '--etcd-ca', '--etcd-cert', '--etcd-key', '--advertise'].find(
    (flag) => values[flag],
  );
  if (!given) return withIt ? `${withIt} goes with --etcd` : null;
  const endpoints: string[] = [];
  for (const part of given.split(',')) {
    const origin = masterOrigin(part);
    if (!origin) return `--etcd takes etcd members' addresses, http(s)://HOST:PORT, comma-separated, got '${part}'`;
    if (offMachine(origin))
      return (
        `--etcd ${origin}: the leader's address and key pin come from etcd, so etcd off this machine is spoken to ` +
        'over TLS: give https:// with --etcd-ca (and --etcd-cert, --etcd-key)'
      );
    endpoints.push(origin);
  }
  const prefix = values['--etcd-prefix'] ?? '/portplane';
  if (!/^\/[A-Za-z0-9._/-]{1,100}$/.test(prefix) || prefix.endsWith('/'))
    return `--etcd-prefix must be a key path such as /portplane (letters, digits, . _ - /), got '${prefix}'`;
  const [certPath, keyPath] = [values['--etcd-cert'] ?? null, values['--etcd-key'] ?? null];
  if ((certPath === null) !== (keyPath === null)) return '--etcd-cert and --etcd-key go together';
  const advertised = values['--advertise'];
  const advertise = advertised ? masterOrigin(advertised) : null;
  if (!advertise)
    return advertised
      ? `--advertise must be http(s)://HOST[:PORT], this master's address, got '${advertised}'`
      : "--etcd needs --advertise: this master's address, which standbys and agents are told when it leads";
  const token = env.MASTER_FOLLOW_TOKEN || null;
  if (token !== null && !TOKEN.test(token))
    return 'MASTER_FOLLOW_TOKEN must be a token of the leader with the replication scope (mst_...)';
  return {
    endpoints,
    prefix,
    caPath: values['--etcd-ca'] ?? null,
    certPath,
    keyPath,
    advertise,
    token,
    followInsecure,
  };
}

/** The primary a standby follows, from --follow and the environment, or why they are not one. */
function followOf(
  url: string | undefined,
  env: Record<string, string | undefined>,
  insecure: boolean,
): MasterConfig['follow'] | string {
  if (!url) return null;
  const origin = masterOrigin(url);
  if (!origin) return `--follow must be http(s)://HOST[:PORT], the primary's address, got '${url}'`;
  if (offMachine(origin) && !insecure)
    return (
      `--follow ${origin} would send the replication token, which reads the whole database, in clear across the ` +
      `network: use https:// (with MASTER_FOLLOW_PIN for the primary's own certificate), or pass --follow-insecure`
    );
  const token = env.MASTER_FOLLOW_TOKEN ?? '';
  if (!TOKEN.test(token))
    return '--follow needs MASTER_FOLLOW_TOKEN: a token of the primary with the replication scope (mst_...)';
  const pin = env.MASTER_FOLLOW_PIN || null;
  if (pin !== null && !PIN.test(pin)) return `MASTER_FOLLOW_PIN must be sha256/<base64 of 32 bytes>, got '${pin}'`;
  if (pin !== null && !origin.startsWith('https:'))
    return 'MASTER_FOLLOW_PIN pins a TLS key: give --follow as https://';
  return { url: origin, pin, token };
}
