// The agent: forwards what its node's config says, from disk at once and from the master
// whenever it pushes a new version; acknowledges what it really applied; reports traffic
// as sequence-numbered deltas kept until the master confirms them.

import { request as httpRequest, type IncomingMessage } from 'node:http';
import { lookup } from 'node:dns/promises';
import { isIP, type Socket } from 'node:net';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import {
  checkMessage,
  inPieces,
  keepAlive,
  LINK_PATH,
  LINK_PROTOCOL,
  MASTER_LINE_BYTES,
  readMessages,
  send,
  type Message,
} from '../agentlink/wire.ts';
import {
  addTraffic,
  Forwarder,
  type ForwardingMode,
  type KernelCounts,
  type SocketKeeper,
  type TunnelReport,
} from '../forward/forwarder.ts';
import { DEFAULT_SRV_BOUNDS } from '../forward/srv.ts';
import { throttledBy, type Logger } from '../log/log.ts';
import { faults } from '../relay/faults.ts';
import {
  AGENT_FEATURES,
  TUNNEL_EXITS,
  TUNNEL_WS,
  type MasterRead,
  configMessage,
  overBudgetMessage,
  probeMessage,
  trafficAckMessage,
  upgradeMessage,
  type UpgradeMessage,
  type UpgradeStatusMessage,
  type FellBackMessage,
} from '../domain/link.ts';
import { keepBundle, type KeptBundle } from './bundles.ts';
import { BundleRefused, versionOrder } from '../release/signature.ts';
import type { RuleTraffic } from '../domain/rules.ts';
import { VitalsMeter } from './vitals.ts';
import { tableOf } from '../kernel/ruleset.ts';
import { agentTokenNode } from '../auth/secrets.ts';
import { pinOf } from '../tls/pin.ts';
import { keyIdOf } from '../release/signature.ts';
import type { KeyObject } from 'node:crypto';
import { canonicalAddress, isLoopback, masterOrigin } from '../schema/net.ts';
import { AgentState, type SavedConfig, type TrafficReport, type TrafficState } from './state.ts';
import { watchRuleset, type RulesetWatch } from '../kernel/nft.ts';

export interface AgentOptions {
  masterUrl: string;
  /** The master's key pin; null: an https master is verified against the system CAs. */
  masterPin: string | null;
  /** Its standbys, each with its pin: tried in turn when the master cannot be reached or refuses the link. */
  otherMasters?: { url: string; pin: string | null }[];
  token: string;
  stateDir: string;
  listenHost: string;
  /** Where rules are carried (see Forwarder); default relay. */
  forwarding?: ForwardingMode;
  /** How many threads relay rules straight to their targets (see forward/relay-thread.ts); default 1. */
  relayWorkers?: number;
  /** How often the kernel rules' target names are looked up again, in seconds; default 60. */
  resolveSeconds?: number;
  /**
   * How often the kernel table is compared with what the agent wrote besides after every change to the ruleset (which
   * `nft monitor` tells at once), in milliseconds; default 30,000.
   */
  driftCheckMs?: number;
  /** The release keys whose signed bundles this agent runs; what it trusts is told the master (their ids). */
  releaseKeys?: KeyObject[];
  /** The supervisor it runs under (see supervisor.ts); absent: it runs alone, and takes no upgrade. */
  supervisor?: SupervisorChannel;
  /** Listening sockets an agent handed over to this one, by `transport:port` (see Forwarder.inherit). */
  inherited?: Map<string, { close(): unknown }>;
  version: string;
  log: Logger;
}

const MAX_BACKOFF_MS = 30_000;

/** What an agent tells its supervisor. */
export interface SupervisorChannel {
  /** Whether the supervisor keeps an upgrade on trial through a soak (the link feature `soak`). */
  soaks: boolean;
  /** Where the supervisor keeps copies of the listening sockets, if it does. */
  keeper: SocketKeeper | null;
  /** What the supervisor went back from before it started this agent (a bundle that crash-looped), if it did. */
  fellBack: Omit<FellBackMessage, 'type'> | null;
  /**
   * Run this kept bundle (verified) in my place, on trial for `gate_seconds` to link and apply, then `soak_seconds`
   * to stay running and linked.
   */
  upgrade(order: { bundle: KeptBundle; gate_seconds: number; soak_seconds: number; rollout_id: number }): void;
  /** Linked and applied a config of the master: what a new bundle on trial must do to stay. */
  ready(): void;
  /** The link to the master closed: a new bundle in its soak goes back for it. */
  unlinked(): void;
}

/** How often a draining agent hands what it relayed to the one that took over. */
const DRAIN_HAND_MS = 2_000;

/** Why a master that presented this certificate is not the one the agent pins, or null when it is. */
function pinRefusal(socket: TLSSocket, pins: readonly string[]): string | null {
  const cert = socket.getPeerX509Certificate();
  if (!cert) return 'the master presented no certificate';
  const pin = pinOf(cert);
  if (!pins.includes(pin)) return `pin mismatch: the master presented ${pin}, this agent pins ${pins.join(' or ')}`;
  const now = Date.now();
  if (now > Date.parse(cert.validTo))
    return `the master's certificate expired on ${new Date(cert.validTo).toISOString()}`;
  if (now < Date.parse(cert.validFrom))
    return `the master's certificate is not valid before ${new Date(cert.validFrom).toISOString()}`;
  return null;
}

