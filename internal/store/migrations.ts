// Numbered schema migrations: entry N brings the database from version N-1 to N. Never
// edit a released entry; append a new one.

export const migrations: readonly string[] = [
  /* 1: users, tokens (API tokens and login sessions), audit log, settings, idempotency */ `
  CREATE TABLE users (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    username TEXT NOT NULL UNIQUE COLLATE NOCASE,
    password_hash TEXT NOT NULL,
    scopes TEXT NOT NULL,
    disabled INTEGER NOT NULL DEFAULT 0 CHECK (disabled IN (0, 1)),
    version INTEGER NOT NULL DEFAULT 1,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
  ) STRICT;

  CREATE TABLE tokens (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL CHECK (kind IN ('api', 'session')),
    name TEXT NOT NULL,
    user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    scopes TEXT NOT NULL,
    secret_hash BLOB NOT NULL UNIQUE,
    created_at TEXT NOT NULL,
    expires_at TEXT,
    last_used_at TEXT
  ) STRICT;
  CREATE INDEX tokens_user ON tokens(user_id);
  CREATE INDEX tokens_kind_expiry ON tokens(kind, expires_at);

  CREATE TABLE audit_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    actor_type TEXT NOT NULL CHECK (actor_type IN ('user', 'token', 'agent', 'system', 'anonymous')),
    actor_id INTEGER,
    actor_name TEXT NOT NULL,
    ip TEXT,
    action TEXT NOT NULL,
    resource TEXT NOT NULL,
    resource_id INTEGER,
    status TEXT NOT NULL CHECK (status IN ('success', 'denied', 'failed')),
    request_id TEXT,
    changes TEXT
  ) STRICT;
  CREATE INDEX audit_at ON audit_log(at);
  CREATE INDEX audit_resource ON audit_log(resource, resource_id);

  CREATE TABLE settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
  ) STRICT;

  CREATE TABLE idempotency_keys (
    token_id INTEGER NOT NULL REFERENCES tokens(id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    status INTEGER NOT NULL,
    headers TEXT NOT NULL,
    body BLOB NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (token_id, key)
  ) STRICT;
  CREATE INDEX idempotency_created ON idempotency_keys(created_at);
  `,
];
