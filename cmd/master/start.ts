// Wires the master: opens the store, loads the license, binds the HTTP server (which answers
// 503 `starting` until the rest is done), bootstraps the first admin, then serves and marks
// itself ready. Returns a handle that closes it all in order.

import { pathSampler } from '../../internal/service/tunnel-paths.ts';
import { SYSTEM_ACTOR } from '../../internal/store/audit.ts';
import { createPublicKey, randomBytes, type KeyObject } from 'node:crypto';
import { agentBundle } from '../../internal/install/bundle.ts';
import { verifyBundle, type BundleSignature } from '../../internal/release/signature.ts';
import { addBundle } from '../../internal/service/bundles.ts';
import { theMaster } from '../../internal/service/master.ts';
import { transact } from '../../internal/service/write.ts';
import { join } from 'node:path';
import { AgentReports } from '../../internal/service/agent-reports.ts';
import { AgentLinks } from '../../internal/agentlink/server.ts';
import { refuse } from '../../internal/agentlink/handshake.ts';
import { DomainError } from '../../internal/errors/errors.ts';
import { Follower } from '../../internal/replication/follower.ts';
import { askPeers } from '../../internal/replication/peers.ts';
import { clearWaiting, markWaiting, servingAloneAsked } from '../../internal/runtime/serve-alone.ts';
import { singleFlight } from '../../internal/runtime/single-flight.ts';
import { App, type Leadership } from '../../internal/api/app.ts';
import { addGauges } from '../../internal/api/health.ts';
import { MasterMetrics } from '../../internal/metrics/metrics.ts';
import { Installer } from '../../internal/install/installer.ts';
import { Clock } from '../../internal/runtime/clock.ts';
import type { Lifecycle } from '../../internal/runtime/lifecycle.ts';
import { clearReady, markReady } from '../../internal/runtime/readiness.ts';
import { Settings, standbysOf } from '../../internal/settings/settings.ts';
import { SyncHub } from '../../internal/sync/hub.ts';
import { createDispatcher } from '../../internal/api/dispatch.ts';
import { EventStreams } from '../../internal/api/streams.ts';
import { consoleHandler } from '../../internal/console/console.ts';
import { routes } from '../../internal/api/routes.ts';
import { SECRET_FIELDS } from '../../internal/domain/secret-fields.ts';
import { tickRules } from '../../internal/service/rules.ts';
import { tickAccounts } from '../../internal/service/standing.ts';
import { evaluateAlerts } from '../../internal/service/alerting.ts';
import { advanceRollouts } from '../../internal/service/rollouts.ts';
import { checkProviderSessions } from '../../internal/service/provider-sign-in.ts';
import { refusedWritesWatch } from '../../internal/service/refused-alerts.ts';
import { licenseWatch } from '../../internal/service/license.ts';
import { hashPassword } from '../../internal/auth/secrets.ts';
import { SecretBox } from '../../internal/crypto/box.ts';
import { issueTunnelKeys } from '../../internal/tunnel/keys.ts';
import { listen, type Listening } from '../../internal/http/server.ts';
import { loadLicense } from '../../internal/license/license.ts';
import { VENDOR_PUBLIC_KEY_PEM } from '../../internal/license/vendor-key.ts';
import type { Logger } from '../../internal/log/log.ts';
import { DatabaseDamaged } from '../../internal/store/connection.ts';
import { openStore, type Store } from '../../internal/store/store.ts';
import { isLoopback } from '../../internal/schema/net.ts';
import { selfSignedFiles, TlsIdentity } from '../../internal/tls/identity.ts';
import { statePromotion } from '../../internal/tls/promotion.ts';
import { VERSION } from '../../internal/version.ts';
import { mkdirSync, readFileSync } from 'node:fs';
import type { Socket } from 'node:net';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { MasterConfig } from './config.ts';
import { batchesInWorker, checkpointInWorker, exportInWorker, importInWorker, type WorkerSetup } from './workers.ts';
import { countLegacyTraffic, maintain, rolledUp } from '../../internal/service/maintenance.ts';

