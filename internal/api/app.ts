// The services a request may use, and how a bearer secret becomes a caller.

import { WriteBudget } from '../auth/budget.ts';
import type { SecretBox } from '../crypto/box.ts';
import { intersect, type Scope } from '../auth/scopes.ts';
import type { Role } from '../store/users.ts';
import { hashSecret, secretKind } from '../auth/secrets.ts';
import { StandbySessions } from '../auth/standby-sessions.ts';
import { LoginThrottle } from '../auth/throttle.ts';
import { DomainError } from '../errors/errors.ts';
import { formatTime } from '../schema/schema.ts';
import { viewLicense, type LicenseView, type Verified } from '../license/license.ts';
import type { Logger } from '../log/log.ts';
import type { Settings } from '../settings/settings.ts';
import type { Actor } from '../store/audit.ts';
import type { Store } from '../store/store.ts';
import type { TokenKind } from '../store/tokens.ts';
import type { SyncHub } from '../sync/hub.ts';
import type { Installer } from '../install/installer.ts';
import type { Clock } from '../runtime/clock.ts';
import { Outbox } from '../service/outbox.ts';
import type { KeyObject } from 'node:crypto';
import { PrimaryReplication } from '../replication/primary.ts';
import type { Follower } from '../replication/follower.ts';
import { singleFlight } from '../runtime/single-flight.ts';
import { backupDataDir } from '../backup/backup.ts';
import { PROMOTE } from './replication.ts';
import type { Lifecycle } from '../runtime/lifecycle.ts';
import type { MasterMetrics } from '../metrics/metrics.ts';
import type { TlsIdentity } from '../tls/identity.ts';
import type { BatchJob } from '../service/batch.ts';
import type { EventStreams } from './streams.ts';
import type { TargetPolicy } from '../domain/rules.ts';
import type { ImportJob } from '../service/transfer.ts';
import type { JobCommitted } from '../service/write.ts';

export interface Principal {
  tokenId: number;
  kind: TokenKind;
  tokenName: string;
  userId: number;
  username: string;
  /** The user's: a tenant reaches only routes that follow ownership (see `tenants` on an operation). */
  role: Role;
  /** A tenant's plan (null: none, which grants nothing). */
  planId: number | null;
  /** The token's scopes as far as its owner still holds them. */
  scopes: Scope[];
  expiresAt: string | null;
}

interface VerifiedCredential {
  principal: Principal;
  expiresAtMs: number | null;
  /** When the user's account ends (a tenant's), and the credential with it. */
  accountEndsAt: string | null;
  lastUsedMs: number | null;
}

/** Whether an account that ends at `endsAt` (null: never) has ended at `nowMs`. */
function ended(endsAt: string | null, nowMs: number): boolean {
  return endsAt !== null && Date.parse(endsAt) <= nowMs;
}

const MAX_VERIFIED = 10_000;

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
  exporter: (exportedAt: string) => Promise<Uint8Array>;
  /** The open GET /api/events streams. */
  events: EventStreams;
  /** The release keys (public halves) agent bundles must be signed with; none: bundles are refused. */
  releaseKeys: KeyObject[];
  /** The follower of the primary this master is a standby of; null for a primary. */
  standby: Follower | null;
  /** Makes a standby serve as the primary (its follower stopped, its copy whole again, its clocks started). */
  becomePrimary: () => void;
}

