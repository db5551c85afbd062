// What a relay holds to, shared with every relay of an agent so that a change applies to their next connection.

import type { DialPolicy } from './dial.ts';

export interface Limits extends DialPolicy {
  maxConnectionsPerRule: number;
  /** Open connections (and UDP sessions) one client address may hold on one rule; more are turned away. */
  maxConnectionsPerSource: number;
  /** A relayed TCP connection with no bytes either way for this long is closed. */
  tcpIdleMs: number;
  maxUdpSessionsPerRule: number;
  udpIdleMs: number;
}

export const DEFAULT_LIMITS: Limits = {
  allowLocalTargets: false,
  maxConnectionsPerRule: 10_000,
  maxConnectionsPerSource: 256,
  tcpIdleMs: 3_600_000,
  maxUdpSessionsPerRule: 10_000,
  udpIdleMs: 60_000,
};
