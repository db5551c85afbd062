// Idempotency-Key answers: what a retry of a POST gets. Its change marked the key used in the change's own transaction
// (see transact); the answer is kept here once given, secrets redacted, for a day.

import { type IdempotencySlot, type StoredResponse } from '../store/idempotency.ts';
import type { App } from './app.ts';
import { bodyLength, fromError, type Outgoing } from './outgoing.ts';
import { DomainError } from '../errors/errors.ts';
import { redactSecrets } from '../domain/secret-fields.ts';
import { ANSWER_PENDING } from '../domain/idempotency.ts';
import { createHash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Principal } from '../auth/principal.ts';
import { validationFailed } from '../errors/errors.ts';
import { IDEMPOTENCY_KEY } from './route.ts';

/** How long a key's answer is kept. */
export const IDEMPOTENCY_TTL_MS = 24 * 60 * 60 * 1000;
/** The largest response kept for replay. */
const MAX_REPLAY_BYTES = 256 * 1024;
// Headers a replayed response repeats; pacing headers are computed fresh each time.
const REPLAYED_HEADERS = ['content-type', 'location', 'etag'];

/** A POST carrying an Idempotency-Key that has not been answered yet: where its answer will be kept. */
export interface Unanswered extends IdempotencySlot {
  /** Its entry in `App.idempotencyInFlight`. */
  inFlight: string;
}

/**
 * What a retry with the same Idempotency-Key gets: the response with the value of every field the API marks secret
 * redacted (a secret is shown once, and never stored), or, for a response too large to keep, a 409 saying the
 * request was carried out.
 */
function replayOf(
  out: Outgoing,
  requestId: string,
  secretFields: ReadonlySet<string>,
): Pick<StoredResponse, 'status' | 'headers' | 'body'> {
  if (out.body && bodyLength(out.body) > MAX_REPLAY_BYTES) {
    const detail =
      `a request with this Idempotency-Key was carried out (status ${out.status}); its response was too large to ` +
      `keep, so read the resources it changed`;
    return replayOf(fromError(new DomainError('conflict', detail), requestId), requestId, secretFields);
  }
  const headers = Object.fromEntries(
    Object.entries(out.headers).filter(([name]) => REPLAYED_HEADERS.includes(name.toLowerCase())),
  );
  const body = !out.body ? Buffer.alloc(0) : Buffer.isBuffer(out.body) ? out.body : Buffer.concat(out.body);
  const type = Object.entries(headers).find(([name]) => name.toLowerCase() === 'content-type')?.[1] ?? '';
  if (body.length === 0 || !/json/.test(type)) return { status: out.status, headers, body };
  const kept = redactSecrets(JSON.parse(body.toString('utf8')), secretFields);
  return { status: out.status, headers, body: Buffer.from(JSON.stringify(kept)) };
}

/** Whether the request with this key committed a change (see `transact`), whatever it answered. */
export function markedUsed(app: App, slot: Unanswered): boolean {
  return (
    app.store.idempotency.find(slot.tokenId, slot.key, app.timestamp(-IDEMPOTENCY_TTL_MS))?.status === ANSWER_PENDING
  );
}

/**
 * Keeps an answer for its Idempotency-Key's retries. Its change is committed already, with the key marked as used:
 * should the answer not be kept, a retry is told that the request was carried out, and this one still answers.
 */
export async function keepAnswer(app: App, slot: Unanswered, out: Outgoing, requestId: string): Promise<void> {
  const stored = { fingerprint: slot.fingerprint, ...replayOf(out, requestId, app.store.secretFields) };
  try {
    await app.store.db.writeInTurn(() => app.store.idempotency.save(slot.tokenId, slot.key, stored, app.timestamp()));
  } catch (error) {
    app.log.error('keeping an answer for its Idempotency-Key failed', {
      request_id: requestId,
      error: (error as Error).message,
    });
  }
}

/**
 * What a request's Idempotency-Key holds: for a POST with one, a slot for the answer it is about to get, the answer
 * kept for it, or (`lost`) what a request that committed without its answer kept of its changes; otherwise no slot.
 * Throws `validation_failed`, `conflict`, `idempotency_key_reused`.
 */
export function keptAnswer(
  app: App,
  method: string,
  { req, principal }: { req: IncomingMessage; principal: Principal | null },
  raw: Buffer,
): { replay: Outgoing } | { slot: Unanswered | null } | { lost: Buffer } {
  const key = req.headers['idempotency-key'];
  if (method !== 'POST' || principal === null || key === undefined) return { slot: null };
  if (typeof key !== 'string' || !IDEMPOTENCY_KEY.test(key))
    throw validationFailed(
      [{ pointer: 'Idempotency-Key', detail: 'must be 1 to 255 visible ASCII characters' }],
      'Idempotency-Key must be 1 to 255 visible ASCII characters',
    );
  const fingerprint = createHash('sha256').update(`${method} ${req.url}\n`).update(raw).digest('base64url');
  const { tokenId } = principal;
  const inFlight = `${tokenId}:${key}`;
  if (app.idempotencyInFlight.has(inFlight))
    throw new DomainError('conflict', 'a request with this Idempotency-Key is still being answered; retry shortly');
  const stored = app.store.idempotency.find(tokenId, key, app.timestamp(-IDEMPOTENCY_TTL_MS));
  if (!stored) return { slot: { tokenId, key, fingerprint, inFlight } };
  if (stored.fingerprint !== fingerprint)
    throw new DomainError('idempotency_key_reused', 'this Idempotency-Key was used for a different request', {
      errors: [{ pointer: 'Idempotency-Key', detail: 'was used for a different request (another body or path)' }],
    });
  if (stored.status === ANSWER_PENDING) return { lost: stored.body };
  return {
    replay: { status: stored.status, headers: { ...stored.headers, 'Idempotent-Replayed': 'true' }, body: stored.body },
  };
}