/** A TLS failure in words a person can act on. */
function tlsProblem(error: Error & { code?: string }): string {
  switch (error.code) {
    case 'CERT_HAS_EXPIRED':
      return "the master's certificate has expired";
    case 'DEPTH_ZERO_SELF_SIGNED_CERT':
    case 'SELF_SIGNED_CERT_IN_CHAIN':
    case 'UNABLE_TO_GET_ISSUER_CERT_LOCALLY':
    case 'UNABLE_TO_VERIFY_LEAF_SIGNATURE':
      return (
        `unknown CA: the system does not trust the master's certificate (${error.code}); give --master-pin for a ` +
        `master's own certificate`
      );
    case 'ERR_TLS_CERT_ALTNAME_INVALID':
      return `the master's certificate is not for this address: ${error.message}`;
    default:
      return error.message;
  }
}
/**
 * Past this many unacknowledged reports (a long master outage) they are merged into one: totals are kept, timing is
 * coarser.
 */
const MAX_PENDING_REPORTS = 500;
/** Changes to how tunnels stand are gathered this long before they are sent. */
const TUNNEL_STATUS_DELAY_MS = 1_000;
/** How long a target's change of health waits for others to go in the same message. */
const HEALTH_DELAY_MS = 100;

export class Agent {
  private readonly forwarder: Forwarder;
  private readonly state: AgentState;
  private config: SavedConfig | null = null;
  private traffic!: TrafficState;
  private socket: Socket | null = null;
  private attempt = 0;
  private stopping = false;
  /** The pin of the master this agent verified on its current (or last) link; null over plain HTTP. */
  private linkPin: string | null = null;
  private applying: Promise<void> = Promise.resolve();
  private reportTimer: NodeJS.Timeout | undefined;
  private readonly vitals = new VitalsMeter();
  /** The ids of the release keys this agent trusts, as it tells the master when it links; empty: none. */
  private readonly releaseKeyIds: string;
  private refreshTimer: NodeJS.Timeout | undefined;
  private driftTimer: NodeJS.Timeout | undefined;
  /** Tells of changes to the ruleset while the kernel carries rules (see checkDrift). */
  private rulesetWatch: RulesetWatch | null = null;
  private driftCheckQueued = false;
  /** Reports are made one at a time (reading the kernel's counters takes a moment). */
  private reporting: Promise<void> = Promise.resolve();
  /** When live numbers were last measured, and their rounds (see sendLive). */
  private liveAt = Date.now();
  private liveRound = 0;
  private retryTimer: NodeJS.Timeout | undefined;
  private tunnelTimer: NodeJS.Timeout | undefined;
  private healthTimer: NodeJS.Timeout | undefined;
  /** Rules whose health checks changed since the kernel table was last brought in line with them. */
  private readonly healthChanged = new Set<number>();
  /** The state of each tunnel end last written to the log. */
  private readonly tunnelsLogged = new Map<number, TunnelReport['state']>();
  /** What the master last heard of each tunnel end, and when. */
  private readonly tunnelsSent = new Map<number, { report: TunnelReport; at: number }>();
  /**
   * Another agent took over (see handOver): this one forwards what it has but no longer links, reports or writes the
   * kernel table, until it drains or is told to resume.
   */
  private handedOver = false;
  /** The rollout whose upgrade this agent started, while it is under way. */
  private upgrading: number | null = null;
  /** What the master is to hear when this agent links again: an upgrade that was rolled back. */
  private untold: UpgradeStatusMessage | null = null;
  private toldReady = false;
  private toldFellBack = false;
  /**
   * Every master, the primary first: those it was given, then the standbys its masters told it of (see learnMasters),
   * and which one the agent links to (or tries) now.
   */
  private masters: { url: string; pin: string | null }[];
  private readonly given: { url: string; pin: string | null }[];
  private current = 0;
  /** The highest epoch of a master this agent has heard (see receive): it takes no config of a lower one. */
  private epoch: number;
  /** The master that said that epoch, this run: what the agent names to a master of an older one. */
  private epochMaster: string | null = null;
  /** That master's statement that it is the primary of that epoch: what fences an older one (tls/promotion.ts). */
  private promotion: string | null;

