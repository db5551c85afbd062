// Health for a load balancer or monitor, and metrics for Prometheus.

import { DomainError } from '../errors/errors.ts';
import { Gauge } from '../metrics/metrics.ts';
import { describe, formatTime } from '../schema/schema.ts';
import { record } from './common.ts';
import { type Ctx, ok, operation, operations, type Reply } from './route.ts';
import type { App } from './app.ts';
import type { Vitals } from '../domain/vitals.ts';
import { syncStates } from '../domain/rules.ts';
import type { Follower } from '../replication/follower.ts';
import { nodeStatuses } from '../domain/nodes.ts';

const METRICS_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

const healthSchema = record('Health', {
  status: {
    type: 'string',
    enum: ['ok', 'starting', 'degraded'],
    description:
      'starting (with 503) until the master serves everything: its first admin made, the console and the agent ' +
      "link wired. degraded (with 503): a standby whose copy cannot follow its primary (replication's error says " +
      'why: a change that does not apply, a full disk; or it halted). A primary that does not answer is no fault ' +
      "of the copy's: said in replication.error, its lag growing. While it shuts down, this route answers a 503 " +
      'problem instead.',
  },
  starting_reason: {
    type: ['string', 'null'],
    description:
      'While starting, what it waits for, when it waits for something: a sync-mode primary none of whose ' +
      'standby_masters answers takes no write before one does (master serve-alone makes it serve). Null otherwise.',
  },
  version: { type: 'string' },
  database: {
    type: 'string',
    enum: ['ok', 'refusing_writes'],
    description:
      'refusing_writes (with 503 and Retry-After) while the disk is full: reads go on, every write answers 507, ' +
      "until a write commits with room on the disk again (4 MiB free on the data dir's file system: a small write " +
      'that still fits in pages the database holds does not end it).',
  },
  database_detail: {
    type: ['string', 'null'],
    description: 'Why writes are refused, and since when; null while the database is ok.',
  },
  uptime_seconds: { type: 'integer' },
  role: {
    type: 'string',
    enum: ['primary', 'standby', 'fenced'],
    description:
      'standby: it serves reads of its copy of the primary named below, and refuses writes. fenced: a primary ' +
      "a newer one took over from (a master it knows said so, or an agent showed that one's signed statement), or, " +
      'elected through etcd, one that cannot renew its lease there: it refuses writes.',
  },
  epoch: {
    type: 'integer',
    description: 'Raised by each promotion of a standby, and each election of a leader (1 before the first).',
  },
  fenced_by: {
    type: ['object', 'null'],
    description:
      "A fenced primary's: the newer primary's epoch, and its address: one of its own standby_masters, the one " +
      'that answered or signed the statement an agent showed (null otherwise). Null unless fenced.',
    required: ['epoch', 'primary'],
    properties: { epoch: { type: 'integer' }, primary: { type: ['string', 'null'] } },
    additionalProperties: false,
  },
  replication_mode: {
    type: 'string',
    enum: ['async', 'sync'],
    description: "How writes are kept for standbys (the setting replication_mode; a standby shows its primary's).",
  },
  sync_lapsed_since: {
    type: ['string', 'null'],
    format: 'date-time',
    description:
      'In sync mode (replication_mode), since when writes are answered without a standby holding them (none did ' +
      'within replication_sync_timeout_seconds); null while one is in step, or in async mode.',
  },
  replication: {
    type: ['object', 'null'],
    description:
      "A standby's copy: its primary, where it stands in the primary's record (generation/seq), how far behind it " +
      'may be (0 while in step; once the primary is silent past a wait for changes, the seconds since it answered; ' +
      'null before the copy is seeded), when the primary last answered, and how often the ' +
      'copy was seeded. Null on a primary.',
    required: ['primary', 'position', 'lag_seconds', 'last_heard_at', 'seeds', 'halted', 'error', 'failing_since'],
    properties: {
      primary: { type: 'string' },
      halted: {
        type: ['string', 'null'],
        description: 'Why it stopped following by itself (its copy was promoted since); null while it follows.',
      },
      error: {
        type: ['string', 'null'],
        description:
          "Why its last attempt to follow failed (the primary's answer, a change that did not apply: a full disk); " +
          'null once one goes through. Its lag grows meanwhile: it counts from what was applied.',
      },
      failing_since: { type: ['string', 'null'], format: 'date-time' },
      position: { type: ['string', 'null'] },
      lag_seconds: { type: ['integer', 'null'] },
      last_heard_at: { type: ['string', 'null'], format: 'date-time' },
      seeds: { type: 'integer' },
    },
    additionalProperties: false,
  },
});

