// `npm run bench`: real processes (the bundled master and agent), the process under test on
// CPU 0 and the load on CPU 1, every figure beside its ceiling measured in the same run.
// Prints one table and writes bench/results/latest.json.

import { spawnSync } from 'node:child_process';
import { request } from 'node:http';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { cpus, release, totalmem, tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { generateLicenseKeys, issueLicense } from '../internal/license/license.ts';
import { migrations } from '../internal/store/migrations.ts';
import { ruleFieldNames } from '../internal/domain/rules.ts';
import { selfSigned } from '../internal/tls/certificate.ts';
import { failover } from './failover.ts';
import { exitSwitching } from './paths.ts';
import type { Row } from './row.ts';
import { startHaproxy } from './haproxy.ts';
import { cpuMicros, hasTaskset, memory, pinned, pinSelf, start, type Running } from './procs.ts';
import { bearer, wrk, type WrkResult } from './wrk.ts';
import { CLIENT, HOST_SIDE, makeLab, NODE, NODE_ADDRESS, removeLab, TARGET, TARGET_ADDRESS, within } from './netns.ts';

const rows: Row[] = [];
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
/** Seconds of the same load before a read row's figures are taken (see `wrk`). */
const WARMUP = 2;
/** Bytes of one bulk run through the data plane, split over its streams. */
const BULK_BYTES = 1024 * 1024 * 1024;
const NODES = 10_000;
const RULES_PER_NODE = 10;
const ADMIN_PASSWORD = 'bench-admin-password';
const node = process.execPath;
/** How deploy/portplane-master.service and npm start run the master. */
const MASTER_FLAGS = ['--max-semi-space-size=4', '--heap-growing-percent=100'];
const work = mkdtempSync(join(tmpdir(), 'portplane-bench-'));

function record(row: Row): void {
  rows.push(row);
  const extra = [
    row.p99_ms !== undefined ? `p99 ${row.p99_ms.toFixed(2)} ms` : '',
    row.ratio !== undefined ? `${row.ratio.toFixed(2)}x ceiling` : '',
  ]
    .filter(Boolean)
    .join(', ');
  console.error(`  ${row.id.padEnd(4)} ${row.scenario}: ${round(row.value)} ${row.unit}${extra ? ` (${extra})` : ''}`);
}

function round(n: number): string {
  return n >= 100 ? Math.round(n).toLocaleString('en-US') : n.toFixed(2);
}

function ensureTools(): void {
  // Debian packages by the command the bench runs: HAProxy is the data plane's peer, the kernel path's rows need
  // nftables and iperf3 too.
  const packages: Record<string, string> = {
    wrk: 'wrk',
    nft: 'nftables',
    iperf3: 'iperf3',
    haproxy: 'haproxy',
    etcd: 'etcd-server',
  };
  const missing = Object.keys(packages)
    .filter((tool) => spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0)
    .map((tool) => packages[tool]!);
  if (missing.length === 0) return;
  console.error(`installing ${missing.join(', ')} from Debian`);
  spawnSync('apt-get', ['update', '-qq'], { stdio: 'inherit' });
  const installed = spawnSync('apt-get', ['install', '-y', '-qq', ...missing], {
    stdio: 'inherit',
    env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
  });
  if (installed.status !== 0) throw new Error(`cannot install ${missing.join(', ')}; install them and run again`);
}

/**
 * JSON made ahead of a timed call, down to its bytes, so that the time is the server's work and not the bench building
 * its body: given a 15 MiB string, Node's client spent 130-150 ms on it before the server saw a byte.
 */
class Encoded {
  readonly bytes: Buffer;
  constructor(value: unknown) {
    this.bytes = Buffer.from(JSON.stringify(value));
  }
}

interface Answer {
  status: number;
  bytes: Buffer;
  /** When its last byte arrived (`performance.now()`), before anything of it was decoded. */
  receivedAt: number;
}

/** One API call on a fresh connection (no keep-alive reuse racing the server's idle time-out). */
function send(base: string, token: string | null, method: string, path: string, body?: unknown): Promise<Answer> {
  const payload = body === undefined ? undefined : body instanceof Encoded ? body.bytes : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(
      base + path,
      {
        method,
        agent: false,
        headers: {
          ...(token ? { authorization: `Bearer ${token}` } : {}),
          ...(payload ? { 'content-type': 'application/json' } : {}),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const receivedAt = performance.now();
          resolve({ status: res.statusCode ?? 500, bytes: Buffer.concat(chunks), receivedAt });
        });
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

interface Captured {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** A small JSON answer, for the data plane's HTTP target. */
const SMALL_JSON = JSON.stringify({ id: 1, name: 'hello', status: 'online' });

/** What the master answers GET `path` with: status, headers (but those of the connection and the date), body. */
function capture(base: string, token: string, path: string): Promise<Captured> {
  return new Promise((resolve, reject) => {
    const req = request(base + path, { agent: false, headers: { authorization: `Bearer ${token}` } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => {
        const skip = new Set(['date', 'connection', 'keep-alive', 'transfer-encoding']);
        const headers = Object.fromEntries(
          Object.entries(res.headers).filter(([name]) => !skip.has(name)) as [string, string][],
        );
        resolve({ status: res.statusCode ?? 500, headers, body: Buffer.concat(chunks).toString('utf8') });
      });
    });
    req.on('error', reject);
    req.end();
  });
}

/** `answer` in a file of the run's work dir, for bench/hello.ts. */
function answerFile(name: string, answer: Captured): string {
  const file = join(work, `answer-${name}.json`);
  writeFileSync(file, JSON.stringify(answer));
  return file;
}

/** `send`, decoded: an answer of 400 or more rejects. */
async function api(base: string, token: string | null, method: string, path: string, body?: unknown): Promise<any> {
  const answer = await send(base, token, method, path, body);
  const text = answer.bytes.toString('utf8');
  if (answer.status >= 400) throw new Error(`${method} ${path}: ${answer.status} ${text.slice(0, 300)}`);
  return text ? JSON.parse(text) : undefined;
}

interface Master {
  proc: Running;
  url: string;
  token: string;
  dataDir: string;
}

const keys = generateLicenseKeys();
const publicKey = join(work, 'license-public.pem');
writeFileSync(publicKey, keys.publicKeyPem);

/**
 * The bundled master on CPU 0, run as the systemd unit runs it, its log (a line a request) appended to a file in its
 * data dir's folder, as journald or a log file would take it: into a pipe the bench reads, it cost the master less.
 */
function masterProcess(dataDir: string, listen: string, env: NodeJS.ProcessEnv = {}): Running {
  return start(
    pinned(0, [
      node,
      ...MASTER_FLAGS,
      'dist/master.mjs',
      '--listen',
      listen,
      '--data-dir',
      dataDir,
      '--license-key',
      publicKey,
    ]),
    env,
    `${dataDir}.log`,
  );
}

/** The bundled agent on CPU 0, with a state dir of its own under the run's work dir. */
/** The bundled agent, relaying on `threads` threads: on the relay's CPU (`pin`), or on any. */
function agentProcess(masterUrl: string, stateDir: string, token: string, threads = 1, pin = true): Running {
  const argv = [
    ...[node, 'dist/agent.mjs', '--master', masterUrl, '--state-dir', join(work, stateDir)],
    ...['--listen-host', '127.0.0.1', '--relay-workers', String(threads)],
    // These rows measure the relay, whatever the host allows.
    ...['--forwarding', 'relay'],
  ];
  return start(pin ? pinned(0, argv) : argv, { AGENT_TOKEN: token });
}

async function startMaster(dataDir: string, listen = '127.0.0.1:0', env: NodeJS.ProcessEnv = {}): Promise<Master> {
  mkdirSync(dataDir, { recursive: true });
  writeFileSync(
    join(dataDir, 'license.json'),
    issueLicense(
      {
        license_id: 'bench',
        edition: 'bench',
        licensee: 'npm run bench',
        limits: { max_nodes: null },
        issued_at: '2026-01-01T00:00:00Z',
        expires_at: null,
      },
      keys.privateKeyPem,
    ),
  );
  const proc = masterProcess(dataDir, listen, { MASTER_ADMIN_PASSWORD: ADMIN_PASSWORD, ...env });
  const url = (await proc.waitFor('listening')).url as string;
  const login = await api(url, null, 'POST', '/api/auth/login', { username: 'admin', password: ADMIN_PASSWORD });
  await api(url, login.token, 'PATCH', '/api/settings', { write_budget_per_minute: 0 });
  const token = (await api(url, login.token, 'POST', '/api/tokens', { name: 'bench', scopes: ['*'] })).token as string;
  return { proc, url, token, dataDir };
}

/** The name of the seed's node at `index` (from 0). */
function seedNodeName(index: number): string {
  return `n${String(index + 1).padStart(5, '0')}`;
}

function seedDocument(nodes: number, rulesPerNode: number, firstPort = 10_000) {
  const names = Array.from({ length: nodes }, (_, i) => seedNodeName(i));
  return {
    format: 'portplane-export',
    version: 1,
    nodes: names.map((name) => ({
      name,
      host: `${name}.bench.example`,
      ssh_port: 22,
      ssh_user: 'root',
      tags: ['bench'],
    })),
    tunnels: [],
    rules: names.flatMap((name, n) =>
      Array.from({ length: rulesPerNode }, (_, k) => ({
        name: `r${n}-${firstPort + k}`,
        node: name,
        tunnel: null,
        protocol: 'tcp',
        listen_port: firstPort + k,
        targets: [`10.${(n >> 8) & 255}.${n & 255}.${k + 1}:80`],
        strategy: 'round_robin',
        enabled: true,
      })),
    ),
  };
}

function randomBelow(n: number): number {
  return Math.floor(Math.random() * n);
}

/** A wrk script reading pages of `path` (with `query`) from 200 cursors, each naming the id `idAt()` gives. */
function randomPages(token: string, path: string, query: string, idAt: () => number): string {
  const cursors = Array.from({ length: 200 }, () => Buffer.from(`id:${idAt()}`).toString('base64url'));
  return `${bearer(token)}cursors = { ${cursors.map((c) => `"${c}"`).join(', ')} }
request = function()
  return wrk.format(nil, "${path}?limit=100${query ? `&${query}` : ''}&cursor=" .. cursors[math.random(1, #cursors)])
end
`;
}

function median(values: number[]): number {
  return [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
}

function peak(master: Master): number {
  return memory(master.proc.child.pid!).peak;
}

async function controlPlane(): Promise<void> {
  console.error(
    `control plane: seeding ${NODES.toLocaleString()} nodes and ${(NODES * RULES_PER_NODE).toLocaleString()} ` +
      `rules through POST /api/import`,
  );
  const master = await startMaster(join(work, 'control'));
  const seed = new Encoded(seedDocument(NODES, RULES_PER_NODE));
  const seedStarted = performance.now();
  // Until the answer's last byte is in: decoding its 7 MiB (180-280 ms here) is the client's work, not the server's.
  const seeded = await send(master.url, master.token, 'POST', '/api/import', seed);
  if (seeded.status !== 200) throw new Error(`the seed import failed: ${seeded.status} ${seeded.bytes.toString()}`);
  const seedSeconds = (seeded.receivedAt - seedStarted) / 1000;
  record({
    id: '0',
    scenario: `seed: import ${NODES} nodes + ${NODES * RULES_PER_NODE} rules in one call`,
    value: seedSeconds,
    unit: 's',
    target: '<= 3 s',
    met: seedSeconds <= 3,
    note:
      `a ${(seed.bytes.length / 2 ** 20).toFixed(1)} MiB document, encoded before the clock starts; ` +
      "until the answer's last byte is in",
  });

  // The audit log as a fleet's writes leave it: an import is one entry per kind it made, so each rule is changed once
  // more, a thousand a batch, each change an entry of its own (100,000 of them).
  for (let first = 1; first <= NODES * RULES_PER_NODE; first += 1000) {
    const ids = Array.from({ length: 1000 }, (_, i) => first + i);
    await api(master.url, master.token, 'POST', '/api/rules/batch-update', { ids, changes: { tags: ['audited'] } });
  }

  // 1. Ceiling: a bare server answering with the bytes the master answers GET /api/nodes/{id} with.
  const sample = await capture(master.url, master.token, '/api/nodes/5000');
  const hello = start(pinned(0, [node, '--import', 'tsx', 'bench/hello.ts', answerFile('node', sample)]));
  const helloUrl = (await hello.waitFor('listening')).url as string;
  const ceiling = wrk(`${helloUrl}/`, { connections: 50, seconds: SECONDS, warmup: WARMUP });
  const helloPeak = memory(hello.child.pid!).peak;
  await hello.stop();
  record({
    id: '1',
    scenario: `ceiling: bare node:http answering GET /api/nodes/{id}'s bytes (${sample.body.length} B of JSON)`,
    value: ceiling.rps,
    unit: 'req/s',
    p50_ms: ceiling.p50,
    p99_ms: ceiling.p99,
    peak_rss_mib: helloPeak,
    target: 'reference',
    met: null,
  });

  // 2. A node by id, ids at random.
  const randomNode = `${bearer(master.token)}request = function()
  return wrk.format(nil, "/api/nodes/" .. math.random(1, ${NODES}))
end
`;
  const one = wrk(`${master.url}/`, { connections: 50, seconds: SECONDS, lua: randomNode, warmup: WARMUP });
  record({
    id: '2',
    scenario: 'GET /api/nodes/{id} with an API token, random ids',
    value: one.rps,
    unit: 'req/s',
    p50_ms: one.p50,
    p99_ms: one.p99,
    peak_rss_mib: peak(master),
    ceiling: ceiling.rps,
    ratio: one.rps / ceiling.rps,
    target: '>= 0.6x ceiling',
    met: one.rps / ceiling.rps >= 0.6 && one.non2xx === 0,
  });

  // 3. A full page of rules, from the middle of the table.
  const middle =
    (
      await api(
        master.url,
        master.token,
        'GET',
        '/api/rules?limit=1&cursor=' + Buffer.from('id:50000').toString('base64url'),
      )
    ).items[0].id - 1;
  const page = wrk(`${master.url}/api/rules?limit=100&cursor=${Buffer.from(`id:${middle}`).toString('base64url')}`, {
    connections: 50,
    seconds: SECONDS,
    lua: bearer(master.token),
    warmup: WARMUP,
  });
  record({
    id: '3',
    scenario: 'GET /api/rules?limit=100 (a full page)',
    value: page.rps,
    unit: 'pages/s',
    p50_ms: page.p50,
    p99_ms: page.p99,
    peak_rss_mib: peak(master),
    ceiling: ceiling.rps,
    ratio: page.rps / ceiling.rps,
    target: '>= 2,500 pages/s',
    met: page.rps >= 2500 && page.non2xx === 0,
  });

  // 2p, 3p. The same reads against the peer a Node developer would write (bench/peer.ts: Fastify and
  // better-sqlite3 over this master's database, the same token check), ids and pages at random,
  // master and peer in turn three times; medians.
  const peer = start(pinned(0, [node, '--import', 'tsx', 'bench/peer.ts', master.dataDir]));
  const peerUrl = (await peer.waitFor('listening')).url as string;
  const rulePages = (query = '') =>
    randomPages(master.token, '/api/rules', query, () => 1 + randomBelow(NODES * RULES_PER_NODE - 100));
  const nodePages = (query = '') => randomPages(master.token, '/api/nodes', query, () => 1 + randomBelow(NODES - 100));
  const auditRows = (await api(master.url, master.token, 'GET', '/api/audit-logs?limit=1')).items[0].id as number;
  const auditPages = (query = '') =>
    randomPages(master.token, '/api/audit-logs', query, () => 101 + randomBelow(auditRows - 100));
  const seedStatus = (await api(master.url, master.token, 'GET', '/api/nodes/1')).status as string;
  const randomRule = `${bearer(master.token)}request = function()
  return wrk.format(nil, "/api/rules/" .. math.random(1, ${NODES * RULES_PER_NODE}))
end
`;
  // Tunnels, users and API tokens, for their lists and reads by id: 1,000 tunnels (one import), 100 users (each
  // password is hashed with scrypt, 80 ms here) and 1,000 tokens.
  const TUNNELS = 1_000;
  const USERS = 100;
  const TOKENS = 1_000;
  const tunnelDocument = {
    format: 'portplane-export',
    version: 1,
    nodes: [],
    tunnels: Array.from({ length: TUNNELS }, (_, i) => ({
      name: `t${i}`,
      entry_node: seedNodeName(i),
      exit_node: seedNodeName(i + 1),
      listen_port: 30_000,
      transport: 'tls',
    })),
    rules: [],
  };
  await api(master.url, master.token, 'POST', '/api/import', tunnelDocument);
  const userIds: number[] = [];
  for (let i = 0; i < USERS; i++) {
    const body = { username: `bench-user-${i}`, password: 'bench-password-1', scopes: ['rules:read'] };
    userIds.push((await api(master.url, master.token, 'POST', '/api/users', body)).id);
  }
  const tokenIds: number[] = [];
  for (let i = 0; i < TOKENS; i++)
    tokenIds.push((await api(master.url, master.token, 'POST', '/api/tokens', { name: `t${i}`, scopes: ['*'] })).id);
  const randomOf = (path: string, ids: number[]) => `${bearer(master.token)}ids = { ${ids.join(', ')} }
request = function()
  return wrk.format(nil, "${path}/" .. ids[math.random(1, #ids)])
end
`;
  // From the second id on: a cursor must name an id of 1 or more.
  const randomPageOf = (path: string, ids: number[]) =>
    randomPages(master.token, path, '', () => ids[1 + randomBelow(ids.length - 101)]! - 1);
  const randomQueries = (path: string, queries: string[]) => `${bearer(master.token)}queries = { ${queries
    .map((q) => `"${q}"`)
    .join(', ')} }
request = function()
  return wrk.format(nil, "${path}?limit=100&" .. queries[math.random(1, #queries)])
end
`;
  const tunnelIds = Array.from({ length: TUNNELS }, (_, i) => i + 1);

  for (const [id, what, lua, goal] of [
    ['2p', 'GET /api/nodes/{id}, random ids, against the peer', randomNode, 1.3],
    ['2r', 'GET /api/rules/{id}, random ids, against the peer', randomRule, 1.3],
    ['3p', 'GET /api/rules?limit=100, random pages, against the peer', rulePages(), 1.25],
    ['3n', 'GET /api/nodes?limit=100, random pages, against the peer', nodePages(), 1.25],
    ['3a', `GET /api/audit-logs?limit=100, random pages of ${auditRows} entries, against the peer`, auditPages(), 1.25],
    [
      '3fn',
      'GET /api/rules?node_id=…, random nodes, against the peer',
      randomQueries(
        '/api/rules',
        Array.from({ length: 200 }, () => `node_id=${1 + randomBelow(NODES)}`),
      ),
      1.25,
    ],
    [
      '3fq',
      'GET /api/rules?q=…, names of random nodes, against the peer',
      randomQueries(
        '/api/rules',
        Array.from({ length: 200 }, () => `q=r${randomBelow(NODES)}-1000`),
      ),
      1.25,
    ],
    [
      '3fe',
      'GET /api/rules?enabled=true&protocol=tcp, random pages, against the peer',
      rulePages('enabled=true&protocol=tcp'),
      1.25,
    ],
    [
      '3fs',
      `GET /api/nodes?status=${seedStatus}, random pages, against the peer`,
      nodePages(`status=${seedStatus}`),
      1.25,
    ],
    ['3ft', 'GET /api/nodes?tag=bench, random pages, against the peer', nodePages('tag=bench'), 1.25],
    ['3fa', 'GET /api/audit-logs?resource=rule, random pages, against the peer', auditPages('resource=rule'), 1.25],
    [
      '2t',
      `GET /api/tunnels/{id}, random ids of ${TUNNELS}, against the peer`,
      randomOf('/api/tunnels', tunnelIds),
      1.3,
    ],
    [
      '3t',
      `GET /api/tunnels?limit=100, random pages of ${TUNNELS}, against the peer`,
      randomPageOf('/api/tunnels', tunnelIds),
      1.25,
    ],
    ['2u', `GET /api/users/{id}, random ids of ${USERS + 1}, against the peer`, randomOf('/api/users', userIds), 1.3],
    [
      '3u',
      `GET /api/users?limit=100, the first page of ${USERS + 1}, against the peer`,
      `${bearer(master.token)}request = function()\n  return wrk.format(nil, "/api/users?limit=100")\nend\n`,
      1.25,
    ],
    [
      '2k',
      `GET /api/tokens/{id}, random ids of ${TOKENS + 1}, against the peer`,
      randomOf('/api/tokens', tokenIds),
      1.3,
    ],
    [
      '3k',
      `GET /api/tokens?limit=100, random pages of ${TOKENS + 1}, against the peer`,
      randomPageOf('/api/tokens', tokenIds),
      1.25,
    ],
  ] as const) {
    const ours: WrkResult[] = [];
    const theirs: number[] = [];
    let failed = 0;
    for (let rep = 0; rep < 3; rep++) {
      const warmup = rep === 0 ? WARMUP : 0;
      const a = wrk(`${master.url}/`, { connections: 50, seconds: SECONDS, lua, warmup });
      const b = wrk(`${peerUrl}/`, { connections: 50, seconds: SECONDS, lua, warmup });
      ours.push(a);
      theirs.push(b.rps);
      failed += a.non2xx + b.non2xx;
    }
    const value = median(ours.map((r) => r.rps));
    const baseline = median(theirs);
    // The issue's second bar for reads under load: the slowest 1% within 5x the median.
    const p50 = median(ours.map((r) => r.p50));
    const p99 = median(ours.map((r) => r.p99));
    record({
      id,
      scenario: what,
      value,
      unit: 'req/s',
      p50_ms: p50,
      p99_ms: p99,
      peak_rss_mib: peak(master),
      ceiling: baseline,
      ratio: value / baseline,
      target: `>= ${goal}x the peer, p99 <= 5x p50`,
      met: value / baseline >= goal && p99 <= 5 * p50 && failed === 0,
      note:
        `master ${ours.map((r) => Math.round(r.rps)).join(', ')}; peer (Fastify + better-sqlite3) ` +
        `${theirs.map(Math.round).join(', ')} req/s; peer peak RSS ${memory(peer.child.pid!).peak} MiB; ` +
        `${failed} non-2xx`,
    });
  }
  await peer.stop();

  // 4. Creates: every request a new port on a node, durable commit and audit row each.
  const createLua = `${bearer(master.token, 'POST')}wrk.headers["Content-Type"] = "application/json"
counter = 0
request = function()
  counter = counter + 1
  local nodeId = (counter % ${NODES}) + 1
  local port = 20000 + math.floor(counter / ${NODES})
  local body = '{"name":"c%d","node_id":%d,"protocol":"tcp","listen_port":%d,"targets":["10.9.9.9:80"]}'
  return wrk.format(nil, "/api/rules", nil, string.format(body, counter, nodeId, port))
end
`;
  const creates = wrk(`${master.url}/api/rules`, { connections: 20, seconds: SECONDS, lua: createLua });
  record({
    id: '4a',
    scenario: 'POST /api/rules (validate, insert, audit, synchronous=FULL), budget off',
    value: creates.rps,
    unit: 'creates/s',
    p50_ms: creates.p50,
    p99_ms: creates.p99,
    peak_rss_mib: peak(master),
    target: '>= 2,000 creates/s',
    met: creates.rps >= 2000 && creates.non2xx === 0,
    note: `${creates.non2xx} non-2xx`,
  });
  await api(master.url, master.token, 'PATCH', '/api/settings', { write_budget_per_minute: null });
  // A user of its own (the budget is per user), so the bench's user keeps its budget for the calls that follow.
  await api(master.url, master.token, 'POST', '/api/users', {
    username: 'paced',
    password: 'paced-password-1',
    scopes: ['rules:write', 'tokens:write'],
  });
  const pacedSession = (
    await api(master.url, null, 'POST', '/api/auth/login', { username: 'paced', password: 'paced-password-1' })
  ).token as string;
  const pacedToken = (
    await api(master.url, pacedSession, 'POST', '/api/tokens', { name: 'paced', scopes: ['rules:write'] })
  ).token as string;
  const paced = wrk(`${master.url}/api/rules`, {
    connections: 20,
    seconds: SECONDS,
    lua: createLua.replace(/20000/g, '30000').replace(master.token, pacedToken),
  });
  const accepted = paced.requests - paced.non2xx;
  record({
    id: '4b',
    scenario: 'POST /api/rules at the default write budget (1200/min per user)',
    value: accepted / SECONDS,
    unit: 'creates/s',
    p50_ms: paced.p50,
    p99_ms: paced.p99,
    peak_rss_mib: peak(master),
    target: 'paced to the budget, rest 429',
    met: accepted <= 1199,
    note: `${accepted} created, ${paced.non2xx} answered 429 in ${SECONDS} s`,
  });
  await api(master.url, master.token, 'PATCH', '/api/settings', { write_budget_per_minute: 0 });

  // 6. Logins (scrypt) and what they do to other requests.
  const idle = wrk(`${master.url}/api/nodes/42`, { connections: 10, seconds: SECONDS, lua: bearer(master.token) });
  const loginLua = bearer('', 'POST', JSON.stringify({ username: 'admin', password: ADMIN_PASSWORD })).replace(
    'wrk.headers["Authorization"] = "Bearer "\n',
    '',
  );
  const logins = await wrkInBackground(`${master.url}/api/auth/login`, 4, SECONDS + 1, loginLua);
  const underLogins = wrk(`${master.url}/api/nodes/42`, {
    connections: 10,
    seconds: SECONDS,
    lua: bearer(master.token),
  });
  const loginResult = await logins.result;
  record({
    id: '6a',
    scenario: 'POST /api/auth/login (scrypt N=2^15)',
    value: loginResult.rps,
    unit: 'logins/s',
    p50_ms: loginResult.p50,
    p99_ms: loginResult.p99,
    peak_rss_mib: peak(master),
    target: 'information',
    met: null,
  });
  record({
    id: '6b',
    scenario: 'GET p99 while logins run, against idle',
    value: underLogins.p99,
    unit: 'ms p99',
    p99_ms: underLogins.p99,
    ceiling: idle.p99,
    ratio: underLogins.p99 / idle.p99,
    target: 'information',
    met: null,
    note: `idle p99 ${idle.p99.toFixed(2)} ms`,
  });

  // 8. Start-up with the seeded data, and idle memory.
  await master.proc.stop();
  const startedAt = performance.now();
  const again = masterProcess(master.dataDir, '127.0.0.1:0');
  const url = (await again.waitFor('listening')).url as string;
  await api(url, master.token, 'GET', '/api/nodes/1');
  const startup = performance.now() - startedAt;
  await new Promise((resolve) => setTimeout(resolve, 2000));
  const idleRss = memory(again.child.pid!).rss;
  record({
    id: '8a',
    scenario: `start-up to first answer (${NODES} nodes, ${NODES * RULES_PER_NODE} rules)`,
    value: startup,
    unit: 'ms',
    target: 'information',
    met: null,
  });
  record({
    id: '8b',
    scenario: 'master RSS idle with that data',
    value: idleRss,
    unit: 'MiB',
    target: '<= 80 MB',
    met: idleRss * 1.048576 <= 80,
  });
  const sizes = ['master', 'agent']
    .map((name) => `${name}.mjs ${(statSync(`dist/${name}.mjs`).size / 1024).toFixed(0)} KiB`)
    .join(', ');
  record({
    id: '8c',
    scenario: `bundle sizes: ${sizes}`,
    value: statSync('dist/master.mjs').size / 1024,
    unit: 'KiB (master)',
    target: 'information',
    met: null,
  });
  const restarted: Master = { ...master, proc: again, url };

  // 8d. Memory under read load, in a master that has done nothing else since it started.
  wrk(`${url}/`, { connections: 50, seconds: SECONDS, lua: randomNode });
  wrk(`${url}/`, { connections: 50, seconds: SECONDS, lua: rulePages() });
  const underLoad = memory(again.child.pid!).peak;
  record({
    id: '8d',
    scenario: 'master peak RSS since start, through GET-by-id and list-of-100 loads (random ids and pages)',
    value: underLoad,
    unit: 'MiB',
    target: '<= 150 MiB',
    met: underLoad <= 150,
  });

  // 5. Live reads while bulk work runs.
  // GETs of one node from 10 connections (wrk, `lua` its script) for as long as `work` runs.
  const readsBeside = async (lua: string, work: () => Promise<unknown>) => {
    const reading = await wrkInBackground(`${url}/api/nodes/42`, 10, 600, lua);
    const started = performance.now();
    await work();
    const seconds = (performance.now() - started) / 1000;
    spawnSync('pkill', ['-INT', '-x', 'wrk']);
    return { reads: await reading.result, seconds };
  };
  // Idle reads, then reads beside the work, in turn three times; medians of each. A single pair falls within this
  // host's noise: the idle p99 alone moved between 0.8 and 2 ms from one 5 s window to the next.
  const besideWork = async (work: (round: number) => Promise<unknown>) => {
    const lua = bearer(master.token);
    const idle: number[] = [];
    const busy: number[] = [];
    const seconds: number[] = [];
    for (let round = 0; round < 3; round++) {
      idle.push(wrk(`${url}/api/nodes/42`, { connections: 10, seconds: SECONDS, lua }).p99);
      const beside = await readsBeside(lua, () => work(round));
      busy.push(beside.reads.p99);
      seconds.push(beside.seconds);
    }
    const list = (values: number[]) => values.map((ms) => ms.toFixed(2)).join(', ');
    const note = `idle p99 ${list(idle)} ms; during ${list(busy)} ms`;
    return { idle: median(idle), busy: median(busy), seconds: median(seconds), note };
  };
  const bulkRow = (id: string, scenario: string, beside: Awaited<ReturnType<typeof besideWork>>, note: string) =>
    record({
      id,
      scenario,
      value: beside.busy,
      unit: 'ms p99',
      ceiling: beside.idle,
      ratio: beside.busy / beside.idle,
      target: '<= 2x idle p99',
      met: beside.busy / beside.idle <= 2,
      note: `${beside.note}; ${note}`,
    });
  // Batches, like imports, are written by a worker thread at the lowest priority: beside reads that keep the core busy
  // they take far longer than alone (the note gives their rate; 1.5-2.5 s a batch here), hence ten of them a round.
  const deleted = 10_000;
  const deleting = await besideWork(async (round) => {
    const ids = Array.from({ length: deleted }, (_, i) => round * deleted + i + 1);
    for (let i = 0; i < ids.length; i += 1000)
      await api(url, master.token, 'POST', '/api/rules/batch-delete', { ids: ids.slice(i, i + 1000) });
  });
  bulkRow(
    '5a',
    `live GET p99 while ${deleted / 1000} batch-deletes remove ${deleted.toLocaleString('en-US')} rules`,
    deleting,
    `deletes ran at ${Math.round(deleted / deleting.seconds)} rules/s`,
  );

  // The import yields the core to the reads in the same way; 5c shows it beside lighter reads.
  // One document for each of 5b's three rounds and one for 5c, each on ports of its own.
  const imports = [50_000, 50_010, 50_020, 50_030].map(
    (firstPort) => new Encoded({ ...seedDocument(1000, 10, firstPort), nodes: [] }),
  );
  const importing = await besideWork((round) => api(url, master.token, 'POST', '/api/import', imports[round]));
  bulkRow(
    '5b',
    'live GET p99 while an import adds 10,000 rules',
    importing,
    `an import took ${importing.seconds.toFixed(1)} s beside reads that keep the master's core busy`,
  );
  // Each connection pauses 2 ms between requests: reads at a fraction of the core's capacity.
  const pacedReads = `${bearer(master.token)}function delay() return 2 end\n`;
  const pacedQuiet = wrk(`${url}/api/nodes/42`, { connections: 10, seconds: SECONDS, lua: pacedReads });
  const light = await readsBeside(pacedReads, () => api(url, master.token, 'POST', '/api/import', imports[3]));
  record({
    id: '5c',
    scenario: 'the same import beside paced reads (10 connections, 2 ms between requests)',
    value: light.seconds,
    unit: 's',
    target: 'information',
    met: null,
    note:
      `reads ${Math.round(pacedQuiet.rps)}/s idle; GET p99 ${light.reads.p99.toFixed(2)} ms during the import, ` +
      `${pacedQuiet.p99.toFixed(2)} ms idle`,
  });
  await restarted.proc.stop();
}

/**
 * Starts wrk in the background and resolves once it is sending (so what follows is measured under load from its
 * start); `result` resolves with its figures after `pkill -INT -x wrk`.
 */
async function wrkInBackground(
  url: string,
  connections: number,
  seconds: number,
  lua: string,
): Promise<{ result: Promise<ReturnType<typeof wrk>> }> {
  // wrk blocks, so it runs in a process of its own; SIGINT to the wrk binary (pkill -x wrk) ends it early, and it still
  // reports.
  const result = new Promise<ReturnType<typeof wrk>>((resolve, reject) => {
    const child = start([
      node,
      '--import',
      'tsx',
      '-e',
      `import('./bench/wrk.ts').then(({ wrk }) => console.log(JSON.stringify({ msg: 'wrk', result: ` +
        `wrk(${JSON.stringify(url)}, { connections: ${connections}, seconds: ${seconds}, lua: ` +
        `${JSON.stringify(lua)} }) })))`,
    ]);
    child.waitFor('wrk', (seconds + 30) * 1000).then((line) => resolve(line.result as ReturnType<typeof wrk>), reject);
  });
  while (spawnSync('pgrep', ['-x', 'wrk']).status !== 0) await new Promise((resolve) => setTimeout(resolve, 50));
  await new Promise((resolve) => setTimeout(resolve, 500));
  return { result };
}

async function fanOut(): Promise<void> {
  const agents = 10_000;
  console.error(`sync fan-out: ${agents.toLocaleString()} light agents speaking the agent protocol`);
  const master = await startMaster(join(work, 'fanout'));
  const imported = await api(master.url, master.token, 'POST', '/api/import', seedDocument(agents, 1));
  const tokensFile = join(work, 'tokens.json');
  writeFileSync(tokensFile, JSON.stringify(imported.nodes.map((n: { agent_token: string }) => n.agent_token)));
  const fleet = start(pinned(1, [node, '--import', 'tsx', 'bench/fake-agents.ts', master.url, tokensFile]));
  const { retries } = (await fleet.waitFor('linked', 120_000)) as { retries: Record<string, number> };
  const retried = Object.entries(retries).map(([reason, count]) => `${count} x ${reason}`);
  // Every agent linked once, but on a contended host some links end and are made again while the fleet settles:
  // the change goes out once the master has them all online (else this row times their relinking, not the fan-out).
  const settling = performance.now();
  const online = async () => (await api(master.url, master.token, 'GET', '/api/dashboard')).nodes.by_status.online;
  let before = await online();
  while (before < agents && performance.now() - settling < 60_000) {
    await new Promise((resolve) => setTimeout(resolve, 250));
    before = await online();
  }
  const settled = (performance.now() - settling) / 1000;
  await new Promise((resolve) => setTimeout(resolve, 1000));
  // One change every agent gets: a data-plane setting, pushed to all of them with their config.
  const started = performance.timeOrigin + performance.now();
  await api(master.url, master.token, 'PATCH', '/api/settings', { tcp_idle_timeout_seconds: 7200 });
  const done = (await fleet.waitFor('all acknowledged', 120_000)).at as number;
  const seconds = (done - started) / 1000;
  const applied = await api(master.url, master.token, 'GET', '/api/dashboard');

  const rss = peak(master);
  record({
    id: '7',
    scenario: `one change touching ${agents.toLocaleString()} connected agents: until every node acknowledged`,
    value: seconds,
    unit: 's',
    peak_rss_mib: rss,
    target: '<= 2 s, master RSS <= 400 MiB',
    met: seconds <= 2 && rss <= 400,
    note:
      `tcp_idle_timeout_seconds changed once; ${before} nodes online when it was made (${settled.toFixed(1)} s after ` +
      `all had linked once), ${applied.nodes.by_status.online} after; ` +
      `${Math.round(agents / seconds).toLocaleString()} config pushes and acknowledgements a second; ` +
      `link attempts retried while the fleet came up: ${retried.join(', ') || 'none'}`,
  });

  // 7b. The master restarts on the same address; every agent links again with its usual backoff.
  const port = new URL(master.url).port;
  await master.proc.stop();
  const restartedAt = performance.timeOrigin + performance.now();
  const again = masterProcess(master.dataDir, `127.0.0.1:${port}`);
  // A link lost and made again before the restart (a slow handshake, say) also ends in 'all relinked'.
  const relinked = (await fleet.waitFor('all relinked', 120_000, (line) => (line.at as number) > restartedAt))
    .at as number;
  record({
    id: '7b',
    scenario: `a master restart: until all ${agents.toLocaleString()} agents linked again`,
    value: (relinked - restartedAt) / 1000,
    unit: 's',
    peak_rss_mib: memory(again.child.pid!).peak,
    target: 'information',
    met: null,
    note: 'from the new process starting; agents retry after a jittered 0.25-0.5 s, give up on a silent try after 5 s',
  });
  await fleet.stop();
  await again.stop();
}

/**
 * Runs bench/dataplane.ts with `args` on the load's CPU (in namespace `ns`, at `host`, when given; on any CPU with
 * `anyCpu`) and returns the JSON line it printed last.
 */
function dataplaneLoad(args: unknown[], where: { ns?: string; host?: string; anyCpu?: boolean } = {}): any {
  const load = [node, '--import', 'tsx', 'bench/dataplane.ts', ...args.map(String)];
  const argv = where.anyCpu ? load : pinned(1, load);
  const [command, ...rest] = where.ns ? within(where.ns, argv) : argv;
  const env = where.host ? { ...process.env, BENCH_HOST: where.host } : process.env;
  const out = spawnSync(command!, rest, { encoding: 'utf8', env });
  const last = out.stdout.trim().split('\n').pop();
  if (!last) throw new Error(`bench/dataplane.ts ${args.join(' ')} printed nothing: ${out.stderr.slice(-500)}`);
  return JSON.parse(last);
}

async function dataPlane(): Promise<void> {
  console.error('data plane: the bundled agent relaying to a sink and an HTTP server, against HAProxy and direct');
  const master = await startMaster(join(work, 'data'));
  // The sink listens on the node's loopback, a target only this setting allows.
  await api(master.url, master.token, 'PATCH', '/api/settings', { allow_local_rule_targets: 1 });
  const nodeRecord = await api(master.url, master.token, 'POST', '/api/nodes', { name: 'relay', host: '127.0.0.1' });
  const sink = start(pinned(1, [node, '--import', 'tsx', 'bench/dataplane.ts', 'sink']));
  const ports = (await sink.waitFor('sink')) as { tcp: number; udp: number };
  const agent = agentProcess(master.url, 'agent-state', nodeRecord.agent_token);
  await agent.waitFor('linked to the master');
  // Every port the relays, peers and tunnels listen on is below the ephemeral range (32768 up), so that none of the
  // load's own connections ever holds one when it is bound.
  const tcpRule = await api(master.url, master.token, 'POST', '/api/rules', {
    name: 'tcp',
    node_id: nodeRecord.id,
    protocol: 'tcp',
    listen_port: 31001,
    targets: [`127.0.0.1:${ports.tcp}`],
  });
  const udpRule = await api(master.url, master.token, 'POST', '/api/rules', {
    name: 'udp',
    node_id: nodeRecord.id,
    protocol: 'udp',
    listen_port: 31002,
    targets: [`127.0.0.1:${ports.udp}`],
  });
  // A tunnel for the same loads: the relay agent is its entry, a second agent (on the same
  // CPU) the exit, which dials the sink.
  const exitRecord = await api(master.url, master.token, 'POST', '/api/nodes', { name: 'exit', host: '127.0.0.1' });
  const exitAgent = agentProcess(master.url, 'exit-state', exitRecord.agent_token);
  await exitAgent.waitFor('linked to the master');
  const tunnel = await api(master.url, master.token, 'POST', '/api/tunnels', {
    name: 'bench',
    entry_node_id: nodeRecord.id,
    exit_node_id: exitRecord.id,
    listen_port: 31010,
  });
  const through = { node_id: nodeRecord.id, tunnel_id: tunnel.id };
  const tunnelTcp = await api(master.url, master.token, 'POST', '/api/rules', {
    ...through,
    name: 'tunnel-tcp',
    protocol: 'tcp',
    listen_port: 31004,
    targets: [`127.0.0.1:${ports.tcp}`],
  });
  const tunnelUdp = await api(master.url, master.token, 'POST', '/api/rules', {
    ...through,
    name: 'tunnel-udp',
    protocol: 'udp',
    listen_port: 31005,
    targets: [`127.0.0.1:${ports.udp}`],
  });
  // The same tunnel's TLS inside a WebSocket (transport ws), straight to the exit's port.
  const wsTunnel = await api(master.url, master.token, 'POST', '/api/tunnels', {
    name: 'bench-ws',
    entry_node_id: nodeRecord.id,
    exit_node_id: exitRecord.id,
    listen_port: 31011,
    transport: 'ws',
  });
  const wsTcp = await api(master.url, master.token, 'POST', '/api/rules', {
    node_id: nodeRecord.id,
    tunnel_id: wsTunnel.id,
    name: 'tunnel-ws-tcp',
    protocol: 'tcp',
    listen_port: 31012,
    targets: [`127.0.0.1:${ports.tcp}`],
  });
  const synced = await api(master.url, master.token, 'POST', '/api/rules/batch-sync', {
    ids: [tcpRule.id, udpRule.id, tunnelTcp.id, tunnelUdp.id, wsTcp.id],
  });
  const unsynced = synced.results.filter((r: { outcome: string }) => r.outcome !== 'applied');
  if (unsynced.length > 0) throw new Error(`rules not applied: ${JSON.stringify(unsynced)}`);
  // The peers, on the relay's CPU: HAProxy in front of the same sink and HTTP server, and a chain of two HAProxies
  // with TLS between them (an ECDSA P-256 certificate, as the agents') in front of the sink, as a tunnel's peer.
  const small = { status: 200, headers: { 'content-type': 'application/json' }, body: SMALL_JSON };
  const hello = start(pinned(1, [node, '--import', 'tsx', 'bench/hello.ts', answerFile('small', small)]));
  const helloUrl = new URL(String((await hello.waitFor('listening')).url));
  const httpRule = await api(master.url, master.token, 'POST', '/api/rules', {
    name: 'http',
    node_id: nodeRecord.id,
    protocol: 'tcp',
    listen_port: 31006,
    targets: [`127.0.0.1:${helloUrl.port}`],
  });
  const httpSynced = await api(master.url, master.token, 'POST', '/api/rules/batch-sync', { ids: [httpRule.id] });
  if (httpSynced.results[0]?.outcome !== 'applied') throw new Error(`rule not applied: ${JSON.stringify(httpSynced)}`);
  const identity = selfSigned(['127.0.0.1']);
  const pem = join(work, 'chain.pem');
  writeFileSync(pem, identity.cert + identity.key, { mode: 0o600 });
  const haproxy = startHaproxy(join(work, 'haproxy.cfg'), [
    { name: 'bulk', bind: '127.0.0.1:31003', server: `127.0.0.1:${ports.tcp}` },
    { name: 'http', bind: '127.0.0.1:31007', server: `127.0.0.1:${helloUrl.port}` },
  ]);
  const chainEntry = startHaproxy(join(work, 'chain-entry.cfg'), [
    { name: 'entry', bind: '127.0.0.1:31008', server: '127.0.0.1:31009', tlsToServer: true },
  ]);
  const chainExit = startHaproxy(join(work, 'chain-exit.cfg'), [
    { name: 'exit', bind: '127.0.0.1:31009', server: `127.0.0.1:${ports.tcp}`, tlsCertificate: pem },
  ]);
  await new Promise((resolve) => setTimeout(resolve, 500));

  const load = (...args: unknown[]) => dataplaneLoad(args);
  const bulk = (port: number, streams: number) => () => load('tcp', port, streams, BULK_BYTES / streams).mib_per_s;
  const connections = (port: number) => () => load('connrate', port, 3, 50).per_second;
  const keepAlive = (port: number) => () =>
    wrk(`http://127.0.0.1:${port}/`, { connections: 50, seconds: 3, warmup: 1 }).rps;
  const versus = (relay: number, peer: number, name: string) => `${(relay / peer).toFixed(2)}x ${name}`;
  const scenarios = [
    ['9a', 'TCP relay throughput, 1 stream', 'MiB/s', bulk(31001, 1), bulk(31003, 1), bulk(ports.tcp, 1)],
    ['9b', 'TCP relay throughput, 8 streams', 'MiB/s', bulk(31001, 8), bulk(31003, 8), bulk(ports.tcp, 8)],
    [
      '9c',
      'TCP connection rate through the relay (connect, 1-byte echo, close; 50 at a time)',
      'conn/s',
      connections(31001),
      connections(31003),
      connections(ports.tcp),
    ],
    [
      '9d',
      'HTTP keep-alive requests through the relay (wrk, 50 connections, a small JSON answer)',
      'req/s',
      keepAlive(31006),
      keepAlive(31007),
      keepAlive(Number(helloUrl.port)),
    ],
  ] as const;
  for (const [id, scenario, unit, relay, peer, direct] of scenarios) {
    const figures = interleaved({ relay, haproxy: peer, direct });
    record({
      id,
      scenario,
      value: figures.relay,
      unit,
      peak_rss_mib: memory(agent.child.pid!).peak,
      ceiling: figures.haproxy,
      ratio: figures.relay / figures.haproxy,
      target: '>= 1.0x HAProxy (TCP mode, 1 thread, same core)',
      met: figures.relay >= figures.haproxy,
      note:
        `medians of 3 interleaved runs: HAProxy ${round(figures.haproxy)}, direct ${round(figures.direct)} ` +
        `(${versus(figures.relay, figures.direct, 'direct')})`,
    });
  }

  // Loss against rate: the fixed-rate generator (a process of its own) straight to the echo, and through the relay,
  // at each rate in turn. The relay is judged by what it adds to the loss the generator and echo have on their own.
  const sweep = [10_000, 25_000, 50_000, 75_000, 100_000, 150_000].map((rate) => {
    const direct = load('udp', ports.udp, rate, 2, 64);
    const relayed = load('udp', 31002, rate, 2, 64);
    return { rate, direct, relayed, added: relayed.loss - direct.loss };
  });
  const at50k = sweep.find((s) => s.rate === 50_000)!;
  const holds = sweep.filter((s) => s.added <= 0.01).map((s) => s.rate);
  const percent = (loss: number) => `${(loss * 100).toFixed(2)}%`;
  record({
    id: '10',
    scenario: 'UDP relay at 50,000 packets/s offered (64-byte datagrams, echoed), loss against the direct path',
    value: at50k.relayed.received / 2,
    unit: 'pkt/s echoed',
    ceiling: at50k.direct.received / 2,
    ratio: at50k.relayed.received / at50k.direct.received,
    target: 'relayed loss within 1 point of direct at 50k pkt/s',
    met: at50k.added <= 0.01,
    note:
      sweep
        .map((s) => {
          // Past what one generator process can send, say what it did send.
          const offered = Math.min(s.direct.offered_pps, s.relayed.offered_pps);
          const short = offered < s.rate * 0.95 ? ` (${Math.round(offered / 1000)}k offered)` : '';
          const losses = `${percent(s.relayed.loss)} relayed, ${percent(s.direct.loss)} direct`;
          return `${s.rate / 1000}k pkt/s${short}: ${losses}`;
        })
        .join('; ') + `; within 1 point at ${holds.length > 0 ? holds.map((r) => `${r / 1000}k`).join(', ') : 'none'}`,
  });

  // Through a tunnel against the chain of two HAProxies with TLS between them; the direct relay beside both.
  const both = () => memory(agent.child.pid!).peak + memory(exitAgent.child.pid!).peak;
  const tunnelScenarios = [
    ['11a', '1 stream', 'MiB/s', bulk(31004, 1), bulk(31008, 1), bulk(31001, 1), '>= 1.2x'],
    ['11b', '8 streams', 'MiB/s', bulk(31004, 8), bulk(31008, 8), bulk(31001, 8), '>= 1.2x'],
    [
      '11c',
      'connection rate (one HTTP/2 stream each; 50 at a time)',
      'conn/s',
      connections(31004),
      connections(31008),
      connections(31001),
      '>= 1.0x',
    ],
  ] as const;
  for (const [id, label, unit, tunnelled, chain, relay, goal] of tunnelScenarios) {
    const figures = interleaved({ tunnelled, chain, relay });
    record({
      id,
      scenario: `TCP through a tunnel (entry agent -> TLS -> exit agent), ${label}`,
      value: figures.tunnelled,
      unit,
      peak_rss_mib: both(),
      ceiling: figures.chain,
      ratio: figures.tunnelled / figures.chain,
      target: `${goal} HAProxy -> TLS -> HAProxy (both on the agents' core)`,
      met: figures.tunnelled / figures.chain >= Number(goal.slice(3, -1)),
      note:
        `medians of 3 interleaved runs: the chain ${round(figures.chain)}, the direct relay ${round(figures.relay)} ` +
        `(${versus(figures.tunnelled, figures.relay, 'the direct relay')}); RSS is both agents'`,
    });
  }
  // The WebSocket transport against the same tunnel over TLS alone; the chain of HAProxies beside both.
  const wsScenarios = [
    ['11e', '1 stream', 'MiB/s', bulk(31012, 1), bulk(31004, 1), bulk(31008, 1)],
    ['11f', '8 streams', 'MiB/s', bulk(31012, 8), bulk(31004, 8), bulk(31008, 8)],
    ['11g', 'connection rate (50 at a time)', 'conn/s', connections(31012), connections(31004), connections(31008)],
  ] as const;
  for (const [id, label, unit, ws, tls, chain] of wsScenarios) {
    const figures = interleaved({ ws, tls, chain });
    record({
      id,
      scenario: `TCP through a tunnel of transport ws (TLS inside a WebSocket), ${label}`,
      value: figures.ws,
      unit,
      peak_rss_mib: both(),
      ceiling: figures.tls,
      ratio: figures.ws / figures.tls,
      // The TLS inside runs over a stream of JavaScript (the WebSocket), not a socket: each record crosses into it and
      // back, framed and masked, where over TLS alone it stays in native code.
      target: '>= 0.5x the same tunnel over TLS alone',
      met: figures.ws / figures.tls >= 0.5,
      note:
        `medians of 3 interleaved runs: over TLS alone ${round(figures.tls)}, the HAProxy chain ` +
        `${round(figures.chain)} (${versus(figures.ws, figures.chain, 'the chain')}); RSS is both agents'`,
    });
  }
  const udpRelayAgain = load('udp', 31002, 50_000, 2, 64);
  const udpTunnel = load('udp', 31005, 50_000, 2, 64);
  record({
    id: '11d',
    scenario: 'UDP through a tunnel at 50,000 packets/s offered (64-byte datagrams, echoed)',
    value: udpTunnel.received / 2,
    unit: 'pkt/s echoed',
    ceiling: udpRelayAgain.received / 2,
    ratio: udpTunnel.received / udpRelayAgain.received,
    target: 'loss within 1 point of the direct relay',
    met: udpTunnel.loss - udpRelayAgain.loss <= 0.01,
    note:
      `loss ${(udpTunnel.loss * 100).toFixed(2)}% through the tunnel, ` +
      `${(udpRelayAgain.loss * 100).toFixed(2)}% via the direct relay`,
  });
  await exitAgent.stop();

  for (const peer of [haproxy, chainEntry, chainExit, hello]) await peer.stop();
  await agent.stop();
  if (sink.child.exitCode !== null)
    throw new Error(`the sink died during the data-plane runs (exit ${sink.child.exitCode})`);
  await sink.stop();
  await master.proc.stop();
}

/**
 * The relay on every core: the agent on two threads (this machine's cores) beside HAProxy with nbthread 2, both free to
 * run on either CPU, for the loads of rows 9a-9d; the agent on one thread beside them, as the gain threads give.
 */
async function relayOnEveryCore(): Promise<void> {
  console.error('relay threads: the bundled agent on 1 and 2 threads against HAProxy with nbthread 2');
  const threads = 2;
  const master = await startMaster(join(work, 'threads'));
  await api(master.url, master.token, 'PATCH', '/api/settings', { allow_local_rule_targets: 1 });
  // Every process here may run on either CPU: the scheduler places them, as it would the relay's threads.
  const sink = start([node, '--import', 'tsx', 'bench/dataplane.ts', 'sink']);
  const ports = (await sink.waitFor('sink')) as { tcp: number; udp: number };
  const small = { status: 200, headers: { 'content-type': 'application/json' }, body: SMALL_JSON };
  const hello = start([node, '--import', 'tsx', 'bench/hello.ts', answerFile('small', small)]);
  const helloPort = Number(new URL(String((await hello.waitFor('listening')).url)).port);
  // An agent a way: two threads on ports 32001-32002, one on 32011-32012.
  const agents: Running[] = [];
  for (const [workers, base] of [
    [threads, 32001],
    [1, 32011],
  ]) {
    const record = await api(master.url, master.token, 'POST', '/api/nodes', {
      name: `t${workers}`,
      host: '127.0.0.1',
    });
    const agent = agentProcess(master.url, `threads-${workers}`, record.agent_token, workers, false);
    await agent.waitFor('linked to the master');
    agents.push(agent);
    const ids = [];
    for (const [offset, target] of [ports.tcp, helloPort].entries()) {
      const rule = await api(master.url, master.token, 'POST', '/api/rules', {
        ...{ name: `t${workers}-${offset}`, node_id: record.id, protocol: 'tcp', listen_port: base! + offset },
        targets: [`127.0.0.1:${target}`],
      });
      ids.push(rule.id);
    }
    const synced = await api(master.url, master.token, 'POST', '/api/rules/batch-sync', { ids });
    if (synced.results.some((r: { outcome: string }) => r.outcome !== 'applied'))
      throw new Error(`rules not applied: ${JSON.stringify(synced)}`);
  }
  const listeners = [
    { name: 'bulk', bind: '127.0.0.1:32021', server: `127.0.0.1:${ports.tcp}` },
    { name: 'http', bind: '127.0.0.1:32022', server: `127.0.0.1:${helloPort}` },
  ];
  const haproxy = startHaproxy(join(work, 'haproxy-threads.cfg'), listeners, undefined, threads);
  await new Promise((resolve) => setTimeout(resolve, 500));

  // Each run gives its rate and how many units it moved (MiB, connections, requests), for the CPU a unit took.
  const load = (...args: unknown[]) => dataplaneLoad(args, { anyCpu: true });
  const bulk = (streams: number) => (port: number) => {
    const { mib_per_s } = load('tcp', port, streams, BULK_BYTES / streams);
    return { rate: mib_per_s as number, units: BULK_BYTES / 2 ** 20 };
  };
  const connections = (port: number) => {
    const { per_second } = load('connrate', port, 3, 50);
    return { rate: per_second as number, units: per_second * 3 };
  };
  const keepAlive = (port: number) => {
    const { rps, requests } = wrk(`http://127.0.0.1:${port}/`, { connections: 50, seconds: 3, warmup: 1 });
    return { rate: rps, units: requests };
  };
  const scenarios = [
    ['9e', 'TCP relay throughput, 1 stream', 'MiB/s', 'a MiB', bulk(1), 0],
    ['9f', 'TCP relay throughput, 8 streams', 'MiB/s', 'a MiB', bulk(8), 0],
    ['9g', 'TCP connection rate (connect, 1-byte echo, close; 50 at a time)', 'conn/s', 'a connection', connections, 0],
    ['9h', 'HTTP keep-alive requests (wrk, 50 connections, a small JSON answer)', 'req/s', 'a request', keepAlive, 1],
  ] as const;
  const pids = { relay: agents[0]!.child.pid!, haproxy: haproxy.child.pid!, one: agents[1]!.child.pid! };
  type Way = keyof typeof pids;
  for (const [id, scenario, unit, per, way, offset] of scenarios) {
    const cpu: Record<Way, number[]> = { relay: [], haproxy: [], one: [] };
    const measured = (name: Way, port: number) => () => {
      const before = cpuMicros(pids[name]);
      const { rate, units } = way(port);
      cpu[name].push((cpuMicros(pids[name]) - before) / Math.max(1, units));
      return rate;
    };
    // A run of each first, not counted: each of the agent's threads compiles its own code as it warms up.
    for (const port of [32001, 32021, 32011]) way(port + offset);
    const figures = interleaved({
      relay: measured('relay', 32001 + offset),
      haproxy: measured('haproxy', 32021 + offset),
      one: measured('one', 32011 + offset),
    });
    const us = (name: Way) => `${Math.round(median(cpu[name]))} us`;
    record({
      id,
      scenario: `${scenario}, on ${threads} threads`,
      value: figures.relay,
      unit,
      peak_rss_mib: memory(agents[0]!.child.pid!).peak,
      ceiling: figures.haproxy,
      ratio: figures.relay / figures.haproxy,
      target: `>= 1.0x HAProxy (TCP mode, nbthread ${threads}, every CPU)`,
      met: figures.relay >= figures.haproxy,
      note:
        `medians of 3 interleaved runs: HAProxy ${round(figures.haproxy)}; the agent on one thread ` +
        `${round(figures.one)} (${(figures.relay / figures.one).toFixed(2)}x from the threads); CPU ${per}: ` +
        `${us('relay')} on ${threads} threads, ${us('one')} on one, HAProxy ${us('haproxy')}; the load and the ` +
        `targets run on either CPU too; RSS ${memory(agents[1]!.child.pid!).peak} MiB on one thread`,
    });
  }
  for (const running of [haproxy, hello, ...agents, sink]) await running.stop();
  await master.proc.stop();
}

/**
 * Medians of three runs of each way, taken in turns (a, b, c, a, b, c, ...), so that what drifts on the host (another
 * tenant, the CPU's clock) falls on every way alike.
 */
function interleaved<K extends string>(ways: Record<K, () => number>, rounds = 3): Record<K, number> {
  const runs = new Map<K, number[]>();
  for (let round = 0; round < rounds; round++)
    for (const [name, run] of Object.entries(ways) as [K, () => number][])
      runs.set(name, [...(runs.get(name) ?? []), run()]);
  return Object.fromEntries([...runs].map(([name, values]) => [name, median(values)])) as Record<K, number>;
}

/** iperf3 from the client to HOST:PORT (the target's server behind it): bits a second received, and bytes sent. */
function iperf(port: number, host: string, streams: number): { mib_per_s: number; bytes: number } {
  const [command, ...args] = within(
    CLIENT,
    pinned(1, ['iperf3', '-c', host, '-p', String(port), '-t', String(SECONDS), '-P', String(streams), '-J']),
  );
  const run = spawnSync(command!, args, { encoding: 'utf8' });
  const result = JSON.parse(run.stdout || '{}');
  if (result.error || !result.end?.sum_received)
    throw new Error(`iperf3 to ${host}:${port} failed: ${result.error ?? run.stderr.slice(-300)}`);
  return { mib_per_s: result.end.sum_received.bits_per_second / 8 / 2 ** 20, bytes: result.end.sum_sent.bytes };
}

/**
 * The kernel path (nftables) on a node between a client and a target, each a network namespace, beside the node as a
 * plain router (the ceiling), the agent's relay and HAProxy (TCP mode, one thread) on the node's CPU, to the same
 * target: bulk with 1 and 8 streams (iperf3), new connections a second, and whether the kernel's counters agree with
 * what the client sent.
 */
async function kernelPath(): Promise<void> {
  console.error(
    'kernel path: client -> node -> target in namespaces; the node as a router, nftables, the relay, HAProxy',
  );
  const unavailable = makeLab();
  if (unavailable) {
    console.error(`  skipped: ${unavailable}`);
    return;
  }
  const master = await startMaster(join(work, 'kernel-data'), `${HOST_SIDE}:0`, { MASTER_INSECURE_HTTP: '1' });
  await api(master.url, master.token, 'PATCH', '/api/settings', { agent_report_interval_seconds: 1 });
  const edge = await api(master.url, master.token, 'POST', '/api/nodes', { name: 'edge', host: NODE_ADDRESS });
  const agent = start(
    within(
      NODE,
      pinned(0, [node, 'dist/agent.mjs', '--master', master.url, '--insecure-http', '--state-dir', join(work, 'ks')]),
    ),
    { AGENT_TOKEN: edge.agent_token, AGENT_FORWARDING: 'auto' },
  );
  await agent.waitFor('linked to the master');
  const iperfServer = start(within(TARGET, pinned(1, ['iperf3', '-s', '-p', '5201'])));
  // One sink on three ports: 7100 the target of the plain rules, all three of the balanced ones.
  const sink = start(within(TARGET, pinned(1, [node, '--import', 'tsx', 'bench/dataplane.ts', 'sink'])), {
    BENCH_HOST: TARGET_ADDRESS,
    BENCH_SINK_PORT: '7100,7101,7102',
  });
  await sink.waitFor('sink');
  const balancedTargets = [7100, 7101, 7102].map((port) => `${TARGET_ADDRESS}:${port}`);
  const haproxy = startHaproxy(
    join(work, 'kernel-haproxy.cfg'),
    [
      { name: 'iperf', bind: `${NODE_ADDRESS}:15203`, server: `${TARGET_ADDRESS}:5201` },
      { name: 'echo', bind: `${NODE_ADDRESS}:15213`, server: `${TARGET_ADDRESS}:7100` },
      { name: 'balanced', bind: `${NODE_ADDRESS}:15233`, server: balancedTargets },
    ],
    (argv) => within(NODE, argv),
  );
  const rule = (
    name: string,
    port: number,
    targetPort: number,
    forwarding: string,
    protocol = 'tcp',
    controls: Record<string, unknown> = {},
  ) =>
    api(master.url, master.token, 'POST', '/api/rules', {
      name,
      node_id: edge.id,
      protocol,
      listen_port: port,
      targets: [`${TARGET_ADDRESS}:${targetPort}`],
      forwarding,
      ...controls,
    });
  const kernel = await rule('kernel', 15201, 5201, 'auto');
  const relay = await rule('relay', 15202, 5201, 'relay');
  const kernelEcho = await rule('kernel-echo', 15211, 7100, 'auto');
  const relayEcho = await rule('relay-echo', 15212, 7100, 'relay');
  const kernelUdp = await rule('kernel-udp', 15221, 7100, 'auto', 'udp');
  // The controls the kernel holds itself: who may connect (the client's block, and a deny list it is not in), how many
  // at once (more than the load opens).
  const kernelControlled = await rule('kernel-controls', 15214, 7100, 'auto', 'tcp', {
    allow_sources: ['10.215.2.0/24', '192.0.2.0/24', '2001:db8::/32'],
    deny_sources: ['10.215.2.128/25', '198.51.100.0/24'],
    max_connections: 10_000,
    quota: { bytes: 2 ** 40, period: 'none', direction: 'both' },
  });
  // Round robin over three targets, on each path: the kernel's needs the health checks it follows.
  const balanced = (name: string, port: number, forwarding: string) =>
    api(master.url, master.token, 'POST', '/api/rules', {
      name,
      node_id: edge.id,
      protocol: 'tcp',
      listen_port: port,
      targets: balancedTargets,
      forwarding,
      health_check: { interval_seconds: 5 },
    });
  const kernelBalanced = await balanced('kernel-balanced', 15231, 'auto');
  const relayBalanced = await balanced('relay-balanced', 15232, 'relay');
  const ids = [
    kernel.id,
    relay.id,
    kernelEcho.id,
    relayEcho.id,
    kernelUdp.id,
    kernelControlled.id,
    kernelBalanced.id,
    relayBalanced.id,
  ];
  await api(master.url, master.token, 'POST', '/api/rules/batch-sync', { ids });
  const paths = await Promise.all(
    ids.map(async (id) => (await api(master.url, master.token, 'GET', `/api/rules/${id}`)).sync.applied_path),
  );
  if (paths.join() !== 'kernel,relay,kernel,relay,kernel,kernel,kernel,relay')
    throw new Error(`unexpected paths: ${paths.join(', ')}`);
  // First, while the node's own connections (the relay's, HAProxy's, with the lab's wide port range) have left no
  // port in TIME_WAIT where the 10,000 rules listen; with reports at the default 10 s (each reads and saves the
  // counts of 10,000 rules), not the 1 s the counters' rows below take.
  await api(master.url, master.token, 'PATCH', '/api/settings', { agent_report_interval_seconds: 10 });
  await applyTenThousand(master, edge.id);
  await api(master.url, master.token, 'PATCH', '/api/settings', { agent_report_interval_seconds: 1 });
  await new Promise((resolve) => setTimeout(resolve, 500));

  const ways = { router: [TARGET_ADDRESS, 5201], kernel: [NODE_ADDRESS, 15201], relay: [NODE_ADDRESS, 15202] } as const;
  for (const streams of [1, 8]) {
    const router = iperf(ways.router[1], ways.router[0], streams).mib_per_s;
    const before = (await api(master.url, master.token, 'GET', `/api/rules/${kernel.id}`)).traffic;
    const viaKernel = iperf(ways.kernel[1], ways.kernel[0], streams);
    const viaRelay = iperf(ways.relay[1], ways.relay[0], streams).mib_per_s;
    const viaHaproxy = iperf(15203, NODE_ADDRESS, streams).mib_per_s;
    await new Promise((resolve) => setTimeout(resolve, 2500));
    const after = (await api(master.url, master.token, 'GET', `/api/rules/${kernel.id}`)).traffic;
    // What the client sent, plus at most the headers of its packets: 52 bytes (20 IPv4, 32 TCP with timestamps) a
    // 1,448-byte segment, much less where the kernel coalesces segments (GRO) before nftables counts them.
    const counted = after.bytes_in - before.bytes_in;
    const off = counted / viaKernel.bytes - 1;
    const countsRight = off >= -0.01 && off <= 52 / 1448 + 0.01;
    record({
      id: streams === 1 ? '12a' : '12b',
      scenario:
        `TCP through the kernel path (nftables), ${streams === 1 ? '1 stream' : '8 streams'}, ` +
        'client and target in other namespaces',
      value: viaKernel.mib_per_s,
      unit: 'MiB/s',
      ceiling: router,
      ratio: viaKernel.mib_per_s / router,
      target: '>= 0.9x the node as a router; counters within 1% of sent (+ headers)',
      met: viaKernel.mib_per_s / router >= 0.9 && countsRight,
      note:
        `router ${Math.round(router)} MiB/s, relay ${Math.round(viaRelay)} MiB/s ` +
        `(${(viaRelay / viaHaproxy).toFixed(2)}x HAProxy), HAProxy ${Math.round(viaHaproxy)} MiB/s; ` +
        `kernel counted ${counted} bytes in for ${viaKernel.bytes} sent (${(off * 100).toFixed(2)}%; headers add at ` +
        'most 3.6%)',
    });
  }
  const rate = (port: number, host: string) =>
    dataplaneLoad(['connrate', port, 3, 10], { ns: CLIENT, host }).per_second as number;
  const routerRate = rate(7100, TARGET_ADDRESS);
  const kernelRate = rate(15211, NODE_ADDRESS);
  const relayRate = rate(15212, NODE_ADDRESS);
  const haproxyRate = rate(15213, NODE_ADDRESS);
  record({
    id: '12c',
    scenario: 'TCP connection rate through the kernel path (connect, 1-byte echo, close; 10 at a time)',
    value: kernelRate,
    unit: 'conn/s',
    ceiling: routerRate,
    ratio: kernelRate / routerRate,
    target: '>= 0.9x the node as a router',
    met: kernelRate / routerRate >= 0.9,
    note:
      `router ${Math.round(routerRate)}/s, relay ${Math.round(relayRate)}/s ` +
      `(${(relayRate / haproxyRate).toFixed(2)}x HAProxy), HAProxy ${Math.round(haproxyRate)}/s`,
  });
  // Alternated with the same rule without controls, each measured after the other as often: the conntrack table a
  // run leaves (its closed connections linger) weighs on the next, whichever it is.
  const controlledRate = rate(15214, NODE_ADDRESS);
  const plainAfter = rate(15211, NODE_ADDRESS);
  record({
    id: '12e',
    scenario:
      'TCP connection rate through a kernel rule with allow_sources, deny_sources, max_connections and a quota, ' +
      'against the same rule without (12c)',
    value: controlledRate,
    unit: 'conn/s',
    ceiling: plainAfter,
    ratio: controlledRate / plainAfter,
    target: '>= 0.9x the rule without controls',
    met: controlledRate / plainAfter >= 0.9,
    note: `without controls ${Math.round(plainAfter)}/s measured right after it (${Math.round(kernelRate)}/s before)`,
  });
  // Balanced over three targets: new connections and bulk through the kernel's spread chain, against the node as a
  // router to one target; the relay's round robin against HAProxy's over the same three.
  // In turn, twice each: what one run leaves in conntrack weighs on the next, whichever way it goes.
  const routerRates: number[] = [];
  const balancedRates: number[] = [];
  for (let round = 0; round < 2; round++) {
    routerRates.push(rate(7100, TARGET_ADDRESS));
    balancedRates.push(rate(15231, NODE_ADDRESS));
  }
  const mean = (values: number[]) => values.reduce((sum, value) => sum + value, 0) / values.length;
  const balancedRate = mean(balancedRates);
  const routerAgain = mean(routerRates);
  const bulk = (port: number, host: string) =>
    dataplaneLoad(['tcp', port, 8, 256 * 2 ** 20], { ns: CLIENT, host }).mib_per_s as number;
  const routerBulk = bulk(7100, TARGET_ADDRESS);
  const balancedBulk = bulk(15231, NODE_ADDRESS);
  record({
    id: '12f',
    scenario: 'TCP connection rate through a kernel rule balancing 3 targets round robin (numgen map)',
    value: balancedRate,
    unit: 'conn/s',
    ceiling: routerAgain,
    ratio: balancedRate / routerAgain,
    target: '>= 0.9x the node as a router to one target',
    met: balancedRate / routerAgain >= 0.9,
    note:
      `router to one target ${Math.round(routerAgain)}/s; means of two runs each, in turn ` +
      `(balanced ${balancedRates.map(Math.round).join(', ')}; router ${routerRates.map(Math.round).join(', ')})`,
  });
  record({
    id: '12g',
    scenario: 'TCP bulk through a kernel rule balancing 3 targets round robin, 8 streams of 256 MiB',
    value: balancedBulk,
    unit: 'MiB/s',
    ceiling: routerBulk,
    ratio: balancedBulk / routerBulk,
    target: '>= 0.9x the node as a router to one target',
    met: balancedBulk / routerBulk >= 0.9,
    note: `router to one target ${Math.round(routerBulk)} MiB/s; the load is one Node.js process (bench/dataplane.ts)`,
  });
  const relayBalancedRate = rate(15232, NODE_ADDRESS);
  const haproxyBalancedRate = rate(15233, NODE_ADDRESS);
  record({
    id: '12h',
    scenario: "TCP connection rate through the relay's round robin over 3 targets, against HAProxy's",
    value: relayBalancedRate,
    unit: 'conn/s',
    ceiling: haproxyBalancedRate,
    ratio: relayBalancedRate / haproxyBalancedRate,
    target: '>= 1.0x HAProxy balancing the same targets (one thread, the same CPU)',
    met: relayBalancedRate / haproxyBalancedRate >= 1.0,
    note: `HAProxy ${Math.round(haproxyBalancedRate)}/s; relay with one target ${Math.round(relayRate)}/s (12c)`,
  });
  // UDP at fixed rates, echoed: the loss through the kernel path beside the loss the node adds as a router.
  const udp = (port: number, host: string, rate: number) =>
    dataplaneLoad(['udp', port, rate, 2, 64], { ns: CLIENT, host }) as { loss: number; received: number };
  const udpSweep = [50_000, 100_000].map((rate) => ({
    rate,
    router: udp(7100, TARGET_ADDRESS, rate),
    kernel: udp(15221, NODE_ADDRESS, rate),
  }));
  const at50k = udpSweep[0]!;
  const percent = (loss: number) => `${(loss * 100).toFixed(2)}%`;
  record({
    id: '12d',
    scenario: 'UDP through the kernel path at 50,000 packets/s offered (64-byte datagrams, echoed)',
    value: at50k.kernel.received / 2,
    unit: 'pkt/s echoed',
    ceiling: at50k.router.received / 2,
    ratio: at50k.kernel.received / at50k.router.received,
    target: 'loss within 1 point of the node as a router',
    met: at50k.kernel.loss - at50k.router.loss <= 0.01,
    note: udpSweep
      .map((s) => `${s.rate / 1000}k pkt/s: ${percent(s.kernel.loss)} kernel, ${percent(s.router.loss)} router`)
      .join('; '),
  });
  await haproxy.stop();
  await sink.stop();
  await iperfServer.stop();
  await agent.stop();
  await master.proc.stop();
  // The node's table goes with its namespace.
  removeLab();
}

/**
 * How long a change takes to be applied (from the write to the node's acknowledgement) on a node forwarding 10,000
 * ports in the kernel: as 10,000 rules of one port, and as one rule of a 10,000-port range.
 */
async function applyTenThousand(master: Master, nodeId: number): Promise<void> {
  const target = `${TARGET_ADDRESS}:7100`;
  const pending = async () =>
    (await api(master.url, master.token, 'GET', `/api/rules?node_id=${nodeId}&sync_state=pending&limit=1&count=true`))
      .total as number;
  const settled = async () => {
    const started = performance.now();
    while ((await pending()) > 0) {
      if (performance.now() - started > 300_000) throw new Error('the node did not apply 10,000 ports in 5 minutes');
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    return performance.now() - started;
  };
  /** Milliseconds from replacing rule `id` (its target's port moved) to the node's acknowledgement of it. */
  const change = async (id: number, port: number) => {
    const current = await api(master.url, master.token, 'GET', `/api/rules/${id}`);
    const started = performance.now();
    await api(master.url, master.token, 'PUT', `/api/rules/${id}`, {
      ...Object.fromEntries(ruleFieldNames.map((field) => [field, current[field]])),
      targets: [`${TARGET_ADDRESS}:${port}`],
    });
    // Looked at every 10 ms: the replace pushed the node its config, whose acknowledgement marks the rule applied.
    for (;;) {
      const { sync } = await api(master.url, master.token, 'GET', `/api/rules/${id}`);
      if (sync.state === 'applied') break;
      if (performance.now() - started > 30_000)
        throw new Error(`the change was not applied within 30 s: ${JSON.stringify(sync)}`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    return performance.now() - started;
  };
  const ids: number[] = [];
  for (let first = 20_000; first < 30_000; first += 1000) {
    const rules = Array.from({ length: 1000 }, (_, i) => ({
      name: `p${first + i}`,
      node_id: nodeId,
      protocol: 'tcp',
      listen_port: first + i,
      targets: [target],
    }));
    const made = await api(master.url, master.token, 'POST', '/api/rules/batch-create', { rules });
    ids.push(...made.results.map((r: { id: number }) => r.id));
  }
  const firstApply = await settled();
  const singles = [];
  for (let i = 0; i < 5; i++) singles.push(await change(ids[i * 1000]!, 7100 + ((i + 1) % 3)));
  for (let i = 0; i < ids.length; i += 1000)
    await api(master.url, master.token, 'POST', '/api/rules/batch-delete', { ids: ids.slice(i, i + 1000) });
  await settled();
  const range = await api(master.url, master.token, 'POST', '/api/rules', {
    name: 'range',
    node_id: nodeId,
    protocol: 'tcp',
    listen_port: 20_000,
    listen_port_end: 29_999,
    targets: [target],
  });
  await settled();
  if ((await api(master.url, master.token, 'GET', `/api/rules/${range.id}`)).sync.applied_path !== 'kernel')
    throw new Error('the 10,000-port range is not in the kernel');
  const ranged = [];
  for (let i = 0; i < 5; i++) ranged.push(await change(range.id, 7100 + ((i + 1) % 3)));
  const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
  record({
    id: '12i',
    scenario: 'Applying a change on a node forwarding 10,000 ports in the kernel as one rule of a 10,000-port range',
    value: median(ranged),
    unit: 'ms',
    target: '<= 1,000 ms from the write to the node acknowledging it',
    met: median(ranged) <= 1000,
    note: 'median of 5 (a target moved each time)',
  });
  record({
    id: '12j',
    scenario: 'Applying a change on a node forwarding 10,000 ports in the kernel as 10,000 one-port rules',
    value: median(singles),
    unit: 'ms',
    target: '<= 1,000 ms from the write to the node acknowledging it',
    met: median(singles) <= 1000,
    note:
      `median of 5; the 10,000 rules' first apply ${Math.round(firstApply)} ms; each change sends and acknowledges ` +
      'the whole config of 10,000 rules',
  });
  await api(master.url, master.token, 'DELETE', `/api/rules/${range.id}`);
}

/** Bytes under `dir`, files of subdirectories included. */
function bytesUnder(dir: string): number {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .reduce((sum, entry) => sum + statSync(join(entry.parentPath, entry.name)).size, 0);
}

/** Median milliseconds of `times` calls of GET `path` one after another (until the answer's last byte). */
async function idleMs(master: Master, path: string, times = 15, status = 200): Promise<number> {
  const took: number[] = [];
  for (let i = 0; i < times; i++) {
    const started = performance.now();
    const answer = await send(master.url, master.token, 'GET', path);
    if (answer.status !== status)
      throw new Error(`GET ${path}: ${answer.status} ${answer.bytes.toString().slice(0, 200)}`);
    took.push(answer.receivedAt - started);
  }
  return median(took);
}

async function scale(): Promise<void> {
  const imports = 5;
  const rulesPerNode = 20;
  console.error(`scale: ${NODES} nodes and ${imports * NODES * rulesPerNode} rules, imported ${imports} times`);
  const master = await startMaster(join(work, 'scale'));
  const importSeconds: number[] = [];
  for (let i = 0; i < imports; i++) {
    const document = new Encoded(seedDocument(NODES, rulesPerNode, 10_000 + i * rulesPerNode));
    const started = performance.now();
    const answer = await send(master.url, master.token, 'POST', '/api/import', document);
    if (answer.status !== 200) throw new Error(`import ${i + 1}: ${answer.status} ${answer.bytes.toString()}`);
    importSeconds.push((answer.receivedAt - started) / 1000);
  }
  const rules = imports * NODES * rulesPerNode;
  const imported = importSeconds.reduce((a, b) => a + b, 0);
  record({
    id: '13a',
    scenario: `import ${rules.toLocaleString('en-US')} rules on ${NODES} nodes, in ${imports} imports`,
    value: imported,
    unit: 's',
    target: '<= 15 s',
    met: imported <= 15,
    note: `each import: ${importSeconds.map((s) => s.toFixed(1)).join(', ')} s`,
  });
  await master.proc.stop();
  const dataBytes = bytesUnder(master.dataDir);
  record({
    id: '13b',
    scenario: 'data dir per rule at that size (audit entries of the imports included)',
    value: dataBytes / rules,
    unit: 'bytes/rule',
    target: '< 800 bytes/rule',
    met: dataBytes / rules < 800,
    note: `${(dataBytes / 2 ** 20).toFixed(0)} MiB in all, after a clean stop`,
  });
  const startedAt = performance.now();
  const proc = masterProcess(master.dataDir, '127.0.0.1:0');
  const url = (await proc.waitFor('listening')).url as string;
  const startup = performance.now() - startedAt;
  const again: Master = { ...master, proc, url };
  await new Promise((resolve) => setTimeout(resolve, 2000));
  record({
    id: '13c',
    scenario: 'start-up to listening at that size, and RSS idle after 2 s',
    value: startup,
    unit: 'ms',
    target: 'information',
    met: null,
    note: `idle RSS ${memory(proc.child.pid!).rss.toFixed(0)} MiB`,
  });
  const middle = Math.floor(NODES / 2);
  const cursor = (id: number) => Buffer.from(`id:${id}`).toString('base64url');
  // A sorted list's cursor: its sort, and the key and id of the last row of the page before.
  const byName = Buffer.from(JSON.stringify({ s: 'name', k: `r${middle}-10045`, i: rules / 2 })).toString('base64url');
  const nodesByName = Buffer.from(JSON.stringify({ s: 'name', k: seedNodeName(middle), i: middle })).toString(
    'base64url',
  );
  const reads = [
    ['GET /api/dashboard', '/api/dashboard'],
    ['GET /api/rules?limit=100, first page', '/api/rules?limit=100'],
    ['GET /api/rules?limit=100, a page in the middle', `/api/rules?limit=100&cursor=${cursor(rules / 2)}`],
    ["GET /api/rules?node_id=N (one node's 100 rules)", `/api/rules?limit=100&node_id=${middle}`],
    ['GET /api/rules?q=TEXT (a name in the middle)', `/api/rules?limit=100&q=r${middle}-10045`],
    ['GET /api/rules?enabled=false (none match)', '/api/rules?limit=100&enabled=false'],
    ['GET /api/nodes?limit=100, a page in the middle', `/api/nodes?limit=100&cursor=${cursor(middle)}`],
    ['GET /api/audit-logs?limit=100, first page', '/api/audit-logs?limit=100'],
    ['GET /api/rules?sort=name, a page in the middle', `/api/rules?limit=100&sort=name&cursor=${byName}`],
    [
      "GET /api/rules?node_id=N&sort=-traffic (one node's, busiest first)",
      `/api/rules?node_id=${middle}&sort=-traffic`,
    ],
    [
      'GET /api/rules?node_id=N&sync_state=pending&count=true',
      `/api/rules?node_id=${middle}&sync_state=pending&count=true`,
    ],
    ['GET /api/rules?count=true (every rule counted)', '/api/rules?limit=100&count=true'],
  ] as const;
  // The neighbours of the sort the index serves (13l): the other way, and nodes, whose sorts no index serves.
  const neighbours = [
    ['GET /api/rules?sort=-name, first page', '/api/rules?limit=100&sort=-name'],
    ['GET /api/nodes?sort=name, a page in the middle', `/api/nodes?limit=100&sort=name&cursor=${nodesByName}`],
    ['GET /api/nodes?sort=-traffic, first page', '/api/nodes?limit=100&sort=-traffic'],
  ] as const;
  // Ids in the order rows were added: the neighbours came after the unindexed sort (13p).
  const measured = [...reads, ...neighbours].map(([scenario, path], index) => ({
    scenario,
    path,
    id: `13${String.fromCharCode('d'.charCodeAt(0) + index + (index >= reads.length ? 1 : 0))}`,
  }));
  for (const { id, scenario, path } of measured) {
    const ms = await idleMs(again, path);
    record({
      id,
      scenario: `${scenario} at that size, idle`,
      value: ms,
      unit: 'ms p50',
      target: '< 10 ms',
      met: ms < 10,
    });
  }
  // A sort no index serves would order every match: past 10,000 it is refused, at the cost of counting 10,001.
  const unindexed = await idleMs(again, '/api/rules?limit=100&sort=-traffic', 5, 400);
  record({
    id: `13${String.fromCharCode('d'.charCodeAt(0) + reads.length)}`,
    scenario: 'GET /api/rules?sort=-traffic over every rule (no index): refused, 400, past 10,000 matches, idle',
    value: unindexed,
    unit: 'ms p50',
    target: 'information',
    met: null,
  });
  await proc.stop();
}

/**
 * One reader must not stall everyone: eight clients loop the heaviest reads a rules:read token may make at 200,000
 * rules (every rule counted, a state counted, a search, an unindexed sort the master refuses past 10,000, a middle page
 * by name, the dashboard, nodes by traffic) while /api/health is timed, against /api/health with nothing else running.
 */
async function readers(): Promise<void> {
  const nodes = 1_000;
  const perNode = 200;
  console.error(`readers: ${nodes * perNode} rules, 8 clients looping the heaviest reads`);
  const master = await startMaster(join(work, 'readers'));
  const imported = await send(
    master.url,
    master.token,
    'POST',
    '/api/import',
    new Encoded(seedDocument(nodes, perNode)),
  );
  if (imported.status !== 200) throw new Error(`import: ${imported.status} ${imported.bytes.toString().slice(0, 200)}`);
  const reader = (
    await api(master.url, master.token, 'POST', '/api/tokens', {
      name: 'reader',
      scopes: ['rules:read', 'nodes:read', 'dashboard:read'],
    })
  ).token as string;
  // One node's 200 rules tagged: a tag filter matching few, and one matching none, read every rule once.
  const tagged = await api(master.url, master.token, 'POST', '/api/rules/batch-update', {
    filter: { node_id: 1 },
    changes: { tags: ['vip'] },
  });
  if (tagged.results?.length !== perNode) throw new Error(`tagging: ${JSON.stringify(tagged).slice(0, 200)}`);
  // The heaviest reads a rules:read token may make, filters included; those a cap refuses (400) are tried as often.
  const heavy = [
    '/api/rules?limit=100&count=true',
    '/api/rules?limit=100&sync_state=pending&count=true',
    `/api/rules?limit=100&q=r${nodes / 2}-10500`,
    '/api/rules?limit=100&q=r1',
    '/api/rules?limit=100&tag=vip&count=true',
    '/api/rules?limit=100&tag=nowhere&count=true',
    '/api/rules?limit=100&state=disabled&count=true',
    `/api/rules?limit=100&node_id=${nodes / 2}&state=active&count=true`,
    '/api/rules?limit=100&sort=-traffic',
    '/api/rules?limit=100&sort=name',
    '/api/dashboard',
    '/api/nodes?limit=100&sort=-traffic',
    '/api/nodes?limit=100&status=online&count=true',
  ];
  const healthMs = async (seconds: number): Promise<number[]> => {
    const took: number[] = [];
    const until = performance.now() + seconds * 1000;
    while (performance.now() < until) {
      const sent = performance.now();
      const answer = await send(master.url, null, 'GET', '/api/health');
      if (answer.status !== 200) throw new Error(`health: ${answer.status}`);
      took.push(answer.receivedAt - sent);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    return took.sort((a, b) => a - b);
  };
  const p = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))]!;
  const idle = await healthMs(5);
  let stop = false;
  let reads = 0;
  const loops = Array.from({ length: 8 }, async (_, i) => {
    while (!stop) {
      const answer = await send(master.url, reader, 'GET', heavy[(i + reads) % heavy.length]!);
      if (answer.status !== 200 && answer.status !== 400) throw new Error(`read: ${answer.status}`);
      reads++;
    }
  });
  const loaded = await healthMs(SECONDS);
  stop = true;
  await Promise.all(loops);
  record({
    id: '14a',
    scenario:
      'GET /api/health while 8 clients loop the heaviest reads, filters included, at 200,000 rules (ceiling: idle)',
    value: p(loaded, 0.99),
    unit: 'ms p99',
    p50_ms: p(loaded, 0.5),
    p99_ms: p(loaded, 0.99),
    ceiling: p(idle, 0.99),
    target: '< 50 ms p99',
    met: p(loaded, 0.99) < 50,
    note: `${reads} heavy reads in ${SECONDS} s`,
  });
  await master.proc.stop();
}

/**
 * GET /api/nodes/{id} as users reach a master off loopback: over HTTPS, with the certificate it made for itself at its
 * first start on a non-loopback address; against a bare node:https server answering the very same bytes with the
 * same certificate, and against the peer over HTTPS. Random ids of 10,000 nodes, wrk keeping its 50 connections.
 */
async function overTls(): Promise<void> {
  console.error(`https: GET /api/nodes/{id} over TLS, ${NODES} nodes`);
  const first = await startMaster(join(work, 'https'));
  await api(first.url, first.token, 'POST', '/api/import', seedDocument(NODES, 1));
  const sample = await capture(first.url, first.token, '/api/nodes/5000');
  await first.proc.stop();
  const proc = masterProcess(first.dataDir, '0.0.0.0:0');
  const url = `https://127.0.0.1:${new URL(String((await proc.waitFor('listening')).url)).port}`;
  const cert = join(first.dataDir, 'tls', 'cert.pem');
  const key = join(first.dataDir, 'tls', 'key.pem');
  const hello = start(
    pinned(0, [node, '--import', 'tsx', 'bench/hello.ts', answerFile('node-tls', sample), cert, key]),
  );
  const ceiling = wrk(`${(await hello.waitFor('listening')).url}/`, {
    connections: 50,
    seconds: SECONDS,
    warmup: WARMUP,
  });
  await hello.stop();
  const randomNode = `${bearer(first.token)}request = function()
  return wrk.format(nil, "/api/nodes/" .. math.random(1, ${NODES}))
end
`;
  const peer = start(pinned(0, [node, '--import', 'tsx', 'bench/peer.ts', first.dataDir]), {
    PEER_TLS_CERT: cert,
    PEER_TLS_KEY: key,
  });
  const peerUrl = String((await peer.waitFor('listening')).url);
  const ours: WrkResult[] = [];
  const theirs: number[] = [];
  for (let rep = 0; rep < 3; rep++) {
    const warmup = rep === 0 ? WARMUP : 0;
    ours.push(wrk(`${url}/`, { connections: 50, seconds: SECONDS, lua: randomNode, warmup }));
    theirs.push(wrk(`${peerUrl}/`, { connections: 50, seconds: SECONDS, lua: randomNode, warmup }).rps);
  }
  await peer.stop();
  await proc.stop();
  const value = median(ours.map((r) => r.rps));
  const failed = ours.reduce((sum, r) => sum + r.non2xx, 0);
  record({
    id: '16a',
    scenario: 'GET /api/nodes/{id} over HTTPS, random ids (ceiling: bare node:https, the same bytes and certificate)',
    value,
    unit: 'req/s',
    p50_ms: median(ours.map((r) => r.p50)),
    p99_ms: median(ours.map((r) => r.p99)),
    ceiling: ceiling.rps,
    ratio: value / ceiling.rps,
    target: '>= 0.6x ceiling',
    met: value / ceiling.rps >= 0.6 && failed === 0,
  });
  record({
    id: '16b',
    scenario: 'GET /api/nodes/{id} over HTTPS, random ids, against the peer over HTTPS (medians of 3, in turn)',
    value,
    unit: 'req/s',
    ceiling: median(theirs),
    ratio: value / median(theirs),
    target: '>= 1.3x the peer',
    met: value / median(theirs) >= 1.3 && failed === 0,
  });
}

const HOUR = 3600;
const DAY = 86_400;

/** `value` rounded down to a multiple of `step`. */
function floorTo(value: number, step: number): number {
  return Math.floor(value / step) * step;
}

/**
 * Writes a month of traffic and vitals for every rule and node of `dataDir` as the master keeps it (history of
 * migration 20): a row an hour up to `minutesFrom`, then a row a minute up to `now`. Rows go in the order the master
 * writes them (a time at a time across every rule: each report, each hourly fold appends its rows), so pages fill as
 * they would; a minute carries six reports' worth of bytes (up to 2 MB each way each). The roll-ups' bounds are left
 * where the master would have left them, so that what is due when it starts is the fold from `minutesFrom`.
 */
function seedMonth(dataDir: string, now: number, minutesFrom: number): { rows: number } {
  const db = new DatabaseSync(join(dataDir, 'master.db'));
  const rules = db.prepare('SELECT id, node_id FROM rules ORDER BY id').all() as { id: number; node_id: number }[];
  const nodeIds = [...new Set(rules.map((r) => r.node_id))];
  const insert = (table: string) =>
    db.prepare(`INSERT INTO ${table} (id, start, bytes_in, bytes_out) VALUES (?, ?, ?, ?)`);
  const [byRule, byNode, total] = [insert('traffic_by_rule'), insert('traffic_by_node'), insert('traffic_total')];
  const vitals = db.prepare(`INSERT INTO node_vitals (node_id, minute, cpu_percent, load1, memory_used_bytes,
    rx_bytes_per_second, tx_bytes_per_second, points) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`);
  const minuteBytes = () => Math.floor(Math.random() * 12e6);
  let rows = 0;
  const write = (start: number, minutes: number) => {
    const nodeSums = new Map<number, [number, number]>();
    let [allIn, allOut] = [0, 0];
    for (const rule of rules) {
      let [bytesIn, bytesOut] = [0, 0];
      for (let m = 0; m < minutes; m++) [bytesIn, bytesOut] = [bytesIn + minuteBytes(), bytesOut + minuteBytes()];
      byRule.run(rule.id, start, bytesIn, bytesOut);
      const sum = nodeSums.get(rule.node_id) ?? [0, 0];
      nodeSums.set(rule.node_id, [sum[0] + bytesIn, sum[1] + bytesOut]);
      [allIn, allOut] = [allIn + bytesIn, allOut + bytesOut];
    }
    for (const [id, [bytesIn, bytesOut]] of nodeSums) byNode.run(id, start, bytesIn, bytesOut);
    total.run(0, start, allIn, allOut);
    for (const id of nodeIds) vitals.run(id, start / 60, 12.5, 0.4, 2e9, 1.5e6, 1.4e6, minutes);
    rows += rules.length + nodeSums.size + 1 + nodeIds.length;
  };
  const monthFrom = floorTo(now - 30 * DAY, HOUR);
  db.exec('BEGIN');
  for (let at = monthFrom; at < minutesFrom; at += HOUR) {
    write(at, 60);
    if ((at - monthFrom) % DAY === 0) db.exec('COMMIT; BEGIN');
  }
  for (let at = minutesFrom; at < floorTo(now, 60); at += 60) {
    write(at, 1);
    if ((at - minutesFrom) % HOUR === 0) db.exec('COMMIT; BEGIN');
  }
  const bounds = db.prepare(`INSERT OR REPLACE INTO history_rollups (series, hours_until, days_until, pruned_until,
    pass) VALUES (?, ?, ?, ?, NULL)`);
  for (const series of ['traffic_by_rule', 'traffic_by_node', 'traffic_total', 'node_vitals'])
    bounds.run(series, minutesFrom, floorTo(now - 35 * DAY, DAY), floorTo(now - 730 * DAY, DAY));
  db.exec('COMMIT');
  db.close();
  return { rows };
}

/** Latencies (ms, sorted) of GET of `paths` in turn, one every 10 ms, until `done()`; and writes made meanwhile. */
async function whileTiming(
  master: Master,
  paths: string[],
  done: () => boolean,
  write?: () => Promise<number>,
): Promise<{ took: number[]; writes: number; refused: number }> {
  const took: number[] = [];
  let [writes, refused, stop] = [0, 0, false];
  const writer = (async () => {
    while (write && !stop) {
      const status = await write();
      writes++;
      if (status >= 300) refused++;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  })();
  while (!done()) {
    const path = paths[took.length % paths.length]!;
    const sent = performance.now();
    const answer = await send(master.url, master.token, 'GET', path);
    if (answer.status !== 200) throw new Error(`GET ${path}: ${answer.status}`);
    took.push(answer.receivedAt - sent);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  stop = true;
  await writer;
  return { took: took.sort((a, b) => a - b), writes, refused };
}

/** The `q` quantile of `sorted`. */
const quantile = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))]!;

/**
 * A month of traffic on 10,000 busy rules on 1,000 nodes, reporting every 10 s: the data dir's size, 30-day series,
 * and live reads and writes while the master's roll-up folds the hours that came due (three of them: the master was
 * stopped for that long), against the same reads once it is done.
 */
async function historyScale(): Promise<void> {
  const nodes = 1_000;
  const perNode = 10;
  console.error(`history: a month of traffic on ${nodes * perNode} busy rules on ${nodes} nodes`);
  const first = await startMaster(join(work, 'history'));
  const imported = await api(first.url, first.token, 'POST', '/api/import', seedDocument(nodes, perNode));
  const tokensFile = join(work, 'history-tokens.json');
  writeFileSync(tokensFile, JSON.stringify(imported.nodes.map((n: { agent_token: string }) => n.agent_token)));
  await first.proc.stop();
  const now = Math.floor(Date.now() / 1000);
  // Twelve hours due: the roll-up outlasts the fleet's linking, which is timed apart.
  const minutesFrom = floorTo(now - DAY, HOUR) - 12 * HOUR;
  const seeding = performance.now();
  const { rows: seeded } = seedMonth(first.dataDir, now, minutesFrom);
  console.error(
    `  seeded ${seeded.toLocaleString('en-US')} rows in ${((performance.now() - seeding) / 1000).toFixed(0)} s`,
  );
  const proc = masterProcess(first.dataDir, '127.0.0.1:0');
  const master: Master = { ...first, proc, url: (await proc.waitFor('listening')).url as string };
  const fleet = start(pinned(1, [node, '--import', 'tsx', 'bench/fake-agents.ts', master.url, tokensFile]), {
    REPORT_SECONDS: '10',
  });
  let rolled: Record<string, unknown> | null = null;
  proc.waitFor('rolled up the history', 600_000).then((line) => (rolled = line));
  await fleet.waitFor('linked', 120_000);
  if (rolled) throw new Error('the roll-up was over before the fleet had linked: make more of it due');
  const ruleId = (await api(master.url, master.token, 'GET', '/api/rules?limit=1&node_id=500')).items[0].id as number;
  const rulePath = `/api/rules/${ruleId}`;
  const body = await api(master.url, master.token, 'GET', rulePath);
  const { name, node_id, protocol, listen_port, targets } = body;
  let flip = false;
  const write = async () =>
    (
      await send(master.url, master.token, 'PUT', rulePath, {
        name,
        node_id,
        protocol,
        listen_port,
        targets,
        enabled: (flip = !flip),
      })
    ).status;
  // A node by id and, in turn, a page of 100 rules from the middle: the roll-up must leave lists alone too.
  const reads = ['/api/nodes/500', `/api/rules?limit=100&cursor=${Buffer.from('id:5000').toString('base64url')}`];
  const during = await whileTiming(master, reads, () => rolled !== null, write);
  const idleUntil = performance.now() + 15_000;
  const idle = await whileTiming(master, reads, () => performance.now() > idleUntil, write);
  const reported = fleet.lines.filter((l) => l.msg === 'reported').at(-1)?.reports ?? 0;
  const ratio = quantile(during.took, 0.99) / quantile(idle.took, 0.99);
  const rolledUp = rolled as unknown as { seconds: number; steps: number };
  record({
    id: '15a',
    scenario: `GET a node and a page of rules while the roll-up folds 12 h of ${nodes * perNode} rules' minutes`,
    value: quantile(during.took, 0.99),
    unit: 'ms p99',
    p50_ms: quantile(during.took, 0.5),
    p99_ms: quantile(during.took, 0.99),
    ceiling: quantile(idle.took, 0.99),
    ratio,
    target: '<= 2x idle p99',
    met: ratio <= 2,
    note:
      `roll-up ${rolledUp.seconds} s in ${rolledUp.steps} ` +
      `steps; ${during.took.length} reads; ${during.writes + idle.writes} writes (PUT a rule), ` +
      `${during.refused + idle.refused} refused; agents' traffic reports meanwhile: ${reported}`,
  });
  record({
    id: '15b',
    scenario: 'writes refused while the roll-up runs',
    value: during.refused,
    unit: 'writes',
    target: '0',
    met: during.refused === 0,
    note: `of ${during.writes}`,
  });
  const from = new Date((now - 30 * DAY) * 1000).toISOString();
  const series = [
    ['the dashboard', '/api/dashboard'],
    ["the master's traffic over 30 days, hourly", `/api/dashboard/traffic?from=${from}&step=3600`],
    ["a node's traffic over 30 days, hourly", `/api/dashboard/traffic?from=${from}&step=3600&node_id=500`],
    ["a rule's traffic over 30 days, hourly", `/api/dashboard/traffic?from=${from}&step=3600&rule_id=${ruleId}`],
    ["a node's vitals over 30 days, hourly", `/api/nodes/500/vitals?from=${from}&step=3600`],
  ] as const;
  for (const [index, [what, path]] of series.entries()) {
    const ms = await idleMs(master, path, 30);
    record({
      id: `15${'cdefg'[index]}`,
      scenario: `GET ${what}`,
      value: ms,
      unit: 'ms p50',
      target: '< 10 ms',
      met: ms < 10,
    });
  }
  await fleet.stop();
  await proc.stop();
  const size = bytesUnder(master.dataDir) / 2 ** 20;
  record({
    id: '15h',
    scenario: `data dir after a month of ${nodes * perNode} busy rules on ${nodes} nodes`,
    value: size,
    unit: 'MiB',
    target: '< 1,024 MiB',
    met: size < 1024,
    note: `${seeded.toLocaleString('en-US')} history rows written, then rolled up by the master; after a clean stop`,
  });
}

/**
 * A data dir of schema 19 with a day of minute buckets for 6,000 busy rules on 100 nodes (8.6 million), upgraded by
 * the master: how long its start takes, how long moving them takes, the data dir's size before and after, and the
 * reads meanwhile (a page of nodes, and the master's, a node's and a rule's series over 30 days) against the same
 * reads once it is done.
 */
async function upgradeScale(): Promise<void> {
  const rules = 6_000;
  const dataDir = join(work, 'upgrade');
  mkdirSync(dataDir, { recursive: true });
  const db = new DatabaseSync(join(dataDir, 'master.db'));
  db.exec('PRAGMA journal_mode = WAL');
  db.exec('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL) STRICT');
  for (let version = 1; version <= 19; version++) {
    db.exec(migrations[version - 1]!);
    db.prepare('INSERT INTO schema_migrations VALUES (?, ?)').run(version, new Date().toISOString());
  }
  const now = floorTo(Math.floor(Date.now() / 1000), 60);
  const seeding = performance.now();
  // Minute by minute, every rule, as a master of then wrote them.
  db.prepare(
    `WITH RECURSIVE minute(at) AS (SELECT ? UNION ALL SELECT at + 60 FROM minute WHERE at + 60 < ?),
      rule(id) AS (SELECT 1 UNION ALL SELECT id + 1 FROM rule WHERE id < ?)
    INSERT INTO traffic_buckets SELECT rule.id, 1 + rule.id % 100, minute.at, 6000000, 5000000 FROM minute, rule`,
  ).run(now - DAY, now, rules);
  db.exec('PRAGMA wal_checkpoint(TRUNCATE)');
  db.close();
  const buckets = rules * 1440;
  console.error(
    `  seeded ${buckets.toLocaleString('en-US')} buckets in ${((performance.now() - seeding) / 1000).toFixed(0)} s`,
  );
  const before = bytesUnder(dataDir) / 2 ** 20;
  const starting = performance.now();
  const master = await startMaster(dataDir);
  const started = (performance.now() - starting) / 1000;
  let moved: Record<string, unknown> | null = null;
  master.proc.waitFor('rolled up the history', 900_000).then((line) => (moved = line));
  const counted = master.proc.lines.find(
    (line) => line.msg === "counted the traffic of before the history into the nodes' history",
  );
  const from = new Date((now - 30 * DAY) * 1000).toISOString();
  const series = ['', '&node_id=50', '&rule_id=3000'].map((q) => `/api/dashboard/traffic?from=${from}&step=3600${q}`);
  const paths = ['/api/nodes?limit=1', ...series];
  const during = await whileTiming(master, paths, () => moved !== null);
  const idleUntil = performance.now() + 10_000;
  const idle = await whileTiming(master, paths, () => performance.now() > idleUntil);
  const ratio = quantile(during.took, 0.99) / quantile(idle.took, 0.99);
  await master.proc.stop();
  const after = bytesUnder(dataDir) / 2 ** 20;
  const movedFor = (moved as unknown as { seconds: number }).seconds;
  record({
    id: '15i',
    scenario:
      `upgrade: a day of minute buckets of ${rules} busy rules (${buckets.toLocaleString('en-US')}) ` +
      'moved into the history',
    value: movedFor,
    unit: 's',
    target: '<= 360 s',
    met: movedFor <= 360,
    note:
      `the master's start ${started.toFixed(1)} s (counting the nodes' sums ${String(counted?.seconds)} s of it, ` +
      'before serving); the rules moved in the roll-up while serving',
  });
  record({
    id: '15j',
    scenario: 'upgrade: the data dir once the buckets moved, beside before',
    value: after / before,
    unit: 'x before',
    target: '<= 0.3x',
    met: after / before <= 0.3,
    note:
      `${before.toFixed(0)} MiB before, ${after.toFixed(0)} MiB after: the last 24 h stay a row a minute ` +
      '(history_minutes_hours), 22 bytes each',
  });
  record({
    id: '15k',
    scenario: "upgrade: GET a page of nodes and the master's, a node's and a rule's 30-day series while they move",
    value: quantile(during.took, 1),
    unit: 'ms max',
    p50_ms: quantile(during.took, 0.5),
    p99_ms: quantile(during.took, 0.99),
    ceiling: quantile(idle.took, 0.99),
    ratio,
    target: '< 50 ms each',
    met: quantile(during.took, 1) < 50,
    note: `${during.took.length} reads during, p99 ${ratio.toFixed(2)}x the same reads' once done`,
  });
}

/** A wrk script creating rules on `nodes` nodes, each request a new port from `firstPort` on (see 4a). */
function createsOn(token: string, nodes: number, firstPort: number): string {
  return `${bearer(token, 'POST')}wrk.headers["Content-Type"] = "application/json"
counter = 0
request = function()
  counter = counter + 1
  local body = '{"name":"c%d","node_id":%d,"protocol":"tcp","listen_port":%d,"targets":["10.9.9.9:80"]}'
  local port = ${firstPort} + math.floor(counter / ${nodes})
  return wrk.format(nil, "/api/rules", nil, string.format(body, counter, (counter % ${nodes}) + 1, port))
end
`;
}

interface RuleRow {
  id: number;
  name: string;
  node_id: number;
  listen_port: number;
}

/** A wrk script replacing `rules` in turn, from `first` on, each kept on its node and port, given a new target. */
function updatesOf(token: string, rules: readonly RuleRow[], first: number): string {
  const bodies = rules.map(
    (r) =>
      `{${r.id}, '{"name":"${r.name}","node_id":${r.node_id},"protocol":"tcp","listen_port":${r.listen_port},` +
      `"targets":["10.9.%d.%d:80"]}'}`,
  );
  return `${bearer(token, 'PUT')}wrk.headers["Content-Type"] = "application/json"
counter = ${first}
rules = { ${bodies.join(',\n')} }
request = function()
  counter = counter + 1
  local rule = rules[(counter % #rules) + 1]
  local body = string.format(rule[2], counter % 200, (counter % 250) + 1)
  return wrk.format(nil, string.format("/api/rules/%d", rule[1]), nil, body)
end
`;
}

/**
 * A directory in memory (/dev/shm) where there is one, for what must not wait for this machine's disk: a standby's copy
 * (another machine's disk, as near as here), 17d's primaries.
 */
const scratchDir = (name: string) =>
  existsSync('/dev/shm') ? mkdtempSync(`/dev/shm/portplane-bench-${name}-`) : mkdtempSync(join(work, `${name}-`));

/**
 * Two primaries of the same data under `base`, one followed by a standby (on CPU 1 beside the load, where a real
 * set-up has another machine), and `inTurn`: both loaded (rule creates, or `updates`) in turn for `pairs` pairs of
 * runs of a second, medians and the median pair's ratio. This machine's speed drifts by 10-30% over tens of seconds:
 * the shorter a pair, the less of that drift falls between its two runs (nine pairs of five seconds read 17d 0.92x and
 * 0.88x on the same code; pairs of a second, in three runs of a harness of the same kind, 0.887-0.897x).
 */
async function followedPair(base: string, pairs: number) {
  const nodes = 100;
  const twin = await startMaster(join(base, 'alone'));
  const primary = await startMaster(join(base, 'primary'));
  type Load = (master: Master, firstPort: number, seconds?: number) => WrkResult;
  const creates: Load = (master, firstPort, seconds = SECONDS) =>
    wrk(`${master.url}/api/rules`, { connections: 20, seconds, lua: createsOn(master.token, nodes, firstPort) });
  for (const master of [twin, primary]) {
    await api(master.url, master.token, 'POST', '/api/import', seedDocument(nodes, 1));
    // Each run its own ports (about 250 a node at most): a warm-up of the same script would take the measured run's.
    creates(master, 18_000, WARMUP);
  }
  const follow = await api(primary.url, primary.token, 'POST', '/api/tokens', {
    name: 'standby',
    scopes: ['replication'],
  });
  // Another machine's, as far as this one allows: the CPU beside the load, only while the load leaves it idle
  // (SCHED_IDLE: at nice 19 it still took wrk's CPU at each of its wake-ups, and the latency of 20 connections is the
  // rate), and a disk of its own (its commits' fsyncs on the primary's disk cost the primary 10-20% here).
  const standbyDir = scratchDir('standby');
  const standby = start(
    pinned(1, ['chrt', '--idle', '0', node, 'dist/master.mjs', '--listen', '127.0.0.1:0', '--data-dir', standbyDir]),
    { MASTER_FOLLOW: primary.url, MASTER_FOLLOW_TOKEN: follow.token },
  );
  const standbyUrl = (await standby.waitFor('listening', 120_000)).url as string;
  const health = () => api(standbyUrl, null, 'GET', '/api/health');
  while ((await health()).replication.lag_seconds !== 0) await new Promise((resolve) => setTimeout(resolve, 100));

  /** Replacements of each master's first 1,000 rules (`firstPort` numbering the requests, as ports number creates). */
  const updates = async (): Promise<Load> => {
    const rulesOf = new Map<Master, RuleRow[]>();
    for (const master of [twin, primary])
      rulesOf.set(master, (await api(master.url, master.token, 'GET', '/api/rules?limit=1000')).items);
    return (master, first, seconds = SECONDS) =>
      wrk(`${master.url}/api/rules`, {
        connections: 20,
        seconds,
        lua: updatesOf(master.token, rulesOf.get(master)!, first),
      });
  };

  const inTurn = (firstPort: number, load: Load = creates) => {
    // Each warmed in the mode measured (a primary's recording for a standby, or its wait for one, runs only once one
    // follows: its first round was 5-8% slower than its next), then in turn, which first changing each round.
    load(twin, firstPort - 1000, WARMUP);
    load(primary, firstPort - 1000, WARMUP);
    const runs = { alone: [] as WrkResult[], followed: [] as WrkResult[] };
    // The CPU each master spent a request in each run: steadier than a rate on a machine whose neighbours move it.
    const cpu = { alone: [] as number[], followed: [] as number[] };
    const measured = (master: Master, port: number, side: 'alone' | 'followed') => {
      const pid = master.proc.child.pid!;
      const before = cpuMicros(pid);
      const result = load(master, port, 1);
      cpu[side].push((cpuMicros(pid) - before) / Math.max(1, result.requests));
      runs[side].push(result);
    };
    for (let round = 0; round < pairs; round++) {
      // A second's creates take 20-30 ports a node here: each round 200 of its own (room for a faster machine).
      const port = firstPort + round * 200;
      if (round % 2 === 0) measured(twin, port, 'alone');
      measured(primary, port, 'followed');
      if (round % 2 === 1) measured(twin, port, 'alone');
    }
    const sorted = <T>(values: T[], of: (value: T) => number) => [...values].sort((x, y) => of(x) - of(y));
    const middle = <T>(values: T[], of: (value: T) => number) => sorted(values, of)[(pairs - 1) / 2]!;
    // Each pair ran one after the other, on the machine as it was then: the ratio is the median pair's, where a ratio
    // of the two medians sets a run against one of another round (the two differed by up to 0.04, either way, here).
    const ratios = runs.followed.map((followed, i) => followed.rps / runs.alone[i]!.rps);
    const rps = (result: WrkResult) => result.rps;
    return {
      alone: middle(runs.alone, rps),
      followed: middle(runs.followed, rps),
      ratio: middle(ratios, (ratio) => ratio),
      // The middle half of the pairs' ratios: how far the machine moved a pair.
      spread: [0.25, 0.75].map((q) => sorted(ratios, (ratio) => ratio)[Math.round((pairs - 1) * q)]!.toFixed(2)),
      cpuMicros: { alone: middle(cpu.alone, (us) => us), followed: middle(cpu.followed, (us) => us) },
    };
  };
  const stop = async () => {
    await standby.stop();
    await Promise.all([twin.proc.stop(), primary.proc.stop()]);
    rmSync(standbyDir, { recursive: true, force: true });
  };
  return { primary, standbyUrl, health, inTurn, updates, stop, nodes };
}

/**
 * A primary's write rate with a standby following it, in async and sync mode, against a twin primary that has none,
 * their data dirs on this machine's disk as an appliance's are, then in memory, where the disk's fsyncs, which both
 * wait for alike, no longer hide what recording costs the CPU; rule updates beside creates (17e); and how long a
 * write takes to show on the standby under load.
 */
async function replication(): Promise<void> {
  // 45 pairs of runs of a second: as many seconds of load as nine pairs of five took (see followedPair).
  const PAIRS = 45;
  console.error("replication: a primary's write rate with a standby following it, against its twin without one");
  const onDisk = await followedPair(work, PAIRS);
  const { primary, standbyUrl, health } = onDisk;
  const asynchronous = onDisk.inTurn(20_000);

  // The same load again, and meanwhile a marked write every 250 ms: how long until a read of the standby shows it.
  const lua = createsOn(primary.token, onDisk.nodes, 30_000);
  const load = await wrkInBackground(`${primary.url}/api/rules`, 20, SECONDS, lua);
  const delays: number[] = [];
  let lagged = 0;
  for (let probe = 0; probe < SECONDS * 4 - 4; probe++) {
    const name = `lag-${probe}`;
    await api(primary.url, primary.token, 'POST', '/api/nodes', { name, host: `${name}.bench.example` });
    const written = performance.now();
    while ((await api(standbyUrl, primary.token, 'GET', `/api/nodes?q=${name}`)).items.length === 0)
      await new Promise((resolve) => setTimeout(resolve, 2));
    delays.push(performance.now() - written);
    lagged = Math.max(lagged, (await health()).replication.lag_seconds ?? 0);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  const probed = await load.result;
  const updated = onDisk.inTurn(60_000, await onDisk.updates());

  await api(primary.url, primary.token, 'PATCH', '/api/settings', { replication_mode: 'sync' });
  const synchronous = onDisk.inTurn(40_000);
  const seeds = (await health()).replication.seeds as number;
  await onDisk.stop();

  const memoryDir = scratchDir('memory');
  const inMemory = await followedPair(memoryDir, PAIRS);
  const asynchronousInMemory = inMemory.inTurn(20_000);
  const seedsInMemory = (await inMemory.health()).replication.seeds as number;
  await inMemory.stop();
  rmSync(memoryDir, { recursive: true, force: true });

  const rateRow = (
    id: string,
    request: string,
    mode: string,
    runs: typeof asynchronous,
    seeded: number,
    target: string,
    met: boolean | null,
  ) =>
    record({
      id,
      scenario: `${request} on a primary with a standby following in ${mode} (ceiling: its twin without)`,
      value: runs.followed.rps,
      unit: request.startsWith('POST') ? 'creates/s' : 'updates/s',
      p50_ms: runs.followed.p50,
      p99_ms: runs.followed.p99,
      ceiling: runs.alone.rps,
      ratio: runs.ratio,
      target,
      met,
      note:
        `medians of ${PAIRS} runs of a second in turn; the ratio the median pair's (half the pairs between ` +
        `${runs.spread.join(' and ')}; of the medians: ` +
        `${(runs.followed.rps / runs.alone.rps).toFixed(2)}); CPU a request ` +
        `${runs.cpuMicros.followed.toFixed(0)} us, without ${runs.cpuMicros.alone.toFixed(0)} us; ` +
        `${runs.followed.non2xx} non-2xx; ` +
        `without: p50 ${runs.alone.p50.toFixed(2)} ms, ` +
        `p99 ${runs.alone.p99.toFixed(2)} ms; the standby seeded ${seeded} time(s) in all`,
    });
  const asyncMet = (runs: typeof asynchronous) => runs.ratio >= 0.9 && runs.followed.non2xx === 0;
  const creates = 'POST /api/rules';
  rateRow('17a', creates, 'async mode', asynchronous, seeds, '>= 0.9x without', asyncMet(asynchronous));
  rateRow('17b', creates, 'sync mode', synchronous, seeds, 'a documented cost', null);
  delays.sort((x, y) => x - y);
  const p99 = quantile(delays, 0.99);
  record({
    id: '17c',
    scenario: "async: a write at the primary until a read of the standby shows it, under 17a's load",
    value: quantile(delays, 0.5),
    unit: 'ms',
    p50_ms: quantile(delays, 0.5),
    p99_ms: p99,
    target: `<= 1,000 ms at >= 500 writes/s`,
    met: p99 <= 1000 && probed.rps >= 500,
    note:
      `${delays.length} marked writes beside ${round(probed.rps)} creates/s; the standby's health said a lag of ` +
      `${lagged} s at most`,
  });
  rateRow(
    '17d',
    creates,
    existsSync('/dev/shm') ? 'async mode, both data dirs in memory' : 'async mode (no /dev/shm: data dirs on the disk)',
    asynchronousInMemory,
    seedsInMemory,
    '>= 0.9x without',
    asyncMet(asynchronousInMemory),
  );
  // 17a's neighbour: a rule replaced, whose old row the session records as well as its new one.
  rateRow('17e', 'PUT /api/rules/{id}', 'async mode', updated, seeds, '>= 0.9x without', asyncMet(updated));
}

function table(): string {
  const header = ['#', 'scenario', 'result', 'p50 ms', 'p99 ms', 'peak RSS MiB', 'ceiling', 'ratio', 'target', 'met'];
  const body = rows.map((r) => [
    r.id,
    r.scenario,
    Number.isNaN(r.value) ? 'n/a' : `${round(r.value)} ${r.unit}`,
    r.p50_ms?.toFixed(2) ?? '',
    r.p99_ms?.toFixed(2) ?? '',
    r.peak_rss_mib?.toFixed(0) ?? '',
    r.ceiling !== undefined ? round(r.ceiling) : '',
    r.ratio !== undefined ? `${r.ratio.toFixed(2)}x` : '',
    r.target,
    r.met === null ? '' : r.met ? 'yes' : 'NO',
  ]);
  const lines = [header, ...body].map((cells) => `| ${cells.join(' | ')} |`);
  lines.splice(1, 0, `|${header.map(() => '---').join('|')}|`);
  const notes = rows.filter((r) => r.note).map((r) => `- ${r.id}: ${r.note}`);
  return [...lines, '', ...notes].join('\n');
}

const started = Date.now();
ensureTools();
// This process is load too: it sends the documents and parses the answers (an import's is megabytes), which
// must not take the server's CPU.
pinSelf(1);
const pinning = hasTaskset
  ? 'server on CPU 0, load and this runner on CPU 1 (taskset)'
  : 'not available (no taskset): figures share both CPUs';
console.error(`CPU pinning: ${pinning}`);
// BENCH_ONLY=control,https,fanout,data,threads,kernel,scale,readers,history,upgrade,replication,failover,paths runs a
// subset (working on one part).
const sections = 'control,https,fanout,data,threads,kernel,scale,readers,history,upgrade,replication,failover,paths';
const only = new Set((process.env.BENCH_ONLY ?? sections).split(','));
if (only.has('control')) await controlPlane();
if (only.has('https')) await overTls();
if (only.has('fanout')) await fanOut();
if (only.has('data')) await dataPlane();
if (only.has('threads')) await relayOnEveryCore();
if (only.has('kernel')) await kernelPath();
if (only.has('scale')) await scale();
if (only.has('readers')) await readers();
if (only.has('history')) await historyScale();
if (only.has('upgrade')) await upgradeScale();
if (only.has('replication')) await replication();
if (only.has('failover')) await failover(record);
if (only.has('paths')) await exitSwitching(record);
const machine = {
  cpu: cpus()[0]?.model,
  cores: cpus().length,
  memory_gib: Math.round(totalmem() / 2 ** 30),
  kernel: release(),
  node: process.version,
  pinned: hasTaskset,
  seconds_per_load: SECONDS,
};
const output = table();
console.log(output);
console.log(
  `\n${machine.cores} x ${machine.cpu}, ${machine.memory_gib} GiB, Linux ${machine.kernel}, Node ` +
    `${machine.node}; run took ${Math.round((Date.now() - started) / 1000)} s`,
);
mkdirSync('bench/results', { recursive: true });
// A run of some parts (BENCH_ONLY) leaves the latest full run's file alone: a partial one once replaced it.
writeFileSync(
  process.env.BENCH_ONLY ? 'bench/results/partial.json' : 'bench/results/latest.json',
  `${JSON.stringify({ at: new Date().toISOString(), only: process.env.BENCH_ONLY ?? null, machine, rows }, null, 2)}\n`,
);
process.exit(0);
