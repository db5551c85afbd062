// How a page of changes travels from a primary to a standby: one line of JSON saying what the page holds (each change
// but its bytes, and how many bytes it is), then each change's bytes back to back. The changesets go as they are: as
// base64 in JSON each cost the primary a third more bytes to send and two strings of its size to make and collect.

import type { RecordedChange } from '../store/recording.ts';

export const CHANGES_TYPE = 'application/vnd.portplane.changes';

/** The most the JSON line of a page may be: 500 changes at most, each a few numbers and a hash. */
const MAX_HEAD_BYTES = 1024 * 1024;

export interface ChangesPage {
  /** The changes after the position asked for are not all kept (or it is of another generation): seed anew. */
  reseed: boolean;
  changes: RecordedChange[];
}

/** The page as the chunks of one body, the changesets as they are (not copied into one). */
export function encodeChanges({ reseed, changes }: ChangesPage): Buffer[] {
  const head = changes.map(({ generation, seq, at, sha256, changeset }) => ({
    generation,
    seq,
    at,
    sha256,
    bytes: changeset.length,
  }));
  const chunks = changes.map((change) =>
    Buffer.from(change.changeset.buffer, change.changeset.byteOffset, change.changeset.length),
  );
  return [Buffer.from(`${JSON.stringify({ reseed, changes: head })}\n`), ...chunks];
}

/** A page as `encodeChanges` makes it; throws on anything else (the bytes are read as coming from anyone). */
export function decodeChanges(body: Buffer): ChangesPage {
  const end = body.indexOf(0x0a);
  if (end < 0 || end > MAX_HEAD_BYTES) throw new Error('not a page of changes: no head line');
  const head = JSON.parse(body.subarray(0, end).toString('utf8')) as { reseed?: unknown; changes?: unknown };
  if (typeof head.reseed !== 'boolean' || !Array.isArray(head.changes)) throw new Error('not a page of changes');
  let offset = end + 1;
  const changes = head.changes.map((c: Record<string, unknown>): RecordedChange => {
    if (
      typeof c !== 'object' ||
      c === null ||
      typeof c.generation !== 'string' ||
      !Number.isSafeInteger(c.seq) ||
      !Number.isSafeInteger(c.at) ||
      typeof c.sha256 !== 'string' ||
      !Number.isSafeInteger(c.bytes) ||
      (c.bytes as number) < 0 ||
      offset + (c.bytes as number) > body.length
    )
      throw new Error('a change is not one, or its bytes are not all there');
    const changeset = body.subarray(offset, offset + (c.bytes as number));
    offset += changeset.length;
    return { generation: c.generation, seq: c.seq as number, at: c.at as number, sha256: c.sha256, changeset };
  });
  if (offset !== body.length) throw new Error('a page of changes has bytes no change claims');
  return { reseed: head.reseed, changes };
}
