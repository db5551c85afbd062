// The peer the control-plane rows are measured against: the same read endpoints, over the
// master's own database file and with the same bearer-token check, written the way a Node
// developer would reach for first (Fastify, better-sqlite3, rows mapped to objects, JSON
// serialised by the framework). Run pinned like the master; prints {"msg":"listening","url"}.
//   node --import tsx bench/peer.ts DATA_DIR

import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import Fastify, { type FastifyInstance } from 'fastify';

const db = new Database(join(process.argv[2]!, 'master.db'), { readonly: true, fileMustExist: true });
const tokenStmt = db.prepare(`SELECT t.scopes, t.expires_at, u.scopes AS user_scopes, u.disabled
  FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.secret_hash = ?`);
const nodeStmt = db.prepare('SELECT * FROM nodes WHERE id = ?');
const ruleStmt = db.prepare('SELECT * FROM rules WHERE id = ?');
const tunnelStmt = db.prepare('SELECT * FROM tunnels WHERE id = ?');
const tunnelsStmt = db.prepare('SELECT * FROM tunnels WHERE id > ? ORDER BY id LIMIT ?');
const userStmt = db.prepare('SELECT * FROM users WHERE id = ?');
const usersStmt = db.prepare('SELECT * FROM users WHERE id > ? ORDER BY id LIMIT ?');
const TOKEN = `SELECT t.id, t.name, t.user_id, u.username, t.scopes, t.created_at, t.expires_at, t.last_used_at
  FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.kind = 'api'`;
const apiTokenStmt = db.prepare(`${TOKEN} AND t.id = ?`);
const apiTokensStmt = db.prepare(`${TOKEN} AND t.id > ? ORDER BY t.id LIMIT ?`);

interface TokenRow {
  scopes: string;
  expires_at: string | null;
  user_scopes: string;
  disabled: number;
}

function grants(scopes: string[], wanted: string): boolean {
  return scopes.includes('*') || scopes.includes(wanted) || scopes.includes(wanted.replace(':read', ':write'));
}

// With PEER_TLS_CERT and PEER_TLS_KEY (PEM files), over HTTPS, as the master serves off loopback.
const tls =
  process.env.PEER_TLS_CERT && process.env.PEER_TLS_KEY
    ? { cert: readFileSync(process.env.PEER_TLS_CERT), key: readFileSync(process.env.PEER_TLS_KEY) }
    : null;
// Its routes are the same either way: typed as over HTTP.
const app = (tls ? Fastify({ https: tls }) : Fastify()) as unknown as FastifyInstance;

app.addHook('onRequest', async (request, reply) => {
  const token = /^Bearer (\S+)$/.exec(request.headers.authorization ?? '')?.[1];
  const row = token ? (tokenStmt.get(createHash('sha256').update(token).digest()) as TokenRow | undefined) : undefined;
  if (!row || row.disabled || (row.expires_at !== null && Date.parse(row.expires_at) <= Date.now()))
    return reply.code(401).send({ code: 'unauthorized' });
  const resource = /^\/api\/([a-z-]+)/.exec(request.url)?.[1] ?? '';
  const wanted = `${resource === 'audit-logs' ? 'audit' : resource}:read`;
  const scopes = JSON.parse(row.scopes) as string[];
  if (!grants(scopes, wanted) || !grants(JSON.parse(row.user_scopes) as string[], wanted))
    return reply.code(403).send({ code: 'insufficient_scope' });
});

function nodeOf(row: Record<string, any>) {
  return {
    id: row.id,
    name: row.name,
    host: row.host,
    ssh_port: row.ssh_port,
    ssh_user: row.ssh_user,
    ssh_auth: row.ssh_auth,
    tags: JSON.parse(row.tags),
    status: row.status,
    status_detail: row.status_detail,
    agent_version: row.agent_version,
    kernel_path: row.kernel_path === null ? null : JSON.parse(row.kernel_path),
    last_seen_at: row.last_seen_at,
    traffic: { bytes_in: row.bytes_in, bytes_out: row.bytes_out },
    install: { started_at: row.install_started_at, finished_at: row.install_finished_at, log_tail: row.install_log },
    version: row.version,
    created_at: row.created_at,
    updated_at: row.updated_at,
  };
}