/** What a master elected through etcd (see elected.ts) adds to its start. */
export interface StartOptions {
  /** Its part in the election: writes are taken only while it holds. */
  leadership?: Leadership;
  /** The name it gives the primary it follows (its --advertise address). */
  standbyName?: string;
  /** Runs once a primary's store is ready, before it serves: an elected leader records its epoch. */
  beforeServing?: (app: App) => Promise<void>;
  /** Gives up a start still seeding its copy (the leader it seeds from is gone). */
  signal?: AbortSignal;
  /** What the import, export and batch workers run in place of this program (see WorkerSetup). */
  workerProgram?: WorkerSetup['program'];
}

export interface Master {
  url: string;
  app: App;
  links: AgentLinks;
  /**
   * Takes a turn of the clock now, as each second does: what has come due is done (for a caller that moved the clock
   * and wants what follows at once, not within the second).
   */
  turn(): Promise<void>;
  /** Re-reads the TLS certificate and key (SIGHUP); new connections get them. */
  reloadTls(): void;
  close(): Promise<void>;
}

/** The identity to serve HTTPS with: given, made once in the data dir off loopback, or none (plain HTTP). */
export function tlsIdentityFor(config: MasterConfig): TlsIdentity | null {
  if (config.tls) return new TlsIdentity(config.tls);
  if (isLoopback(config.host) || config.insecureHttp) return null;
  return new TlsIdentity(selfSignedFiles(config.dataDir, config.host));
}

const MAINTENANCE_INTERVAL_MS = 60 * 60 * 1000;
/** How often a primary asks the masters its standby_masters lists whether one leads a later epoch. */
const PEER_WATCH_MS = 5000;

async function bootstrapAdmin(store: Store, log: Logger, password: string | null, now: string): Promise<void> {
  if (store.users.count() > 0) return;
  const chosen = password ?? randomBytes(18).toString('base64url');
  const passwordHash = await hashPassword(chosen);
  store.write(() => {
    const admin = store.users.insert(
      { username: 'admin', password_hash: passwordHash, scopes: ['*'], disabled: false },
      now,
    );
    store.audit.record(
      SYSTEM_ACTOR,
      {
        action: 'user.create',
        resource: 'user',
        resource_id: admin.id,
        status: 'success',
        changes: { after: { username: 'admin', scopes: ['*'] } },
      },
      now,
    );
  });
  if (password === null) {
    // The one time a secret is written out: the operator has no other way to learn it.
    log.info('created the first admin; this password is shown only now', { username: 'admin', password: chosen });
  } else {
    log.info('created the first admin with MASTER_ADMIN_PASSWORD', { username: 'admin' });
  }
}

/** Runs `fn`; a failure becomes one that says what could not be used and what to do about it. */
/** The agent bundle this master carries and the release's signature of it, once that verifies as this version. */
function signedOwnAgent(path: string, keys: readonly KeyObject[]): { bundle: Buffer; signature: BundleSignature } {
  const signature = JSON.parse(readFileSync(path, 'utf8')) as BundleSignature;
  const bundle = agentBundle();
  const version = verifyBundle(bundle, signature, keys);
  if (version !== VERSION) throw new Error(`it signs agent ${version}, and this master carries ${VERSION}`);
  return { bundle, signature };
}

function using<T>(what: string, remedy: string, fn: () => T): T {
  try {
    return fn();
  } catch (error) {
    throw new Error(`cannot use ${what}: ${(error as Error).message}; ${remedy}`, { cause: error });
  }
}

async function listening(config: MasterConfig, fn: () => Promise<Listening>): Promise<Listening> {
  try {
    return await fn();
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const where = `${config.host}:${config.port}`;
    if (code === 'EADDRINUSE')
      throw new Error(
        `cannot listen on ${where}: the address is in use; ` +
          'stop what holds it (another master?) or give --listen another port',
      );
    if (code === 'EACCES')
      throw new Error(`cannot listen on ${where}: not permitted; use a port above 1023 or grant CAP_NET_BIND_SERVICE`);
    if (code === 'EADDRNOTAVAIL')
      throw new Error(`cannot listen on ${where}: no such address on this machine; check --listen`);
    throw new Error(`cannot listen on ${where}: ${(error as Error).message}`);
  }
}