  constructor(private readonly options: AgentOptions) {
    this.given = [{ url: options.masterUrl, pin: options.masterPin }, ...(options.otherMasters ?? [])];
    this.masters = this.given;
    this.releaseKeyIds = (options.releaseKeys ?? []).map(keyIdOf).join(',');
    this.forwarder = new Forwarder(
      options.listenHost,
      {},
      options.forwarding ?? 'relay',
      tableOf(agentTokenNode(options.token) ?? 0),
      options.relayWorkers ?? 1,
      (error) => options.log.error('a relay thread ended; the others relay on', { error: error?.message ?? null }),
    );
    if (this.forwarder.queuedAtRisk)
      options.log.warn('an upgrade may reset connections waiting to be accepted by a relay thread', {
        reason: this.forwarder.queuedAtRisk,
      });
    // A fault contained in one flow is logged (at most LINES_PER_KEY a minute: a flood of them is one client's doing)
    // and counted in the node's vitals.
    const faultLog = throttledBy(options.log)('faults');
    faults.onFault = (site, error) =>
      faultLog.warn('a fault ended one flow; the agent goes on', { site, error: error.stack ?? error.message });
    if (options.inherited) this.forwarder.inherit(options.inherited);
    this.forwarder.keeper = options.supervisor?.keeper ?? null;
    this.forwarder.onTunnelChange = () => this.tunnelsChanged();
    // A target going up or down is told at once (a few changing together, in one message).
    this.forwarder.onHealthChange = (id, change) => {
      // The kernel sends no new client to a target down, at once: one rewrite for the rules whose checks changed
      // meanwhile (a target many rules share goes down in all of them together). The master hears of it with the
      // next few changes; of a new fastest target it need not hear.
      if (this.handedOver) return;
      this.healthChanged.add(id);
      if (this.healthChanged.size === 1)
        this.applying = this.applying
          .then(async () => {
            const ids = [...this.healthChanged];
            this.healthChanged.clear();
            await this.forwarder.refreshKernelHealth(ids);
          })
          .catch((error: Error) =>
            this.options.log.warn('rewriting the kernel table for a target up or down failed', {
              error: error.message,
            }),
          );
      if (change === 'lead' || this.healthTimer || this.stopping) return;
      this.healthTimer = setTimeout(() => {
        this.healthTimer = undefined;
        this.sendHealth();
      }, HEALTH_DELAY_MS);
    };
    // A rule's expiry stops it here at that time, also while the master is away.
    this.forwarder.srv.onChange = () => {
      // A rule's SRV records changed: applied again with the new ones, and the master told how each rule stands.
      if (this.handedOver) return;
      this.applying = this.applying
        .then(() => (this.config ? this.apply(this.config, true) : undefined))
        .catch((error: Error) => this.options.log.error('applying new SRV records failed', { error: error.message }));
    };
    this.forwarder.onExpiry = () => {
      if (this.handedOver) return;
      this.applying = this.applying
        .then(() => (this.config ? this.apply(this.config, false) : undefined))
        .catch((error: Error) => this.options.log.error('stopping an expired rule failed', { error: error.message }));
    };
    this.state = new AgentState(options.stateDir, (damaged) =>
      options.log.warn('a saved file was damaged: set aside, to be rebuilt from the master', { ...damaged }),
    );
    this.epoch = this.state.loadEpoch();
    // SRV records read before a restart stand until their names answer again.
    this.forwarder.srv.keepIn(this.state);
    this.promotion = this.state.loadPromotion();
    this.learnMasters(this.state.loadMasters());
  }

  async start(): Promise<void> {
    this.traffic = this.state.loadTraffic();
    const saved = this.state.loadConfig();
    if (saved) {
      this.options.log.info('applying the saved config', { version: saved.version, rules: saved.rules.length });
      await this.apply(saved, false);
    }
    this.startTimers(saved?.report_interval_seconds ?? 10);
    this.connect();
  }

  private startTimers(reportSeconds: number): void {
    this.scheduleReports(reportSeconds);
    this.refreshTimer = setInterval(
      () => {
        this.applying = this.applying
          .then(() => this.forwarder.refreshKernel())
          .then((changed) => {
            if (changed) this.options.log.info("a kernel rule's target address changed: table rewritten");
          })
          .catch((error: Error) =>
            this.options.log.warn('rewriting the kernel table failed', { error: error.message }),
          );
      },
      (this.options.resolveSeconds ?? 60) * 1000,
    );
    this.driftTimer = setInterval(() => this.queueDriftCheck(), this.options.driftCheckMs ?? 30_000);
  }

  private stopTimers(): void {
    clearInterval(this.reportTimer);
    clearInterval(this.refreshTimer);
    clearInterval(this.driftTimer);
    this.rulesetWatch?.close();
    this.rulesetWatch = null;
    clearTimeout(this.retryTimer);
    clearTimeout(this.tunnelTimer);
    clearTimeout(this.healthTimer);
  }

  /** Stops its timers, those an apply under way starts before it ends included (a report's, a ruleset watch). */
  private async stopTimersSettled(): Promise<void> {
    this.stopTimers();
    await this.applying;
    this.stopTimers();
  }

  async stop(): Promise<void> {
    this.stopping = true;
    await this.stopTimersSettled();
    // A worker that handed over leaves the reports to the one that took over.
    if (!this.handedOver) await this.report();
    this.socket?.destroy();
    await this.forwarder.close();
  }

  /**
   * Another agent takes over: this one stops linking, reporting and writing the kernel table, saves what it counted
   * (which the new one reads), and gives its listening sockets, which it keeps accepting on meanwhile.
   */
  async handOver(): Promise<{ key: string; handle: object }[]> {
    this.handedOver = true;
    await this.stopTimersSettled();
    await this.report();
    this.socket?.destroy();
    this.socket = null;
    return this.forwarder.listeningHandles();
  }

  /** The agent that was to take over did not: this one carries on, links again and tells the master why. */
  async resume(rolloutId: number, reason: string): Promise<void> {
    this.handedOver = false;
    this.upgrading = null;
    this.untold = { type: 'upgrade_status', rollout_id: rolloutId, state: 'rolled_back', detail: reason.slice(0, 500) };
    // What the other one counted and was given is on disk: carried on from there.
    this.traffic = this.state.loadTraffic();
    const saved = this.state.loadConfig();
    if (saved) await (this.applying = this.applying.then(() => this.apply(saved, false)).catch(() => undefined));
    this.startTimers(saved?.report_interval_seconds ?? 10);
    this.queueDriftCheck();
    this.connect();
  }

