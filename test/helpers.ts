import assert from 'node:assert/strict';
// Test helpers: the real master in-process on port 0 with a temporary data dir, and a
// small HTTP client that returns status, headers and parsed body.

import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { X509Certificate } from 'node:crypto';
import { request as httpsRequest } from 'node:https';
import type { TLSSocket } from 'node:tls';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { start, type Master } from '../cmd/master/start.ts';
import type { MasterConfig } from '../cmd/master/config.ts';
import { rolledUp } from '../internal/service/maintenance.ts';
import { tenantScopes, type Scope } from '../internal/auth/scopes.ts';
import { silentLogger, type Logger } from '../internal/log/log.ts';
import { controlDefaults } from '../internal/domain/rules.ts';
import { selfSigned } from '../internal/tls/certificate.ts';
import { pinOf } from '../internal/tls/pin.ts';
import { built } from './dist.ts';

/** What a rule has of each control when none is given (the API's defaults), for tests that write rules directly. */
export const NO_CONTROLS = controlDefaults;

export const ADMIN_PASSWORD = 'admin-password-for-tests';

export interface Running extends Master {
  dataDir: string;
  admin: string;
  /** Moves the master's clock forward, and takes a turn of it. */
  advance(ms: number): void;
}

export interface StartOptions {
  licenseKeyPath?: string;
  /** Release keys' public halves (PEM files) agent bundles must be signed with. */
  releaseKeyPaths?: string[];
  /** The release's signature of the agent the master carries (--agent-signature). */
  agentSignaturePath?: string;
  /** Run as a standby of this primary (--follow). */
  follow?: { url: string; pin?: string; token: string };
  secretKeyPath?: string;
  dataDir?: string;
  /** Called with the data dir before the master starts (e.g. to place a license); give `dataDir` for an empty one. */
  prepare?: (dataDir: string) => void;
  /** A fixed port, e.g. to restart a master where its agents expect it; default: any free port. */
  port?: number;
  /** Where to listen; default 127.0.0.1 (plain HTTP). */
  host?: string;
  tls?: { certPath: string; keyPath: string };
  insecureHttp?: boolean;
  /** Where the master logs; default nowhere. */
  log?: Logger;
  /**
   * Let operators' rules and alert channels reach what is local (allow_local_rule_targets and
   * allow_local_channel_targets): loopback echo servers and receivers, for tests that forward or notify.
   */
  localTargets?: boolean;
  /** Return while the maintenance the start began still runs; by default once it is done. */
  duringMaintenance?: boolean;
}

export async function startMaster(t: TestContext, options: StartOptions = {}): Promise<Running> {
  const dataDir = options.dataDir ?? mkdtempSync(join(tmpdir(), 'portplane-test-'));
  // A master on a data dir of its own, whose start a test does not read in the log, nor makes a standby, starts from a
  // copy of a first such master's (its admin made and logged in), which `prepare` then sees: hashing the admin's
  // password at the start and again at the login took 300 of a start's 480 ms, and tests start hundreds.
  const copied = !options.dataDir && !options.log && !options.follow && !options.secretKeyPath;
  const seed = copied ? await seeded() : null;
  if (seed) cpSync(seed.dir, dataDir, { recursive: true });
  options.prepare?.(dataDir);
  let offset = 0;
  const master = await start(
    {
      host: options.host ?? '127.0.0.1',
      port: options.port ?? 0,
      dataDir,
      secretKeyPath: options.secretKeyPath ?? null,
      licenseKeyPath: options.licenseKeyPath ?? null,
      releaseKeyPaths: options.releaseKeyPaths ?? [],
      agentSignaturePath: options.agentSignaturePath ?? null,
      follow: options.follow ? { pin: null, ...options.follow } : null,
      etcd: null,
      adminPassword: ADMIN_PASSWORD,
      tls: options.tls ?? null,
      insecureHttp: options.insecureHttp ?? false,
    },
    options.log ?? silentLogger,
    () => Date.now() + offset,
    // Its workers run the built master: from source, each would compile it again under tsx (300 ms of CPU a worker).
    { workerProgram: { path: built('master'), execArgv: [] } },
  );
  t.after(async () => {
    await master.close();
    if (!options.dataDir) rmSync(dataDir, { recursive: true, force: true });
  });
  if (master.app.tls) trusted.set(master.url, master.app.tls.cert);
  // A standby serves no login (it writes nothing): its caller brings a token of its primary.
  // Moving the clock takes a turn of it at once: what came due happens now, not within the next second.
  const advance = (ms: number) => {
    offset += ms;
    void master.turn();
  };
  if (options.follow) return { ...master, close: master.close, dataDir, admin: '', advance };
  // The maintenance a start begins has written what it writes before a test looks at the database.
  if (!options.duringMaintenance) await rolledUp(master.app);
  const admin = seed?.admin ?? (await login(master.url, 'admin', ADMIN_PASSWORD));
  if (options.localTargets) {
    const allowed = await call(master.url, 'PATCH', '/api/settings', {
      token: admin,
      body: { allow_local_rule_targets: 1, allow_local_channel_targets: 1 },
    });
    if (allowed.status !== 200) throw new Error(`allowing local targets failed: ${allowed.status}`);
  }
  return { ...master, close: master.close, dataDir, admin, advance };
}

