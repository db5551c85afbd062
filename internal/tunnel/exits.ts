// The entry end of a tunnel of one exit or several: a session to each exit (a TunnelEntry), measured every round
// (PINGs, and where there is something to probe, a connect through the exit to its probe target), and a choice of
// the exit new connections go to (choice.ts). A connection stays on the session it was opened on.

import type { ExitReport, ExitStrategy, SwitchReason, TunnelTransport } from '../domain/tunnels.ts';
import type { DatagramDial, DialPolicy, TcpDial } from '../relay/dial.ts';
import { ExitChoice, usableScores, type Measure, type Switching } from './choice.ts';
import { TunnelEntry, type ProbeResult } from './entry.ts';
import type { TunnelView } from './wire.ts';

export interface EntryExit {
  node_id: number;
  /** The exit node's address and tunnel port. */
  host: string;
  port: number;
  /** The exit's key. */
  peer_pin: string;
  /** Transport ws: the WebSocket URL to dial instead of the exit's port. */
  via: string | null;
}

export interface EntriesConfig {
  id: number;
  cert: string;
  key: string;
  transport: TunnelTransport;
  /** In the order the tunnel names them (failover's preference). */
  exits: EntryExit[];
  strategy: ExitStrategy;
  switching: Switching;
  /** How often each exit is measured (a round). */
  round_ms: number;
  /** Whether the exits have something to probe: several exits, or a probe target named. */
  probing: boolean;
}

/** The last move of the choice: from which exit to which (by node), why, and the scores then. */
export interface SwitchView {
  from: number | null;
  to: number | null;
  reason: SwitchReason;
  from_score_ms: number | null;
  to_score_ms: number | null;
  at: string;
}

export interface EntryView extends TunnelView {
  exits: ExitReport[];
  /** The exit node new connections go to; null while none is up. */
  chosen: number | null;
  switched: SwitchView | null;
}

export class TunnelEntries {
  private readonly entries: TunnelEntry[];
  private readonly probes: ProbeResult[];
  private readonly choice: ExitChoice;
  private switched: SwitchView | null = null;
  private readonly timer: NodeJS.Timeout;
  private closed = false;

  constructor(
    readonly config: EntriesConfig,
    private readonly onView: () => void,
    /** What a WebSocket's URL may reach (see TunnelEntry). */
    policy: DialPolicy,
  ) {
    const { id, cert, key, transport, round_ms } = config;
    this.probes = config.exits.map(() => null);
    this.choice = new ExitChoice(config.strategy, config.switching);
    this.entries = config.exits.map(
      (exit, index) =>
        new TunnelEntry(
          // PINGed by the rounds, so that a round's look goes by measures all taken in it.
          { id, cert, key, transport, ...exit, ping_interval_ms: 0 },
          () => this.changed(index),
          policy,
        ),
    );
    this.timer = setInterval(() => this.round(), round_ms);
  }

  get current(): EntryView {
    const exits = this.exitViews();
    const chosen = this.choice.chosen;
    const lead = chosen === null ? null : this.entries[chosen]!.current;
    const errors = exits.flatMap(({ error, node_id }) =>
      error === null ? [] : [exits.length > 1 ? `exit node ${node_id}: ${error}` : error],
    );
    return {
      state: lead?.state === 'up' ? 'up' : 'down',
      error: lead ? lead.error : errors.join('; ') || 'connecting to the exit node',
      rtt_us: lead?.rtt_us ?? null,
      loss_percent: lead?.loss_percent ?? null,
      exits,
      chosen: chosen === null ? null : this.config.exits[chosen]!.node_id,
      switched: this.switched,
    };
  }

  /** A TCP dial through the exit chosen when it is called (see TunnelEntry.dialTcp). */
  dialTcp(ruleId: number): TcpDial {
    return (onOpen, onFail, client) => this.lead().dialTcp(ruleId)(onOpen, onFail, client);
  }

  /** A UDP session through the exit chosen when it opens. */
  dialDatagrams(ruleId: number): DatagramDial {
    return (onReply, onEnd, client) => this.lead().dialDatagrams(ruleId)(onReply, onEnd, client);
  }

  close(): void {
    this.closed = true;
    clearInterval(this.timer);
    for (const entry of this.entries) entry.close();
  }

  /** The chosen exit's session; before any is up, the first exit's (whose dial waits for it, or fails). */
  private lead(): TunnelEntry {
    return this.entries[this.choice.chosen ?? 0]!;
  }

  private exitViews(): ExitReport[] {
    const measures = this.measures();
    const scores = usableScores(measures);
    return this.entries.map((entry, index) => {
      const { state, error, rtt_us, loss_percent } = entry.current;
      const probe = this.probes[index];
      return {
        node_id: this.config.exits[index]!.node_id,
        ...{ state, error, rtt_us, loss_percent },
        probe_us: probe && probe !== 'failed' ? Math.round(probe.ms * 1000) : null,
        probe_failed: probe === 'failed',
        score_ms: scores[index] ?? null,
      };
    });
  }

  private measures(): Measure[] {
    return this.entries.map((entry, index) => {
      const { state, rtt_us, loss_percent } = entry.current;
      const probe = this.probes[index];
      return {
        up: state === 'up',
        rtt_ms: rtt_us === null ? null : rtt_us / 1000,
        loss_percent,
        probe_ms: probe && probe !== 'failed' ? probe.ms : null,
        probe_failed: probe === 'failed',
      };
    });
  }

  /** An exit's session came up, went down or measured: a chosen exit down is left at once. */
  private changed(index: number): void {
    // Undefined while the entries are being made (an entry may report as it starts): the first round looks.
    const entry = this.entries as TunnelEntry[] | undefined;
    if (!entry) return;
    if (entry[index]!.current.state !== 'up') this.probes[index] = null;
    this.look(false);
    this.onView();
  }

  /**
   * A measuring round: every exit PINGed and, where there is something to probe, probed; the choice looks once all
   * have answered, or at the latest before the next round (what has not answered by then is not counted in it).
   */
  private round(): void {
    const { round_ms, probing } = this.config;
    let looked = false;
    const look = () => {
      if (looked || this.closed) return;
      looked = true;
      clearTimeout(deadline);
      if (this.look(true)) this.onView();
    };
    const deadline = setTimeout(look, round_ms * 0.9);
    const measured = this.entries.map(async (entry, index) => {
      const probe = probing ? entry.probe(round_ms * 0.9) : null;
      await entry.ping();
      const result = await probe;
      if (probing && !this.closed) this.probes[index] = entry.current.state === 'up' ? result : null;
    });
    void Promise.all(measured).then(look);
  }

  /** Moves the choice where it must; true when it moved. */
  private look(measured: boolean): boolean {
    if (this.closed) return false;
    const scores = usableScores(this.measures());
    const moved = this.choice.look(scores, performance.now(), measured);
    if (!moved) return false;
    const nodeOf = (index: number | null) => (index === null ? null : this.config.exits[index]!.node_id);
    this.switched = {
      from: nodeOf(moved.from),
      to: nodeOf(moved.to),
      reason: moved.reason,
      from_score_ms: moved.from === null ? null : (scores[moved.from] ?? null),
      to_score_ms: moved.to === null ? null : (scores[moved.to] ?? null),
      at: new Date().toISOString(),
    };
    return true;
  }
}
