// Reads a request body with a size cap and a media-type check, before any parsing.

import type { IncomingMessage } from 'node:http';
import { DomainError } from '../errors/errors.ts';
import { shapeProblem } from '../schema/json.ts';

export const MAX_BODY_BYTES = 1024 * 1024;

/** The client went away (closed or reset its connection) before it had sent its body: nobody is left to answer. */
export class ClientGone extends Error {
  constructor() {
    super('the client closed the connection before it had sent its body');
  }
}

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
  try {
    for await (const chunk of req as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > limit) throw new DomainError('payload_too_large', `the body must be at most ${limit} bytes`);
      chunks.push(chunk);
    }
  } catch (error) {
    if (req.destroyed && !(error instanceof DomainError)) throw new ClientGone();
    throw error;
  }
  const body = Buffer.concat(chunks);
  if (body.length > 0 && !isJsonMediaType(req.headers['content-type'])) {
    throw new DomainError('unsupported_media_type', 'send the body as application/json');
  }
  return body;
}

/** Deeper than any body of this API nests (an import document: 4); looked at before parsing. */
export const MAX_JSON_DEPTH = 16;

/**
 * Parses a JSON body; an empty body parses as `undefined`. Throws `invalid_json`, also for one nested too deep, and
 * `payload_too_large` for one that opens more than `maxOpened` arrays and objects.
 */
export function parseJson(body: Buffer, maxOpened = Infinity): unknown {
  if (body.length === 0) return undefined;
  const text = body.toString('utf8');
  const problem = shapeProblem(text, MAX_JSON_DEPTH, maxOpened);
  if (problem === 'too_deep')
    throw new DomainError('invalid_json', `the body nests arrays and objects deeper than ${MAX_JSON_DEPTH}`);
  if (problem === 'too_many')
    throw new DomainError(
      'payload_too_large',
      `the body opens more than ${maxOpened} arrays and objects: send it in parts`,
    );
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new DomainError('invalid_json', `the body is not valid JSON: ${(error as Error).message}`);
  }
}