/** The store of the data dir, or why it cannot be used and what to do about it. */
function openData(config: MasterConfig, presence: SyncHub, clock: Clock): Store {
  try {
    const time = () => clock.timestamp();
    return openStore(config.dataDir, { secretFields: SECRET_FIELDS, presence, time, copy: config.follow !== null });
  } catch (error) {
    // Not the dir's fault, and nothing another --data-dir would fix: the data itself is what is lost.
    if (error instanceof DatabaseDamaged)
      throw new Error(
        `${error.message}. Keep this data dir as it is, and restore the last backup into an empty one: ` +
          `master restore --data-dir NEW-DIR BACKUP-FILE (npm run master -- restore ... in a clone), then start with ` +
          '--data-dir NEW-DIR (README, Recovery)',
        { cause: error },
      );
    throw new Error(
      `cannot use the data dir ${config.dataDir}: ${(error as Error).message}; give --data-dir a directory this user ` +
        'can write',
      { cause: error },
    );
  }
}

/**
 * What the last master recorded of agent links and installs is history once this one starts: no agent is linked yet
 * and no install runs. Nodes it left online are offline, and their tunnels' ends down, until their agents link again;
 * installs it left running are install_failed.
 */
function recordRestart(store: Store, at: string): void {
  store.write(() => {
    for (const nodeId of store.nodes.afterRestart(at))
      store.tunnels.nodeDown(nodeId, `the master restarted; the agent of node ${nodeId} has not linked again yet`, at);
  });
}

/**
 * This master's promotion statement for its epoch (see tls/promotion.ts), made once an epoch: none before the first
 * promotion, and none without a TLS key of its own to sign with.
 */
function promotionOf(store: Store, tls: TlsIdentity | null, clock: Clock): () => string | null {
  let made: { epoch: number; pem: string; statement: string } | null = null;
  return () => {
    const epoch = store.epoch.current();
    if (!tls || epoch < 2) return null;
    if (made?.epoch !== epoch || made.pem !== tls.key)
      made = { epoch, pem: tls.key, statement: statePromotion(tls.key, epoch, clock.timestamp()) };
    return made.statement;
  };
}

/**
 * A standby's follower, its copy seeded before anything opens it: a start waits for the primary (saying so), since
 * there is nothing to serve without a copy.
 */
async function seededFollower(
  config: MasterConfig,
  log: Logger,
  changed: () => void,
  options: StartOptions,
): Promise<Follower> {
  const { url, pin, token } = config.follow!;
  mkdirSync(config.dataDir, { recursive: true, mode: 0o700 });
  const path = join(config.dataDir, 'master.db');
  const follower = new Follower({ url, pin, token, path, log, changed, name: options.standbyName });
  while (!follower.position()) {
    if (options.signal?.aborted) {
      follower.stop();
      throw new Error(`gave up seeding from ${url}: ${String(options.signal.reason)}`);
    }
    try {
      await follower.step();
    } catch (error) {
      log.warn('cannot seed a copy from the primary yet; trying again', {
        primary: url,
        error: (error as Error).message,
      });
      await new Promise((resolve) => setTimeout(resolve, 2000));
    }
  }
  return follower;
}