/** A master's configuration on loopback, plain HTTP, on `port` (any free one by default), its admin's password set. */
export function plainConfig(dataDir: string, port = 0): MasterConfig {
  return {
    host: '127.0.0.1',
    port,
    dataDir,
    secretKeyPath: null,
    licenseKeyPath: null,
    releaseKeyPaths: [],
    agentSignaturePath: null,
    follow: null,
    etcd: null,
    adminPassword: ADMIN_PASSWORD,
    tls: null,
    insecureHttp: false,
  };
}

/** A data dir a master left after its first start, with its admin's login session. */
export interface Seed {
  dir: string;
  admin: string;
}

/** How a run's global setup (test/global-setup.ts) hands every test file the one seed it made. */
export const SEED_ENV = 'PORTPLANE_TEST_SEED';

/** Starts a master on the empty `dir`, logs its admin in and stops it. */
export async function makeSeed(dir: string): Promise<Seed> {
  const master = await start(plainConfig(dir), silentLogger);
  try {
    await rolledUp(master.app);
    return { dir, admin: await login(master.url, 'admin', ADMIN_PASSWORD) };
  } finally {
    await master.close();
  }
}

/** The run's seed, or one made once in this process (a test file run alone). */
let seed: Promise<Seed> | null = null;

function seeded(): Promise<Seed> {
  seed ??= (async () => {
    const handed = process.env[SEED_ENV];
    if (handed) return JSON.parse(handed) as Seed;
    const dir = mkdtempSync(join(tmpdir(), 'portplane-seed-'));
    process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
    return makeSeed(dir);
  })();
  return seed;
}

export interface Answer {
  status: number;
  headers: Headers;
  body: any;
}

export interface CallOptions {
  token?: string;
  body?: unknown;
  headers?: Record<string, string>;
}

/** Certificates to trust per HTTPS base URL: the one each TLS master serves. */
const trusted = new Map<string, string>();

/** Trusts `cert` (PEM) for calls to `base`: a master running as a process of its own, with its own certificate. */
export function trustMaster(base: string, cert: string): void {
  trusted.set(base, cert);
}

/** An HTTPS request that trusts `cert` alone (and not its names: tests reach masters by any local address). */
function httpsCall(
  url: string,
  cert: string,
  method: string,
  headers: Record<string, string>,
  body: string | undefined,
): Promise<{ status: number; headers: Headers; text: string }> {
  return new Promise((resolve, reject) => {
    // Trusted by being exactly this certificate, whatever its dates or names (a test client, not an agent).
    const expected = new X509Certificate(cert).fingerprint256;
    const req = httpsRequest(url, { method, headers, rejectUnauthorized: false, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
      res.on('end', () =>
        resolve({
          status: res.statusCode!,
          headers: new Headers(
            Object.entries(res.headers).flatMap(([k, v]) =>
              v === undefined ? [] : [[k, String(v)] as [string, string]],
            ),
          ),
          text,
        }),
      );
    });
    req.on('error', reject);
    req.on('socket', (socket) =>
      socket.on('secureConnect', () => {
        if ((socket as TLSSocket).getPeerX509Certificate()?.fingerprint256 !== expected)
          req.destroy(new Error('not the master'));
      }),
    );
    req.end(body);
  });
}

