// What the agent keeps on disk, so it forwards through a master outage and its own restart
// and never counts traffic twice: the last applied config, and the traffic report stream.

import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { configMessage, COUNT, PIN, type TunnelEnd } from '../domain/link.ts';
import { array, integer, nullable, object, optional, string, validate } from '../schema/schema.ts';
import type { SrvRecord } from '../relay/dns.ts';
import { writeFileAtomic } from '../runtime/files.ts';
import { MAX_STATEMENT_BYTES } from '../tls/promotion.ts';
import type { ForwardRule, RuleTraffic } from '../domain/rules.ts';

const MAX_LEARNED_PINS = 4;

const pinList = array(PIN, { max: 64 });
/** The SRV records last read for each name the rules use (see forward/srv.ts): what a restart starts from. */
const srvAnswers = array(
  object({
    name: string({ min: 1, max: 253 }),
    records: array(
      object({
        priority: integer({ min: 0, max: 65535 }),
        weight: integer({ min: 0, max: 65535 }),
        port: integer({ min: 0, max: 65535 }),
        target: string({ max: 253 }),
      }),
      { max: 1024 },
    ),
  }),
  { max: 200_000 },
);
const masterList = array(object({ url: string({ min: 8, max: 300 }), pin: nullable(PIN) }), { max: 8 });
/** A rule's counts as reported: refused too, which the controls count (absent: none). */
const reported = object({ id: COUNT, bytes_in: COUNT, bytes_out: COUNT, refused: optional(COUNT) });
const trafficState = object({
  stream: string({ min: 1, max: 64 }),
  seq: COUNT,
  pending: array(
    object({
      stream: string({ min: 1, max: 64 }),
      seq: COUNT,
      at: COUNT,
      rules: array(reported, { max: 1_000_000 }),
    }),
    { max: 1_000_000 },
  ),
  kernel: optional(array(reported, { max: 1_000_000 }), []),
});

export interface SavedConfig {
  version: number;
  report_interval_seconds: number;
  /** Absent in configs saved by older agents: the forwarder's defaults apply. */
  tcp_idle_timeout_seconds?: number;
  srv_ttl_min_seconds?: number;
  /** Absent in configs of masters older than it: they read no field agents added since (see MASTER_READS). */
  master_reads?: string[];
  srv_ttl_max_seconds?: number;
  max_connections_per_source?: number;
  /** Absent in configs saved by older agents: local targets are not allowed. */
  allow_local_targets?: boolean;
  rules: ForwardRule[];
  /** Absent in configs saved by agents older than tunnels. Holds the tunnels' private keys: the file is 0600. */
  tunnels?: TunnelEnd[];
}

export interface TrafficReport {
  stream: string;
  seq: number;
  at: number;
  rules: RuleTraffic[];
}

export interface TrafficState {
  stream: string;
  seq: number;
  /** Reports not yet acknowledged by the master, oldest first. */
  pending: TrafficReport[];
  /** The kernel counters' values already counted in a report, per rule (absent: none yet). */
  kernel?: RuleTraffic[];
}

/** A saved file found damaged and set aside, to be rebuilt from the master. */
export interface Damaged {
  file: string;
  keptAs: string;
  reason: string;
}

