// The store: one database and the SQL of each resource, opened together.

import { PlanStore } from './plans.ts';
import { chmodSync, closeSync, existsSync, mkdirSync, openSync, readdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { AlertRuleStore, AlertStore, ChannelStore, DeliveryStore, SilenceStore } from './alerts.ts';
import { AuditStore } from './audit.ts';
import { BundleStore } from './bundles.ts';
import { RolloutStore } from './rollouts.ts';
import { ChangeSession, EpochStore, markOwn } from './replication.ts';
import { ConditionStore } from './conditions.ts';
import type { ConnectionOptions, Derivations } from './connection.ts';
import { Database } from './database.ts';
import { dropTriggers, installDerived } from './derived.ts';
import { EventStore } from './events.ts';
import { IdempotencyStore } from './idempotency.ts';
import { lockDataDir, type DataDirLock } from './lock.ts';
import { NodeStore, type Presence } from './nodes.ts';
import { RuleStore } from './rules.ts';
import { SettingsStore } from './settings.ts';
import { TokenStore } from './tokens.ts';
import { TrafficStore } from './traffic.ts';
import { TunnelStore } from './tunnels.ts';
import { UserStore } from './users.ts';
import { VitalsStore } from './vitals.ts';
import { TunnelPathStore } from './tunnel-paths.ts';
import { TotpStore } from './totp.ts';
import { IdentityStore } from './identities.ts';
import { PasskeyStore } from './passkeys.ts';
import { Generation } from './page.ts';

export interface StoreOptions {
  /**
   * The names of fields that hold secrets (see SECRET_FIELDS), redacted in
   * whatever the store keeps of what a request gave: the audit log's changes, an Idempotency-Key's replay.
   */
  secretFields: ReadonlySet<string>;
  /** The data dir's lock, released when the store closes. */
  lock?: DataDirLock | null;
  /** The agent links, when this is the serving master's store: what nodes' status is rendered from. */
  presence?: Presence;
  /** The master's clock, as stored, for what triggers write (see Database); by default the system's. */
  time?: () => string;
  /** A standby's copy (see replication.ts): opened as it is, never migrated; its schema must be this master's. */
  copy?: boolean;
}

export class Store {
  readonly credentials = new Generation();
  readonly users: UserStore;
  readonly tokens: TokenStore;
  readonly audit: AuditStore;
  readonly settings: SettingsStore;
  readonly idempotency: IdempotencyStore;
  readonly nodes: NodeStore;
  readonly rules: RuleStore;
  readonly tunnels: TunnelStore;
  readonly traffic: TrafficStore;
  readonly events: EventStore;
  readonly vitals: VitalsStore;
  readonly tunnelPaths: TunnelPathStore;
  readonly totp: TotpStore;
  readonly identities: IdentityStore;
  readonly passkeys: PasskeyStore;
  readonly channels: ChannelStore;
  readonly alertRules: AlertRuleStore;
  readonly alerts: AlertStore;
  readonly deliveries: DeliveryStore;
  readonly silences: SilenceStore;
  readonly conditions: ConditionStore;
  readonly bundles: BundleStore;
  readonly rollouts: RolloutStore;
  readonly epoch: EpochStore;
  readonly plans: PlanStore;

  readonly secretFields: ReadonlySet<string>;
  private readonly lock: DataDirLock | null;

  constructor(
    readonly db: Database,
    options: StoreOptions,
  ) {
    this.secretFields = options.secretFields;
    this.lock = options.lock ?? null;
    this.users = new UserStore(db, this.credentials);
    this.tokens = new TokenStore(db, this.credentials);
    this.audit = new AuditStore(db, this.secretFields);
    this.settings = new SettingsStore(db);
    this.idempotency = new IdempotencyStore(db);
    this.nodes = new NodeStore(db, options.presence);
    this.rules = new RuleStore(db);
    this.tunnels = new TunnelStore(db);
    this.traffic = new TrafficStore(db);
    this.events = new EventStore(db);
    this.vitals = new VitalsStore(db);
    this.tunnelPaths = new TunnelPathStore(db);
    this.totp = new TotpStore(db);
    this.identities = new IdentityStore(db);
    this.passkeys = new PasskeyStore(db);
    this.channels = new ChannelStore(db);
    this.alertRules = new AlertRuleStore(db);
    this.alerts = new AlertStore(db);
    this.deliveries = new DeliveryStore(db);
    this.silences = new SilenceStore(db);
    this.conditions = new ConditionStore(db);
    this.bundles = new BundleStore(db);
    this.rollouts = new RolloutStore(db);
    this.epoch = new EpochStore(db);
    this.plans = new PlanStore(db);
  }

  /** See `Database.write`: synchronous, all-or-nothing, durable once `committed()` resolves. */
  write<T>(fn: () => T): T {
    return this.db.write(fn);
  }

  committed(): Promise<void> {
    return this.db.committed();
  }

  pendingCommit(): Promise<void> | null {
    return this.db.pendingCommit();
  }

  close(): void {
    this.db.close();
    this.lock?.release();
  }

  /**
   * A standby's copy becomes the primary's database: what triggers keep is installed again and rebuilt, and it stands
   * in its own record of changes from now on (see markOwn).
   */
  takeOver(): void {
    this.db.takeOver(markOwn);
  }

  /** On a worker's connection: records what its job commits, for standbys (see Database.recordJob). */
  recordJob(): ChangeSession {
    return this.db.recordJob((db) => new ChangeSession(db));
  }
}

/** What triggers keep, as every connection of the master installs it (see derived.ts). */
const derived: Derivations = { install: (db) => installDerived(db), drop: dropTriggers };

/** The database at `path`, opened with what triggers keep (see Database). */
export function openDatabase(path: string, options: Partial<ConnectionOptions> = {}): Database {
  return new Database(path, derived, options);
}

/**
 * Makes `dir` and its missing parents one by one. (A recursive mkdir under /proc loops
 * forever in some Node.js versions; this fails at once with the reason.)
 */
function makeDir(dir: string): void {
  const parent = dirname(dir);
  if (parent !== dir && !existsSync(parent)) makeDir(parent);
  try {
    mkdirSync(dir, { mode: 0o700 });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
  }
  if (!statSync(dir).isDirectory()) throw new Error(`${dir} is not a directory`);
}

/**
 * Makes `dir` (and every folder in it) 0700 and every file in it 0600, whatever they were:
 * the data dir holds the fleet's credentials, and an older install or a copied backup may
 * have left it readable.
 */
export function secureDataDir(dir: string): void {
  makeDir(dir);
  chmodSync(dir, 0o700);
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) secureDataDir(path);
    else if (entry.isFile()) chmodSync(path, 0o600);
  }
}

/**
 * Opens the database in `dataDir`, securing the dir first. SQLite gives its -wal and -shm files the database file's
 * mode.
 */
export function openStore(dataDir: string, options: Omit<StoreOptions, 'lock'>): Store {
  secureDataDir(dataDir);
  const lock = lockDataDir(dataDir);
  try {
    const path = join(dataDir, 'master.db');
    closeSync(openSync(path, 'a', 0o600));
    return new Store(openDatabase(path, { time: options.time, migrate: !options.copy }), { ...options, lock });
  } catch (error) {
    lock.release();
    throw error;
  }
}
