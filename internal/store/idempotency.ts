// SQL for stored responses to POSTs that carried an Idempotency-Key.

import type { Database } from './database.ts';
import { ANSWER_PENDING } from '../domain/idempotency.ts';

/**
 * What is kept of answers for retries, oldest dropped first: per user (over all its tokens and sessions, so logging in
 * again gives no more room) at most KEYS_PER_USER keys and BYTES_PER_USER of answers, and KEYS_IN_TOTAL keys in all.
 */
export const KEYS_PER_USER = 1000;
export const BYTES_PER_USER = 16 * 1024 * 1024;
export const KEYS_IN_TOTAL = 100_000;
/** The total is looked at every this many keys kept: it may run over by as many. */
const TOTAL_EVERY = 100;

const EMPTY = Buffer.alloc(0);

/** A POST's Idempotency-Key, where its answer is kept: for the token that sent it, with the request's fingerprint. */
export interface IdempotencySlot {
  tokenId: number;
  key: string;
  fingerprint: string;
}

export interface StoredResponse {
  fingerprint: string;
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

export class IdempotencyStore {
  private readonly findStmt;
  private readonly saveStmt;
  private readonly pruneStmt;
  private readonly trimUserStmt;
  private readonly trimTotalStmt;

  constructor(db: Database) {
    this.findStmt = db.prepare(
      'SELECT fingerprint, status, headers, body FROM idempotency_keys WHERE token_id = ? AND key = ? AND ' +
        'created_at > ?',
    );
    this.saveStmt =
      db.prepare(`INSERT INTO idempotency_keys (token_id, key, fingerprint, status, headers, body, created_at)
      VALUES (?, ?, ?, ?, ?, ?, ?)
      ON CONFLICT (token_id, key) DO UPDATE SET fingerprint = excluded.fingerprint, status = excluded.status,
        headers = excluded.headers, body = excluded.body, created_at = excluded.created_at`);
    this.pruneStmt = db.prepare('DELETE FROM idempotency_keys WHERE created_at <= ?');
    this.trimUserStmt = db.prepare(`DELETE FROM idempotency_keys WHERE rowid IN (
      SELECT kept FROM (
        SELECT k.rowid AS kept, row_number() OVER newest AS n, sum(length(k.body)) OVER newest AS bytes
        FROM tokens t JOIN idempotency_keys k ON k.token_id = t.id
        WHERE t.user_id = (SELECT user_id FROM tokens WHERE id = :token_id)
        WINDOW newest AS (ORDER BY k.created_at DESC, k.rowid DESC))
      WHERE n > ${KEYS_PER_USER} OR bytes > ${BYTES_PER_USER})`);
    this.trimTotalStmt = db.prepare(`DELETE FROM idempotency_keys WHERE rowid IN
      (SELECT rowid FROM idempotency_keys ORDER BY created_at DESC LIMIT -1 OFFSET ${KEYS_IN_TOTAL})`);
  }

  /** The stored response for a key, unless it was stored at or before `notBefore`. */
  find(tokenId: number, key: string, notBefore: string): StoredResponse | undefined {
    const row = this.findStmt.get(tokenId, key, notBefore) as
      { fingerprint: string; status: number; headers: string; body: Uint8Array } | undefined;
    return row && { ...row, headers: JSON.parse(row.headers) as Record<string, string>, body: Buffer.from(row.body) };
  }

  /** Stores a response, within what its user and the table may keep (see KEYS_PER_USER). */
  save(tokenId: number, key: string, response: StoredResponse, at: string): void {
    const { lastInsertRowid } = this.saveStmt.run(
      tokenId,
      key,
      response.fingerprint,
      response.status,
      JSON.stringify(response.headers),
      response.body,
      at,
    );
    this.trimUserStmt.run({ token_id: tokenId });
    if (Number(lastInsertRowid) % TOTAL_EVERY === 0) this.trimTotalStmt.run();
  }

  /**
   * Records, inside the transaction of a request's change, that the request with this key committed: a retry finds
   * the answer saved after it, or this mark if the answer could not be kept.
   */
  reserve(slot: IdempotencySlot, at: string, changed: readonly unknown[] = []): void {
    const body = changed.length > 0 ? Buffer.from(JSON.stringify(changed)) : EMPTY;
    this.save(slot.tokenId, slot.key, { fingerprint: slot.fingerprint, status: ANSWER_PENDING, headers: {}, body }, at);
  }

  prune(before: string): number {
    return Number(this.pruneStmt.run(before).changes);
  }
}