export class App {
  readonly throttle: LoginThrottle;
  readonly budget: WriteBudget;
  /** `token:key` of POSTs with an Idempotency-Key that are still being answered. */
  readonly idempotencyInFlight = new Set<string>();
  private readonly verified = new Map<string, VerifiedCredential>();
  private verifiedGeneration = -1;
  /** A standby's own login sessions (its copy takes no write); none on a primary. */
  readonly standbySessions = new StandbySessions();

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
  readonly exporter: (exportedAt: string) => Promise<Uint8Array>;
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
  /**
   * The primary that took over from this one, as its agents said: its epoch, and its address if they named it. Null:
   * this master serves writes.
   */
  fencedBy: { epoch: number; primary: string | null } | null = null;
  private readonly lifecycle: Lifecycle;
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
    this.startedAt = this.clock.now();
    this.outbox = new Outbox(this, (outcome) => this.metrics.deliveries.inc({ outcome }));
    this.throttle = new LoginThrottle(this.clock.now);
    this.budget = new WriteBudget(this.clock.now);
    this.replicas = new PrimaryReplication({
      db: this.store.db,
      settings: this.settings,
      log: this.log,
      now: () => this.now(),
    });
  }

  /**
   * Throws `read_only` for what a standby leaves to its primary (writes but its promotion, and following it), and for
   * every write of a primary that another took over from.
   */
  refuseOnStandby(method: string, path: string): void {
    const primary = this.standby?.primary;
    if (primary && !STANDBY_WRITES.has(path) && (method !== 'GET' || path.startsWith('/api/replication/')))
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
  }

  /** Another primary took over from this one (see AgentLinks): it writes nothing more. */
  fence(epoch: number, primary: string | null): void {
    if (this.fencedBy === null)
      this.log.error('fenced: a newer primary took over; this master refuses writes', { epoch, primary });
    this.fencedBy = { epoch, primary };
  }

  /** What this master is now: a standby of a primary, a primary another took over from (fenced), or the primary. */
  get role(): 'primary' | 'standby' | 'fenced' {
    return this.standby ? 'standby' : this.fencedBy !== null ? 'fenced' : 'primary';
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
    return this.localPolicy('allow_local_rule_targets');
  }

  /** Where alert channels may send now (allow_local_channel_targets, and where the master is). */
  channelPolicy(): TargetPolicy {
    return this.localPolicy('allow_local_channel_targets');
  }

  private localPolicy(setting: 'allow_local_rule_targets' | 'allow_local_channel_targets'): TargetPolicy {
    const masterUrl = this.settings.get('install_master_url');
    return {
      allowLocal: this.settings.get(setting) === 1,
      masterHosts: masterUrl ? [new URL(masterUrl).hostname.replace(/^\[|\]$/g, '')] : [],
    };
  }

  /**
   * Turns an Authorization header into a caller. Throws `unauthorized`. Verified credentials
   * are cached by secret until anything that could revoke or narrow one changes (see
   * Store.credentials), so most requests skip the lookup and the hash.
   */
  authenticate(header: string | undefined): Principal {
    const match = header && /^Bearer +([^ ]+) *$/i.exec(header);
    if (!match) throw new DomainError('unauthorized', 'send Authorization: Bearer <token>');
    const secret = match[1]!;
    const generation = this.store.credentials.value;
    if (this.verifiedGeneration !== generation) {
      this.verified.clear();
      this.verifiedGeneration = generation;
    }
    const entry = this.verified.get(secret) ?? this.lookup(secret);
    if (entry === null) return this.standbySession(secret);
    const now = this.now();
    if (entry.expiresAtMs !== null && entry.expiresAtMs <= now) {
      const detail = `the token expired at ${entry.principal.expiresAt}`;
      throw new DomainError('unauthorized', detail, { invalidToken: true });
    }
    if (ended(entry.accountEndsAt, now)) {
      const detail = `the account expired at ${entry.accountEndsAt}: ask an operator to extend it`;
      throw new DomainError('unauthorized', detail, { invalidToken: true });
    }
    // Last use is recorded at most once a minute so that reads do not all become writes; a standby writes nothing.
    if (!this.standby && (entry.lastUsedMs === null || entry.lastUsedMs < now - 60_000)) {
      const at = this.timestamp();
      this.store.db.whenWritable(() => this.store.write(() => this.store.tokens.touch(entry.principal.tokenId, at)));
      entry.lastUsedMs = now;
    }
    return entry.principal;
  }

  /**
   * The caller `principal` as it stands now, for what outlives the request that authenticated it (an event stream):
   * null once its token is revoked, expired or logged out, or its user disabled or deleted; else with the scopes it
   * holds now (its user's may have narrowed).
   */
  reauthorize(principal: Principal): Principal | null {
    if (principal.tokenId < 0) return this.standbyPrincipal(principal.tokenId);
    const credential = this.store.tokens.findCredential(principal.tokenId, principal.kind);
    if (!credential || credential.user_disabled || credential.created_by.id !== principal.userId) return null;
    if (credential.expires_at !== null && Date.parse(credential.expires_at) <= this.now()) return null;
    if (ended(credential.user_expires_at, this.now())) return null;
    return {
      ...principal,
      role: credential.user_role,
      planId: credential.user_plan_id,
      scopes: intersect(credential.user_scopes, credential.scopes),
      expiresAt: credential.expires_at,
    };
  }

  /** The credential `secret` is, cached; null for a session a standby may hold (see standbySession). */
  private lookup(secret: string): VerifiedCredential | null {
    const kind = secretKind(secret);
    if (kind !== 'api' && kind !== 'session') throw refused();
    const credential = this.store.tokens.findBySecretHash(hashSecret(secret));
    if (!credential && kind === 'session' && this.standby) return null;
    if (!credential || credential.kind !== kind || credential.user_disabled) throw refused();
    const entry: VerifiedCredential = {
      principal: {
        tokenId: credential.id,
        kind: credential.kind,
        tokenName: credential.name,
        userId: credential.created_by.id,
        username: credential.created_by.username,
        role: credential.user_role,
        planId: credential.user_plan_id,
        scopes: intersect(credential.user_scopes, credential.scopes),
        expiresAt: credential.expires_at,
      },
      expiresAtMs: credential.expires_at === null ? null : Date.parse(credential.expires_at),
      accountEndsAt: credential.user_expires_at,
      lastUsedMs: credential.last_used_at === null ? null : Date.parse(credential.last_used_at),
    };
    if (this.verified.size >= MAX_VERIFIED) this.verified.clear();
    this.verified.set(secret, entry);
    return entry;
  }

  /**
   * The caller of a standby's own login session (see StandbySessions), looked up at each request rather than cached:
   * one logged out, or whose user the primary disabled or gave a new password, is refused at once. Throws
   * `unauthorized`.
   */
  private standbySession(secret: string): Principal {
    const session = this.standbySessions.find(secret);
    const principal = session && this.standbyPrincipal(session.id);
    if (!principal) throw refused();
    return principal;
  }

  private standbyPrincipal(id: number): Principal | null {
    const session = this.standbySessions.get(id);
    if (!session || session.expiresAtMs <= this.now()) return null;
    const user = this.store.users.findByIdWithHash(session.userId);
    // A password changed at the primary ends the user's other sessions there, and every one here.
    if (!user || user.disabled || user.password_hash !== session.passwordHash) return null;
    if (ended(user.expires_at, this.now())) return null;
    return {
      tokenId: session.id,
      kind: 'session',
      tokenName: 'login',
      userId: user.id,
      username: user.username,
      role: user.role,
      planId: user.plan_id,
      scopes: user.scopes,
      expiresAt: formatTime(session.expiresAtMs),
    };
  }
}

/** What a standby does though it writes nothing: its promotion, and its own login sessions (see StandbySessions). */
const STANDBY_WRITES = new Set([PROMOTE, '/api/auth/login', '/api/auth/logout']);

const refused = () => new DomainError('unauthorized', 'the token is unknown or revoked', { invalidToken: true });

export function actorOf(principal: Principal | null, ip: string, requestId: string): Actor {
  if (!principal)
    return { actor_type: 'anonymous', actor_id: null, actor_name: 'anonymous', ip, request_id: requestId };
  return principal.kind === 'session'
    ? { actor_type: 'user', actor_id: principal.userId, actor_name: principal.username, ip, request_id: requestId }
    : { actor_type: 'token', actor_id: principal.tokenId, actor_name: principal.username, ip, request_id: requestId };
}
