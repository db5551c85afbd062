// A client of etcd's v3 API through its JSON gateway (etcd 3.4: /v3/kv/..., /v3/lease/...), over node:http(s): the few
// calls an election needs. Each call goes to the member that answered last, and to the others in turn when it does
// not answer; keys and values travel in base64, revisions and lease ids as decimal strings.

import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';

/** The most of one answer read: a range of the election's keys is a few KiB. */
const MAX_ANSWER_BYTES = 1024 * 1024;
/** How long one member is given to answer one call. */
const CALL_TIMEOUT_MS = 2000;

export interface EtcdOptions {
  endpoints: readonly string[];
  /** TLS to etcd: the CA its members' certificates are checked by, and this master's client certificate and key. */
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  timeoutMs?: number;
}

export interface KeyValue {
  key: string;
  value: string;
  createRevision: number;
  modRevision: number;
  /** The lease the key lives by, as etcd writes it ('0': none). */
  lease: string;
}

/** A condition of a transaction (etcd's Compare), on one key. */
export type Compare = Record<string, unknown>;
/** An operation of a transaction (etcd's RequestOp). */
export type Operation = Record<string, unknown>;

/** etcd did not answer, or answered with an error: the call may or may not have taken effect. */
export class EtcdUnavailable extends Error {}

const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');
const unb64 = (value: unknown) => (typeof value === 'string' ? Buffer.from(value, 'base64').toString('utf8') : '');
const revision = (value: unknown) => (typeof value === 'string' && /^\d{1,15}$/.test(value) ? Number(value) : 0);

/** The key does not exist (it never did, or was deleted, or its lease expired). */
export const absent = (key: string): Compare => ({
  key: b64(key),
  target: 'CREATE',
  result: 'EQUAL',
  create_revision: '0',
});
/** The key was last changed at `modRevision` (0: it does not exist). */
export const unchangedSince = (key: string, modRevision: number): Compare => ({
  key: b64(key),
  target: 'MOD',
  result: 'EQUAL',
  mod_revision: String(modRevision),
});
/** The key lives by `lease`. */
export const heldBy = (key: string, lease: string): Compare => ({
  key: b64(key),
  target: 'LEASE',
  result: 'EQUAL',
  lease,
});
export const put = (key: string, value: string, lease?: string): Operation => ({
  request_put: { key: b64(key), value: b64(value), ...(lease ? { lease } : {}) },
});
export const remove = (key: string): Operation => ({ request_delete_range: { key: b64(key) } });

export class Etcd {
  /** The member that answered last, asked first. */
  private preferred = 0;

  constructor(private readonly options: EtcdOptions) {
    if (options.endpoints.length === 0) throw new Error('no etcd endpoint');
  }

  async get(key: string): Promise<KeyValue | null> {
    const answer = await this.call('/v3/kv/range', { key: b64(key) });
    return kvsOf(answer)[0] ?? null;
  }

  /** Every key that starts with `prefix`, at most `limit` of them. */
  async list(prefix: string, limit = 256): Promise<KeyValue[]> {
    const start = Buffer.from(prefix, 'utf8');
    const end = Buffer.from(start);
    end[end.length - 1]! += 1;
    const answer = await this.call('/v3/kv/range', {
      key: start.toString('base64'),
      range_end: end.toString('base64'),
      limit: String(limit),
    });
    return kvsOf(answer);
  }

  async put(key: string, value: string, lease?: string): Promise<void> {
    await this.call('/v3/kv/put', (put(key, value, lease) as { request_put: unknown }).request_put);
  }

  /** Applies `success` if every `compare` holds, `failure` otherwise; says which. */
  async txn(compare: Compare[], success: Operation[], failure: Operation[] = []): Promise<boolean> {
    const answer = await this.call('/v3/kv/txn', { compare, success, failure });
    return answer.succeeded === true;
  }

  /** A lease of `ttlSeconds`; its id. */
  async grant(ttlSeconds: number): Promise<string> {
    const answer = await this.call('/v3/lease/grant', { TTL: String(ttlSeconds) });
    const id = answer.ID;
    if (typeof id !== 'string' || !/^\d{1,20}$/.test(id)) throw new EtcdUnavailable('etcd granted no lease');
    return id;
  }

