// Numbered schema migrations: entry N brings the database from version N-1 to N. Each is
// frozen SQL text, built from nothing that could change: never edit a released entry;
// append a new one. Tables and data moves only: what triggers keep is defined once beside
// the code it mirrors and installed at every open (derived.ts), so the trigger bodies the
// entries up to 19 once carried were taken out of them.
//
// A column's constraint changes the way SQLite says (sqlite.org/lang_altertable.html#otheralter): a new table, the
// rows copied, the old one dropped, the new one renamed. Such an entry is listed in `tableRebuilds`: it runs with
// foreign keys off (so that dropping the old table cascades to nothing) and with no trigger installed (they are
// installed again after, with what they keep rebuilt), and commits only when foreign_key_check finds nothing.

/** The entries that rebuild a table (see above). */
export const tableRebuilds: ReadonlySet<number> = new Set([23, 38, 39, 45, 56]);

/** The minute buckets of traffic as migration 20 left them, until moved into the history (legacy-traffic.ts). */
export const LEGACY_TRAFFIC = 'traffic_buckets_before_20';

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
  /* 2: nodes, tunnels, forwarding rules, the ports they claim, traffic buckets */ `
  CREATE TABLE nodes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE COLLATE NOCASE,
    host TEXT NOT NULL,
    ssh_port INTEGER NOT NULL CHECK (ssh_port BETWEEN 1 AND 65535),
    ssh_user TEXT NOT NULL,
    ssh_auth TEXT NOT NULL CHECK (ssh_auth IN ('none', 'key', 'password')),
    ssh_secret BLOB,
    tags TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'new' CHECK (status IN ('new', 'installing', 'online', 'offline', 'install_failed')),
    status_detail TEXT,
    agent_token_hash BLOB NOT NULL UNIQUE,
    agent_version TEXT,
    last_seen_at TEXT,
    config_version INTEGER NOT NULL DEFAULT 1,
    bytes_in INTEGER NOT NULL DEFAULT 0,
    bytes_out INTEGER NOT NULL DEFAULT 0,
    version INTEGER NOT NULL DEFAULT 1,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
  ) STRICT;

  CREATE TABLE tunnels (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE COLLATE NOCASE,
    entry_node_id INTEGER NOT NULL REFERENCES nodes(id),
    exit_node_id INTEGER NOT NULL REFERENCES nodes(id),
    listen_port INTEGER NOT NULL CHECK (listen_port BETWEEN 1 AND 65535),
    transport TEXT NOT NULL CHECK (transport IN ('tls')),
    status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'up', 'down')),
    version INTEGER NOT NULL DEFAULT 1,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    CHECK (entry_node_id != exit_node_id)
  ) STRICT;
  CREATE INDEX tunnels_entry ON tunnels(entry_node_id);
  CREATE INDEX tunnels_exit ON tunnels(exit_node_id);

  CREATE TABLE rules (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    node_id INTEGER NOT NULL REFERENCES nodes(id),
    tunnel_id INTEGER REFERENCES tunnels(id),
    protocol TEXT NOT NULL CHECK (protocol IN ('tcp', 'udp', 'tcp+udp')),
    listen_port INTEGER NOT NULL CHECK (listen_port BETWEEN 1 AND 65535),
    targets TEXT NOT NULL,
    strategy TEXT NOT NULL CHECK (strategy IN ('round_robin', 'random', 'failover')),
    enabled INTEGER NOT NULL CHECK (enabled IN (0, 1)),
    sync_state TEXT NOT NULL DEFAULT 'pending' CHECK (sync_state IN ('pending', 'applied', 'failed')),
    sync_error TEXT,
    sync_applied_at TEXT,
    bytes_in INTEGER NOT NULL DEFAULT 0,
    bytes_out INTEGER NOT NULL DEFAULT 0,
    version INTEGER NOT NULL DEFAULT 1,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
  ) STRICT;
  CREATE INDEX rules_node ON rules(node_id);
  CREATE INDEX rules_tunnel ON rules(tunnel_id);

  -- Every listening port a rule or tunnel holds on a node, one row per transport protocol:
  -- the primary key is what makes a port taken, and the row says by whom.
  CREATE TABLE port_claims (
    node_id INTEGER NOT NULL REFERENCES nodes(id),
    protocol TEXT NOT NULL CHECK (protocol IN ('tcp', 'udp')),
    port INTEGER NOT NULL,
    rule_id INTEGER REFERENCES rules(id) ON DELETE CASCADE,
    tunnel_id INTEGER REFERENCES tunnels(id) ON DELETE CASCADE,
    PRIMARY KEY (node_id, protocol, port),
    CHECK ((rule_id IS NULL) != (tunnel_id IS NULL))
  ) STRICT;
  CREATE INDEX port_claims_rule ON port_claims(rule_id);
  CREATE INDEX port_claims_tunnel ON port_claims(tunnel_id);

  -- Traffic per rule per minute (start as Unix seconds). No foreign keys: history outlives
  -- the rule or node it was counted for, until traffic_retention_days prunes it.
  CREATE TABLE traffic_buckets (
    rule_id INTEGER NOT NULL,
    node_id INTEGER NOT NULL,
    bucket_start INTEGER NOT NULL,
    bytes_in INTEGER NOT NULL DEFAULT 0,
    bytes_out INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (rule_id, bucket_start)
  ) STRICT;
  CREATE INDEX traffic_time ON traffic_buckets(bucket_start);
  CREATE INDEX traffic_node_time ON traffic_buckets(node_id, bucket_start);
  `,
  /* 3: where each node's traffic report stream stands, so a resent report counts once */ `
  ALTER TABLE nodes ADD COLUMN traffic_stream TEXT;
  ALTER TABLE nodes ADD COLUMN traffic_seq INTEGER NOT NULL DEFAULT 0;
  `,
  /* 4: install-over-SSH progress on nodes */ `
  ALTER TABLE nodes ADD COLUMN install_started_at TEXT;
  ALTER TABLE nodes ADD COLUMN install_finished_at TEXT;
  ALTER TABLE nodes ADD COLUMN install_log TEXT;
  `,
  /* 5: each rule's API JSON, rendered on write by triggers, so lists concatenate text */ `
  CREATE TABLE rule_views (
    id INTEGER PRIMARY KEY REFERENCES rules(id) ON DELETE CASCADE,
    json TEXT NOT NULL
  ) STRICT;
  `,
  /* 6: traffic report streams kept per node and stream; traffic totals that read back as safe integers */ `
  CREATE TABLE traffic_streams (
    node_id INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    stream TEXT NOT NULL,
    seq INTEGER NOT NULL,
    seen_at TEXT NOT NULL,
    PRIMARY KEY (node_id, stream)
  ) STRICT;
  INSERT INTO traffic_streams (node_id, stream, seq, seen_at)
    SELECT id, traffic_stream, traffic_seq, coalesce(last_seen_at, updated_at) FROM nodes WHERE traffic_stream IS NOT NULL;
  ALTER TABLE nodes DROP COLUMN traffic_stream;
  ALTER TABLE nodes DROP COLUMN traffic_seq;

  UPDATE nodes SET bytes_in = max(0, min(bytes_in, 9007199254740991)), bytes_out = max(0, min(bytes_out, 9007199254740991));
  UPDATE traffic_buckets SET bytes_in = max(0, min(bytes_in, 9007199254740991)), bytes_out = max(0, min(bytes_out, 9007199254740991));
  `,
  /* 7: tunnels that forward: each end's key pair, how each end stands; tunnel rules' results at both ends */ `
  ALTER TABLE tunnels ADD COLUMN exit_cert TEXT;
  ALTER TABLE tunnels ADD COLUMN exit_key BLOB;
  ALTER TABLE tunnels ADD COLUMN entry_cert TEXT;
  ALTER TABLE tunnels ADD COLUMN entry_key BLOB;
  ALTER TABLE tunnels ADD COLUMN entry_status TEXT NOT NULL DEFAULT 'pending' CHECK (entry_status IN ('pending', 'up', 'down'));
  ALTER TABLE tunnels ADD COLUMN entry_error TEXT;
  ALTER TABLE tunnels ADD COLUMN entry_reported_at TEXT;
  ALTER TABLE tunnels ADD COLUMN exit_status TEXT NOT NULL DEFAULT 'pending' CHECK (exit_status IN ('pending', 'up', 'down'));
  ALTER TABLE tunnels ADD COLUMN exit_error TEXT;
  ALTER TABLE tunnels ADD COLUMN exit_reported_at TEXT;
  ALTER TABLE tunnels ADD COLUMN rtt_us INTEGER;
  -- What each end reported for a rule through a tunnel, as {"state", "error"}; sync_state combines them.
  ALTER TABLE rules ADD COLUMN entry_result TEXT;
  ALTER TABLE rules ADD COLUMN exit_result TEXT;
  `,
  /* 8: the kernel path: how a rule may be carried, how its node carried it; which paths a node can use */ `
  ALTER TABLE rules ADD COLUMN forwarding TEXT NOT NULL DEFAULT 'auto' CHECK (forwarding IN ('auto', 'relay'));
  ALTER TABLE rules ADD COLUMN sync_path TEXT CHECK (sync_path IN ('kernel', 'relay'));
  -- What the node's agent last said of the kernel path: {"available": bool, "reason": text or null}.
  ALTER TABLE nodes ADD COLUMN kernel_path TEXT;
  `,
  /* 9: rule counts and traffic totals kept as rules change, so the dashboard reads three rows instead of every rule;
     indexes for the rule list's filters by enabled and protocol */ `
  CREATE TABLE rule_tallies (
    sync_state TEXT PRIMARY KEY,
    rules INTEGER NOT NULL,
    enabled INTEGER NOT NULL,
    -- REAL: a sum over a million rules may pass what an INTEGER holds (an overflow would fail the rule's write).
    bytes_in REAL NOT NULL,
    bytes_out REAL NOT NULL
  ) STRICT;
  CREATE INDEX rules_enabled ON rules(enabled);
  CREATE INDEX rules_protocol ON rules(protocol);
  `,
  /* 10: rule names indexed by trigram, so a search of a million names reads only those that can match */ `
  CREATE VIRTUAL TABLE rule_names USING fts5(name, content='rules', content_rowid='id', tokenize='trigram',
    detail='none');
  `,
  /* 11: the audit log filtered by resource alone reads in id order (the index by resource and id sorted them) */ `
  CREATE INDEX audit_resource_order ON audit_log(resource, id);
  `,
  /* 12: rule controls: tags, who may connect, how many at once, how fast, until when, the PROXY protocol; what was
     refused */ `
  ALTER TABLE rules ADD COLUMN tags TEXT NOT NULL DEFAULT '[]';
  ALTER TABLE rules ADD COLUMN allow_sources TEXT NOT NULL DEFAULT '[]';
  ALTER TABLE rules ADD COLUMN deny_sources TEXT NOT NULL DEFAULT '[]';
  ALTER TABLE rules ADD COLUMN max_connections INTEGER CHECK (max_connections > 0);
  ALTER TABLE rules ADD COLUMN bandwidth_limit INTEGER CHECK (bandwidth_limit > 0);
  ALTER TABLE rules ADD COLUMN expires_at TEXT;
  ALTER TABLE rules ADD COLUMN proxy_protocol TEXT NOT NULL DEFAULT 'none' CHECK (proxy_protocol IN ('none', 'v1', 'v2'));
  -- Set by the master once expires_at has passed; a new expires_at (or none) clears it.
  ALTER TABLE rules ADD COLUMN expired INTEGER NOT NULL DEFAULT 0 CHECK (expired IN (0, 1));
  -- Connections and datagrams the node turned away (allow_sources, deny_sources, max_connections).
  ALTER TABLE rules ADD COLUMN refused INTEGER NOT NULL DEFAULT 0;
  -- The master's clock looks for rules whose time is up.
  CREATE INDEX rules_expiry ON rules(expires_at) WHERE expires_at IS NOT NULL AND expired = 0;
  `,
  /* 13: rule quotas: bytes per period, counted in the direction(s) billed; a spent quota stops the rule till its
     period starts over */ `
  ALTER TABLE rules ADD COLUMN quota_bytes INTEGER CHECK (quota_bytes > 0);
  ALTER TABLE rules ADD COLUMN quota_period TEXT CHECK (quota_period IN ('none', 'day', 'month'));
  ALTER TABLE rules ADD COLUMN quota_direction TEXT CHECK (quota_direction IN ('in', 'out', 'both'));
  ALTER TABLE rules ADD COLUMN quota_reset_day INTEGER CHECK (quota_reset_day BETWEEN 1 AND 28);
  ALTER TABLE rules ADD COLUMN quota_reset_hour INTEGER CHECK (quota_reset_hour BETWEEN 0 AND 23);
  -- What the current period has counted, since quota_period_start; quota_resets_at is when the next one starts.
  ALTER TABLE rules ADD COLUMN quota_used INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE rules ADD COLUMN quota_period_start TEXT;
  ALTER TABLE rules ADD COLUMN quota_resets_at TEXT;
  -- Set when the master disabled the rule because its quota was spent; the period's start enables it again.
  ALTER TABLE rules ADD COLUMN quota_spent INTEGER NOT NULL DEFAULT 0 CHECK (quota_spent IN (0, 1));
  CREATE INDEX rules_quota_reset ON rules(quota_resets_at) WHERE quota_resets_at IS NOT NULL;
  `,
  /* 14: health-checked targets: how a rule's node checks them, and how they stood at its last report */ `
  ALTER TABLE rules ADD COLUMN health_check TEXT;
  -- {"status", "targets": [{"target", "status", "error", "checked_at"}]}, kept by the master from its node's reports.
  ALTER TABLE rules ADD COLUMN health TEXT;
  `,
  /* 15: the event journal: what changed, in order, for GET /api/events (resources are rendered when sent) */ `
  -- AUTOINCREMENT: an id is never given twice, even once pruned, so a resume point always means one place.
  CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    type TEXT NOT NULL,
    resource TEXT NOT NULL,
    resource_id INTEGER,
    -- The nodes it concerns: a rule's node (and a tunnelled rule's exit node), a tunnel's two ends.
    node_id INTEGER,
    other_node_id INTEGER,
    -- A change's facts beyond the resource itself (a license's status before and after).
    detail TEXT
  ) STRICT;
  `,
  /* 16: node vitals: the latest as the node shows them, and a point a minute for charts (kept as traffic is) */ `
  -- JSON as the API shows it, written by the master from its agent's report; not an event of its own (see 15).
  ALTER TABLE nodes ADD COLUMN vitals TEXT;
  CREATE TABLE node_vitals (
    node_id INTEGER NOT NULL,
    minute INTEGER NOT NULL,
    cpu_percent REAL,
    load1 REAL NOT NULL,
    memory_used_bytes INTEGER NOT NULL,
    rx_bytes_per_second REAL,
    tx_bytes_per_second REAL,
    PRIMARY KEY (node_id, minute)
  ) STRICT, WITHOUT ROWID;
  `,
  /* 17: lists of rules sorted by name read an index in that order, not every rule */ `
  CREATE INDEX rules_by_name ON rules(name COLLATE NOCASE, id);
  `,
  /* 18: a tunnel whose port the master picked (none was given) may be moved by it when the exit finds it taken */ `
  ALTER TABLE tunnels ADD COLUMN port_picked INTEGER NOT NULL DEFAULT 0 CHECK (port_picked IN (0, 1));
  `,
  /* 19: the journal keeps at most the newest 1,000 events an agent's reports caused per resource */ `
  -- For the bound on what agents' reports journal (events_reported_bound in store/events.ts). The index is partial:
  -- the events of writes through the API cost nothing more.
  CREATE INDEX events_reported ON events(resource, resource_id, id)
    WHERE type IN ('rule.sync', 'rule.health', 'tunnel.status', 'node.status', 'node.agent');
  `,
  /* 20: traffic and vitals at falling resolution: minutes, then hours, then days (store/history.ts) */ `
  -- A rule's, a node's and the whole master's traffic, each a row per minute, hour or day that had any: the maintenance
  -- folds minutes into hours and hours into days as they age. A node's and the master's rows are their rules' sums,
  -- kept as reports are counted, so no series reads more rows than it shows points. Like the buckets they replace they
  -- outlive the rule or node they count, until traffic_retention_days.
  CREATE TABLE traffic_by_rule (
    id INTEGER NOT NULL,
    start INTEGER NOT NULL,
    bytes_in INTEGER NOT NULL,
    bytes_out INTEGER NOT NULL,
    PRIMARY KEY (id, start)
  ) STRICT, WITHOUT ROWID;
  CREATE TABLE traffic_by_node (
    id INTEGER NOT NULL,
    start INTEGER NOT NULL,
    bytes_in INTEGER NOT NULL,
    bytes_out INTEGER NOT NULL,
    PRIMARY KEY (id, start)
  ) STRICT, WITHOUT ROWID;
  -- The id is always 0: the same shape as the others, so one roll-up serves all three.
  CREATE TABLE traffic_total (
    id INTEGER NOT NULL CHECK (id = 0),
    start INTEGER NOT NULL,
    bytes_in INTEGER NOT NULL,
    bytes_out INTEGER NOT NULL,
    PRIMARY KEY (id, start)
  ) STRICT, WITHOUT ROWID;
  -- The minute buckets of before: the maintenance moves them into the tables above in small steps, then drops this.
  ALTER TABLE traffic_buckets RENAME TO traffic_buckets_before_20;

  -- A vitals point is the average of this many minutes' points.
  ALTER TABLE node_vitals ADD COLUMN points INTEGER NOT NULL DEFAULT 1 CHECK (points >= 1);

  -- Where each series' roll-up stands. Before hours_until a series holds hours or days, before days_until only days,
  -- before pruned_until nothing (Unix seconds); pass is the roll-up under way (JSON), null between them.
  CREATE TABLE history_rollups (
    series TEXT PRIMARY KEY,
    hours_until INTEGER NOT NULL DEFAULT 0,
    days_until INTEGER NOT NULL DEFAULT 0,
    pruned_until INTEGER NOT NULL DEFAULT 0,
    pass TEXT
  ) STRICT;
  `,
  /* 21: what an import made is audited as one entry per kind, naming the spans of ids it made */
  `
  -- An entry whose resource_id is null may name spans of its resource's ids (first to last, both in): an entry that
  -- names an id's span is about that id as much as one whose resource_id it is.
  CREATE TABLE audit_spans (
    audit_id INTEGER NOT NULL REFERENCES audit_log(id) ON DELETE CASCADE,
    first_id INTEGER NOT NULL,
    last_id INTEGER NOT NULL CHECK (last_id >= first_id),
    PRIMARY KEY (audit_id, first_id)
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX audit_spans_by_id ON audit_spans(last_id, first_id);
  `,
  /* 22: why the relay carries a rule (the node said: its controls, its targets, the agent's mode) */ `
  -- Shown as sync.relayed_because while sync_path is 'relay'; what an older agent leaves null.
  ALTER TABLE rules ADD COLUMN relay_reason TEXT;
  `,
  /* 23: the rules table rebuilt: more strategies, per-target weights, port ranges, the client's address kept */ `
  CREATE TABLE rules_23 (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    node_id INTEGER NOT NULL REFERENCES nodes(id),
    tunnel_id INTEGER REFERENCES tunnels(id),
    protocol TEXT NOT NULL CHECK (protocol IN ('tcp', 'udp', 'tcp+udp')),
    listen_port INTEGER NOT NULL CHECK (listen_port BETWEEN 1 AND 65535),
    -- A range's last port (inclusive); null: the one port.
    listen_port_end INTEGER CHECK (listen_port_end BETWEEN listen_port AND 65535),
    targets TEXT NOT NULL,
    strategy TEXT NOT NULL
      CHECK (strategy IN ('round_robin', 'random', 'failover', 'source_hash', 'least_conn', 'lowest_latency')),
    -- A JSON array of integers, one per target; null: all alike.
    weights TEXT,
    -- 1: the node does not rewrite the client's address (its targets route their replies back through it).
    preserve_source INTEGER NOT NULL DEFAULT 0 CHECK (preserve_source IN (0, 1)),
    enabled INTEGER NOT NULL CHECK (enabled IN (0, 1)),
    sync_state TEXT NOT NULL DEFAULT 'pending' CHECK (sync_state IN ('pending', 'applied', 'failed')),
    sync_error TEXT,
    sync_applied_at TEXT,
    bytes_in INTEGER NOT NULL DEFAULT 0,
    bytes_out INTEGER NOT NULL DEFAULT 0,
    version INTEGER NOT NULL DEFAULT 1,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    entry_result TEXT,
    exit_result TEXT,
    forwarding TEXT NOT NULL DEFAULT 'auto' CHECK (forwarding IN ('auto', 'relay')),
    sync_path TEXT CHECK (sync_path IN ('kernel', 'relay')),
    tags TEXT NOT NULL DEFAULT '[]',
    allow_sources TEXT NOT NULL DEFAULT '[]',
    deny_sources TEXT NOT NULL DEFAULT '[]',
    max_connections INTEGER CHECK (max_connections > 0),
    bandwidth_limit INTEGER CHECK (bandwidth_limit > 0),
    expires_at TEXT,
    proxy_protocol TEXT NOT NULL DEFAULT 'none' CHECK (proxy_protocol IN ('none', 'v1', 'v2')),
    expired INTEGER NOT NULL DEFAULT 0 CHECK (expired IN (0, 1)),
    refused INTEGER NOT NULL DEFAULT 0,
    quota_bytes INTEGER CHECK (quota_bytes > 0),
    quota_period TEXT CHECK (quota_period IN ('none', 'day', 'month')),
    quota_direction TEXT CHECK (quota_direction IN ('in', 'out', 'both')),
    quota_reset_day INTEGER CHECK (quota_reset_day BETWEEN 1 AND 28),
    quota_reset_hour INTEGER CHECK (quota_reset_hour BETWEEN 0 AND 23),
    quota_used INTEGER NOT NULL DEFAULT 0,
    quota_period_start TEXT,
    quota_resets_at TEXT,
    quota_spent INTEGER NOT NULL DEFAULT 0 CHECK (quota_spent IN (0, 1)),
    health_check TEXT,
    health TEXT,
    relay_reason TEXT
  ) STRICT;
  INSERT INTO rules_23 (id, name, node_id, tunnel_id, protocol, listen_port, targets, strategy, enabled, sync_state,
    sync_error, sync_applied_at, bytes_in, bytes_out, version, created_at, updated_at, entry_result, exit_result,
    forwarding, sync_path, tags, allow_sources, deny_sources, max_connections, bandwidth_limit, expires_at,
    proxy_protocol, expired, refused, quota_bytes, quota_period, quota_direction, quota_reset_day, quota_reset_hour,
    quota_used, quota_period_start, quota_resets_at, quota_spent, health_check, health, relay_reason)
  SELECT id, name, node_id, tunnel_id, protocol, listen_port, targets, strategy, enabled, sync_state,
    sync_error, sync_applied_at, bytes_in, bytes_out, version, created_at, updated_at, entry_result, exit_result,
    forwarding, sync_path, tags, allow_sources, deny_sources, max_connections, bandwidth_limit, expires_at,
    proxy_protocol, expired, refused, quota_bytes, quota_period, quota_direction, quota_reset_day, quota_reset_hour,
    quota_used, quota_period_start, quota_resets_at, quota_spent, health_check, health, relay_reason
  FROM rules;
  -- AUTOINCREMENT: no id a deleted rule had is given again, so the sequence outlives the old table.
  CREATE TEMP TABLE rules_sequence_23 AS SELECT seq FROM sqlite_sequence WHERE name = 'rules';
  DROP TABLE rules;
  ALTER TABLE rules_23 RENAME TO rules;
  DELETE FROM sqlite_sequence WHERE name = 'rules';
  INSERT INTO sqlite_sequence (name, seq) SELECT 'rules', seq FROM temp.rules_sequence_23;
  DROP TABLE temp.rules_sequence_23;
  CREATE INDEX rules_node ON rules(node_id);
  CREATE INDEX rules_tunnel ON rules(tunnel_id);
  CREATE INDEX rules_enabled ON rules(enabled);
  CREATE INDEX rules_protocol ON rules(protocol);
  CREATE INDEX rules_expiry ON rules(expires_at) WHERE expires_at IS NOT NULL AND expired = 0;
  CREATE INDEX rules_quota_reset ON rules(quota_resets_at) WHERE quota_resets_at IS NOT NULL;
  CREATE INDEX rules_by_name ON rules(name COLLATE NOCASE, id);
  `,
  /* 24: claims by port, for the rules list's ?port= */ `
  CREATE INDEX port_claims_port ON port_claims(port);
  `,
  /* 25: alerts: channels, alert rules, what each rule finds, silences, the outbox of notifications and its log */ `
  CREATE TABLE channels (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE COLLATE NOCASE,
    type TEXT NOT NULL CHECK (type IN ('webhook', 'email', 'telegram')),
    config TEXT NOT NULL,
    secret BLOB,
    failing_since TEXT,
    last_error TEXT,
    version INTEGER NOT NULL DEFAULT 1,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
  ) STRICT;
  CREATE TABLE alert_rules (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE COLLATE NOCASE,
    condition TEXT NOT NULL,
    threshold INTEGER,
    selector TEXT NOT NULL DEFAULT '{}',
    for_seconds INTEGER NOT NULL CHECK (for_seconds >= 0),
    repeat_seconds INTEGER CHECK (repeat_seconds > 0),
    damping_seconds INTEGER NOT NULL DEFAULT 0 CHECK (damping_seconds >= 0),
    channel_ids TEXT NOT NULL DEFAULT '[]',
    enabled INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    version INTEGER NOT NULL DEFAULT 1,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
  ) STRICT;
  CREATE TABLE alerts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    alert_rule_id INTEGER NOT NULL REFERENCES alert_rules(id) ON DELETE CASCADE,
    resource TEXT NOT NULL,
    resource_id INTEGER NOT NULL,
    node_id INTEGER,
    other_node_id INTEGER,
    tags TEXT NOT NULL DEFAULT '[]',
    state TEXT NOT NULL CHECK (state IN ('pending', 'firing', 'clearing')),
    muted INTEGER NOT NULL DEFAULT 0 CHECK (muted IN (0, 1)),
    summary TEXT NOT NULL,
    since TEXT NOT NULL,
    fired_at TEXT,
    notified_at TEXT,
    cleared_at TEXT,
    UNIQUE (alert_rule_id, resource, resource_id)
  ) STRICT;
  CREATE TABLE deliveries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id TEXT NOT NULL UNIQUE,
    channel_id INTEGER NOT NULL REFERENCES channels(id) ON DELETE CASCADE,
    payload TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'sent', 'failed')),
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TEXT,
    last_error TEXT,
    created_at TEXT NOT NULL,
    finished_at TEXT
  ) STRICT;
  CREATE TABLE silences (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    comment TEXT NOT NULL,
    alert_rule_ids TEXT NOT NULL DEFAULT '[]',
    node_ids TEXT NOT NULL DEFAULT '[]',
    tags TEXT NOT NULL DEFAULT '[]',
    starts_at TEXT NOT NULL,
    ends_at TEXT NOT NULL,
    version INTEGER NOT NULL DEFAULT 1,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
  ) STRICT;
  CREATE INDEX silences_end ON silences(ends_at);
  CREATE INDEX deliveries_due ON deliveries(next_attempt_at) WHERE state = 'pending';
  CREATE INDEX deliveries_channel ON deliveries(channel_id, id);
  CREATE INDEX deliveries_created ON deliveries(created_at);
  CREATE INDEX rules_sync_failed ON rules(id) WHERE sync_state = 'failed';
  CREATE INDEX rules_unhealthy ON rules(id) WHERE json_extract(health, '$.status') IN ('degraded', 'down');
  CREATE INDEX rules_quota ON rules(id) WHERE quota_bytes IS NOT NULL;
  CREATE INDEX tunnels_down ON tunnels(id) WHERE status = 'down';
  `,
  /* 26: agent bundles the master carries, each with the signature of a release key; the keys each agent trusts */ `
  CREATE TABLE agent_bundles (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    version TEXT NOT NULL UNIQUE,
    sha256 TEXT NOT NULL,
    size INTEGER NOT NULL,
    key_id TEXT NOT NULL,
    signature TEXT NOT NULL,
    body BLOB NOT NULL,
    created_at TEXT NOT NULL
  ) STRICT;
  ALTER TABLE nodes ADD COLUMN agent_release_keys TEXT NOT NULL DEFAULT '[]';
  -- For the bound on alert events (events_alert_bound in store/events.ts), as events_reported is for reports.
  CREATE INDEX events_alerts ON events(resource, resource_id, id) WHERE type IN ('alert.firing', 'alert.resolved');
  `,
  /* 27: rollouts of agent bundles to nodes in waves, and where each node of one stands */ `
  CREATE TABLE rollouts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    version TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('running', 'paused', 'halted', 'aborted', 'done')),
    reason TEXT,
    waves TEXT NOT NULL,
    gate_seconds INTEGER NOT NULL,
    pause_seconds INTEGER NOT NULL,
    wave INTEGER NOT NULL DEFAULT 0,
    wave_started_at TEXT NOT NULL,
    wave_passed_at TEXT,
    revision INTEGER NOT NULL DEFAULT 1,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
  ) STRICT;
  -- One rollout under way at a time.
  CREATE UNIQUE INDEX rollouts_under_way ON rollouts(state = 'running' OR state = 'paused')
    WHERE state IN ('running', 'paused');
  CREATE TABLE rollout_nodes (
    rollout_id INTEGER NOT NULL REFERENCES rollouts(id) ON DELETE CASCADE,
    node_id INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    wave INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('waiting', 'upgrading', 'passed', 'failed')),
    from_version TEXT,
    detail TEXT,
    unhealthy_before INTEGER,
    started_at TEXT,
    finished_at TEXT,
    PRIMARY KEY (rollout_id, node_id)
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX rollout_nodes_node ON rollout_nodes(node_id);
  CREATE INDEX rollout_nodes_wave ON rollout_nodes(rollout_id, wave, state);
  `,
  /* 28: where a copy of the database stands in the primary's record of its changes, and the primaries' epoch */ `
  CREATE TABLE replication_position (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    generation TEXT NOT NULL,
    seq INTEGER NOT NULL
  ) STRICT;
  -- Raised by each promotion of a standby: what agents and a former primary fence by.
  CREATE TABLE master_epoch (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    epoch INTEGER NOT NULL,
    promoted_at TEXT NOT NULL
  ) STRICT;
  `,
  /* 29: who owns each rule and tunnel: what they had so far goes to the first administrator (or the first user) */ `
  ALTER TABLE rules ADD COLUMN owner_id INTEGER REFERENCES users(id);
  ALTER TABLE tunnels ADD COLUMN owner_id INTEGER REFERENCES users(id);
  UPDATE rules SET owner_id = (SELECT id FROM users ORDER BY scopes NOT LIKE '%"*"%', id LIMIT 1);
  UPDATE tunnels SET owner_id = (SELECT id FROM users ORDER BY scopes NOT LIKE '%"*"%', id LIMIT 1);
  CREATE INDEX rules_owner ON rules(owner_id);
  CREATE INDEX tunnels_owner ON tunnels(owner_id);
  `,
  /* 30: plans: named sets of grants tenants are held to */ `
  CREATE TABLE plans (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE COLLATE NOCASE,
    node_ids TEXT NOT NULL,
    node_tags TEXT NOT NULL,
    port_ranges TEXT NOT NULL,
    max_rules INTEGER,
    max_connections INTEGER,
    bandwidth_limit INTEGER,
    traffic TEXT,
    version INTEGER NOT NULL DEFAULT 1,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
  ) STRICT;
  `,
  /* 31: users are operators (as all were) or tenants, whom a plan holds to its grants */ `
  ALTER TABLE users ADD COLUMN role TEXT NOT NULL DEFAULT 'operator' CHECK (role IN ('operator', 'tenant'));
  ALTER TABLE users ADD COLUMN plan_id INTEGER REFERENCES plans(id);
  CREATE INDEX users_plan ON users(plan_id);
  `,
  /* 32: whose an audit entry is (the user whose resource or account it is about), for what a tenant may read */ `
  ALTER TABLE audit_log ADD COLUMN owner_id INTEGER;
  CREATE INDEX audit_owner ON audit_log(owner_id, id);
  `,
  /* 33: tenants' accounts expire and count a traffic allowance; what that and their plan do to each rule of theirs */ `
  ALTER TABLE users ADD COLUMN expires_at TEXT;
  ALTER TABLE users ADD COLUMN expired INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE users ADD COLUMN traffic_used INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE users ADD COLUMN traffic_period_start TEXT;
  ALTER TABLE users ADD COLUMN traffic_resets_at TEXT;
  ALTER TABLE users ADD COLUMN traffic_spent INTEGER NOT NULL DEFAULT 0;
  CREATE INDEX users_expiry ON users(expires_at) WHERE expired = 0;
  CREATE INDEX users_traffic_reset ON users(traffic_resets_at);
  ALTER TABLE rules ADD COLUMN held TEXT;
  ALTER TABLE rules ADD COLUMN held_connections INTEGER;
  ALTER TABLE rules ADD COLUMN held_bandwidth INTEGER;
  `,
  /* 34: whose an event is (the user whose resource it tells of), for what a tenant's event stream follows */ `
  ALTER TABLE events ADD COLUMN owner_id INTEGER;
  `,
  /* 35: how many rules each user owns, kept by triggers (store/rule-view.ts) */ `
  CREATE TABLE owner_tallies (
    user_id INTEGER PRIMARY KEY,
    rules INTEGER NOT NULL
  ) STRICT;
  `,
  /* 36: which nodes carry each tag, kept by triggers (store/node-tags.ts) */ `
  CREATE TABLE node_tag_index (
    tag TEXT NOT NULL,
    node_id INTEGER NOT NULL,
    PRIMARY KEY (tag, node_id)
  ) STRICT, WITHOUT ROWID;
  `,
  /* 37: the rules an owner's standing holds, found without reading all an operator's rules */ `
  CREATE INDEX rules_held ON rules(owner_id)
    WHERE held IS NOT NULL OR held_connections IS NOT NULL OR held_bandwidth IS NOT NULL;
  `,
  /* 38: what a standby derives itself has no primary key, so that the session recording what a primary commits for
     it (one, of every table) passes over those rows (store/replication.ts); made anew from the tables after */ `
  DROP TABLE rule_views;
  -- The rowid is the rule's id.
  CREATE TABLE rule_views (json TEXT NOT NULL) STRICT;
  DROP TABLE rule_tallies;
  CREATE TABLE rule_tallies (
    sync_state TEXT NOT NULL UNIQUE,
    rules INTEGER NOT NULL,
    enabled INTEGER NOT NULL,
    bytes_in REAL NOT NULL,
    bytes_out REAL NOT NULL
  ) STRICT;
  DROP TABLE owner_tallies;
  -- The rowid is the user's id.
  CREATE TABLE owner_tallies (rules INTEGER NOT NULL) STRICT;
  DROP TABLE node_tag_index;
  CREATE TABLE node_tag_index (tag TEXT NOT NULL, node_id INTEGER NOT NULL, UNIQUE (tag, node_id)) STRICT;
  -- FTS5 keeps its index in tables with keys, which the session records: without each name's size (for ranking,
  -- which no search here does), a rule's write is one row fewer to record.
  DROP TABLE rule_names;
  CREATE VIRTUAL TABLE rule_names USING fts5(name, content='rules', content_rowid='id', tokenize='trigram',
    detail='none', columnsize=0);
  `,
  /* 39: port claims follow from the rules and tunnels, kept by triggers (store/ports.ts) and derived by a standby: a
     unique key instead of a primary key, for the session to pass over them; made anew from the tables after */ `
  DROP TABLE port_claims;
  CREATE TABLE port_claims (
    node_id INTEGER NOT NULL REFERENCES nodes(id),
    protocol TEXT NOT NULL CHECK (protocol IN ('tcp', 'udp')),
    port INTEGER NOT NULL,
    rule_id INTEGER REFERENCES rules(id) ON DELETE CASCADE,
    tunnel_id INTEGER REFERENCES tunnels(id) ON DELETE CASCADE,
    UNIQUE (node_id, protocol, port),
    CHECK ((rule_id IS NULL) != (tunnel_id IS NULL))
  ) STRICT;
  CREATE INDEX port_claims_rule ON port_claims(rule_id);
  CREATE INDEX port_claims_tunnel ON port_claims(tunnel_id);
  CREATE INDEX port_claims_port ON port_claims(port);
  `,
  /* 40: a node's config version in a table of its own: each rule written bumps it, and the session recording what a
     primary commits keeps a row it changes whole, a node's with its install log (store/nodes.ts) */ `
  CREATE TABLE node_configs (
    node_id INTEGER PRIMARY KEY REFERENCES nodes(id),
    version INTEGER NOT NULL
  ) STRICT;
  INSERT INTO node_configs (node_id, version) SELECT id, config_version FROM nodes WHERE config_version <> 1;
  ALTER TABLE nodes DROP COLUMN config_version;
  `,
  /* 41: who may reach local targets is set per kind: allow_local_targets, which was both, becomes the two */ `
  INSERT INTO settings (key, value)
    SELECT 'allow_local_rule_targets', value FROM settings WHERE key = 'allow_local_targets';
  INSERT INTO settings (key, value)
    SELECT 'allow_local_channel_targets', value FROM settings WHERE key = 'allow_local_targets';
  DELETE FROM settings WHERE key = 'allow_local_targets';
  `,
  /* 42: which rules carry each tag, kept by triggers (store/tag-index.ts), made from the rules when the database opens;
     a rule's sync state and the audit log's filters each read an index */ `
  CREATE TABLE rule_tag_index (tag TEXT NOT NULL, rule_id INTEGER NOT NULL, UNIQUE (tag, rule_id)) STRICT;
  CREATE INDEX rules_sync_state ON rules(sync_state);
  CREATE INDEX audit_action ON audit_log(action, id);
  CREATE INDEX audit_actor ON audit_log(actor_name, id);
  CREATE INDEX audit_actor_type ON audit_log(actor_type, id);
  CREATE INDEX audit_status ON audit_log(status, id);
  -- An entry's id alone (its resource given or not); (resource, resource_id) served only the two together.
  DROP INDEX audit_resource;
  CREATE INDEX audit_resource_id ON audit_log(resource_id, id);
  `,
  /* 43: a rollout's soak, how long a node's new agent must stay linked, applied and healthy after its gate, and
     since when each node has; a node's agent that went back from a bundle that crash-looped */ `
  ALTER TABLE rollouts ADD COLUMN soak_seconds INTEGER NOT NULL DEFAULT 60;
  ALTER TABLE rollout_nodes ADD COLUMN soaking_since TEXT;
  -- Which link of the node's agent the soak began on (SyncHub.linkOf): another one since fails it.
  ALTER TABLE rollout_nodes ADD COLUMN soak_link INTEGER;
  -- What its agent's supervisor last said it went back from, a bundle that crash-looped (JSON), or null.
  ALTER TABLE nodes ADD COLUMN agent_fell_back TEXT;
  `,
  /* 44: the newer primary a primary was fenced by, kept across its restarts: the master's own, never replicated */ `
  CREATE TABLE master_fence (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    epoch INTEGER NOT NULL,
    primary_url TEXT,
    fenced_at TEXT NOT NULL
  ) STRICT;
  `,
  /* 45: the tunnels table rebuilt: transport ws (the tunnel's TLS inside a WebSocket) and the URL the entry dials */ `
  CREATE TABLE tunnels_45 (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE COLLATE NOCASE,
    entry_node_id INTEGER NOT NULL REFERENCES nodes(id),
    exit_node_id INTEGER NOT NULL REFERENCES nodes(id),
    listen_port INTEGER NOT NULL CHECK (listen_port BETWEEN 1 AND 65535),
    transport TEXT NOT NULL CHECK (transport IN ('tls', 'ws')),
    -- Transport ws: the WebSocket URL the entry dials (a reverse proxy in front of the exit); null: the exit itself.
    via TEXT CHECK (via IS NULL OR transport = 'ws'),
    status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'up', 'down')),
    version INTEGER NOT NULL DEFAULT 1,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    exit_cert TEXT,
    exit_key BLOB,
    entry_cert TEXT,
    entry_key BLOB,
    entry_status TEXT NOT NULL DEFAULT 'pending' CHECK (entry_status IN ('pending', 'up', 'down')),
    entry_error TEXT,
    entry_reported_at TEXT,
    exit_status TEXT NOT NULL DEFAULT 'pending' CHECK (exit_status IN ('pending', 'up', 'down')),
    exit_error TEXT,
    exit_reported_at TEXT,
    rtt_us INTEGER,
    port_picked INTEGER NOT NULL DEFAULT 0 CHECK (port_picked IN (0, 1)),
    owner_id INTEGER REFERENCES users(id),
    CHECK (entry_node_id != exit_node_id)
  ) STRICT;
  INSERT INTO tunnels_45 (id, name, entry_node_id, exit_node_id, listen_port, transport, status, version, created_at,
    updated_at, exit_cert, exit_key, entry_cert, entry_key, entry_status, entry_error, entry_reported_at, exit_status,
    exit_error, exit_reported_at, rtt_us, port_picked, owner_id)
  SELECT id, name, entry_node_id, exit_node_id, listen_port, transport, status, version, created_at,
    updated_at, exit_cert, exit_key, entry_cert, entry_key, entry_status, entry_error, entry_reported_at, exit_status,
    exit_error, exit_reported_at, rtt_us, port_picked, owner_id
  FROM tunnels;
  CREATE TEMP TABLE tunnels_sequence_45 AS SELECT seq FROM sqlite_sequence WHERE name = 'tunnels';
  DROP TABLE tunnels;
  ALTER TABLE tunnels_45 RENAME TO tunnels;
  DELETE FROM sqlite_sequence WHERE name = 'tunnels';
  INSERT INTO sqlite_sequence (name, seq) SELECT 'tunnels', seq FROM temp.tunnels_sequence_45;
  DROP TABLE temp.tunnels_sequence_45;
  CREATE INDEX tunnels_entry ON tunnels(entry_node_id);
  CREATE INDEX tunnels_exit ON tunnels(exit_node_id);
  CREATE INDEX tunnels_down ON tunnels(id) WHERE status = 'down';
  CREATE INDEX tunnels_owner ON tunnels(owner_id);
  `,
  /* 46: a rule's rate of new connections, and a plan's cap on it, which its tenants' rules are held to */ `
  ALTER TABLE rules ADD COLUMN max_new_connections_per_second INTEGER CHECK (max_new_connections_per_second > 0);
  ALTER TABLE rules ADD COLUMN held_new_connections INTEGER;
  ALTER TABLE plans ADD COLUMN max_new_connections_per_second INTEGER;
  DROP INDEX rules_held;
  CREATE INDEX rules_held ON rules(owner_id)
    WHERE held IS NOT NULL OR held_connections IS NOT NULL OR held_bandwidth IS NOT NULL
      OR held_new_connections IS NOT NULL;
  `,
  /* 47: the node's address a rule's connections to its targets come from */ `
  ALTER TABLE rules ADD COLUMN source_address TEXT;
  `,
  /* 48: when a rule takes new clients, on one zone's wall clock (JSON: {zone, windows}) */ `
  ALTER TABLE rules ADD COLUMN allow_hours TEXT;
  `,
  /* 49: the share of its PINGs a tunnel's entry saw lost, and a point a minute of how each tunnel's path stood */ `
  ALTER TABLE tunnels ADD COLUMN loss_percent REAL;
  CREATE TABLE tunnel_paths (
    tunnel_id INTEGER NOT NULL,
    minute INTEGER NOT NULL,
    up REAL NOT NULL,
    rtt_us REAL,
    loss_percent REAL,
    points INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (tunnel_id, minute)
  ) STRICT, WITHOUT ROWID;
  `,
  /*
   * 50: a tunnel's exits past the first (which stays in tunnels), each with its port, key pair and how it stands; how
   * the entry picks among them, what it measured of each, and its choice. A rule's result at its exits is by node.
   */ `
  CREATE TABLE tunnel_exits (
    tunnel_id INTEGER NOT NULL REFERENCES tunnels(id) ON DELETE CASCADE,
    node_id INTEGER NOT NULL REFERENCES nodes(id),
    position INTEGER NOT NULL CHECK (position >= 1),
    listen_port INTEGER NOT NULL CHECK (listen_port BETWEEN 1 AND 65535),
    port_picked INTEGER NOT NULL DEFAULT 0 CHECK (port_picked IN (0, 1)),
    via TEXT,
    exit_cert TEXT,
    exit_key BLOB,
    status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'up', 'down')),
    error TEXT,
    reported_at TEXT,
    PRIMARY KEY (tunnel_id, node_id)
  ) STRICT;
  CREATE INDEX tunnel_exits_node ON tunnel_exits(node_id);
  CREATE INDEX tunnel_exits_order ON tunnel_exits(tunnel_id, position);
  ALTER TABLE tunnels ADD COLUMN exit_strategy TEXT NOT NULL DEFAULT 'failover'
    CHECK (exit_strategy IN ('failover', 'lowest_latency'));
  ALTER TABLE tunnels ADD COLUMN probe_target TEXT;
  ALTER TABLE tunnels ADD COLUMN exit_paths TEXT;
  ALTER TABLE tunnels ADD COLUMN chosen_exit_node_id INTEGER;
  ALTER TABLE tunnels ADD COLUMN chosen_because TEXT;
  ALTER TABLE tunnels ADD COLUMN chosen_at TEXT;
  UPDATE rules SET exit_result = json_object(
      CAST((SELECT exit_node_id FROM tunnels WHERE id = rules.tunnel_id) AS TEXT), json(exit_result))
    WHERE exit_result IS NOT NULL AND tunnel_id IS NOT NULL;
  `,
  /*
   * 51: each path of a tunnel through one of its exits (entry -> exit, and exit -> its probe target), and a point a
   * minute of how it stood, folded as tunnel_paths are
   */ `
  CREATE TABLE tunnel_exit_paths (
    id INTEGER PRIMARY KEY,
    tunnel_id INTEGER NOT NULL REFERENCES tunnels(id) ON DELETE CASCADE,
    node_id INTEGER NOT NULL,
    UNIQUE (tunnel_id, node_id)
  ) STRICT;
  CREATE TABLE exit_path_points (
    path_id INTEGER NOT NULL,
    minute INTEGER NOT NULL,
    up REAL NOT NULL,
    rtt_us REAL,
    loss_percent REAL,
    probe_us REAL,
    probe_ok REAL,
    points INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (path_id, minute)
  ) STRICT, WITHOUT ROWID;
  `,
  /*
   * 52: a user's second factor: a TOTP secret (sealed), confirmed or still being enrolled, the last step a code of it
   * was taken at (each once), and the hashes of the recovery codes not used yet (JSON)
   */ `
  CREATE TABLE user_totp (
    user_id INTEGER PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
    secret BLOB NOT NULL,
    created_at TEXT NOT NULL,
    confirmed_at TEXT,
    last_step INTEGER,
    recovery TEXT NOT NULL DEFAULT '[]'
  ) STRICT;
  `,
  /* 53: where a login session was opened from (address, user agent) and how it signed in, for its user to see */ `
  ALTER TABLE tokens ADD COLUMN ip TEXT;
  ALTER TABLE tokens ADD COLUMN user_agent TEXT;
  ALTER TABLE tokens ADD COLUMN signed_in_with TEXT;
  `,
  /*
   * 54: sign-in by the organisation's OpenID provider: which provider subject a user is (linked at their first
   * sign-in by it, each subject one user), and for each session it opened the refresh token (sealed) the master asks
   * it again with, and when
   */ `
  CREATE TABLE user_identities (
    user_id INTEGER PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
    issuer TEXT NOT NULL,
    subject TEXT NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (issuer, subject)
  ) STRICT;
  CREATE TABLE provider_sessions (
    token_id INTEGER PRIMARY KEY REFERENCES tokens(id) ON DELETE CASCADE,
    refresh_token BLOB NOT NULL,
    checked_at TEXT NOT NULL,
    next_check_ms INTEGER NOT NULL,
    unanswered_since TEXT
  ) STRICT;
  CREATE INDEX provider_sessions_due ON provider_sessions (next_check_ms);
  `,
  /*
   * 55: passkeys (WebAuthn credentials) a user signs in with: the credential's id, its public key (a JWK) and COSE
   * algorithm, the signature counter last seen, the name its user gave it
   */ `
  CREATE TABLE passkeys (
    id INTEGER PRIMARY KEY,
    user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    credential_id BLOB NOT NULL UNIQUE,
    public_key TEXT NOT NULL,
    algorithm INTEGER NOT NULL,
    sign_count INTEGER NOT NULL,
    name TEXT NOT NULL,
    created_at TEXT NOT NULL,
    last_used_at TEXT,
    version INTEGER NOT NULL DEFAULT 1
  ) STRICT;
  CREATE INDEX passkeys_user ON passkeys (user_id);
  `,
  /* 56: channels of the chat services (slack, discord, teams, ntfy): the type's CHECK widened, the table rebuilt */ `
  CREATE TABLE channels_56 (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE COLLATE NOCASE,
    type TEXT NOT NULL CHECK (type IN ('webhook', 'email', 'telegram', 'slack', 'discord', 'teams', 'ntfy')),
    config TEXT NOT NULL,
    secret BLOB,
    failing_since TEXT,
    last_error TEXT,
    version INTEGER NOT NULL DEFAULT 1,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
  ) STRICT;
  INSERT INTO channels_56 (id, name, type, config, secret, failing_since, last_error, version, created_at, updated_at)
  SELECT id, name, type, config, secret, failing_since, last_error, version, created_at, updated_at FROM channels;
  CREATE TEMP TABLE channels_sequence_56 AS SELECT seq FROM sqlite_sequence WHERE name = 'channels';
  DROP TABLE channels;
  ALTER TABLE channels_56 RENAME TO channels;
  DELETE FROM sqlite_sequence WHERE name = 'channels';
  INSERT INTO sqlite_sequence (name, seq) SELECT 'channels', seq FROM temp.channels_sequence_56;
  DROP TABLE temp.channels_sequence_56;
  `,
  /*
   * 57: what each rule and node carried today (UTC), kept as reports are counted, for the top talkers by bytes today:
   * a row each, reset by the first report of a new day, read busiest first through its index
   */ `
  CREATE TABLE traffic_today (
    kind TEXT NOT NULL CHECK (kind IN ('rule', 'node')),
    id INTEGER NOT NULL,
    day INTEGER NOT NULL,
    bytes_in INTEGER NOT NULL,
    bytes_out INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    PRIMARY KEY (kind, id)
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX traffic_today_busiest ON traffic_today (kind, day, bytes);
  `,
  /*
   * 58: the minute buckets of before migration 20 that are still to be moved, in the order they are moved (by rule and
   * time, clustered on that key): a step reads and deletes a range of neighbouring rows, where the rows of a rule
   * lay scattered among every other rule's of the same minute, with two more indexes to update. A data dir whose
   * buckets have all moved gets an empty table, dropped by the next roll-up.
   */ `
  CREATE TABLE IF NOT EXISTS traffic_buckets_before_20 (
    rule_id INTEGER NOT NULL,
    node_id INTEGER NOT NULL,
    bucket_start INTEGER NOT NULL,
    bytes_in INTEGER NOT NULL DEFAULT 0,
    bytes_out INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (rule_id, bucket_start)
  ) STRICT;
  CREATE TABLE traffic_buckets_58 (
    rule_id INTEGER NOT NULL,
    node_id INTEGER NOT NULL,
    bucket_start INTEGER NOT NULL,
    bytes_in INTEGER NOT NULL,
    bytes_out INTEGER NOT NULL,
    PRIMARY KEY (rule_id, bucket_start)
  ) STRICT, WITHOUT ROWID;
  INSERT INTO traffic_buckets_58 (rule_id, node_id, bucket_start, bytes_in, bytes_out)
  SELECT rule_id, node_id, bucket_start, bytes_in, bytes_out FROM traffic_buckets_before_20 NOT INDEXED
  ORDER BY rule_id, bucket_start;
  DROP TABLE traffic_buckets_before_20;
  ALTER TABLE traffic_buckets_58 RENAME TO traffic_buckets_before_20;
  `,
  /*
   * 59: a rule's API JSON is rendered as a page is read, no longer kept rendered beside the rule: the copy was 1,026
   * of the 1,455 bytes a rule took, and written again at every change of the rule, each report of its traffic included
   */ `
  DROP TRIGGER IF EXISTS rule_views_insert;
  DROP TRIGGER IF EXISTS rule_views_update;
  DROP TRIGGER IF EXISTS rule_views_delete;
  DROP TABLE rule_views;
  `,
];
