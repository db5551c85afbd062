// The quality of tunnels' paths over time: once a minute the master writes each tunnel's point from how it stands
// (store/tunnel-paths.ts); the clock's turn asks every second, and only a new minute writes.

import type { Store } from '../store/store.ts';

export function pathSampler(app: { store: Store; now(): number }): () => void {
  let last = -1;
  return () => {
    const minute = Math.floor(app.now() / 60_000);
    // While an import or a batch holds writes, the minute is sampled at the first second after it.
    if (minute === last || app.store.db.writesHeld) return;
    // Once a minute whatever comes of it: a write that fails (a full disk) is not tried again every second.
    last = minute;
    app.store.write(() => app.store.tunnelPaths.sample(minute));
  };
}
