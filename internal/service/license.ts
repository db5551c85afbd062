// The license as time passes: it expires, or its not_before comes, without anything being written.

import type { LicenseView } from '../license/license.ts';
import type { Store } from '../store/store.ts';

/** What watching the license needs of the master. */
export interface LicenseWatched {
  store: Store;
  licenseView(): LicenseView;
  timestamp(): string;
}

/**
 * A clock's check of the license: once its status changes (it expires, or its not_before comes), a license.changed
 * event tells event streams, with the status before and after. The first call only notes the status.
 */
export function licenseWatch(app: LicenseWatched): () => void {
  let last = app.licenseView().status;
  return () => {
    const now = app.licenseView().status;
    if (now === last || app.store.db.writesHeld) return;
    const before = last;
    last = now;
    app.store.write(() =>
      app.store.events.append('license.changed', 'license', null, { before, after: now }, app.timestamp()),
    );
  };
}
