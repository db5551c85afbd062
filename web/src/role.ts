// The master's role, said above every page while it is not the plain one: a standby serves reads of its primary's copy
// and refuses writes, a fenced primary refuses writes, and a primary in sync mode may be going on without its standby.
// Read from the public health route now and every few seconds (signed in or not: it tells whom to sign in to), so a
// promotion or a fencing shows without a reload.

import { api, type Schema } from './api.ts';

type Health = Schema<'Health'>;

const EVERY_MS = 5000;

/** What the banner says about `health`, and how loudly; null: nothing to say. */
function noticeOf(health: Health): { text: string; kind: 'warn' | 'error' } | null {
  const { replication, fenced_by: fenced } = health;
  if (health.role === 'standby' && replication) {
    if (replication.halted) return { text: `Standby, no longer following: ${replication.halted}`, kind: 'error' };
    const lag = replication.lag_seconds;
    const behind = lag === null ? 'not seeded yet' : lag === 0 ? 'in step' : `up to ${lag} s behind`;
    return { text: `Standby of ${replication.primary}: read-only (${behind}). Make changes there.`, kind: 'warn' };
  }
  if (health.role === 'fenced' && fenced) {
    const where = fenced.primary ? ` at ${fenced.primary}` : '';
    return {
      text: `A newer primary (epoch ${fenced.epoch})${where} took over: this master is read-only.`,
      kind: 'error',
    };
  }
  if (health.sync_lapsed_since) {
    const since = new Date(health.sync_lapsed_since).toLocaleString();
    return { text: `Sync replication lapsed since ${since}: writes are not held by a standby.`, kind: 'warn' };
  }
  return null;
}

let health: Health | null = null;

/** The master's health as last read; null before the first answer. */
export function currentHealth(): Health | null {
  return health;
}

/** Whether the master takes no write now (a standby, or a primary fenced by a newer one): write controls hide. */
export function readOnlyMaster(): boolean {
  return health !== null && health.role !== 'primary';
}

/**
 * Keeps `banner` saying the master's role, for as long as the console is open; `changed` is told when the master
 * turns read-only or writable (a promotion, a fencing). Resolves once the role was first read (or could not be).
 */
export function watchRole(banner: HTMLElement, changed: () => void): Promise<void> {
  const read = async () => {
    if (document.visibilityState !== 'visible') return;
    try {
      const before = readOnlyMaster();
      health = (await api<Health>('GET', '/api/health')).data;
      const notice = noticeOf(health);
      banner.hidden = notice === null;
      banner.textContent = notice?.text ?? '';
      banner.dataset.kind = notice?.kind ?? '';
      if (readOnlyMaster() !== before) changed();
    } catch {
      // Health refused (the master starting or shutting down): the banner stays as it was until it answers.
    }
  };
  const first = read();
  window.setInterval(() => void read(), EVERY_MS);
  document.addEventListener('visibilitychange', () => void read());
  return first;
}