export async function call(base: string, method: string, path: string, options: CallOptions = {}): Promise<Answer> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  let body: string | undefined;
  if (options.body !== undefined) {
    body = typeof options.body === 'string' ? options.body : JSON.stringify(options.body);
    headers['content-type'] ??= 'application/json';
  }
  const cert = trusted.get(base);
  const response = cert
    ? await httpsCall(base + path, cert, method, headers, body)
    : await fetch(base + path, { method, headers, body, redirect: 'manual' }).then(async (r) => ({
        status: r.status,
        headers: r.headers,
        text: await r.text(),
      }));
  const text = response.text;
  let parsed: unknown = text;
  if (text && /json/.test(response.headers.get('content-type') ?? '')) parsed = JSON.parse(text);
  return { status: response.status, headers: response.headers, body: parsed };
}

/**
 * Holds `m`'s writes as an import being written does, until `release()`; `ended` resolves once the hold is over.
 * Resolves once writes are held.
 */
export async function holdingWrites(m: Master): Promise<{ release: () => void; ended: Promise<unknown> }> {
  let release!: () => void;
  const ended = m.app.store.db.holdWrites(() => new Promise<void>((resolve) => (release = resolve)));
  while (!release) await new Promise((resolve) => setImmediate(resolve));
  return { release, ended };
}

export async function login(base: string, username: string, password: string): Promise<string> {
  const answer = await call(base, 'POST', '/api/auth/login', { body: { username, password } });
  if (answer.status !== 200) throw new Error(`login failed: ${answer.status} ${JSON.stringify(answer.body)}`);
  return answer.body.token;
}

/**
 * Makes `username` a tenant on plan `planId` (password `<username>-password`; every tenant scope unless `user` says
 * otherwise, with whatever else it gives), as the admin, and signs them in. Returns the user as answered and a session.
 */
export async function newTenant(m: Running, username: string, planId: number, user: Record<string, unknown> = {}) {
  const password = `${username}-password`;
  const made = await call(m.url, 'POST', '/api/users', {
    token: m.admin,
    body: { username, password, role: 'tenant', plan_id: planId, scopes: tenantScopes, ...user },
  });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  return { id: made.body.id as number, user: made.body, token: await login(m.url, username, password) };
}

/** Issues an API token with `scopes` through the API, as the admin. */
export async function mintToken(master: Running, scopes: readonly Scope[], name = 'test'): Promise<string> {
  const answer = await call(master.url, 'POST', '/api/tokens', { token: master.admin, body: { name, scopes } });
  if (answer.status !== 201) throw new Error(`mint failed: ${answer.status} ${JSON.stringify(answer.body)}`);
  return answer.body.token;
}

/**
 * Every row of every table, so a test can prove a request changed nothing. A token's
 * last_used_at is bookkeeping that any authenticated call may update, so it is left out, as is
 * replication_position (where the record of changes stands, which a standby's first read starts).
 */
/**
 * What the master's clock writes, whatever a request does: its replication position, and a sample of every tunnel's
 * and exit's path each minute (a test may cross a minute), with the exits' paths it keeps as it samples.
 */
const SAMPLED = ['replication_position', 'tunnel_paths', 'exit_path_points', 'tunnel_exit_paths'];

