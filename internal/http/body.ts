// Reads a request body with a size cap and a media-type check, before any parsing.

import type { IncomingMessage } from 'node:http';
import { DomainError } from '../errors/errors.ts';

export const MAX_BODY_BYTES = 1024 * 1024;

function isJsonMediaType(contentType: string | undefined): boolean {
  if (!contentType) return false;
  const essence = contentType.split(';')[0]!.trim().toLowerCase();
  return essence === 'application/json' || (essence.startsWith('application/') && essence.endsWith('+json'));
}

/**
 * Returns the raw body (empty when there is none). Throws `payload_too_large` past
 * `limit` and `unsupported_media_type` for a non-empty body that is not JSON.
 */
export async function readBody(req: IncomingMessage, limit = MAX_BODY_BYTES): Promise<Buffer> {
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > limit) {
    throw new DomainError('payload_too_large', `the body must be at most ${limit} bytes`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) throw new DomainError('payload_too_large', `the body must be at most ${limit} bytes`);
    chunks.push(chunk);
  }
  const body = Buffer.concat(chunks);
  if (body.length > 0 && !isJsonMediaType(req.headers['content-type'])) {
    throw new DomainError('unsupported_media_type', 'send the body as application/json');
  }
  return body;
}

/** Parses a JSON body; an empty body parses as `undefined`. Throws `invalid_json`. */
export function parseJson(body: Buffer): unknown {
  if (body.length === 0) return undefined;
  try {
    return JSON.parse(body.toString('utf8'));
  } catch (error) {
    throw new DomainError('invalid_json', `the body is not valid JSON: ${(error as Error).message}`);
  }
}
