// The peer the control-plane rows are measured against: the same read endpoints, over the
// master's own database file and with the same bearer-token check, written the way a Node
// developer would reach for first (Fastify, better-sqlite3, rows mapped to objects, JSON
// serialised by the framework). Run pinned like the master; prints {"msg":"listening","url"}.
//   node --import tsx bench/peer.ts DATA_DIR

import { createHash } from 'node:crypto';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import Fastify from 'fastify';

const db = new Database(join(process.argv[2]!, 'master.db'), { readonly: true, fileMustExist: true });
const tokenStmt = db.prepare(`SELECT t.scopes, t.expires_at, u.scopes AS user_scopes, u.disabled
  FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.secret_hash = ?`);
const nodeStmt = db.prepare('SELECT * FROM nodes WHERE id = ?');
const nodesStmt = db.prepare('SELECT * FROM nodes WHERE id > ? ORDER BY id LIMIT ?');
const rulesStmt = db.prepare('SELECT * FROM rules WHERE id > ? ORDER BY id LIMIT ?');
const ruleStmt = db.prepare('SELECT * FROM rules WHERE id = ?');
const auditStmt = db.prepare('SELECT * FROM audit_log WHERE id < ? ORDER BY id DESC LIMIT ?');
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

const app = Fastify();

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

app.get<{ Querystring: { limit?: string; cursor?: string } }>('/api/nodes', async (request) => {
  const limit = Math.min(Number(request.query.limit ?? 50), 1000);
  return pageOf(nodesStmt.all(afterOf(request.query.cursor), limit + 1) as Record<string, any>[], limit, nodeOf);
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
    sync: {
      state: row.sync_state,
      error: row.sync_error === null ? null : JSON.parse(row.sync_error),
      applied_at: row.sync_applied_at,
      applied_path: row.sync_path,
    },
    traffic: { bytes_in: row.bytes_in, bytes_out: row.bytes_out },
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

app.get<{ Querystring: { limit?: string; cursor?: string } }>('/api/rules', async (request) => {
  const limit = Math.min(Number(request.query.limit ?? 50), 1000);
  return pageOf(rulesStmt.all(afterOf(request.query.cursor), limit + 1) as Record<string, any>[], limit, ruleOf);
});

app.get<{ Querystring: { limit?: string; cursor?: string } }>('/api/audit-logs', async (request) => {
  const limit = Math.min(Number(request.query.limit ?? 50), 1000);
  const before = request.query.cursor ? afterOf(request.query.cursor) : Number.MAX_SAFE_INTEGER;
  const rows = auditStmt.all(before, limit + 1) as Record<string, any>[];
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
