// The services a request may use.

import { WriteBudget } from '../auth/budget.ts';
import type { SecretBox } from '../crypto/box.ts';
import { StandbySessions } from '../auth/standby-sessions.ts';
import { ProviderSignIns } from '../oidc/sign-ins.ts';
import { Challenges } from '../auth/challenges.ts';
import type { HandedOff } from '../service/provider-sign-in.ts';
import { Callers } from './callers.ts';
import type { Principal } from '../auth/principal.ts';
import type { Actor } from '../store/audit.ts';
import { LoginThrottle } from '../auth/throttle.ts';
import { DomainError } from '../errors/errors.ts';
import { viewLicense, type LicenseView, type Verified } from '../license/license.ts';
import type { Logger } from '../log/log.ts';
import { localPolicy, type Settings } from '../settings/settings.ts';
import type { Store } from '../store/store.ts';
import type { SyncHub } from '../sync/hub.ts';
import type { Installer } from '../install/installer.ts';
import type { Clock } from '../runtime/clock.ts';
import { Outbox } from '../service/outbox.ts';
import type { KeyObject } from 'node:crypto';
import { PrimaryReplication, type StandbyChoice } from '../replication/primary.ts';
import type { Follower } from '../replication/follower.ts';
import { singleFlight } from '../runtime/single-flight.ts';
import { backupDataDir } from '../backup/backup.ts';
import type { Lifecycle } from '../runtime/lifecycle.ts';
import type { MasterMetrics } from '../metrics/metrics.ts';
import type { TlsIdentity } from '../tls/identity.ts';
import type { BatchJob } from '../service/batch.ts';
import type { EventStreams } from './streams.ts';
import type { TargetPolicy } from '../domain/rules.ts';
import type { ImportJob } from '../service/transfer.ts';
import type { Exporter } from '../service/node-export.ts';
import type { JobCommitted } from '../service/write.ts';

/** What the API's handlers may use: assembled by cmd/master. */
export interface AppParts {
  store: Store;
  log: Logger;
  license: Verified;
  box: SecretBox;
  /** The certificate the master serves, when it serves HTTPS itself. */
  tls: TlsIdentity | null;
  /** The operator chose plain HTTP off loopback (--insecure-http); agents may then dial it so too. */
  insecureHttp: boolean;
  dataDir: string;
  version: string;
  clock: Clock;
  settings: Settings;
  sync: SyncHub;
  installer: Installer;
  lifecycle: Lifecycle;
  metrics: MasterMetrics;
  /** Runs an import off the event loop, on a connection of its own (cmd/master starts a worker thread). */
  importer: (job: ImportJob) => Promise<JobCommitted>;
  /** Runs a batch that creates, updates or deletes the same way (cmd/master keeps a worker thread for them). */
  batcher: (job: BatchJob) => Promise<JobCommitted>;
  /** The export document as JSON (see transfer.exportJson), made off the event loop (cmd/master: a worker thread). */
  exporter: Exporter;
  /** The open GET /api/events streams. */
  events: EventStreams;
  /** The release keys (public halves) agent bundles must be signed with; none: bundles are refused. */
  releaseKeys: KeyObject[];
  /** The follower of the primary this master is a standby of; null for a primary. */
  standby: Follower | null;
  /** Makes a standby serve as the primary (its follower stopped, its copy whole again, its clocks started). */
  becomePrimary: () => void;
  /** Masters elected through etcd: this one's part in the election; null for a master promoted by hand. */
  leadership?: Leadership | null;
}

/** A master's part in an election (see election/election.ts), as the API needs it. */
export interface Leadership extends StandbyChoice {
  /** Whether this master leads and is sure it still does: only then does it take writes. */
  holds(): boolean;
}

export class App {
  readonly throttle: LoginThrottle;
  readonly budget: WriteBudget;
  /** `token:key` of POSTs with an Idempotency-Key that are still being answered. */
  readonly idempotencyInFlight = new Set<string>();
  private readonly callers: Callers;
  /** A standby's own login sessions (its copy takes no write); none on a primary. */
  readonly standbySessions = new StandbySessions();
  /** Sign-ins by the identity provider in flight, and the provider (see oidc/sign-ins.ts). */
  readonly providerSignIns: ProviderSignIns<HandedOff>;
  /** WebAuthn challenges outstanding (see auth/challenges.ts). */
  readonly challenges: Challenges;

