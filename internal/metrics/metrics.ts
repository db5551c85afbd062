// Counters, gauges and histograms with labels, written in the Prometheus text exposition
// format 0.0.4. Small on purpose: what the master measures, nothing more.

type Labels = Record<string, string>;

function escapeValue(value: string): string {
  return value.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
}

function labelText(labels: Labels): string {
  const entries = Object.entries(labels);
  return entries.length === 0 ? '' : `{${entries.map(([k, v]) => `${k}="${escapeValue(v)}"`).join(',')}}`;
}

function number(value: number): string {
  return value === Infinity ? '+Inf' : Number.isInteger(value) ? String(value) : value.toPrecision(6);
}

interface Family {
  name: string;
  help: string;
  type: 'counter' | 'gauge' | 'histogram';
  render(): string[];
}

export class Counter implements Family {
  readonly type = 'counter';
  private readonly values = new Map<string, { labels: Labels; value: number }>();

  constructor(
    readonly name: string,
    readonly help: string,
  ) {}

  inc(labels: Labels = {}, by = 1): void {
    this.series(labels).value += by;
  }

  /** The series of `labels`, to count on without finding it again (for hot paths). */
  series(labels: Labels): { value: number } {
    const key = labelText(labels);
    let entry = this.values.get(key);
    if (!entry) this.values.set(key, (entry = { labels, value: 0 }));
    return entry;
  }

  render(): string[] {
    return [...this.values.values()].map(({ labels, value }) => `${this.name}${labelText(labels)} ${number(value)}`);
  }
}

export class Histogram implements Family {
  readonly type = 'histogram';
  private readonly series = new Map<string, { labels: Labels; counts: number[]; sum: number; count: number }>();

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly buckets: readonly number[],
  ) {}

  observe(value: number, labels: Labels = {}): void {
    this.handle(labels)(value);
  }

  /** A function observing into the series of `labels`, found once (for hot paths). */
  handle(labels: Labels): (value: number) => void {
    const key = labelText(labels);
    let entry = this.series.get(key);
    if (!entry) this.series.set(key, (entry = { labels, counts: this.buckets.map(() => 0), sum: 0, count: 0 }));
    const series = entry;
    return (value) => {
      for (let i = 0; i < this.buckets.length; i++) if (value <= this.buckets[i]!) series.counts[i]! += 1;
      series.sum += value;
      series.count += 1;
    };
  }

  render(): string[] {
    return [...this.series.values()].flatMap(({ labels, counts, sum, count }) => [
      ...this.buckets.map((le, i) => `${this.name}_bucket${labelText({ ...labels, le: number(le) })} ${counts[i]}`),
      `${this.name}_bucket${labelText({ ...labels, le: '+Inf' })} ${count}`,
      `${this.name}_sum${labelText(labels)} ${number(sum)}`,
      `${this.name}_count${labelText(labels)} ${count}`,
    ]);
  }
}

/** A value read when the metrics are scraped. */
export class Gauge implements Family {
  readonly type = 'gauge';

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly read: () => { labels?: Labels; value: number }[],
  ) {}

  render(): string[] {
    return this.read().map(({ labels = {}, value }) => `${this.name}${labelText(labels)} ${number(value)}`);
  }
}

export class Registry {
  private readonly families: Family[] = [];

  add<F extends Family>(family: F): F {
    this.families.push(family);
    return family;
  }

  /** Every family, in text format 0.0.4. */
  render(): string {
    return this.families
      .flatMap((f) => [
        `# HELP ${f.name} ${f.help.replace(/\\/g, '\\\\').replace(/\n/g, '\\n')}`,
        `# TYPE ${f.name} ${f.type}`,
        ...f.render(),
      ])
      .join('\n')
      .concat('\n');
  }
}

/** Seconds, for latencies: from a millisecond to ten seconds. */
export const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10];

/** What the master counts as it runs; gauges are read from the app when scraped. */
export class MasterMetrics {
  readonly registry = new Registry();
  readonly requests = this.registry.add(
    new Counter('portplane_http_requests_total', 'HTTP requests answered, by route, method and status.'),
  );
  readonly latency = this.registry.add(
    new Histogram(
      'portplane_http_request_duration_seconds',
      'Time to answer an HTTP request, by route and method.',
      LATENCY_BUCKETS,
    ),
  );
  readonly commits = this.registry.add(
    new Histogram(
      'portplane_db_commit_duration_seconds',
      'Group commits of the database and their fsync, in seconds.',
      LATENCY_BUCKETS,
    ),
  );
  readonly writesRefusedBusy = this.registry.add(
    new Counter(
      'portplane_writes_refused_busy_total',
      'Live writes refused with 503 after waiting their bound behind an import or batch being written.',
    ),
  );
  readonly loginFailures = this.registry.add(
    new Counter('portplane_login_failures_total', 'Logins refused for a wrong password, user or state.'),
  );
  readonly kernelDrifts = this.registry.add(
    new Counter(
      'portplane_kernel_drifts_total',
      "Times something else removed or changed a node's kernel table, which its agent wrote back.",
    ),
  );
  readonly tunnelExitSwitches = this.registry.add(
    new Counter(
      'portplane_tunnel_exit_switches_total',
      "Moves of a tunnel entry's choice of exit, by the entry's reason (first_up, exit_down, lower_latency, " +
        'preferred_back).',
    ),
  );
  readonly deliveries = this.registry.add(
    new Counter(
      'portplane_notification_deliveries_total',
      'Attempts to deliver a notification to an alert channel, by outcome (sent, retry, failed).',
    ),
  );
  /** Per method, route and status: the request counter and latency series, found once. */
  private readonly requestSeries = new Map<string, { count: { value: number }; latency: (seconds: number) => void }>();

  constructor() {
    // Counters without labels are shown from the start, at 0: a scraper tells none from not exported.
    for (const counter of [this.writesRefusedBusy, this.loginFailures, this.kernelDrifts]) counter.series({});
  }

  /** Counts one answered request (route: the pattern that matched, so the series stay few). */
  request(method: string, route: string, status: number, seconds: number): void {
    const key = `${method} ${route} ${status}`;
    let series = this.requestSeries.get(key);
    if (!series) {
      const count = this.requests.series({ route, method, status: String(status) });
      series = { count, latency: this.latency.handle({ route, method }) };
      this.requestSeries.set(key, series);
    }
    series.count.value += 1;
    series.latency(seconds);
  }
}
