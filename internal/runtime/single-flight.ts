// Work whose result does for everyone asking at once: a copy of the whole database (a standby's snapshot, a backup)
// costs memory and I/O that grow with the data, so callers who ask while one is being made share it rather than
// each starting another.

/** `make`, run once for all who ask while it runs: they share its result, or its error. */
export function singleFlight<T>(make: () => Promise<T>): () => Promise<T> {
  let running: Promise<T> | null = null;
  return () =>
    (running ??= make().finally(() => {
      running = null;
    }));
}