  readonly store: Store;
  readonly log: Logger;
  readonly license: Verified;
  readonly box: SecretBox;
  readonly tls: TlsIdentity | null;
  readonly insecureHttp: boolean;
  readonly version: string;
  readonly dataDir: string;
  readonly clock: Clock;
  readonly settings: Settings;
  readonly sync: SyncHub;
  readonly installer: Installer;
  readonly metrics: MasterMetrics;
  readonly importer: (job: ImportJob) => Promise<JobCommitted>;
  readonly batcher: (job: BatchJob) => Promise<JobCommitted>;
  readonly exporter: Exporter;
  /** When this master started, for its uptime. */
  readonly startedAt: number;
  /** The open GET /api/events streams. */
  readonly events: EventStreams;
  /** Where notifications are sent from. */
  readonly outbox: Outbox;
  readonly releaseKeys: KeyObject[];
  /** The follower of the primary this master is a standby of; null for a primary (and once promoted). */
  standby: Follower | null;
  private readonly becomePrimary: () => void;
  /** This master's part in an election through etcd; null for one promoted by hand. */
  readonly leadership: Leadership | null;
  /**
   * The primary that took over from this one, as its agents said: its epoch, and its address if they named it. Null:
   * this master serves writes.
   */
  fencedBy: { epoch: number; primary: string | null } | null = null;
  private readonly lifecycle: Lifecycle;
  /** Why a master that starts does not serve yet, when it waits for something (its peers); null otherwise. */
  startingReason: string | null = null;
  /** The primary's side of replication: what standbys follow. */
  readonly replicas: PrimaryReplication;

  /** The data dir's backup archive; one at a time (see singleFlight). */
  readonly archive = singleFlight(() => backupDataDir(this.dataDir, new Date(this.now())));

  constructor(parts: AppParts) {
    ({
      store: this.store,
      log: this.log,
      license: this.license,
      box: this.box,
      tls: this.tls,
      insecureHttp: this.insecureHttp,
      dataDir: this.dataDir,
      version: this.version,
      clock: this.clock,
      settings: this.settings,
      sync: this.sync,
      installer: this.installer,
      lifecycle: this.lifecycle,
      metrics: this.metrics,
      importer: this.importer,
      batcher: this.batcher,
      exporter: this.exporter,
      events: this.events,
      releaseKeys: this.releaseKeys,
      standby: this.standby,
      becomePrimary: this.becomePrimary,
    } = parts);
    this.leadership = parts.leadership ?? null;
    this.startedAt = this.clock.now();
    this.outbox = new Outbox(this, (outcome) => this.metrics.deliveries.inc({ outcome }));
    this.throttle = new LoginThrottle(this.clock.now);
    this.providerSignIns = new ProviderSignIns(this.clock.now);
    this.challenges = new Challenges(this.clock.now);
    this.callers = new Callers({
      store: this.store,
      sessions: this.standbySessions,
      clock: this.clock,
      writes: () => this.standby === null,
    });
    this.budget = new WriteBudget(this.clock.now);
    this.replicas = new PrimaryReplication({
      db: this.store.db,
      settings: this.settings,
      log: this.log,
      now: () => this.now(),
      choice: this.leadership ?? undefined,
    });
  }

  /**
   * Throws `read_only` for what a standby leaves to its primary (writes, unless a route's `standby` says it serves
   * them, and the reads it says a standby refuses), and for every write of a primary that another took over from.
   */
  refuseOnStandby(method: string, standby?: 'serves' | 'refuses'): void {
    const primary = this.standby?.primary;
    if (primary && (standby === 'refuses' || (standby !== 'serves' && method !== 'GET')))
      throw new DomainError('read_only', `this master is a standby of ${primary}: ask it`, { data: { primary } });
    const fenced = this.fencedBy;
    if (fenced !== null && method !== 'GET') {
      const where = fenced.primary ? ` at ${fenced.primary}` : '';
      throw new DomainError(
        'read_only',
        `a standby promoted to the primary of epoch ${fenced.epoch}${where} took over from this master: write ` +
          'there, and make this one its standby (--follow)',
        fenced.primary ? { data: { primary: fenced.primary } } : {},
      );
    }
    if (this.leaderless && method !== 'GET')
      throw new DomainError(
        'read_only',
        'this master cannot be sure in etcd that it still leads (its lease could not be renewed): it takes no write ' +
          'until it can, or follows the master elected in its place',
      );
  }

