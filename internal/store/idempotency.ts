// SQL for stored responses to POSTs that carried an Idempotency-Key.

import type { Database } from './database.ts';

/** How many stored responses one token keeps: with the write budget, this bounds the table. */
export const KEYS_PER_TOKEN = 1000;

const EMPTY = Buffer.alloc(0);

/** A POST's Idempotency-Key, where its answer is kept: for the token that sent it, with the request's fingerprint. */
export interface IdempotencySlot {
  tokenId: number;
  key: string;
  fingerprint: string;
}

/** The status of a key whose request committed its change and whose answer is not (yet) kept. */
export const ANSWER_PENDING = 0;

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
  private readonly trimStmt;

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
    this.trimStmt = db.prepare(`DELETE FROM idempotency_keys WHERE token_id = :token_id AND key NOT IN
      (SELECT key FROM idempotency_keys WHERE token_id = :token_id ORDER BY created_at DESC,
        rowid DESC LIMIT ${KEYS_PER_TOKEN})`);
  }

  /** The stored response for a key, unless it was stored at or before `notBefore`. */
  find(tokenId: number, key: string, notBefore: string): StoredResponse | undefined {
    const row = this.findStmt.get(tokenId, key, notBefore) as
      { fingerprint: string; status: number; headers: string; body: Uint8Array } | undefined;
    return row && { ...row, headers: JSON.parse(row.headers) as Record<string, string>, body: Buffer.from(row.body) };
  }

  /** Stores a response; a token keeps its KEYS_PER_TOKEN most recent ones. */
  save(tokenId: number, key: string, response: StoredResponse, at: string): void {
    this.saveStmt.run(
      tokenId,
      key,
      response.fingerprint,
      response.status,
      JSON.stringify(response.headers),
      response.body,
      at,
    );
    this.trimStmt.run({ token_id: tokenId });
  }

  /**
   * Records, inside the transaction of a request's change, that the request with this key committed: a retry finds
   * the answer saved after it, or this mark if the answer could not be kept.
   */
  reserve(slot: IdempotencySlot, at: string): void {
    this.save(
      slot.tokenId,
      slot.key,
      { fingerprint: slot.fingerprint, status: ANSWER_PENDING, headers: {}, body: EMPTY },
      at,
    );
  }

  prune(before: string): number {
    return Number(this.pruneStmt.run(before).changes);
  }
}
