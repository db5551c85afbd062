// A sealed secret was given for one place: the fields that decide where it is sent, or who reads what it guards. A
// write that changes one of them without giving the secret again in the same request would send the stored secret
// wherever the writer points it, and the writer may be someone who may edit the resource but never saw the secret. So
// such a write is refused, naming the secret to give: one rule for every resource that keeps a secret.

import { isDeepStrictEqual } from 'node:util';
import { validationFailed } from '../errors/errors.ts';

/** A secret a resource keeps, and the fields it is bound to. */
export interface SecretBinding {
  /** What the secret is, as the refusal names it. */
  label: string;
  /** The request fields that give it (any one of them); the first is where the refusal points. */
  given: readonly [string, ...string[]];
  /** The fields that decide where it goes or who reads what it guards. */
  bound: readonly string[];
  /** How a write drops the secret instead, where it may ("null for none"). */
  dropped?: string;
}

/**
 * Inside a write that keeps the stored secret (none given, and one stored): throws `validation_failed` naming the
 * secret's field if any bound field changes from `before` to `after` (absent and null are the same).
 */
export function holdSecretInPlace(binding: SecretBinding, before: object, after: object): void {
  const value = (of: object, field: string) => (of as Record<string, unknown>)[field] ?? null;
  const moved = binding.bound.filter((field) => !isDeepStrictEqual(value(before, field), value(after, field)));
  if (moved.length === 0) return;
  const fields = binding.given.join(' or ') + (binding.dropped ? `, or ${binding.dropped}` : '');
  throw validationFailed([
    {
      pointer: `#/${binding.given[0]}`,
      detail:
        `changing ${moved.join(', ')} needs the ${binding.label} again (${fields}): the stored one was given for ` +
        `the old ${moved.join(', ')}`,
    },
  ]);
}