  /**
   * After handing over: takes no new connection, carries those open until they end or `seconds` pass, then closes,
   * handing what it relayed meanwhile to `hand` (every DRAIN_HAND_MS and at the end).
   */
  async drainOut(seconds: number, hand: (traffic: RuleTraffic[]) => Promise<void>): Promise<void> {
    // An agent going back drains too (see Supervisor.upgrade): it stops linking and reporting first.
    this.handedOver = true;
    this.stopTimers();
    this.socket?.destroy();
    await this.forwarder.stopAccepting();
    const deadline = Date.now() + seconds * 1000;
    let handedAt = Date.now();
    while (this.forwarder.openConnections > 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 250));
      if (Date.now() - handedAt >= DRAIN_HAND_MS) {
        void hand(this.forwarder.drain());
        handedAt = Date.now();
      }
    }
    this.stopping = true;
    this.options.log.info('drained: the old agent exits', { open: this.forwarder.openConnections });
    await this.forwarder.close();
    await hand(this.forwarder.drain());
  }

  /** Adds what an agent that handed over relayed to what this one reports next. */
  absorb(traffic: RuleTraffic[]): void {
    this.forwarder.absorb(traffic);
  }

  /**
   * The standbys a master this agent verified told it of, after those it was given: kept (they outlive a restart),
   * each held to what a master it is given must be (http only on this machine, unless it was told otherwise).
   */
  private learnMasters(told: readonly { url: string; pin: string | null }[]): void {
    const hostOf = (url: string) => new URL(url).hostname.replace(/^\[|\]$/g, '');
    // Plain HTTP off this machine only if it was given such a master (it was started with --insecure-http).
    const insecure = this.given.some(({ url }) => url.startsWith('http:') && !isLoopback(hostOf(url)));
    const fine = told.filter(({ url, pin }) => {
      if (masterOrigin(url) !== url) return false;
      return url.startsWith('https:') || (pin === null && (isLoopback(hostOf(url)) || insecure));
    });
    const known = new Set(this.given.map((m) => m.url));
    const learned = fine.filter((m) => !known.has(m.url)).slice(0, 8);
    const next = [...this.given, ...learned];
    if (JSON.stringify(next) === JSON.stringify(this.masters)) return;
    const now = this.master.url;
    this.masters = next;
    this.current = Math.max(
      0,
      next.findIndex((m) => m.url === now),
    );
    this.state.saveMasters(learned);
  }

  /** The master this agent links to, or tries, now. */
  private get master(): { url: string; pin: string | null } {
    return this.masters[this.current]!;
  }

  /** The pins the master may present: the configured one, and the next ones a verified master announced. */
  private acceptedPins(): string[] {
    return this.master.pin === null ? [] : [this.master.pin, ...this.state.loadPins()];
  }

  /**
   * Opens TLS to an https master and checks it (its pin, or the system CAs) before anything
   * is written on the socket; then asks for the link. A master it cannot verify gets nothing.
   */
  private connect(): void {
    const { log } = this.options;
    const url = new URL(this.master.url);
    if (url.protocol === 'http:') return this.upgrade(url, null);
    const host = url.hostname.replace(/^\[|\]$/g, '');
    const pins = this.acceptedPins();
    const socket = tlsConnect({
      host,
      port: Number(url.port || 443),
      servername: isIP(host) ? undefined : host,
      // With a pin, the pin is the trust: the certificate may be the master's own.
      rejectUnauthorized: pins.length === 0,
      minVersion: 'TLSv1.2',
      ALPNProtocols: ['http/1.1'],
    });
    socket.setTimeout(10_000, () => socket.destroy(new Error('timed out connecting to the master')));
    const failed = (error: Error) => {
      log.warn('cannot reach the master', { url: url.origin, error: tlsProblem(error) });
      this.retry();
    };
    socket.once('error', failed);
    socket.once('secureConnect', () => {
      socket.off('error', failed);
      socket.setTimeout(0);
      const refusal = pins.length > 0 ? pinRefusal(socket, pins) : null;
      if (refusal) {
        socket.on('error', () => undefined);
        socket.destroy();
        log.warn('refusing the master: it is not the one this agent pins; nothing was sent', {
          url: url.origin,
          reason: refusal,
        });
        return this.retry();
      }
      const cert = socket.getPeerX509Certificate();
      this.linkPin = cert ? pinOf(cert) : null;
      this.upgrade(url, socket);
    });
  }

  private upgrade(url: URL, socket: TLSSocket | null): void {
    const { log } = this.options;
    const req = httpRequest({
      host: url.hostname.replace(/^\[|\]$/g, ''),
      port: Number(url.port || (socket ? 443 : 80)),
      path: LINK_PATH,
      method: 'GET',
      timeout: 10_000,
      headers: {
        Host: url.host,
        Connection: 'Upgrade',
        Upgrade: LINK_PROTOCOL,
        Authorization: `Bearer ${this.options.token}`,
        'X-Agent-Version': this.options.version,
        'X-Agent-Features': [
          ...AGENT_FEATURES,
          TUNNEL_WS,
          TUNNEL_EXITS,
          ...(this.options.supervisor?.soaks ? ['soak'] : []),
        ].join(','),
        'X-Agent-Epoch': String(this.epoch),
        ...(this.epochMaster ? { 'X-Agent-Primary': this.epochMaster } : {}),
        ...(this.promotion ? { 'X-Agent-Promotion': this.promotion } : {}),
        ...(this.releaseKeyIds ? { 'X-Agent-Release-Keys': this.releaseKeyIds } : {}),
      },
      ...(socket ? { createConnection: () => socket } : {}),
    });
    req.on('upgrade', (_res, linkSocket, head) => this.linked(linkSocket, head));
    req.on('response', (res: IncomingMessage) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk.slice(0, 2000)));
      res.on('end', () => {
        let detail = body;
        let primary: unknown;
        try {
          ({ detail = body, primary } = JSON.parse(body));
        } catch {
          // not a problem document; log it as it came
        }
        log.warn('the master refused the link', { status: res.statusCode, detail });
        // A standby names its primary: that is the master to try next, if it is one of this agent's.
        const named = this.masters.findIndex((m) => m.url === primary);
        this.retry(named >= 0 ? named : undefined);
      });
    });
    req.on('timeout', () => req.destroy(new Error('timed out connecting to the master')));
    req.on('error', (error) => {
      log.warn('cannot reach the master', { url: url.origin, error: error.message });
      this.retry();
    });
    req.end();
  }

  /** Tries again after a while: the master `next` (by index) if given, otherwise the next master in turn. */
  private retry(next?: number): void {
    if (this.stopping || this.handedOver) return;
    this.current = next ?? (this.current + 1) % this.masters.length;
    // The wait grows with each round of every master tried, not each one: while masters fail over, the one that
    // leads next is tried within seconds of taking over, however many were tried meanwhile.
    const ceiling = Math.min(MAX_BACKOFF_MS, 500 * 2 ** Math.floor(this.attempt / this.masters.length));
    this.attempt += 1;
    // Jitter spreads a fleet's reconnects after a master restart.
    this.retryTimer = setTimeout(() => this.connect(), ceiling * (0.5 + Math.random() / 2));
  }

  private linked(socket: Socket, head: Buffer): void {
    if (this.stopping || this.handedOver) return void socket.destroy();
    this.attempt = 0;
    this.socket = socket;
    if (head.length > 0) socket.unshift(head);
    socket.on('error', (error) => this.options.log.warn('the link failed', { error: error.message }));
    socket.on('close', () => {
      if (this.socket === socket) this.socket = null;
      if (!this.stopping && !this.handedOver) {
        this.options.supervisor?.unlinked();
        this.options.log.warn('the link to the master closed; forwarding goes on, reconnecting');
        this.retry();
      }
    });
    keepAlive(socket);
    readMessages(socket, (message) => this.receive(message), MASTER_LINE_BYTES);
    this.options.log.info('linked to the master', { url: this.master.url });
    void this.learnMasterAddresses(socket);
    for (const report of this.traffic.pending) send(socket, { type: 'traffic', ...report });
    this.sendTunnelStatus(true);
    this.sendPaths(socket);
    this.sendHealth();
    // A node shows how it is doing as soon as it links, not a report interval later.
    send(socket, this.vitalsNow());
    if (this.untold) send(socket, this.untold);
    this.untold = null;
    // Told once: on the first link this agent makes.
    if (this.options.supervisor?.fellBack && !this.toldFellBack) {
      send(socket, { type: 'fell_back', ...this.options.supervisor.fellBack });
      this.toldFellBack = true;
    }
  }

  /**
   * The master's addresses, which rules may not reach (unless local targets are allowed): the one this link reached
   * and those its name resolves to here, so that a target naming the master any other way is refused after DNS.
   */
  private async learnMasterAddresses(socket: Socket): Promise<void> {
    // Every master's: a rule reaches none of them, its standbys included.
    const found = await Promise.all(
      this.masters.map(({ url }) => {
        const host = new URL(url).hostname.replace(/^\[|\]$/g, '');
        return isIP(host)
          ? [host]
          : lookup(host, { all: true }).then(
              (all) => all.map((a) => a.address),
              () => [],
            );
      }),
    );
    const addresses = [socket.remoteAddress, ...found.flat()].filter((a): a is string => !!a);
    this.forwarder.setLimits({ masterAddresses: new Set(addresses.map((a) => canonicalAddress(a) ?? a)) });
  }

  private receive(message: Message): void {
    if (message.type === 'ping') return send(this.socket!, { type: 'pong' });
    if (message.type === 'config') {
      const { type: _, next_master_pin, epoch, promotion, ...config } = checkMessage(configMessage, message);
      // A master of an epoch before the highest this agent heard was the primary once, and no longer is (a standby
      // was promoted since): what it says is not applied, and the agent tries its other masters.
      if (epoch !== undefined && epoch < this.epoch) {
        this.options.log.warn('refusing the config of a master of an older epoch: a newer primary serves', {
          url: this.master.url,
          epoch,
          highest_seen: this.epoch,
        });
        this.socket?.destroy();
        return;
      }
      if (epoch !== undefined && epoch > this.epoch) {
        this.epoch = epoch;
        this.state.saveEpoch(epoch);
      }
      if (epoch === this.epoch && promotion !== null && promotion !== this.promotion) {
        this.promotion = promotion;
        this.state.savePromotion(promotion);
      }
      if (epoch === undefined || epoch === this.epoch) this.epochMaster = this.master.url;
      this.learnMasters(config.masters ?? []);
      // What a master this agent verified says it will switch to (see docs/agent-protocol.md): that key, besides the
      // one it presents now. An announcement it withdrew, or replaced, is forgotten.
      const { pin: current } = this.master;
      if (current !== null)
        this.state.keepPins(
          [next_master_pin, this.linkPin].filter((pin): pin is string => pin !== null && pin !== current),
        );
      this.applying = this.applying
        .then(() => this.apply(config, true))
        .catch((error: Error) => this.options.log.error('applying the config failed', { error: error.message }));
      return;
    }
    if (message.type === 'probe') {
      const { id, protocol, targets, timeout_ms, local_targets } = checkMessage(probeMessage, message);
      // Tried under the config its master sent before it (whether local targets are allowed, say), once applied.
      void this.applying
        .then(() => this.forwarder.probe(protocol, targets, timeout_ms, local_targets))
        .then(
          (results) => {
            if (this.socket) send(this.socket, { type: 'probe_result', id, results });
          },
          // A probe that fails fails alone: the master answers its caller when no result comes.
          (error: Error) => this.options.log.error('a probe failed', { id, error: error.message }),
        );
      return;
    }
    if (message.type === 'upgrade') return this.runBundle(checkMessage(upgradeMessage, message));
    if (message.type === 'over_budget') {
      // A master this agent verified says it writes too much: what it sent past its budget was dropped.
      const { detail } = checkMessage(overBudgetMessage, message);
      this.options.log.warn('the master dropped messages of this agent: over its write budget', { detail });
      return;
    }
    if (message.type === 'traffic_ack') {
      const { stream, seq } = checkMessage(trafficAckMessage, message);
      this.traffic.pending = this.traffic.pending.filter((r) => r.stream !== stream || r.seq > seq);
      this.state.saveTraffic(this.traffic);
    }
  }

  /**
   * A rollout's order to run another bundle: kept once its signature verifies against this agent's release keys, then
   * run by the supervisor in this one's place (see supervisor.ts). The master hears of a refusal at once, and of a
   * success from the new agent linking.
   */
  private runBundle(order: UpgradeMessage): void {
    const status = (state: UpgradeStatusMessage['state'], detail: string) => {
      if (this.socket) send(this.socket, { type: 'upgrade_status', rollout_id: order.rollout_id, state, detail });
    };
    const { supervisor, releaseKeys = [], stateDir, log } = this.options;
    if (!supervisor || releaseKeys.length === 0)
      return status('refused', 'this agent trusts no release key (--release-key): it runs no other bundle');
    if (this.upgrading !== null) return status('refused', `the upgrade of rollout ${this.upgrading} is under way`);
    let kept: KeptBundle;
    try {
      kept = keepBundle(stateDir, releaseKeys, Buffer.from(order.bundle, 'base64'), order.signature);
    } catch (error) {
      if (!(error instanceof BundleRefused)) throw error;
      log.warn('refused an agent bundle', { version: order.version, reason: error.message });
      return status('refused', `the bundle is refused: ${error.message}`);
    }
    if (kept.version !== order.version)
      return status('refused', `the bundle is signed as ${kept.version}, not ${order.version}`);
    // A master may only move an agent on: an older signed bundle may hold what a newer one fixed.
    if ((versionOrder(kept.version) ?? '') < (versionOrder(this.options.version) ?? ''))
      return status(
        'refused',
        `${kept.version} is older than this agent (${this.options.version}): an upgrade never goes back; a ` +
          'reinstall puts the agent the master carries',
      );
    this.upgrading = order.rollout_id;
    const { gate_seconds, soak_seconds, rollout_id } = order;
    log.info('upgrading', { from: this.options.version, to: kept.version, gate_seconds, soak_seconds });
    const soak = soak_seconds > 0 ? `, then stays running and linked for ${soak_seconds} s` : '';
    status(
      'restarting',
      `${kept.version} starts; ${this.options.version} comes back unless it links and applies within ` +
        `${gate_seconds} s${soak}`,
    );
    supervisor.upgrade({ bundle: kept, gate_seconds, soak_seconds, rollout_id });
  }

  private async apply(config: SavedConfig, acknowledge: boolean): Promise<void> {
    this.forwarder.setLimits({
      allowLocalTargets: config.allow_local_targets ?? false,
      ...(config.tcp_idle_timeout_seconds ? { tcpIdleMs: config.tcp_idle_timeout_seconds * 1000 } : {}),
      ...(config.max_connections_per_source ? { maxConnectionsPerSource: config.max_connections_per_source } : {}),
    });
    const minSeconds = config.srv_ttl_min_seconds ?? DEFAULT_SRV_BOUNDS.minSeconds;
    this.forwarder.srvBounds = {
      minSeconds,
      maxSeconds: Math.max(minSeconds, config.srv_ttl_max_seconds ?? DEFAULT_SRV_BOUNDS.maxSeconds),
    };
    const results = await this.forwarder.apply(config.rules, config.tunnels ?? []);
    const raKept = this.forwarder.raKept.splice(0);
    if (raKept.length > 0)
      this.options.log.info('IPv6 forwarding is on: router advertisements stay accepted (accept_ra=2)', {
        interfaces: raKept,
      });
    this.watchKernel();
    this.state.saveConfig(config);
    if (config.report_interval_seconds !== this.config?.report_interval_seconds)
      this.scheduleReports(config.report_interval_seconds);
    this.config = config;
    const failed = results.filter((r) => r.state === 'failed');
    this.options.log.info('applied config', {
      version: config.version,
      rules: results.length,
      failed: failed.length,
      errors: failed.slice(0, 5).map((r) => ({ id: r.id, ...r.error })),
    });
    if (!acknowledge || !this.socket) return;
    this.sendPaths(this.socket);
    // The master starts a rule whose targets or checks changed over at unknown: it hears where they stand.
    this.sendHealth();
    // The master reads at most MAX_ENTRIES results a message; all but the last say more follow.
    const pieces = inPieces(results);
    pieces.forEach((piece, i) =>
      send(this.socket!, { type: 'applied', version: config.version, results: piece, partial: i < pieces.length - 1 }),
    );
    if (!this.toldReady) this.options.supervisor?.ready();
    this.toldReady = true;
  }

  private tunnelsChanged(): void {
    const reports = this.forwarder.tunnelReports();
    // A move of an entry's choice of exit is told at once: it is rare (the choice's hysteresis sees to it), and the
    // operator watching it should not wait out the delay that gathers the rest.
    const moved = reports.filter((report) => report.chosen !== this.tunnelsSent.get(report.id)?.report.chosen);
    for (const { id, chosen, switched } of moved)
      if (chosen !== undefined && this.tunnelsSent.has(id))
        this.options.log.info('tunnel exit switched', { tunnel_id: id, to: chosen, reason: switched?.reason ?? null });
    if (moved.some((report) => report.chosen !== undefined) && !this.stopping) {
      clearTimeout(this.tunnelTimer);
      this.tunnelTimer = undefined;
      this.sendTunnelStatus(false);
    }
    for (const report of reports) {
      const logged = this.tunnelsLogged.get(report.id);
      if (logged === report.state) continue;
      this.tunnelsLogged.set(report.id, report.state);
      if (report.state === 'up') this.options.log.info('tunnel up', { tunnel_id: report.id });
      else if (logged !== undefined)
        this.options.log.warn('tunnel down', { tunnel_id: report.id, error: report.error });
    }
    if (this.tunnelTimer || this.stopping) return;
    this.tunnelTimer = setTimeout(() => {
      this.tunnelTimer = undefined;
      this.sendTunnelStatus(false);
    }, TUNNEL_STATUS_DELAY_MS);
  }

  /**
   * Tells the master how the node's tunnel ends stand: every end when `all`, otherwise those
   * whose state or error changed, and round-trip times at most once a report interval.
   */
  private sendTunnelStatus(all: boolean): void {
    const socket = this.socket;
    if (!socket) return;
    const now = Date.now();
    const interval = (this.config?.report_interval_seconds ?? 10) * 1000;
    const reports = this.forwarder.tunnelReports();
    const ids = new Set(reports.map((r) => r.id));
    for (const id of this.tunnelsSent.keys()) if (!ids.has(id)) this.tunnelsSent.delete(id);
    const due = reports.filter((report) => {
      const sent = this.tunnelsSent.get(report.id);
      return (
        all ||
        !sent ||
        sent.report.state !== report.state ||
        sent.report.error !== report.error ||
        sent.report.chosen !== report.chosen ||
        ((sent.report.rtt_us !== report.rtt_us || sent.report.loss_percent !== report.loss_percent) &&
          now - sent.at >= interval)
      );
    });
    if (due.length === 0) return;
    for (const report of due) this.tunnelsSent.set(report.id, { report, at: now });
    for (const piece of inPieces(due)) {
      const tunnels = piece.map(({ id, state, error, rtt_us, loss_percent, exits, chosen, switched }) => ({
        id,
        state,
        error: error === null ? null : error.slice(0, 500),
        rtt_us,
        // Only where known: a master older than it ends a link on a field it does not know.
        ...(loss_percent === null || !this.masterReads('tunnel_status.loss_percent') ? {} : { loss_percent }),
        ...(exits === undefined || !this.masterReads('tunnel_status.exits')
          ? {}
          : {
              exits: exits.map((exit) => ({ ...exit, error: exit.error === null ? null : exit.error.slice(0, 500) })),
              chosen,
              switched,
            }),
      }));
      send(socket, { type: 'tunnel_status', tunnels });
    }
  }

  /** How the targets of the node's health-checked rules stand, all of them (at most MAX_ENTRIES rules a message). */
  private sendHealth(): void {
    const rules = this.forwarder.healthReports();
    if (!this.socket || rules.length === 0) return;
    for (const piece of inPieces(rules)) send(this.socket, { type: 'health', rules: piece });
  }

  /** Checks the kernel table soon, once for a burst of ruleset changes, in turn with applying configs. */
  private queueDriftCheck(): void {
    if (this.driftCheckQueued || this.stopping) return;
    this.driftCheckQueued = true;
    setTimeout(() => {
      this.driftCheckQueued = false;
      this.applying = this.applying
        .then(() => this.checkDrift())
        .catch((error: Error) => this.options.log.warn('checking the kernel table failed', { error: error.message }));
    }, 100).unref();
  }

  /** Watches the ruleset while the kernel path is in use here, and not otherwise. */
  private watchKernel(): void {
    const inUse = this.forwarder.kernelState.available;
    if (inUse && !this.rulesetWatch) this.rulesetWatch = watchRuleset(() => this.queueDriftCheck());
    if (!inUse && this.rulesetWatch) {
      this.rulesetWatch.close();
      this.rulesetWatch = null;
    }
  }

  /**
   * Puts the kernel table back when something else removed or changed it, and tells the master; when it cannot,
   * applies the config again, so that every rule says the relay carries it (never a kernel that does not).
   */
  private async checkDrift(): Promise<void> {
    const outcome = await this.forwarder.checkKernel();
    const offload = this.forwarder.kernelState.available && (await this.forwarder.checkFlowOffload());
    if (offload) {
      this.options.log.warn('flow offload on this node: the kernel counts no traffic it offloads', {
        devices: this.forwarder.flowOffload,
      });
      if (this.socket && outcome !== 'restored') this.sendPaths(this.socket);
    }
    if (outcome === 'restored') {
      this.options.log.warn('the kernel table was removed or changed by something else: written back', {
        drifts: this.forwarder.kernelDrift.count,
      });
      if (this.socket) this.sendPaths(this.socket);
    } else if (outcome === 'failed' && this.config) {
      this.options.log.warn('the kernel table could not be written back: the relay carries its rules', {
        reason: this.forwarder.kernelState.available ? null : this.forwarder.kernelState.reason,
      });
      await this.apply(this.config, true);
    }
  }

  /** Which ways of forwarding this node can use, and why not, and the kernel table's drifts, for the node's answer. */
  private sendPaths(socket: Socket): void {
    const kernel = this.forwarder.kernelState;
    const { count, lastAt } = this.forwarder.kernelDrift;
    const drift = { drifts: count, last_drift_at: lastAt, flow_offload: this.forwarder.flowOffload };
    send(socket, {
      type: 'paths',
      kernel: kernel.available
        ? { available: true, reason: null, ...drift }
        : { available: false, reason: kernel.reason, ...drift },
    });
  }

  private scheduleReports(seconds: number): void {
    clearInterval(this.reportTimer);
    this.reportTimer = setInterval(() => void this.report(), seconds * 1000);
  }

  /** The node's vitals, with what of them the master reads. */
  private vitalsNow() {
    const relay = this.masterReads('vitals.relay') ? { ...this.forwarder.relayThreads } : undefined;
    return this.vitals.read(this.masterReads('vitals.addresses'), relay);
  }

  /** Whether the master reads `field` of an agent's message (it names it in its config's master_reads). */
  private masterReads(field: MasterRead): boolean {
    return this.config?.master_reads?.includes(field) ?? false;
  }

  /** Reports are made one after another; vitals go with each (and on linking), the master keeps the latest. */
  private report(): Promise<void> {
    this.reporting = this.reporting
      .then(() => {
        if (this.socket) send(this.socket, this.vitalsNow());
        return this.reportNow();
      })
      .catch((error: Error) => this.options.log.error('reporting traffic failed', { error: error.message }));
    return this.reporting;
  }

  /**
   * Counts what crossed the relays and the kernel since the last report, keeps it until acknowledged, and sends it:
   * one report per MAX_ENTRIES rules, each with its own sequence number. The kernel's counters only grow: what was
   * reported of them is kept with the reports (in the same file, written at once), so a restart neither loses nor
   * repeats a byte.
   */
  private async reportNow(): Promise<void> {
    const kernel = await this.forwarder.kernelCounts();
    const drained = addKernel(this.forwarder.drain(), kernel, this.traffic);
    if (drained.length === 0) {
      if (kernel) this.state.saveTraffic(this.traffic);
      return this.sendLive(drained);
    }
    const traffic = this.traffic;
    const at = Math.floor(Date.now() / 1000);
    let fresh: TrafficReport[] = inPieces(drained).map((rules) => ({
      stream: traffic.stream,
      seq: ++traffic.seq,
      at,
      rules,
    }));
    traffic.pending.push(...fresh);
    if (traffic.pending.length > MAX_PENDING_REPORTS) {
      const merged = new Map<number, RuleTraffic>();
      for (const r of traffic.pending.flatMap((p) => p.rules)) addTraffic(merged, r.id, r);
      traffic.pending = inPieces([...merged.values()]).map((rules) => ({
        stream: traffic.stream,
        seq: ++traffic.seq,
        at,
        rules,
      }));
      fresh = traffic.pending;
    }
    this.state.saveTraffic(traffic);
    if (this.socket) for (const report of fresh) send(this.socket, { type: 'traffic', ...report });
    await this.sendLive(drained);
  }

  /**
   * What each rule carries now and its rates since the last report (`drained`: its bytes since then), where the
   * master reads it: never kept, a gauge of this moment.
   */
  private async sendLive(drained: readonly RuleTraffic[]): Promise<void> {
    const now = Date.now();
    const seconds = Math.max(1, (now - this.liveAt) / 1000);
    this.liveAt = now;
    if (!this.socket || !this.masterReads('live')) return;
    const open = await this.forwarder.openByRule();
    const rules = new Map<number, { id: number; open: number; rate_in: number; rate_out: number }>();
    for (const [id, count] of open) rules.set(id, { id, open: count, rate_in: 0, rate_out: 0 });
    for (const { id, bytes_in, bytes_out } of drained) {
      const rule = rules.get(id) ?? { id, open: 0, rate_in: 0, rate_out: 0 };
      rule.rate_in = Math.round(bytes_in / seconds);
      rule.rate_out = Math.round(bytes_out / seconds);
      if (rule.open + rule.rate_in + rule.rate_out > 0) rules.set(id, rule);
    }
    const round = ++this.liveRound;
    const pieces = rules.size === 0 ? [[]] : inPieces([...rules.values()]);
    if (this.socket) for (const piece of pieces) send(this.socket, { type: 'live', round, rules: piece });
  }
}

