// A master among masters elected through etcd (internal/election): at start it follows the leader etcd names, or
// takes the lead when none does and the election's rules let it; as a standby it watches for the leader's loss; as
// the leader it takes writes while its lease holds. A change it cannot make in place (the leader it follows replaced
// by another, its own leadership lost) starts it again, in this process: it then follows whoever leads.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { App } from '../../internal/api/app.ts';
import { Election, type Standing } from '../../internal/election/election.ts';
import { Etcd, EtcdUnavailable } from '../../internal/election/etcd.ts';
import type { Logger } from '../../internal/log/log.ts';
import { isLoopback } from '../../internal/schema/net.ts';
import { theMaster } from '../../internal/service/master.ts';
import { transact } from '../../internal/service/write.ts';
import { standingOnDisk } from '../../internal/store/replication.ts';
import type { EtcdConfig, MasterConfig } from './config.ts';
import { start, tlsIdentityFor, type Master } from './start.ts';

/** How often a master asks etcd who leads, and publishes where it stands. */
const WATCH_MS = 1000;
/** How long a master that found no leader lets the others publish where they stand before it decides. */
const SETTLE_MS = 1500;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Where a running master's database stands. */
function standingOf(app: App): Standing {
  const position = app.standby?.position() ?? null;
  return {
    epoch: app.store.epoch.current(),
    generation: position?.generation ?? null,
    seq: position?.seq ?? null,
    source: app.standby === null,
  };
}

function etcdOf(config: EtcdConfig): Etcd {
  const read = (path: string | null) => (path === null ? undefined : readFileSync(path));
  return new Etcd({
    endpoints: config.endpoints,
    ca: read(config.caPath),
    cert: read(config.certPath),
    key: read(config.keyPath),
  });
}

/** A master elected through etcd: started again, in this process, whenever its part changes. */
export async function startElected(config: MasterConfig, log: Logger): Promise<Master> {
  const etcd = etcdOf(config.etcd!);
  let current: Incarnation = await incarnation(config, log, etcd);
  let closed = false;
  const restart = async (reason: string) => {
    log.warn('starting again to follow the leader', { reason });
    // A close that fails (a socket that would not end) still leaves the port to the next incarnation, which says so.
    await current.master
      .close()
      .catch((error: Error) => log.error('closing before starting again failed', { error: error.message }));
    while (!closed) {
      try {
        current = await incarnation(config, log, etcd);
        // Stopped while it started again: it stops too.
        if (closed) return void (await current.master.close());
        current.ended.then(restart, () => {});
        return;
      } catch (error) {
        log.error('could not start again; trying again', { error: (error as Error).message });
        await sleep(WATCH_MS);
      }
    }
  };
  current.ended.then(restart, () => {});
  return {
    get url() {
      return current.master.url;
    },
    get app() {
      return current.master.app;
    },
    get links() {
      return current.master.links;
    },
    turn: () => current.master.turn(),
    reloadTls: () => current.master.reloadTls(),
    close: () => {
      closed = true;
      return current.master.close();
    },
  };
}

interface Incarnation {
  master: Master;
  /** Resolves with why this master must start again (see startElected). */
  ended: Promise<string>;
}

/** One start of an elected master: as the leader, or as a standby of the leader etcd names. */
async function incarnation(config: MasterConfig, log: Logger, etcd: Etcd): Promise<Incarnation> {
  const { advertise, prefix, token } = config.etcd!;
  // Published with its address: what standbys trust it by.
  const me = { url: advertise, pin: tlsIdentityFor(config)?.pin ?? null };
  const election = new Election({ etcd, prefix, me, log });
  await untilAnswered(log, () => election.start());
  let end: (reason: string) => void = () => {};
  const ended = new Promise<string>((resolve) => (end = resolve));
  const role = await untilAnswered(log, () => roleOf(config, log, election));
  const options = {
    leadership: {
      holds: () => election.holds(),
      current: () => election.current(),
      choose: (standby: string | null) => election.designate(standby),
    },
    standbyName: advertise,
  };
  let master: Master;
  if ('won' in role) {
    try {
      master = await start(config, log, Date.now, {
        ...options,
        beforeServing: (app) => recordElected(app, role.won),
      });
    } catch (error) {
      await election.stop();
      throw error;
    }
  } else {
    const following = role.leader;
    const abort = new AbortController();
    const watching = watchWhileSeeding(election, following.url, abort);
    try {
      master = await start({ ...config, follow: { ...following, token: token! } }, log, Date.now, {
        ...options,
        signal: abort.signal,
      });
    } catch (error) {
      await election.stop();
      throw error;
    } finally {
      abort.abort('started');
      await watching;
    }
  }
  const stopWatch = watch(master.app, election, log, end);
  const close = master.close;
  master.close = async () => {
    stopWatch();
    await election.stop();
    await close();
  };
  return { master, ended };
}

