// Login sessions a standby master opens. Its copy of the primary's database takes no write of its own, yet a person
// must be able to sign in to it (the console, read-only, while the primary is away), so the session is held here, in
// the standby's memory: it ends with the process or the promotion (sign in again), and there are at most
// MAX_STANDBY_SESSIONS (the oldest goes first), MAX_STANDBY_SESSIONS_PER_USER of one user's. Ids are negative, so none
// is ever taken for a row of the tokens table.

import { hashSecret, newSecret } from './secrets.ts';

export const MAX_STANDBY_SESSIONS = 1_000;
/** A user's at most: one signing in again and again ends their own oldest, never someone else's. */
export const MAX_STANDBY_SESSIONS_PER_USER = 20;

export interface StandbySession {
  id: number;
  userId: number;
  /** The user's password hash when it opened: a password changed since (at the primary) ends the session. */
  passwordHash: string;
  expiresAtMs: number;
}

export class StandbySessions {
  /** By the secret's hash (hex), oldest first. */
  private readonly bySecret = new Map<string, StandbySession>();
  private readonly byId = new Map<number, string>();
  private opened = 0;
  /** The last TOTP step taken here, by user: the copy takes no write, so a code's single use is kept here. */
  private readonly steps = new Map<number, number>();

  /** A new session of the user `userId` (whose password hash is `passwordHash`) until `expiresAtMs`, and its secret. */
  open(userId: number, passwordHash: string, expiresAtMs: number): { secret: string; session: StandbySession } {
    const theirs = [...this.bySecret.values()].filter((session) => session.userId === userId);
    if (theirs.length >= MAX_STANDBY_SESSIONS_PER_USER) this.close(theirs[0]!.id);
    while (this.bySecret.size >= MAX_STANDBY_SESSIONS) this.close(this.bySecret.values().next().value!.id);
    const secret = newSecret('session');
    const session = { id: -++this.opened, userId, passwordHash, expiresAtMs };
    const key = hashSecret(secret).toString('hex');
    this.bySecret.set(key, session);
    this.byId.set(session.id, key);
    return { secret, session };
  }

  /** Takes TOTP step `step` for the user after the last the primary took (`taken`); false when it or a later was. */
  takeStep(userId: number, step: number, taken: number | null): boolean {
    const last = Math.max(this.steps.get(userId) ?? -1, taken ?? -1);
    if (step <= last) return false;
    this.steps.set(userId, step);
    return true;
  }

  /** The session `secret` opened, if it is still open (expired or not: the caller says which it refuses). */
  find(secret: string): StandbySession | undefined {
    return this.bySecret.get(hashSecret(secret).toString('hex'));
  }

  get(id: number): StandbySession | undefined {
    const key = this.byId.get(id);
    return key === undefined ? undefined : this.bySecret.get(key);
  }

  close(id: number): void {
    const key = this.byId.get(id);
    if (key === undefined) return;
    this.byId.delete(id);
    this.bySecret.delete(key);
  }

  /** Ends every one: what a promotion does, since the primary's sessions are rows of its database. */
  clear(): void {
    this.bySecret.clear();
    this.byId.clear();
  }
}