export class AgentState {
  constructor(
    private readonly dir: string,
    private readonly onDamaged: (damaged: Damaged) => void = () => undefined,
  ) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  }

  /** The config last applied, or null (none yet, or its file was damaged: the master sends it again). */
  loadConfig(): SavedConfig | null {
    return this.read('config.json', (value) => {
      const { errors } = validate(configMessage, { next_master_pin: null, ...(value as object), type: 'config' });
      return errors.length === 0 ? (value as SavedConfig) : `not a config: ${errors[0]!.pointer} ${errors[0]!.detail}`;
    });
  }

  saveConfig(config: SavedConfig): void {
    this.write('config.json', config);
  }

  /**
   * The report stream; a new state dir, or a damaged file, starts a new stream (traffic it had not reported is lost,
   * never counted twice).
   */
  loadTraffic(): TrafficState {
    const saved = this.read('traffic.json', (value) => {
      const { errors } = validate(trafficState, value);
      return errors.length === 0 ? (value as TrafficState) : `not a report stream: ${errors[0]!.pointer}`;
    });
    return saved ?? { stream: randomUUID(), seq: 0, pending: [] };
  }

  saveTraffic(state: TrafficState): void {
    this.write('traffic.json', state);
  }

  /** Master key pins learned over a verified link, newest first; none if the file was damaged. */
  loadPins(): string[] {
    return (
      this.read('pins.json', (value) => {
        const { errors } = validate(pinList, value);
        return errors.length === 0 ? (value as string[]) : 'not a list of pins';
      }) ?? []
    );
  }

  /** The standby masters its masters told it of (see Agent.learnMasters). */
  loadMasters(): { url: string; pin: string | null }[] {
    return (
      this.read('masters.json', (value) => {
        const { errors } = validate(masterList, value);
        return errors.length === 0 ? (value as { url: string; pin: string | null }[]) : 'not a list of masters';
      }) ?? []
    );
  }

  saveMasters(masters: readonly { url: string; pin: string | null }[]): void {
    this.write('masters.json', masters);
  }

  /** The highest epoch of a master this agent has heard (1 before any told it one). */
  loadEpoch(): number {
    return (
      this.read('epoch.json', (value) =>
        Number.isSafeInteger(value) && (value as number) >= 1 ? (value as number) : 'not an epoch',
      ) ?? 1
    );
  }

  saveEpoch(epoch: number): void {
    this.write('epoch.json', epoch);
  }

  /** The statement of the primary of that epoch (see Agent.promotion); null: none heard. */
  loadPromotion(): string | null {
    const kept = this.read('promotion.json', (value) => {
      const statement = (value as { statement?: unknown } | null)?.statement;
      return typeof statement === 'string' && statement.length <= MAX_STATEMENT_BYTES ? { statement } : 'not one';
    });
    return kept?.statement ?? null;
  }

  savePromotion(statement: string): void {
    this.write('promotion.json', { statement });
  }

  /** The SRV records last read, by name; none when there is no file, or it was damaged (the names are read again). */
  loadSrv(): { name: string; records: SrvRecord[] }[] {
    return (
      this.read('srv.json', (value) => {
        const { errors } = validate(srvAnswers, value);
        return errors.length === 0 ? (value as { name: string; records: SrvRecord[] }[]) : 'not SRV answers';
      }) ?? []
    );
  }

  saveSrv(answers: readonly { name: string; records: readonly SrvRecord[] }[]): void {
    this.write('srv.json', answers);
  }

  /** Keeps `pins` (at most MAX_LEARNED_PINS of them) as the ones learned, forgetting any other. */
  keepPins(pins: readonly string[]): void {
    const kept = [...new Set(pins)].slice(0, MAX_LEARNED_PINS);
    if (JSON.stringify(kept) !== JSON.stringify(this.loadPins())) this.write('pins.json', kept);
  }

  /**
   * The file `name` as `check` takes it, or null when there is none. A file that cannot be read as JSON or that `check`
   * refuses (it returns why) is renamed aside (`<name>.damaged-<time>`), reported, and is as good as none.
   */
  private read<T>(name: string, check: (value: unknown) => T | string): T | null {
    const path = join(this.dir, name);
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw new Error(`${path} is unreadable: ${(error as Error).message}`);
    }
    let checked: T | string;
    try {
      checked = check(JSON.parse(text));
    } catch (error) {
      checked = `not JSON: ${(error as Error).message}`;
    }
    if (typeof checked !== 'string') return checked;
    const keptAs = `${path}.damaged-${Date.now()}`;
    renameSync(path, keptAs);
    this.onDamaged({ file: path, keptAs, reason: checked });
    return null;
  }

  /** A crash leaves the old file or the new one, never half of one. */
  private write(name: string, value: unknown): void {
    const path = join(this.dir, name);
    writeFileAtomic(path, JSON.stringify(value));
  }
}