/** Calls `fn` until etcd answers it, saying why meanwhile. */
async function untilAnswered<T>(log: Logger, fn: () => Promise<T>): Promise<T> {
  for (let said = ''; ;) {
    try {
      return await fn();
    } catch (error) {
      if (!(error instanceof EtcdUnavailable)) throw error;
      const message = (error as Error).message;
      if (message !== said) log.warn('cannot reach etcd yet; trying again', { error: message });
      said = message;
      await sleep(WATCH_MS);
    }
  }
}

type Role = { won: number } | { leader: { url: string; pin: string | null } };

/** Whom this master follows, or the epoch it was elected the leader of: waits until one of them is so. */
async function roleOf(config: MasterConfig, log: Logger, election: Election): Promise<Role> {
  const { advertise, token, followInsecure } = config.etcd!;
  let said = '';
  const waiting = (why: string) => {
    if (why !== said) log.warn('not serving yet', { why });
    said = why;
  };
  // Nothing writes the data dir while no master of this process runs: where it stands is read once.
  const onDisk = standingOnDisk(join(config.dataDir, 'master.db'));
  for (; ; await sleep(WATCH_MS)) {
    const leader = await election.leader();
    if (leader && leader.url !== advertise) {
      const { protocol, hostname } = new URL(leader.url);
      if (token === null)
        waiting(
          `${leader.url} leads: give MASTER_FOLLOW_TOKEN, a token of it with the replication scope, to follow it`,
        );
      else if (protocol === 'http:' && !isLoopback(hostname.replace(/^\[|\]$/g, '')) && !followInsecure)
        waiting(
          `${leader.url} leads at a plain http:// address: following it would send the replication token in clear; ` +
            'serve masters over TLS, or pass --follow-insecure',
        );
      else return { leader };
      continue;
    }
    // This master's own key from before it started again lives until its lease ends.
    if (leader) {
      waiting('etcd still names this master the leader, from before it started again: until that lease ends');
      continue;
    }
    let standing = onDisk;
    if (standing === null) {
      if (await election.hasLed()) {
        waiting('no data dir yet, and the cluster led before: it follows the next leader');
        continue;
      }
      standing = { epoch: 1, generation: null, seq: null, source: true };
    }
    await election.publish(standing);
    await sleep(SETTLE_MS);
    const why = await election.mayNotLead(standing);
    if (why !== null) {
      waiting(why);
      continue;
    }
    const won = await election.campaign(standing);
    if (won !== null) return { won };
  }
}

/** Gives up a start seeding from `following` once etcd names another leader, or none. */
async function watchWhileSeeding(election: Election, following: string, abort: AbortController): Promise<void> {
  while (!abort.signal.aborted) {
    await sleep(WATCH_MS);
    const leader = await election.leader().catch(() => undefined);
    if (leader !== undefined && leader?.url !== following && !abort.signal.aborted)
      abort.abort(leader ? `${leader.url} leads now` : `${following} leads no more`);
  }
}

/** An elected leader's epoch, in its database, with the entry that records it. */
async function recordElected(app: App, epoch: number): Promise<void> {
  await transact(app, theMaster('replication.promote'), (change) => {
    const raised = app.store.epoch.elected(epoch, app.timestamp());
    change.audit({ resource: 'master', resource_id: null, changes: { after: { role: 'primary', epoch: raised } } });
  });
}

/**
 * Every WATCH_MS: publishes where this master stands, and asks who leads. When none does, a standby, or a primary whose
 * lease expired, takes the lead if the election lets it; when another leads than the one it follows (or than
 * itself), it starts again to follow that one. While etcd does not answer it goes on as it is: a standby serves reads
 * of its copy, and a leader takes no write once its lease could have expired. Returns what stops it.
 */
function watch(app: App, election: Election, log: Logger, end: (reason: string) => void): () => void {
  let stopped = false;
  let said = '';
  const note = (level: 'info' | 'warn', message: string, why: string) => {
    if (why !== said) log[level](message, { why });
    said = why;
  };
  void (async () => {
    while (!stopped) {
      await sleep(WATCH_MS);
      if (stopped) return;
      try {
        await election.publish(standingOf(app));
        const leader = await election.leader();
        if (election.isLeader) continue;
        const followed = app.standby?.primary ?? null;
        if (leader && leader.url !== followed) return end(`${leader.url} leads now`);
        if (leader) continue;
        await sleep(SETTLE_MS);
        if (stopped || (await election.leader())) continue;
        const standing = standingOf(app);
        await election.publish(standing);
        const why = await election.mayNotLead(standing);
        if (why !== null) {
          note('warn', 'no master leads, and this one may not', why);
          continue;
        }
        const won = await election.campaign(standing);
        if (won === null || stopped) continue;
        if (app.standby) app.promote();
        await recordElected(app, won);
        note('info', 'leads', `elected the leader of epoch ${won}`);
      } catch (error) {
        note('warn', 'asking etcd who leads failed', (error as Error).message);
      }
    }
  })();
  return () => {
    stopped = true;
  };
}