/**
 * The relays' traffic with what the kernel counted since it was last reported (`traffic.kernel`, updated here). A
 * counter below what was reported started over (a new table): all of it is new.
 */
export function addKernel(relayed: RuleTraffic[], kernel: KernelCounts | null, traffic: TrafficState): RuleTraffic[] {
  if (!kernel) return relayed;
  const seen = new Map(kernel.fresh ? [] : (traffic.kernel ?? []).map((r) => [r.id, r]));
  const totals = new Map(relayed.map((r) => [r.id, { ...r }]));
  // What grew since it was last reported; a counter below that started over (a new table): all of it is new.
  const grown = (now: number, before: number) => (now >= before ? now - before : now);
  for (const [id, now] of kernel.counts) {
    const before = seen.get(id) ?? { id, bytes_in: 0, bytes_out: 0 };
    const bytesIn = grown(now.bytes_in, before.bytes_in);
    const bytesOut = grown(now.bytes_out, before.bytes_out);
    const refused = grown(now.refused ?? 0, before.refused ?? 0);
    seen.set(id, {
      id,
      bytes_in: now.bytes_in,
      bytes_out: now.bytes_out,
      ...(now.refused === undefined ? {} : { refused: now.refused }),
    });
    if (bytesIn === 0 && bytesOut === 0 && refused === 0) continue;
    const total = totals.get(id) ?? { id, bytes_in: 0, bytes_out: 0 };
    total.bytes_in += bytesIn;
    total.bytes_out += bytesOut;
    if (refused > 0) total.refused = (total.refused ?? 0) + refused;
    totals.set(id, total);
  }
  for (const id of kernel.removed) seen.delete(id);
  traffic.kernel = [...seen.values()];
  return [...totals.values()];
}
