// The master acting on its own: what its clock does (expiries, quota periods, the license), audited as the system.

import { SYSTEM_ACTOR } from '../store/audit.ts';
import type { Requester } from './write.ts';

/**
 * The master's own writes, audited as `action` by the system (or as each entry says): there is no caller, so no scope
 * to check.
 */
export function theMaster(action?: string): Requester {
  return {
    actor: SYSTEM_ACTOR,
    action,
    get caller(): never {
      throw new Error('the master acts on its own, for no caller');
    },
  };
}