function health(ctx: Ctx<undefined, {}>): Reply {
  const { app } = ctx;
  try {
    app.store.db.schemaVersion();
  } catch (error) {
    throw new DomainError('unavailable', 'the database does not answer', { retryAfterSeconds: 5 }, error);
  }
  const uptime = Math.floor((app.now() - app.startedAt) / 1000);
  const refused = app.store.db.writesRefused;
  const standby = app.standby;
  // A primary that does not answer is a failover's first sign, said in replication but no fault of this copy's.
  const degraded = standby !== null && (standby.halted !== null || standby.failing?.copy === true);
  const body = {
    status: app.starting ? 'starting' : degraded ? 'degraded' : 'ok',
    starting_reason: app.starting ? app.startingReason : null,
    version: app.version,
    database: refused ? 'refusing_writes' : 'ok',
    database_detail: refused ? `${refused.reason} (since ${formatTime(refused.since)})` : null,
    uptime_seconds: uptime,
    role: app.role,
    epoch: app.store.epoch.current(),
    fenced_by: app.fencedBy,
    replication_mode: app.settings.get('replication_mode'),
    sync_lapsed_since: app.replicas.lapsedSince === null ? null : formatTime(app.replicas.lapsedSince),
    replication: standby && replicationOf(standby, app.now()),
  };
  if (app.starting) return { status: 503, body, headers: { 'Retry-After': '1' } };
  if (degraded) return { status: 503, body, headers: { 'Retry-After': '5' } };
  return refused ? { status: 503, body, headers: { 'Retry-After': '30' } } : ok(body);
}

/** The master's role and epoch, and a standby's lag: what a watcher that promotes standbys goes by. */
function addReplicationGauges(app: App): void {
  const { registry } = app.metrics;
  const roles = ['primary', 'standby', 'fenced'] as const;
  registry.add(
    new Gauge('portplane_role', "This master's role: 1 for the one it has (as health says).", () =>
      roles.map((name) => ({ labels: { role: name }, value: app.role === name ? 1 : 0 })),
    ),
  );
  registry.add(
    new Gauge('portplane_epoch', 'The epoch this master holds: raised by each promotion of a standby.', () => [
      { value: app.store.epoch.current() },
    ]),
  );
  registry.add(
    new Gauge(
      'portplane_replication_lag_seconds',
      "A standby's: how far behind its primary its copy may be (0 while in step); none on a primary.",
      () => {
        const lag = app.standby?.lagSeconds(app.now());
        return lag === undefined || lag === null ? [] : [{ value: lag }];
      },
    ),
  );
  registry.add(
    new Gauge(
      'portplane_replication_sync_lapsed',
      "1 while writes are answered without a standby holding them though replication_mode is sync (health's " +
        'sync_lapsed_since), else 0.',
      () => [{ value: app.replicas.lapsedSince === null ? 0 : 1 }],
    ),
  );
}

/** How a standby's copy stands, as health shows it. */
function replicationOf(standby: Follower, now: number) {
  const position = standby.position();
  return {
    primary: standby.primary,
    position: position && `${position.generation}/${position.seq}`,
    lag_seconds: standby.lagSeconds(now),
    last_heard_at: standby.lastHeardAt === null ? null : formatTime(standby.lastHeardAt),
    seeds: standby.seeds,
    halted: standby.halted,
    error: standby.failing?.reason ?? null,
    failing_since: standby.failing ? formatTime(standby.failing.since) : null,
  };
}

/** The gauges read from the running master when it is scraped. */
export function addGauges(app: App): void {
  const { registry } = app.metrics;
  addReplicationGauges(app);
  registry.add(
    new Gauge('portplane_agents_connected', 'Nodes whose agent is linked now.', () => [
      { value: app.sync.connectedCount() },
    ]),
  );
  registry.add(
    new Gauge('portplane_nodes', 'Nodes by status, as the API and the dashboard show them.', () => {
      const by = app.store.nodes.countByStatus();
      return nodeStatuses.map((status) => ({ labels: { status }, value: by[status] ?? 0 }));
    }),
  );
  registry.add(
    new Gauge('portplane_rules', 'Forwarding rules by sync state.', () => {
      const by = app.store.rules.counts().by_sync_state;
      return syncStates.map((state) => ({ labels: { sync_state: state }, value: by[state] }));
    }),
  );
  registry.add(
    new Gauge('portplane_traffic_bytes', 'Bytes counted on the current rules, by direction.', () => {
      const totals = app.store.traffic.totals();
      return [
        { labels: { direction: 'in' }, value: totals.bytes_in },
        { labels: { direction: 'out' }, value: totals.bytes_out },
      ];
    }),
  );
  registry.add(
    new Gauge('portplane_alerts_firing', 'Alerts firing now (clearing ones included, not yet resolved).', () => [
      { value: app.store.alerts.firing() },
    ]),
  );
  registry.add(
    new Gauge('portplane_event_streams', 'GET /api/events streams open now.', () => [
      { value: app.events.gauges().streams },
    ]),
  );
  registry.add(
    new Gauge(
      'portplane_event_stream_buffered_bytes',
      'Bytes written to event streams that their clients have not read.',
      () => [{ value: app.events.gauges().bufferedBytes }],
    ),
  );
  registry.add(
    new Gauge('process_resident_memory_bytes', 'Resident memory of the master process.', () => [
      { value: process.memoryUsage().rss },
    ]),
  );
  registry.add(
    new Gauge('process_heap_used_bytes', 'JavaScript heap in use.', () => [{ value: process.memoryUsage().heapUsed }]),
  );
  addVitalsGauges(app);
}

