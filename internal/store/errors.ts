// Recognising SQLite constraint failures, so the store can turn them into domain errors.

import { DomainError } from '../errors/errors.ts';

function isUniqueViolation(error: unknown): boolean {
  return error instanceof Error && /UNIQUE constraint failed/.test(error.message);
}

/**
 * Runs `fn`; a UNIQUE violation becomes a `conflict` saying that `what` is taken and
 * naming the holder's id (looked up only then).
 */
export function unlessTaken<T>(what: string, holderId: () => number | undefined, fn: () => T): T {
  try {
    return fn();
  } catch (error) {
    if (!isUniqueViolation(error)) throw error;
    const id = holderId();
    throw new DomainError('conflict', `${what} is taken`, { conflict: { kind: 'name', id: id ?? null } });
  }
}
