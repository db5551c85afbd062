// A tunnel's states and transports, as lists report and filter them.

export const tunnelStatuses = ['pending', 'up', 'down'] as const;
export type TunnelStatus = (typeof tunnelStatuses)[number];
export const transports = ['tls', 'ws'] as const;
export type TunnelTransport = (typeof transports)[number];
/** How a tunnel of several exits picks one for new connections: the first up, or the one its entry measures best. */
export const exitStrategies = ['failover', 'lowest_latency'] as const;
export type ExitStrategy = (typeof exitStrategies)[number];
/** The most exits a tunnel names: each is a session its entry keeps up and measures. */
export const MAX_TUNNEL_EXITS = 8;
/** Why an entry's choice of exit moved: the first exit up, the chosen one down, a better one, the preferred back. */
export const switchReasons = ['first_up', 'exit_down', 'lower_latency', 'preferred_back'] as const;
export type SwitchReason = (typeof switchReasons)[number];
/**
 * How an entry measures its exits and when it moves between them, by default (each a setting, see tunnel/choice.ts):
 * a round every 5 s; a better exit three rounds in a row, ahead by 20 ms and by 15 %; 30 s since the last move.
 */
export const DEFAULT_SWITCHING = { round_seconds: 5, rounds: 3, gain_ms: 20, gain_percent: 15, cooldown_seconds: 30 };

/** How one exit of a tunnel stands as its entry measures it, and reports it. */
export interface ExitReport {
  node_id: number;
  state: 'up' | 'down';
  error: string | null;
  rtt_us: number | null;
  loss_percent: number | null;
  /** The exit's connect to the probe target, in µs; null: not probed, or not answered. */
  probe_us: number | null;
  /** The exit reached no probe target at the last round. */
  probe_failed: boolean;
  /** What the entry's choice goes by (tunnel/choice.ts scoreOf); null: not usable. */
  score_ms: number | null;
}