/** Each node's vitals at its agent's last report, labelled with the node's id and name. */
function addVitalsGauges(app: App): void {
  // Every node's vitals, read and parsed once per scrape: the six gauges are rendered one after another, in one turn.
  let scrape: { id: number; name: string; vitals: Vitals }[] | null = null;
  const latest = () => {
    if (!scrape) {
      scrape = app.store.vitals.latest().map((row) => ({ ...row, vitals: JSON.parse(row.vitals) as Vitals }));
      queueMicrotask(() => (scrape = null));
    }
    return scrape;
  };
  const perNode = (read: (vitals: Vitals) => { labels?: Record<string, string>; value: number | null }[]) => () =>
    latest().flatMap(({ id, name, vitals }) =>
      read(vitals)
        .filter((sample): sample is { labels?: Record<string, string>; value: number } => sample.value !== null)
        .map(({ labels, value }) => ({ labels: { node_id: String(id), node: name, ...labels }, value })),
    );
  const gauges: [string, string, (vitals: Vitals) => { labels?: Record<string, string>; value: number | null }[]][] = [
    ['portplane_node_cpu_percent', 'CPU in use on the node, of all its CPUs.', (v) => [{ value: v.cpu_percent }]],
    ['portplane_node_load1', "The node's 1 minute load average.", (v) => [{ value: v.load[0] ?? null }]],
    ['portplane_node_memory_total_bytes', "The node's memory.", (v) => [{ value: v.memory.total_bytes }]],
    [
      'portplane_node_memory_available_bytes',
      "The node's memory available to programs.",
      (v) => [{ value: v.memory.available_bytes }],
    ],
    [
      'portplane_node_network_bytes',
      "Bytes through each of the node's interfaces since it booted, by direction.",
      (v) =>
        v.interfaces.flatMap((i) => [
          { labels: { interface: i.name, direction: 'rx' }, value: i.rx_bytes },
          { labels: { interface: i.name, direction: 'tx' }, value: i.tx_bytes },
        ]),
    ],
    [
      'portplane_node_agent_uptime_seconds',
      "How long the node's agent has run.",
      (v) => [{ value: v.agent.uptime_seconds }],
    ],
  ];
  for (const [name, help, read] of gauges) app.metrics.registry.add(new Gauge(name, help, perNode(read)));
}

function metrics(ctx: Ctx<undefined, {}>): Reply {
  return {
    status: 200,
    raw: ctx.app.metrics.registry.render(),
    headers: { 'Content-Type': METRICS_TYPE },
  };
}

export const healthOperations = operations({
  getHealth: operation({
    summary: 'Whether the master serves and its database answers',
    description:
      'Public, for a load balancer, a monitor or a script waiting for a master it started: 200 with the version ' +
      'and uptime once it serves everything; 503 with status starting (and Retry-After) before that, 503 with ' +
      'database refusing_writes while the disk is full (reads go on, writes answer 507), and 503 while it shuts ' +
      'down or if the database does not answer. Every other route answers 503 (unavailable) while the master ' +
      'starts.',
    responses: {
      200: { description: 'Healthy', schema: healthSchema },
      503: {
        description:
          'Starting (this document, status starting), writes refused on a full disk (this document, database ' +
          'refusing_writes), a standby whose copy does not follow (this document, status degraded), or shutting ' +
          'down or the database does not answer (a problem)',
        schema: healthSchema,
      },
    },
    answersWhileStarting: true,
    handler: health,
  }),
  getMetrics: operation({
    summary: 'Metrics in the Prometheus text format 0.0.4',
    description:
      'Requests and their latency by route, method and status; database commits (with their fsync) ' +
      "and their time; the master's role and epoch, a standby's lag, and a sync primary's lapse; agents connected; " +
      'nodes by status; live writes refused after waiting behind bulk work; rules by sync state; traffic totals; ' +
      'login failures; process memory.',
    responses: { 200: { description: 'The metrics', mediaType: METRICS_TYPE, schema: describe({ type: 'string' }) } },
    handler: metrics,
  }),
});