// A list's filters the way one writes them first: a condition for each query parameter given, the statement
// prepared once per combination (as the master does; one written for every case would keep SQLite from the indexes).
type Filters = Record<string, { sql: string; value: (text: string) => unknown }>;
const filtered = new Map<string, ReturnType<typeof db.prepare>>();

function page(table: string, filters: Filters, query: Record<string, string | undefined>, newestFirst = false) {
  const used = Object.keys(filters).filter((name) => query[name] !== undefined);
  const key = `${table}?${used.join()}`;
  let statement = filtered.get(key);
  if (!statement) {
    const where = [newestFirst ? 'id < ?' : 'id > ?', ...used.map((name) => filters[name]!.sql)].join(' AND ');
    statement = db.prepare(`SELECT * FROM ${table} WHERE ${where} ORDER BY id ${newestFirst ? 'DESC' : ''} LIMIT ?`);
    filtered.set(key, statement);
  }
  const limit = Math.min(Number(query.limit ?? 50), 1000);
  const start = query.cursor ? afterOf(query.cursor) : newestFirst ? Number.MAX_SAFE_INTEGER : 0;
  const values = used.map((name) => filters[name]!.value(query[name]!));
  return { rows: statement.all(start, ...values, limit + 1) as Record<string, any>[], limit };
}

const asBit = (text: string) => (text === 'true' ? 1 : 0);
const asIs = (text: string) => text;

function afterOf(cursor: string | undefined): number {
  return cursor ? Number(Buffer.from(cursor, 'base64url').toString().slice('id:'.length)) : 0;
}

function pageOf<T extends { id: number }>(rows: Record<string, any>[], limit: number, map: (row: any) => T) {
  const items = rows.slice(0, limit).map(map);
  const last = items[items.length - 1];
  return {
    items,
    next_cursor: rows.length > limit && last ? Buffer.from(`id:${last.id}`).toString('base64url') : null,
  };
}

app.get<{ Params: { id: string } }>('/api/nodes/:id', async (request, reply) => {
  const row = nodeStmt.get(Number(request.params.id)) as Record<string, any> | undefined;
  if (!row) return reply.code(404).send({ code: 'not_found' });
  reply.header('ETag', `W/"${row.version}"`);
  return nodeOf(row);
});

const nodeFilters: Filters = {
  status: { sql: 'status = ?', value: asIs },
  tag: { sql: 'EXISTS (SELECT 1 FROM json_each(tags) WHERE value = ?)', value: asIs },
  q: { sql: "(name LIKE '%' || ? || '%')", value: asIs },
};

app.get<{ Querystring: Record<string, string | undefined> }>('/api/nodes', async (request) => {
  const { rows, limit } = page('nodes', nodeFilters, request.query);
  return pageOf(rows, limit, nodeOf);
});

function ruleOf(row: Record<string, any>) {
  return {
    id: row.id,
    name: row.name,
    node_id: row.node_id,
    tunnel_id: row.tunnel_id,
    protocol: row.protocol,
    listen_port: row.listen_port,
    targets: JSON.parse(row.targets),
    strategy: row.strategy,
    forwarding: row.forwarding,
    enabled: row.enabled === 1,
    tags: JSON.parse(row.tags),
    allow_sources: JSON.parse(row.allow_sources),
    deny_sources: JSON.parse(row.deny_sources),
    max_connections: row.max_connections,
    bandwidth_limit: row.bandwidth_limit,
    expires_at: row.expires_at,
    proxy_protocol: row.proxy_protocol,
    state: row.expired === 1 ? 'expired' : row.enabled === 1 ? 'active' : 'disabled',
    sync: {
      state: row.sync_state,
      error: row.sync_error === null ? null : JSON.parse(row.sync_error),
      applied_at: row.sync_applied_at,
      applied_path: row.sync_path,
    },
    traffic: { bytes_in: row.bytes_in, bytes_out: row.bytes_out, refused: row.refused },
    version: row.version,
    created_at: row.created_at,
    updated_at: row.updated_at,
  };
}