  /** An elected primary that cannot be sure it still leads: it takes no write meanwhile. */
  get leaderless(): boolean {
    return this.standby === null && this.leadership !== null && !this.leadership.holds();
  }

  /** Whether this master takes writes and runs its clocks: a primary that no other took over from. */
  get serving(): boolean {
    return this.standby === null && this.fencedBy === null && !this.leaderless;
  }

  /** Another primary took over from this one (see AgentLinks): it writes nothing more. */
  fence(epoch: number, primary: string | null): void {
    const was = this.fencedBy;
    if (was === null)
      this.log.error('fenced: a newer primary took over; this master refuses writes', { epoch, primary });
    if (was !== null && (epoch < was.epoch || (epoch === was.epoch && was.primary !== null))) return;
    this.fencedBy = { epoch, primary };
    // Kept in the database too: started again as it was, it is fenced from the start, whoever answers then. An import
    // or a batch holding writes keeps it waiting, not from being kept.
    const at = this.timestamp();
    this.store.db.whenWritable(() => {
      try {
        this.store.write(() => this.store.epoch.fence(epoch, primary, at));
      } catch (error) {
        this.log.error('recording the fence failed: it holds until this master stops', {
          error: (error as Error).message,
        });
      }
    });
    if (was === null) this.onFenced();
  }

  /** Told once, when this master is first fenced: its agents' links are cut, for them to find the newer primary. */
  onFenced: () => void = () => {};

  /** What this master is now: a standby of a primary, a primary another took over from (fenced), or the primary. */
  get role(): 'primary' | 'standby' | 'fenced' {
    return this.standby ? 'standby' : this.fencedBy !== null || this.leaderless ? 'fenced' : 'primary';
  }

  /** A standby becomes the primary; its writes are the caller's to make. Throws `conflict` on a primary. */
  promote(): void {
    if (!this.standby) throw new DomainError('conflict', 'this master is the primary already');
    this.becomePrimary();
    this.standby = null;
    this.standbySessions.clear();
  }

  get starting(): boolean {
    return this.lifecycle.starting;
  }

  get draining(): boolean {
    return this.lifecycle.draining;
  }

  set draining(value: boolean) {
    this.lifecycle.draining = value;
  }

  now(): number {
    return this.clock.now();
  }

  /** The current time as an RFC 3339 string, as stored in the database. */
  timestamp(offsetMs = 0): string {
    return this.clock.timestamp(offsetMs);
  }

  licenseView(): LicenseView {
    return viewLicense(this.license, this.now());
  }

  /** Which targets operators' rules may have now (allow_local_rule_targets, and where the master is). */
  targetPolicy(): TargetPolicy {
    return localPolicy(this.settings, 'allow_local_rule_targets');
  }

  /** Where alert channels may send now (allow_local_channel_targets, and where the master is). */
  channelPolicy(): TargetPolicy {
    return localPolicy(this.settings, 'allow_local_channel_targets');
  }

  /** Turns an Authorization header into a caller (see Callers). Throws `unauthorized`. */
  authenticate(header: string | undefined): Principal {
    return this.callers.authenticate(header);
  }

  /** The caller `principal` as it stands now, or null (see Callers). */
  reauthorize(principal: Principal): Principal | null {
    return this.callers.reauthorize(principal);
  }
}

/** How the audit log names `principal` (null: nobody authenticated). */
export function actorOf(principal: Principal | null, ip: string, requestId: string): Actor {
  if (!principal)
    return { actor_type: 'anonymous', actor_id: null, actor_name: 'anonymous', ip, request_id: requestId };
  return principal.kind === 'session'
    ? { actor_type: 'user', actor_id: principal.userId, actor_name: principal.username, ip, request_id: requestId }
    : { actor_type: 'token', actor_id: principal.tokenId, actor_name: principal.username, ip, request_id: requestId };
}
