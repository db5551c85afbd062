// Passkeys (WebAuthn Level 2) checked on the master's side, through node:crypto alone: a new credential's
// registration (its client data, its authenticator data and COSE public key: ES256, RS256 or EdDSA; attestation
// `none` asked, and whatever statement comes not trusted for anything) and each assertion it signs at a sign-in. User
// presence and verification are required; the signature counter must go forward.

import { createHash, createPublicKey, timingSafeEqual, verify, type KeyObject } from 'node:crypto';
import { decodeCbor, type Cbor } from './cbor.ts';

/** COSE algorithm numbers (RFC 9053) taken, in the order asked for. */
export const COSE_ALGORITHMS = { ES256: -7, EdDSA: -8, RS256: -257 } as const;

export class PasskeyRefused extends Error {}

/** Where passkeys are used: the console's origin and its host as the relying party id. */
export interface RelyingParty {
  id: string;
  origin: string;
}

/** A credential as kept: its id, public key (a JWK) and COSE algorithm, and its signature counter. */
export interface Credential {
  credentialId: Uint8Array;
  publicKey: Record<string, string>;
  algorithm: number;
  signCount: number;
}

function sha256(data: Uint8Array | string): Buffer {
  return createHash('sha256').update(data).digest();
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

/** The client data a browser signed over, checked: the ceremony's type, its challenge, our origin. */
function checkClientData(clientDataJSON: Uint8Array, type: string, challenge: string, rp: RelyingParty): void {
  let data: { type?: unknown; challenge?: unknown; origin?: unknown; crossOrigin?: unknown };
  try {
    data = JSON.parse(Buffer.from(clientDataJSON).toString('utf8'));
  } catch {
    throw new PasskeyRefused('its client data is not JSON');
  }
  if (data.type !== type) throw new PasskeyRefused(`its client data is not of ${type}`);
  if (typeof data.challenge !== 'string' || !sameBytes(Buffer.from(data.challenge), Buffer.from(challenge)))
    throw new PasskeyRefused('it answers another challenge');
  if (data.origin !== rp.origin) throw new PasskeyRefused(`it was made for another origin than ${rp.origin}`);
  if (data.crossOrigin === true) throw new PasskeyRefused('it was made in a frame of another origin');
}

interface AuthenticatorData {
  flags: number;
  signCount: number;
  credential?: { id: Uint8Array; publicKey: Map<Cbor, Cbor> };
}

const FLAG_PRESENT = 0x01;
const FLAG_VERIFIED = 0x04;
const FLAG_ATTESTED = 0x40;

function parseAuthenticatorData(data: Uint8Array, rp: RelyingParty): AuthenticatorData {
  if (data.length < 37) throw new PasskeyRefused('its authenticator data is too short');
  const view = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  if (!sameBytes(view.subarray(0, 32), sha256(rp.id))) throw new PasskeyRefused(`it is for another site than ${rp.id}`);
  const flags = view[32]!;
  if (!(flags & FLAG_PRESENT)) throw new PasskeyRefused('the user was not present');
  if (!(flags & FLAG_VERIFIED)) throw new PasskeyRefused('the user was not verified (a PIN, a fingerprint)');
  const signCount = view.readUInt32BE(33);
  if (!(flags & FLAG_ATTESTED)) return { flags, signCount };
  if (view.length < 55) throw new PasskeyRefused('its attested credential data is too short');
  const idLength = view.readUInt16BE(53);
  if (idLength > 1023 || view.length < 55 + idLength) throw new PasskeyRefused('its credential id is malformed');
  const id = new Uint8Array(view.subarray(55, 55 + idLength));
  let key: Cbor;
  try {
    key = decodeCbor(view, 55 + idLength).value;
  } catch (error) {
    throw new PasskeyRefused(`its public key is not CBOR: ${(error as Error).message}`);
  }
  if (!(key instanceof Map)) throw new PasskeyRefused('its public key is not a COSE key');
  return { flags, signCount, credential: { id, publicKey: key } };
}

function bytesAt(key: Map<Cbor, Cbor>, label: number): string {
  const value = key.get(label);
  if (!(value instanceof Uint8Array) || value.length === 0 || value.length > 1024)
    throw new PasskeyRefused('its public key is missing a part');
  return Buffer.from(value).toString('base64url');
}

/** A COSE public key (RFC 9053) as a JWK node:crypto reads, and its algorithm; refused unless ES256, RS256, EdDSA. */
export function coseToJwk(key: Map<Cbor, Cbor>): { jwk: Record<string, string>; algorithm: number } {
  const kty = key.get(1);
  const alg = key.get(3);
  let jwk: Record<string, string>;
  if (kty === 2 && alg === COSE_ALGORITHMS.ES256 && key.get(-1) === 1)
    jwk = { kty: 'EC', crv: 'P-256', x: bytesAt(key, -2), y: bytesAt(key, -3) };
  else if (kty === 3 && alg === COSE_ALGORITHMS.RS256) jwk = { kty: 'RSA', n: bytesAt(key, -1), e: bytesAt(key, -2) };
  else if (kty === 1 && alg === COSE_ALGORITHMS.EdDSA && key.get(-1) === 6)
    jwk = { kty: 'OKP', crv: 'Ed25519', x: bytesAt(key, -2) };
  else throw new PasskeyRefused('its key is not ES256 (P-256), RS256 or EdDSA (Ed25519)');
  publicKeyOf(jwk);
  return { jwk, algorithm: alg };
}

function publicKeyOf(jwk: Record<string, string>): KeyObject {
  try {
    const key = createPublicKey({ key: jwk, format: 'jwk' });
    if (jwk.kty === 'RSA' && (key.asymmetricKeyDetails?.modulusLength ?? 0) < 2048) throw new Error('short');
    return key;
  } catch {
    throw new PasskeyRefused('its public key is not one (or an RSA key under 2048 bits)');
  }
}

/**
 * A registration (navigator.credentials.create's answer) checked against the challenge it was asked with: the
 * credential to keep. Throws `PasskeyRefused`.
 */
export function verifyRegistration(
  answer: { clientDataJSON: Uint8Array; attestationObject: Uint8Array },
  challenge: string,
  rp: RelyingParty,
): Credential {
  checkClientData(answer.clientDataJSON, 'webauthn.create', challenge, rp);
  let attestation: Cbor;
  try {
    attestation = decodeCbor(answer.attestationObject).value;
  } catch (error) {
    throw new PasskeyRefused(`its attestation is not CBOR: ${(error as Error).message}`);
  }
  const authData = attestation instanceof Map ? attestation.get('authData') : undefined;
  if (!(authData instanceof Uint8Array)) throw new PasskeyRefused('its attestation has no authenticator data');
  const parsed = parseAuthenticatorData(authData, rp);
  if (!parsed.credential) throw new PasskeyRefused('it carries no credential');
  const { jwk, algorithm } = coseToJwk(parsed.credential.publicKey);
  return { credentialId: parsed.credential.id, publicKey: jwk, algorithm, signCount: parsed.signCount };
}

/**
 * A sign-in's assertion (navigator.credentials.get's answer) checked against the challenge it was asked with and
 * the credential it names: its new signature counter. Throws `PasskeyRefused`, also for a counter that did not go
 * forward (a cloned authenticator).
 */
export function verifyAssertion(
  answer: { clientDataJSON: Uint8Array; authenticatorData: Uint8Array; signature: Uint8Array },
  challenge: string,
  rp: RelyingParty,
  credential: Pick<Credential, 'publicKey' | 'algorithm' | 'signCount'>,
): number {
  checkClientData(answer.clientDataJSON, 'webauthn.get', challenge, rp);
  const parsed = parseAuthenticatorData(answer.authenticatorData, rp);
  const signed = Buffer.concat([answer.authenticatorData, sha256(answer.clientDataJSON)]);
  const key = publicKeyOf(credential.publicKey);
  const digest = credential.algorithm === COSE_ALGORITHMS.EdDSA ? null : 'sha256';
  let good = false;
  try {
    good = verify(digest, signed, key, answer.signature);
  } catch {
    good = false;
  }
  if (!good) throw new PasskeyRefused('its signature does not verify');
  // Authenticators that keep no counter say 0 each time; one that keeps one must have moved it forward.
  if ((parsed.signCount !== 0 || credential.signCount !== 0) && parsed.signCount <= credential.signCount)
    throw new PasskeyRefused(
      `its signature counter went back (${parsed.signCount}, after ${credential.signCount}): a cloned authenticator?`,
    );
  return parsed.signCount;
}
