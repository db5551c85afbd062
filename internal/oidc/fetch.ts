// The master's requests to an identity provider: JSON answers read up to a bound, within a deadline, over TLS unless
// the provider is on this host's loopback. A provider that is slow, huge or down fails the sign-in or the check that
// asked, and nothing else.

import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { isIP } from 'node:net';

/** How long a provider has to answer, from the connect to the last byte. */
export const PROVIDER_TIMEOUT_MS = 10_000;
/** The largest answer read: discovery documents and key sets are a few kilobytes. */
const MAX_ANSWER_BYTES = 512 * 1024;

/** The provider could not be asked, or answered what is not an answer (not JSON, too large, 5xx): try again later. */
export class ProviderUnreachable extends Error {}

export interface Answer {
  status: number;
  body: unknown;
}

/** Why `url` may not be asked (a provider's address or one of its endpoints), or null. */
export function providerUrlProblem(url: string): string | null {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return 'is not a URL';
  }
  if (parsed.username || parsed.password) return 'must not carry credentials';
  if (parsed.protocol === 'https:') return null;
  if (parsed.protocol !== 'http:') return 'must be https:';
  const host = parsed.hostname.replace(/^\[|\]$/g, '');
  const loopback = host === 'localhost' || host === '::1' || (isIP(host) === 4 && host.startsWith('127.'));
  return loopback ? null : 'must be https: (plain http only on loopback)';
}

function readJson(res: IncomingMessage, resolve: (answer: Answer) => void, reject: (error: Error) => void): void {
  const chunks: Buffer[] = [];
  let size = 0;
  res.on('data', (chunk: Buffer) => {
    size += chunk.length;
    if (size > MAX_ANSWER_BYTES)
      res.destroy(new ProviderUnreachable(`it answered more than ${MAX_ANSWER_BYTES} bytes`));
    else chunks.push(chunk);
  });
  res.on('error', (error) =>
    reject(error instanceof ProviderUnreachable ? error : new ProviderUnreachable(codeOf(error))),
  );
  res.on('end', () => {
    const status = res.statusCode ?? 0;
    let body: unknown;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      return reject(new ProviderUnreachable(`it answered ${status} with what is not JSON`));
    }
    resolve({ status, body });
  });
}

/** What failed, in words that name no address (they go to the audit log and the problem answered). */
function codeOf(error: unknown): string {
  const code = (error as NodeJS.ErrnoException | null)?.code;
  return typeof code === 'string' && /^[A-Z0-9_]{2,64}$/.test(code) ? `it could not be reached (${code})` : 'it failed';
}

/**
 * GETs (or, with `form`, POSTs as application/x-www-form-urlencoded) `url` and reads its JSON answer, whatever its
 * status. Throws `ProviderUnreachable`.
 */
export function askProvider(
  url: string,
  { form, headers = {} }: { form?: URLSearchParams; headers?: Record<string, string> } = {},
): Promise<Answer> {
  const problem = providerUrlProblem(url);
  if (problem) return Promise.reject(new ProviderUnreachable(`its address ${problem}`));
  const body = form?.toString();
  const target = new URL(url);
  return new Promise((resolve, reject) => {
    const send = target.protocol === 'https:' ? httpsRequest : httpRequest;
    const req = send(
      target,
      {
        method: body === undefined ? 'GET' : 'POST',
        headers: {
          Accept: 'application/json',
          ...(body === undefined
            ? {}
            : { 'Content-Type': 'application/x-www-form-urlencoded', 'Content-Length': Buffer.byteLength(body) }),
          ...headers,
        },
        timeout: PROVIDER_TIMEOUT_MS,
      },
      (res) => readJson(res, resolve, reject),
    );
    const late = () => req.destroy(new ProviderUnreachable(`no answer within ${PROVIDER_TIMEOUT_MS / 1000} s`));
    const deadline = setTimeout(late, PROVIDER_TIMEOUT_MS);
    req.on('close', () => clearTimeout(deadline));
    req.on('timeout', late);
    req.on('error', (error) =>
      reject(error instanceof ProviderUnreachable ? error : new ProviderUnreachable(codeOf(error))),
    );
    req.end(body);
  });
}
