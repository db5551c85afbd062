// SQL for users' second factor: a TOTP secret (sealed by the caller) being enrolled or confirmed, the last step a code
// of it was taken at, and the hashes of the recovery codes left. Taking a step or a recovery code is one statement
// that succeeds once: two logins with the same code race to it, and one loses.

import type { Database } from './database.ts';

export interface TotpFactor {
  /** Sealed. */
  secret: Uint8Array;
  created_at: string;
  /** Null while enrolling: the first code confirms it. */
  confirmed_at: string | null;
  last_step: number | null;
  /** How many recovery codes are left. */
  recovery_left: number;
}

export class TotpStore {
  private readonly findStmt;
  private readonly enrolStmt;
  private readonly confirmStmt;
  private readonly stepStmt;
  private readonly recoveryStmt;
  private readonly removeStmt;

  constructor(db: Database) {
    this.findStmt = db.prepare(`SELECT secret, created_at, confirmed_at, last_step,
        json_array_length(recovery) AS recovery_left
      FROM user_totp WHERE user_id = ?`);
    this.enrolStmt = db.prepare(`INSERT INTO user_totp (user_id, secret, created_at) VALUES (:user_id, :secret, :at)
      ON CONFLICT (user_id) DO UPDATE SET secret = excluded.secret, created_at = excluded.created_at,
        last_step = NULL, recovery = '[]'
      WHERE user_totp.confirmed_at IS NULL`);
    this.confirmStmt = db.prepare(`UPDATE user_totp SET confirmed_at = :at, last_step = :step, recovery = :recovery
      WHERE user_id = :user_id AND confirmed_at IS NULL`);
    this.stepStmt = db.prepare(`UPDATE user_totp SET last_step = :step
      WHERE user_id = :user_id AND confirmed_at IS NOT NULL AND (last_step IS NULL OR last_step < :step)
      RETURNING user_id`);
    this.recoveryStmt = db.prepare(`UPDATE user_totp
      SET recovery = (SELECT json_group_array(value) FROM json_each(recovery) WHERE value <> :hash)
      WHERE user_id = :user_id AND confirmed_at IS NOT NULL
        AND EXISTS (SELECT 1 FROM json_each(recovery) WHERE value = :hash)
      RETURNING user_id`);
    this.removeStmt = db.prepare('DELETE FROM user_totp WHERE user_id = ? RETURNING user_id');
  }

  find(userId: number): TotpFactor | undefined {
    return this.findStmt.get(userId) as TotpFactor | undefined;
  }

  /** Inside a write: a new secret being enrolled (one being enrolled is replaced); false when one is confirmed. */
  enrol(userId: number, sealedSecret: Uint8Array, at: string): boolean {
    return this.enrolStmt.run({ user_id: userId, secret: sealedSecret, at }).changes > 0;
  }

  /** Inside a write: the secret being enrolled is the user's from now, `step` taken, with these recovery hashes. */
  confirm(userId: number, step: number, recoveryHashes: readonly string[], at: string): boolean {
    const recovery = JSON.stringify(recoveryHashes);
    return this.confirmStmt.run({ user_id: userId, step, recovery, at }).changes > 0;
  }

  /** Inside a write: takes `step` for the user; false when it or a later one was taken already. */
  takeStep(userId: number, step: number): boolean {
    return this.stepStmt.get({ user_id: userId, step }) !== undefined;
  }

  /** Inside a write: uses up the recovery code of hash `hash` (hex); false when the user has no such code left. */
  useRecovery(userId: number, hash: string): boolean {
    return this.recoveryStmt.get({ user_id: userId, hash }) !== undefined;
  }

  /** Inside a write: the user signs in without a second factor again; false when they had none. */
  remove(userId: number): boolean {
    return this.removeStmt.get(userId) !== undefined;
  }
}