app.get<{ Params: { id: string } }>('/api/rules/:id', async (request, reply) => {
  const row = ruleStmt.get(Number(request.params.id)) as Record<string, any> | undefined;
  if (!row) return reply.code(404).send({ code: 'not_found' });
  reply.header('ETag', `W/"${row.version}"`);
  return ruleOf(row);
});

const ruleFilters: Filters = {
  node_id: { sql: 'node_id = ?', value: Number },
  tunnel_id: { sql: 'tunnel_id = ?', value: Number },
  enabled: { sql: 'enabled = ?', value: asBit },
  protocol: { sql: 'protocol = ?', value: asIs },
  tag: { sql: 'EXISTS (SELECT 1 FROM json_each(tags) WHERE value = ?)', value: asIs },
  q: { sql: "name LIKE '%' || ? || '%'", value: asIs },
};

app.get<{ Querystring: Record<string, string | undefined> }>('/api/rules', async (request) => {
  const { rows, limit } = page('rules', ruleFilters, request.query);
  return pageOf(rows, limit, ruleOf);
});

const auditFilters: Filters = {
  resource: { sql: 'resource = ?', value: asIs },
  action: { sql: 'action = ?', value: asIs },
};

app.get<{ Querystring: Record<string, string | undefined> }>('/api/audit-logs', async (request) => {
  const { rows, limit } = page('audit_log', auditFilters, request.query, true);
  return pageOf(rows, limit, (row) => ({ ...row, changes: row.changes === null ? null : JSON.parse(row.changes) }));
});

function tunnelOf(row: Record<string, any>) {
  return {
    id: row.id,
    name: row.name,
    entry_node_id: row.entry_node_id,
    exit_node_id: row.exit_node_id,
    listen_port: row.listen_port,
    transport: row.transport,
    status: row.status,
    rtt_ms: row.rtt_us === null ? null : Math.round(row.rtt_us / 10) / 100,
    ends: {
      entry: { status: row.entry_status, last_error: row.entry_error, reported_at: row.entry_reported_at },
      exit: { status: row.exit_status, last_error: row.exit_error, reported_at: row.exit_reported_at },
    },
    version: row.version,
    created_at: row.created_at,
    updated_at: row.updated_at,
  };
}

function userOf({ password_hash: _, ...row }: Record<string, any>) {
  return { ...row, scopes: JSON.parse(row.scopes), disabled: row.disabled === 1 };
}

function tokenOf(row: Record<string, any>) {
  return { ...row, scopes: JSON.parse(row.scopes) };
}

// Tunnels, users and API tokens: a page and one by id each, mapped as above.
for (const [path, one, many, map] of [
  ['/api/tunnels', tunnelStmt, tunnelsStmt, tunnelOf],
  ['/api/users', userStmt, usersStmt, userOf],
  ['/api/tokens', apiTokenStmt, apiTokensStmt, tokenOf],
] as [string, typeof tunnelStmt, typeof tunnelsStmt, (row: Record<string, any>) => { id: number }][]) {
  app.get<{ Params: { id: string } }>(`${path}/:id`, async (request, reply) => {
    const row = one.get(Number(request.params.id)) as Record<string, any> | undefined;
    if (!row) return reply.code(404).send({ code: 'not_found' });
    return map(row);
  });
  app.get<{ Querystring: { limit?: string; cursor?: string } }>(path, async (request) => {
    const limit = Math.min(Number(request.query.limit ?? 50), 1000);
    return pageOf(many.all(afterOf(request.query.cursor), limit + 1) as Record<string, any>[], limit, map);
  });
}

const url = await app.listen({ host: '127.0.0.1', port: 0 });
console.log(JSON.stringify({ msg: 'listening', url }));
