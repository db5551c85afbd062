// A rule as the agent's forwarder takes it, for tests that drive the relay without a master.

import type { ForwardRule } from '../internal/domain/rules.ts';
import { NO_CONTROLS } from './helpers.ts';

/** TCP, round robin over `targets`, local targets allowed, no controls but those in `extra`. */
export function forwardRule(id: number, listen_port: number, targets: string[], extra: Partial<ForwardRule> = {}) {
  const made: ForwardRule = {
    id,
    protocol: 'tcp',
    listen_port,
    listen_port_end: null,
    targets,
    strategy: 'round_robin',
    weights: null,
    enabled: true,
    tunnel_id: null,
    forwarding: 'auto',
    local_targets: true,
    ...NO_CONTROLS,
    ...extra,
  };
  return made;
}
