// One notification's HTTP request: a POST of JSON to an address outside the master's own network, unless the
// operator allowed local ones. The address is checked as named and as resolved (a name that resolves to loopback is
// refused as loopback is), the answer's body is read only as far as a short excerpt, and a receiver that does not
// answer in time fails this attempt alone.

import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { request as httpRequest, type RequestOptions } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { LookupFunction } from 'node:net';
import { localReason, type TargetPolicy } from '../domain/rules.ts';

/** How long a receiver has to answer, from the connect to the last byte of its answer. */
export const POST_TIMEOUT_MS = 10_000;

/** What of a refusing receiver's answer is kept in the delivery log. */
const EXCERPT_BYTES = 200;

/** A delivery attempt that did not go through, with why in words for the delivery log. */
export class NotSent extends Error {
  constructor(
    message: string,
    /** False when no retry can help (the address is refused): the delivery fails at once. */
    readonly retryable = true,
  ) {
    super(message);
  }
}

/**
 * What a failure says in the delivery log: its own words for one of ours, otherwise the code of what failed
 * (ECONNREFUSED, ETIMEDOUT, a certificate's verification), never Node's message, which names the address it tried
 * and what a name resolved to: the log is read by whoever may read alerts, and must be no way to learn where names
 * lead from the master's network.
 */
export function failureOf(error: unknown): string {
  if (error instanceof NotSent) return error.message;
  const code = (error as NodeJS.ErrnoException | null)?.code;
  if (typeof code !== 'string' || !/^[A-Z0-9_]{2,64}$/.test(code)) return 'it failed';
  return /CERT|SIGNATURE|ISSUER|ALTNAME/.test(code) ? `its certificate did not verify (${code})` : code;
}

/** Why a channel's `url` may not be used under `policy`, or null when it may. */
export function urlRefusal(url: string, policy: TargetPolicy): string | null {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return 'is not a URL';
  }
  if (parsed.protocol !== 'https:' && parsed.protocol !== 'http:') return 'must be http: or https:';
  if (parsed.username || parsed.password) return 'must not carry credentials (put them in the channel secret)';
  return hostRefusal(parsed.hostname.replace(/^\[|\]$/g, ''), policy);
}

/** Why a channel may not reach `host` under `policy`, or null when it may. */
export function hostRefusal(host: string, policy: TargetPolicy): string | null {
  const reason = localReason(host, null, policy);
  return reason && `${host} ${reason}; channels reach such addresses only with allow_local_channel_targets`;
}

/** A lookup that refuses what resolves to an address `policy` does not allow. */
export function guardedLookup(policy: TargetPolicy): LookupFunction {
  return (hostname, options, callback) => {
    dnsLookup(hostname, { ...options, all: true }, (error, addresses: LookupAddress[]) => {
      if (error) return callback(error, '', 0);
      for (const { address } of addresses) {
        const reason = localReason(address, null, policy);
        // Not which address, nor why: the log must tell nothing of where a name leads (see failureOf).
        if (reason) return callback(new NotSent('the address is one channels may not reach', false), '', 0);
      }
      if (options.all) return (callback as unknown as (e: null, a: LookupAddress[]) => void)(null, addresses);
      callback(null, addresses[0]!.address, addresses[0]!.family);
    });
  };
}

/** POSTs `body` to `url`; resolves once it answered 2xx. Throws `NotSent` (also once `signal` aborts it). */
export function postJson(
  url: string,
  body: string,
  headers: Record<string, string>,
  policy: TargetPolicy,
  signal?: AbortSignal,
): Promise<void> {
  const refused = urlRefusal(url, policy);
  if (refused) return Promise.reject(new NotSent(`the address ${refused}`, false));
  const parsed = new URL(url);
  const options: RequestOptions = {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body), ...headers },
    lookup: guardedLookup(policy),
    timeout: POST_TIMEOUT_MS,
    signal,
  };
  return new Promise((resolve, reject) => {
    const send = parsed.protocol === 'https:' ? httpsRequest : httpRequest;
    const req = send(parsed, options, (res) => {
      const status = res.statusCode ?? 0;
      let excerpt = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        if (excerpt.length < EXCERPT_BYTES) excerpt += chunk.slice(0, EXCERPT_BYTES - excerpt.length);
      });
      res.on('end', () => {
        if (status >= 200 && status < 300) return resolve();
        reject(new NotSent(`answered ${status}${excerpt ? `: ${excerpt.replace(/\s+/g, ' ').trim()}` : ''}`));
      });
      res.on('error', (error) => reject(new NotSent(failureOf(error))));
    });
    const deadline = setTimeout(
      () => req.destroy(new NotSent(`no answer within ${POST_TIMEOUT_MS / 1000} s`)),
      POST_TIMEOUT_MS,
    );
    req.on('close', () => clearTimeout(deadline));
    req.on('timeout', () => req.destroy(new NotSent(`no answer within ${POST_TIMEOUT_MS / 1000} s`)));
    req.on('error', (error) => reject(new NotSent(failureOf(error), !(error instanceof NotSent) || error.retryable)));
    req.end(body);
  });
}