  /** Renews a lease; the seconds it now has, 0 when it has expired (or never was). */
  async keepAlive(lease: string): Promise<number> {
    const answer = await this.call('/v3/lease/keepalive', { ID: lease });
    const result = answer.result as Record<string, unknown> | undefined;
    if (result === undefined) throw new EtcdUnavailable('etcd said nothing of the lease');
    return revision(result.TTL);
  }

  /** Ends a lease now: the keys that live by it are deleted. */
  async revoke(lease: string): Promise<void> {
    try {
      await this.call('/v3/lease/revoke', { ID: lease });
    } catch (error) {
      // Expired already: what revoking was for.
      if (!/lease not found/.test((error as Error).message)) throw error;
    }
  }

  /** Asks each member in turn, starting with the one that answered last, until one answers. */
  private async call(path: string, body: unknown): Promise<Record<string, unknown>> {
    const { endpoints } = this.options;
    let failure: Error | undefined;
    for (let i = 0; i < endpoints.length; i++) {
      const index = (this.preferred + i) % endpoints.length;
      try {
        const answer = await this.ask(endpoints[index]!, path, JSON.stringify(body));
        this.preferred = index;
        return answer;
      } catch (error) {
        failure = error as Error;
        // etcd's own refusal (a lease not found, a compare malformed) is the same from any member.
        if (error instanceof EtcdRefused) throw error;
      }
    }
    throw new EtcdUnavailable(`no etcd member answered ${path}: ${failure?.message}`);
  }

  private ask(endpoint: string, path: string, body: string): Promise<Record<string, unknown>> {
    const url = new URL(path, endpoint);
    const { ca, cert, key } = this.options;
    const request = url.protocol === 'https:' ? httpsRequest : httpRequest;
    return new Promise((resolve, reject) => {
      const req = request(
        url,
        {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) },
          timeout: this.options.timeoutMs ?? CALL_TIMEOUT_MS,
          ...(url.protocol === 'https:' ? { ca, cert, key } : {}),
        },
        (res) => {
          const chunks: Buffer[] = [];
          let size = 0;
          res.on('data', (chunk: Buffer) => {
            size += chunk.length;
            if (size > MAX_ANSWER_BYTES) req.destroy(new Error(`${endpoint} answered too much`));
            else chunks.push(chunk);
          });
          res.on('end', () => {
            let answer: unknown;
            try {
              answer = JSON.parse(Buffer.concat(chunks).toString('utf8'));
            } catch {
              return reject(new Error(`${endpoint} answered ${res.statusCode} with no JSON`));
            }
            if (typeof answer !== 'object' || answer === null || Array.isArray(answer))
              return reject(new Error(`${endpoint} answered ${res.statusCode} with no object`));
            const { error, message } = answer as Record<string, unknown>;
            const said = typeof message === 'string' ? message : typeof error === 'string' ? error : null;
            // A member without a quorum answers with an error too: another member may have one.
            if (said !== null && /lease not found|invalid|malformed|too many/i.test(said))
              return reject(new EtcdRefused(said.slice(0, 200)));
            if (said !== null || res.statusCode !== 200)
              return reject(new Error(`${endpoint} answered ${res.statusCode}: ${String(said).slice(0, 200)}`));
            resolve(answer as Record<string, unknown>);
          });
          res.on('error', reject);
        },
      );
      req.on('timeout', () => req.destroy(new Error(`${endpoint} did not answer in time`)));
      req.on('error', reject);
      req.end(body);
    });
  }
}

class EtcdRefused extends EtcdUnavailable {}

function kvsOf(answer: Record<string, unknown>): KeyValue[] {
  const kvs = Array.isArray(answer.kvs) ? (answer.kvs as unknown[]) : [];
  return kvs.flatMap((kv) => {
    if (typeof kv !== 'object' || kv === null) return [];
    const { key, value, create_revision, mod_revision, lease } = kv as Record<string, unknown>;
    return [
      {
        key: unb64(key),
        value: unb64(value),
        createRevision: revision(create_revision),
        modRevision: revision(mod_revision),
        lease: typeof lease === 'string' ? lease : '0',
      },
    ];
  });
}
