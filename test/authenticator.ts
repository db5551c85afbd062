// A software WebAuthn authenticator for tests without a browser: an ES256 key pair per credential, the CBOR and
// authenticator data a real one sends, and a signature counter (test/e2e/passkeys.test.ts has Chromium's own).

import { createHash, generateKeyPairSync, randomBytes, sign, type KeyObject } from 'node:crypto';

function cbor(value: unknown): Buffer {
  const head = (major: number, n: number) =>
    n < 24
      ? Buffer.from([(major << 5) | n])
      : n < 256
        ? Buffer.from([(major << 5) | 24, n])
        : Buffer.from([(major << 5) | 25, n >> 8, n & 255]);
  if (typeof value === 'number') return value >= 0 ? head(0, value) : head(1, -1 - value);
  if (typeof value === 'string') return Buffer.concat([head(3, Buffer.byteLength(value)), Buffer.from(value)]);
  if (value instanceof Uint8Array) return Buffer.concat([head(2, value.length), value]);
  if (value instanceof Map)
    return Buffer.concat([head(5, value.size), ...[...value].flatMap(([k, v]) => [cbor(k), cbor(v)])]);
  throw new Error(`no CBOR for ${typeof value}`);
}

const b64 = (bytes: Uint8Array) => Buffer.from(bytes).toString('base64url');
const sha256 = (data: Uint8Array | string) => createHash('sha256').update(data).digest();

export class SoftAuthenticator {
  private readonly key: KeyObject;
  readonly publicJwk;
  readonly credentialId = randomBytes(32);
  counter = 0;

  constructor(
    readonly rpId: string,
    readonly origin: string,
  ) {
    const pair = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    this.key = pair.privateKey;
    this.publicJwk = pair.publicKey.export({ format: 'jwk' });
  }

  private authData(flags: number, attested?: Buffer): Buffer {
    const count = Buffer.alloc(4);
    count.writeUInt32BE(this.counter);
    return Buffer.concat([sha256(this.rpId), Buffer.from([flags]), count, attested ?? Buffer.alloc(0)]);
  }

  /** navigator.credentials.create's answer to `challenge`, as the console sends it. */
  register(challenge: string, overrides: { origin?: string; flags?: number } = {}) {
    const clientData = JSON.stringify({ type: 'webauthn.create', challenge, origin: overrides.origin ?? this.origin });
    const cose = new Map<number, unknown>([
      [1, 2],
      [3, -7],
      [-1, 1],
      [-2, Buffer.from(this.publicJwk.x!, 'base64url')],
      [-3, Buffer.from(this.publicJwk.y!, 'base64url')],
    ]);
    const idLength = Buffer.from([this.credentialId.length >> 8, this.credentialId.length & 255]);
    const attested = Buffer.concat([Buffer.alloc(16), idLength, this.credentialId, cbor(cose)]);
    const authData = this.authData(overrides.flags ?? 0x45, attested);
    const attestation = cbor(
      new Map<string, unknown>([
        ['fmt', 'none'],
        ['attStmt', new Map()],
        ['authData', authData],
      ]),
    );
    return {
      id: b64(this.credentialId),
      response: { clientDataJSON: b64(Buffer.from(clientData)), attestationObject: b64(attestation) },
    };
  }

  /** navigator.credentials.get's answer to `challenge`, its counter moved on first. */
  assert(challenge: string) {
    this.counter++;
    const clientData = Buffer.from(JSON.stringify({ type: 'webauthn.get', challenge, origin: this.origin }));
    const authData = this.authData(0x05);
    const signature = sign('sha256', Buffer.concat([authData, sha256(clientData)]), this.key);
    return {
      id: b64(this.credentialId),
      response: { clientDataJSON: b64(clientData), authenticatorData: b64(authData), signature: b64(signature) },
    };
  }
}