export function snapshot(master: Master, except: readonly string[] = []): string {
  const db = master.app.store.db;
  const tables = (
    db
      // Tables of rows only: a full-text index (virtual, and its shadow tables) is derived from them.
      .prepare(
        "SELECT name, wr FROM pragma_table_list WHERE schema = 'main' AND type = 'table' " +
          "AND name NOT LIKE 'sqlite_%' ORDER BY name",
      )
      .all() as { name: string; wr: number }[]
  ).filter(({ name }) => !except.includes(name) && !SAMPLED.includes(name));
  return JSON.stringify(
    tables.map(({ name, wr }) => [
      name,
      db
        // A table without rowid is read in its primary key's order.
        .prepare(`SELECT * FROM "${name}"${wr ? '' : ' ORDER BY rowid'}`)
        .all()
        .map((row) =>
          JSON.stringify(row, (k, v) =>
            k === 'last_used_at' ? undefined : v instanceof Uint8Array ? Buffer.from(v).toString('hex') : v,
          ),
        ),
    ]),
  );
}

export function assertProblem(answer: Answer, status: number, code: string): void {
  if (answer.status !== status || answer.body?.code !== code) {
    throw new Error(`expected ${status} ${code}, got ${answer.status} ${JSON.stringify(answer.body)}`);
  }
  if (answer.headers.get('content-type') !== 'application/problem+json') {
    throw new Error(`expected application/problem+json, got ${answer.headers.get('content-type')}`);
  }
}

/** Creates a node as the admin; returns its record (with the agent token). */
export async function node(m: Running, name: string, extra: Record<string, unknown> = {}) {
  const answer = await call(m.url, 'POST', '/api/nodes', {
    token: m.admin,
    body: { name, host: `${name}.example.net`, ...extra },
  });
  assert.equal(answer.status, 201, JSON.stringify(answer.body));
  return answer.body;
}

/** `count` TCP rule bodies on `nodeId`, named `${prefix}-<i>`, on consecutive ports from `firstPort`. */
export function ruleBodies(nodeId: number, count: number, firstPort = 10000, prefix = 'bulk') {
  return Array.from({ length: count }, (_, i) => ({
    name: `${prefix}-${i}`,
    node_id: nodeId,
    protocol: 'tcp',
    listen_port: firstPort + i,
    targets: [`10.1.${(i >> 8) & 255}.${i & 255}:80`],
  }));
}

/** Creates a TCP rule as the admin with defaults for what `body` leaves out; returns the answer. */
export async function rule(m: Running, body: Record<string, unknown>) {
  return call(m.url, 'POST', '/api/rules', {
    token: m.admin,
    body: { name: 'r', protocol: 'tcp', targets: ['10.0.0.1:80'], ...body },
  });
}

/**
 * The threads of this process that run at nice 19, as a master's worker threads do (Linux; elsewhere none), by id:
 * a test counts those not in `before`, since other files' tests may run in the same process and leave theirs ending.
 * A thread named WorkerThread, Node's name for a worker given none, is not one: the master names each of its own, and
 * in npm test's processes each of them is joined by such a thread, at its priority.
 */
export function yieldingThreads(before: ReadonlySet<string> = new Set()): Set<string> {
  if (process.platform !== 'linux') return new Set();
  return new Set(
    readdirSync('/proc/self/task').filter((tid) => {
      if (before.has(tid)) return false;
      try {
        const stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
        // The name in parentheses, then state is field 3, nice field 19.
        if (stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')) === 'WorkerThread') return false;
        return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]) === 19;
      } catch {
        return false; // a thread that ended between the listing and the read
      }
    }),
  );
}

export interface CertFiles {
  certPath: string;
  keyPath: string;
  pin: string;
}

/** A self-signed certificate for `names` and its key, in files of a directory of their own, and its pin. */
export function certFiles(names = ['127.0.0.1', 'localhost']): CertFiles {
  const dir = mkdtempSync(join(tmpdir(), 'portplane-cert-'));
  const made = selfSigned(names);
  const files = { certPath: join(dir, 'cert.pem'), keyPath: join(dir, 'key.pem') };
  writeFileSync(files.certPath, made.cert);
  writeFileSync(files.keyPath, made.key, { mode: 0o600 });
  return { ...files, pin: pinOf(made.cert) };
}
