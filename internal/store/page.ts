// What the stores of several resources share: the page of a list as SQLite builds it, and the generation of
// credentials every change that can end one bumps.

/** A page as JSON text (built by SQLite): the items array, and the last id on it when another page follows. */
export interface JsonPage {
  items: string;
  lastId: number | null;
  /** How many items match in all, when asked for (`count`). */
  total?: number;
  /** In a sorted list, the last item's sort key (with lastId, where the next page starts). */
  lastKey?: unknown;
}

/**
 * Bumped by every change that can end or narrow a credential (revocation, expiry pruning,
 * a user's scopes or state), so caches of verified credentials know to forget.
 */
export class Generation {
  value = 0;
  bump(): void {
    this.value += 1;
  }
}
