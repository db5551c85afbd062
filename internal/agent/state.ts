// What the agent keeps on disk, so it forwards through a master outage and its own restart
// and never counts traffic twice: the last applied config, and the traffic report stream.

import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TunnelEnd } from '../domain/link.ts';
import { writeFileAtomic } from '../runtime/files.ts';
import type { ForwardRule, RuleTraffic } from '../domain/rules.ts';

const MAX_LEARNED_PINS = 4;

export interface SavedConfig {
  version: number;
  report_interval_seconds: number;
  /** Absent in configs saved by older agents: the forwarder's defaults apply. */
  tcp_idle_timeout_seconds?: number;
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
}

export class AgentState {
  constructor(private readonly dir: string) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  }

  loadConfig(): SavedConfig | null {
    return this.read<SavedConfig>('config.json');
  }

  saveConfig(config: SavedConfig): void {
    this.write('config.json', config);
  }

  /** The report stream; a new state dir starts a new stream. */
  loadTraffic(): TrafficState {
    return this.read<TrafficState>('traffic.json') ?? { stream: randomUUID(), seq: 0, pending: [] };
  }

  saveTraffic(state: TrafficState): void {
    this.write('traffic.json', state);
  }

  /** Master key pins learned over a verified link, newest first. */
  loadPins(): string[] {
    return this.read<string[]>('pins.json') ?? [];
  }

  /** Keeps `pins` (at most MAX_LEARNED_PINS of them) as the ones learned, forgetting any other. */
  keepPins(pins: readonly string[]): void {
    const kept = [...new Set(pins)].slice(0, MAX_LEARNED_PINS);
    if (JSON.stringify(kept) !== JSON.stringify(this.loadPins())) this.write('pins.json', kept);
  }

  private read<T>(name: string): T | null {
    try {
      return JSON.parse(readFileSync(join(this.dir, name), 'utf8')) as T;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw new Error(`${join(this.dir, name)} is unreadable: ${(error as Error).message}`);
    }
  }

  /** A crash leaves the old file or the new one, never half of one. */
  private write(name: string, value: unknown): void {
    const path = join(this.dir, name);
    writeFileAtomic(path, JSON.stringify(value));
  }
}
