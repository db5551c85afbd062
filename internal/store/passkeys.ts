// SQL for passkeys: each user's WebAuthn credentials, and the signature counter each last showed, moved forward only
// (two sign-ins racing with one answer: one of them loses).

import type { Database } from './database.ts';

/** A passkey as its user sees it. */
export interface Passkey {
  id: number;
  name: string;
  algorithm: number;
  created_at: string;
  last_used_at: string | null;
  version: number;
}

/** A passkey as a sign-in checks it. */
export interface StoredPasskey extends Passkey {
  user_id: number;
  public_key: Record<string, string>;
  sign_count: number;
}

const SHOWN = 'id, name, algorithm, created_at, last_used_at, version';

export class PasskeyStore {
  private readonly listStmt;
  private readonly countStmt;
  private readonly byCredentialStmt;
  private readonly credentialsStmt;
  private readonly insertStmt;
  private readonly renameStmt;
  private readonly removeStmt;
  private readonly findStmt;
  private readonly usedStmt;
  private readonly removeAllStmt;

  constructor(db: Database) {
    this.listStmt = db.prepare(`SELECT ${SHOWN} FROM passkeys WHERE user_id = ? ORDER BY id`);
    this.countStmt = db.prepare('SELECT count(*) AS n FROM passkeys WHERE user_id = ?');
    this.findStmt = db.prepare(`SELECT ${SHOWN} FROM passkeys WHERE id = ? AND user_id = ?`);
    this.byCredentialStmt = db.prepare(`SELECT ${SHOWN}, user_id, public_key, sign_count
      FROM passkeys WHERE credential_id = ?`);
    this.credentialsStmt = db.prepare('SELECT credential_id FROM passkeys WHERE user_id = ?');
    this.insertStmt = db.prepare(`INSERT INTO passkeys
        (user_id, credential_id, public_key, algorithm, sign_count, name, created_at)
      VALUES (:user_id, :credential_id, :public_key, :algorithm, :sign_count, :name, :at)
      ON CONFLICT (credential_id) DO NOTHING
      RETURNING ${SHOWN}`);
    this.renameStmt = db.prepare(`UPDATE passkeys SET name = :name, version = version + 1
      WHERE id = :id AND user_id = :user_id RETURNING ${SHOWN}`);
    this.removeStmt = db.prepare('DELETE FROM passkeys WHERE id = ? AND user_id = ? RETURNING id');
    this.removeAllStmt = db.prepare('DELETE FROM passkeys WHERE user_id = ? RETURNING id');
    this.usedStmt = db.prepare(`UPDATE passkeys SET sign_count = :count, last_used_at = :at
      WHERE id = :id AND (sign_count < :count OR (sign_count = 0 AND :count = 0)) RETURNING id`);
  }

  listOf(userId: number): Passkey[] {
    return this.listStmt.all(userId) as unknown as Passkey[];
  }

  countOf(userId: number): number {
    return (this.countStmt.get(userId) as { n: number }).n;
  }

  find(id: number, userId: number): Passkey | undefined {
    return this.findStmt.get(id, userId) as Passkey | undefined;
  }

  /** The passkey of credential `credentialId`, whoever's it is. */
  byCredential(credentialId: Uint8Array): StoredPasskey | undefined {
    const row = this.byCredentialStmt.get(credentialId) as (StoredPasskey & { public_key: string }) | undefined;
    return row && { ...row, public_key: JSON.parse(row.public_key) };
  }

  /** The credential ids of user `userId`'s passkeys (so an authenticator does not register one twice). */
  credentialsOf(userId: number): Uint8Array[] {
    return (this.credentialsStmt.all(userId) as { credential_id: Uint8Array }[]).map((row) => row.credential_id);
  }

  /** Inside a write: a new passkey; undefined when its credential is one already kept. */
  insert(
    userId: number,
    credential: { credentialId: Uint8Array; publicKey: Record<string, string>; algorithm: number; signCount: number },
    name: string,
    at: string,
  ): Passkey | undefined {
    return this.insertStmt.get({
      user_id: userId,
      credential_id: credential.credentialId,
      public_key: JSON.stringify(credential.publicKey),
      algorithm: credential.algorithm,
      sign_count: credential.signCount,
      name,
      at,
    }) as Passkey | undefined;
  }

  rename(id: number, userId: number, name: string): Passkey | undefined {
    return this.renameStmt.get({ id, user_id: userId, name }) as Passkey | undefined;
  }

  remove(id: number, userId: number): boolean {
    return this.removeStmt.get(id, userId) !== undefined;
  }

  /** Inside a write: every passkey of user `userId` gone; their ids. */
  removeAllOf(userId: number): number[] {
    return (this.removeAllStmt.all(userId) as { id: number }[]).map((row) => row.id);
  }

  /** Inside a write: passkey `id` signed in showing counter `count`; false when the counter did not go forward. */
  used(id: number, count: number, at: string): boolean {
    return this.usedStmt.get({ id, count, at }) !== undefined;
  }
}