export async function start(
  config: MasterConfig,
  log: Logger,
  now: () => number = Date.now,
  options: StartOptions = {},
): Promise<Master> {
  // The agent links' record of which nodes are online, which the store renders their status from.
  const sync = new SyncHub();
  const clock = new Clock(now);
  // What reads the copy is told when the follower changed it (once it is there to be told).
  let copyChanged = () => {};
  // What only a primary does (defined once the server is wired): at start, or when a standby is promoted.
  let servePrimary = async () => {};
  const standby = config.follow ? await seededFollower(config, log, () => copyChanged(), options) : null;
  const store = openData(config, sync, clock);
  // Its follower alone changes a standby's copy: nothing else writes through the store.
  if (standby) store.db.readCopyOf(standby.primary);
  try {
    const keyPem = config.licenseKeyPath
      ? using(`the license key ${config.licenseKeyPath}`, 'check --license-key', () =>
          readFileSync(config.licenseKeyPath!, 'utf8'),
        )
      : VENDOR_PUBLIC_KEY_PEM;
    const license = loadLicense(join(config.dataDir, 'license.json'), keyPem);
    const secretKey = config.secretKeyPath ?? join(config.dataDir, 'secret.key');
    const box = using(`the sealing key ${secretKey}`, 'check --secret-key', () => SecretBox.open(secretKey));
    const releaseKeys = config.releaseKeyPaths.map((path) =>
      using(`the release key ${path}`, 'check --release-key (Ed25519 PEM public keys, comma-separated)', () => {
        const key = createPublicKey(readFileSync(path, 'utf8'));
        if (key.asymmetricKeyType !== 'ed25519') throw new Error(`it is an ${key.asymmetricKeyType} key, not Ed25519`);
        return key;
      }),
    );
    const ownAgent = config.agentSignaturePath
      ? using(
          `the agent signature ${config.agentSignaturePath}`,
          "check --agent-signature (npm run release -- sign, of this master's own dist/agent.mjs) and --release-key",
          () => signedOwnAgent(config.agentSignaturePath!, releaseKeys),
        )
      : null;
    const tls = using(
      'the TLS certificate and key',
      'check --tls-cert and --tls-key (a PEM certificate and its key)',
      () => tlsIdentityFor(config),
    );
    // Tunnels made before tunnels forwarded have no key pairs yet.
    const keyless = standby ? [] : store.tunnels.keyless();
    if (keyless.length > 0)
      store.write(() => {
        for (const id of keyless)
          store.tunnels.setKeys(
            id,
            issueTunnelKeys(id, (key) => box.seal(key)),
          );
      });
    const settings = new Settings(store, box);
    const lifecycle: Lifecycle = { starting: true, draining: false };
    if (!standby) recordRestart(store, clock.timestamp());
    await store.committed();
    const metrics = new MasterMetrics();
    store.db.onCommitted((seconds) => metrics.commits.observe(seconds));
    store.db.onCallbackError((error) =>
      log.error('an after-commit callback failed', { error: (error as Error)?.stack ?? String(error) }),
    );
    // A failed group commit undoes writes the in-memory copies already reflect.
    store.db.onCommitFailure(() => {
      settings.reload();
      store.credentials.bump();
    });
    const workerSetup: WorkerSetup = {
      version: VERSION,
      databasePath: store.db.path,
      sealingKey: box.key(),
      ...(options.workerProgram ? { program: options.workerProgram } : {}),
    };
    const batches = batchesInWorker(workerSetup);
    const installer = new Installer({
      store,
      box,
      settings,
      sync,
      log,
      clock,
      dataDir: config.dataDir,
      get draining() {
        return lifecycle.draining;
      },
    });
    const events = new EventStreams({ store, sync, log, clock, routes });
    const app = new App({
      store,
      log,
      license,
      box,
      tls,
      insecureHttp: config.insecureHttp,
      dataDir: config.dataDir,
      version: VERSION,
      clock,
      settings,
      sync,
      installer,
      lifecycle,
      metrics,
      importer: importInWorker(workerSetup),
      batcher: (job) => batches.run(job),
      exporter: exportInWorker(workerSetup),
      events,
      releaseKeys,
      standby,
      leadership: options.leadership,
      // A standby becomes the primary: it stops following, its copy gets back what it went without, and it serves.
      becomePrimary() {
        standby?.stop();
        store.db.readCopyOf(null);
        store.takeOver();
        settings.reload();
        store.credentials.bump();
        servePrimary().catch((error: Error) => log.error('serving as the primary failed', { error: error.message }));
      },
    });
    copyChanged = () => {
      store.db.changedElsewhere();
      settings.reload();
      store.credentials.bump();
    };
    addGauges(app);
    const view = app.licenseView();
    (view.problem ? log.warn : log.info)('license', {
      status: view.status,
      edition: view.edition,
      problem: view.problem,
    });
    const dispatch = createDispatcher(app, routes);
    const serveConsole = consoleHandler();
    // The console's few files at the root; everything else, /api/ and what matches nothing, is the API's (which, while
    // the master starts, answers 503 for all but health).
    const serve = async (req: IncomingMessage, res: ServerResponse) => {
      if (app.starting || !serveConsole(req, res)) await dispatch(req, res);
    };
    const fence = (epoch: number, primary: string | null) => app.fence(epoch, primary);
    const promotion = promotionOf(store, tls, clock);
    const reports = new AgentReports({
      store,
      sync,
      log,
      metrics,
      now: clock.now,
      timestamp: () => clock.timestamp(),
      retentionDays: () => settings.get('traffic_retention_days'),
    });
    const links = new AgentLinks({ store, reports, sync, settings, log, clock, box, lifecycle, fence, promotion });
    const http = await listening(config, () => listen(serve, config.host, config.port, tls));
    // Agents link to the primary; a standby refuses them, naming it, and so does a primary another took over from.
    http.server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
      const fenced = app.fencedBy;
      const there = fenced?.primary ? `: link to ${fenced.primary}` : '';
      if (app.standby)
        refuse(socket, new DomainError('read_only', `this master is a standby of ${app.standby.primary}: link there`));
      else if (fenced)
        refuse(
          socket,
          new DomainError('read_only', `a primary of epoch ${fenced.epoch} took over from this master${there}`, {
            data: { primary: fenced.primary },
          }),
        );
      else links.handleUpgrade(req, socket, head);
    });
    app.onFenced = () => links.cutAll();
    let timer: NodeJS.Timeout | undefined;
    let ruleClock: NodeJS.Timeout | undefined;
    /** A turn of a primary's clock (rules, tenants, alerts, rollouts, the license), as each second takes one. */
    let clockTurn = async (): Promise<void> => undefined;
    let peerWatch: NodeJS.Timeout | undefined;
    // Whether a master its standby_masters lists leads a later epoch: promoted while this one was down, or while it
    // still serves (the watcher cut off from it, not from the standby). This one is fenced then, rather than both
    // taking writes. How many answered, for the first ask (see heardFromPeers).
    const checkPeers = singleFlight(async () => {
      if (app.fencedBy !== null || app.standby) return null;
      const peers = standbysOf(settings.get('standby_masters'));
      const heard = await askPeers(peers, store.epoch.current());
      if (heard.newer) app.fence(heard.newer.epoch, heard.newer.primary);
      return { peers, answered: heard.answered };
    });
    // Before its first write. In sync mode a primary none of whose peers answers waits for one (a partition leaves it
    // unable to know whether one was promoted meanwhile), saying why, until an operator says to serve alone; in async
    // mode it goes on after the one bounded ask. Elected through etcd, the election has answered that already.
    const heardFromPeers = async () => {
      try {
        for (let said = false; ; said = true) {
          const heard = await checkPeers();
          const alone = heard === null || heard.peers.length === 0 || heard.answered > 0;
          if (alone || options.leadership || settings.get('replication_mode') !== 'sync') return;
          if (servingAloneAsked(config.dataDir))
            return log.warn('serving without its peers, as `master serve-alone` asked', { peers: heard.peers.length });
          const why =
            `none of the masters standby_masters lists answered (${heard.peers.map((peer) => peer.url).join(', ')}): ` +
            'in sync mode a primary takes no write before one does, as one may have been promoted meanwhile; ' +
            `\`master serve-alone --data-dir ${config.dataDir}\` makes it serve without them`;
          if (!said) log.error('waiting for a peer to answer before the first write', { why });
          app.startingReason = why;
          markWaiting(config.dataDir, why);
          for (let i = 0; i < PEER_WATCH_MS / 1000 && !servingAloneAsked(config.dataDir); i++)
            await new Promise((resolve) => setTimeout(resolve, 1000));
        }
      } finally {
        app.startingReason = null;
        clearWaiting(config.dataDir);
      }
    };
    try {
      // What only a primary does: carry its own agent among the bundles, maintenance, and the clock of rules, alerts
      // and rollouts.
      servePrimary = async () => {
        if (ownAgent && !store.bundles.findVersion(VERSION))
          await transact(app, theMaster('bundle.create'), (change) =>
            addBundle(app, change, ownAgent.bundle, ownAgent.signature, releaseKeys),
          );
        countLegacyTraffic(app);
        const housekeeping = () =>
          store.db.whenWritable(() => {
            // A primary another took over from writes nothing more.
            if (!app.serving) return;
            const failed = (error: unknown) =>
              log.error('maintenance failed', { error: (error as Error)?.stack ?? String(error) });
            try {
              maintain(app).catch(failed);
            } catch (error) {
              failed(error);
            }
          });
        housekeeping();
        timer = setInterval(housekeeping, MAINTENANCE_INTERVAL_MS).unref();
        // Rules whose expires_at has come stop within a second of it; quota periods start over as punctually; a license
        // that expires says so as soon.
        const licenseTick = licenseWatch(app);
        const samplePaths = pathSampler(app);
        const refusedTick = refusedWritesWatch(app);
        const failed = (what: string) => (error: Error) => log.error(what, { error: error.message });
        clockTurn = async () => {
          if (app.draining || !app.serving) return;
          try {
            licenseTick();
          } catch (error) {
            failed('recording a change of the license failed')(error as Error);
          }
          try {
            samplePaths();
          } catch (error) {
            failed("sampling the tunnels' paths failed")(error as Error);
          }
          await Promise.all([
            tickRules(app).catch(failed("the rules' clock failed")),
            tickAccounts(app).catch(failed("the tenants' clock failed")),
            evaluateAlerts(app)
              .then(() => app.outbox.kick())
              .catch(failed('evaluating the alert rules failed')),
            refusedTick().catch(failed('alerting on refused writes failed')),
            advanceRollouts(app).catch(failed('the rollout failed a turn')),
            checkProviderSessions(app).catch(failed('asking the identity provider about its sessions failed')),
          ]);
        };
        ruleClock = setInterval(() => void clockTurn(), 1000).unref();
        peerWatch = setInterval(() => void checkPeers(), PEER_WATCH_MS).unref();
      };
      // A standby writes nothing of its own: its copy changes by its primary's changes alone.
      if (standby) void standby.run();
      else {
        // Only now that the port is ours: a start that fails earlier never made an admin whose password nobody saw.
        await bootstrapAdmin(store, log, config.adminPassword, app.timestamp());
        // Fenced before it stopped, it still is; and a standby it knows may have been promoted past it while it was
        // down: it takes no write before it asked.
        const kept = store.epoch.fencedBy();
        if (kept && kept.epoch > store.epoch.current()) app.fence(kept.epoch, kept.primary);
        await heardFromPeers();
        await options.beforeServing?.(app);
        await servePrimary();
      }
      lifecycle.starting = false;
      markReady(config.dataDir, http.url);
    } catch (error) {
      await http.close();
      throw error;
    }
    if (!tls && !isLoopback(config.host))
      log.warn('serving plain HTTP off loopback (--insecure-http): put a TLS-terminating proxy in front');
    log.info('listening', {
      url: http.url,
      tls_pin: tls?.pin ?? null,
      tls_not_after: tls?.notAfter ?? null,
      data_dir: config.dataDir,
      version: VERSION,
      schema_version: store.db.schemaVersion(),
    });
    const checkpoints = checkpointInWorker(store.db.path, store.db, log);
    let closing: Promise<void> | undefined;
    return {
      url: http.url,
      app,
      links,
      turn: () => clockTurn(),
      reloadTls() {
        if (!tls) return void log.info('SIGHUP: no certificate to reload (plain HTTP)');
        try {
          tls.reload();
          http.setCredentials(tls);
          log.info('reloaded the TLS certificate', { tls_pin: tls.pin, tls_not_after: tls.notAfter });
        } catch (error) {
          log.error('reloading the TLS certificate failed; serving the previous one', {
            error: (error as Error).message,
          });
        }
      },
      close() {
        closing ??= (async () => {
          app.draining = true;
          clearReady(config.dataDir);
          clearInterval(timer);
          clearInterval(ruleClock);
          clearInterval(peerWatch);
          // An import or batch being written finishes first (new requests are refused meanwhile).
          await store.db.writable();
          await rolledUp(app);
          await app.outbox.close();
          await batches.close();
          app.events.close();
          app.replicas.stop();
          standby?.stop();
          links.close();
          await http.close();
          await checkpoints.close();
          store.close();
          log.info('stopped');
        })();
        return closing;
      },
    };
  } catch (error) {
    store.close();
    throw error;
  }
}
