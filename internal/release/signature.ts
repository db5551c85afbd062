// Agent bundles signed by a release key (Ed25519): the signature covers the bundle's SHA-256, its size and the
// version it claims, so an agent that holds the release key's public half runs no bundle but those its holder
// signed, whoever hands it over (a master, a mirror). The key is the operator's (`npm run release -- keygen`), kept
// off the master: a master taken over can hand agents only what was signed (see the API reference, "Security
// model").

import { createHash, createPrivateKey, createPublicKey, sign, verify, type KeyObject } from 'node:crypto';
import { canonicalJson } from '../license/license.ts';
import { keyPinOf } from '../tls/pin.ts';

export const SIGNATURE_FORMAT = 'portplane-agent-signature';

/** A version as bundles carry it: major.minor.patch, with an optional pre-release or build suffix. */
export const BUNDLE_VERSION = /^[0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,4}(?:[-+][0-9A-Za-z.-]{1,32})?$/;

/**
 * A version as text that sorts as versions do (null for what is not one): each number zero-padded, and a release
 * after its pre-releases.
 */
export function versionOrder(version: string): string | null {
  const parts = /^([0-9]{1,4})\.([0-9]{1,4})\.([0-9]{1,4})(?:-([0-9A-Za-z.-]+))?/.exec(version);
  if (!parts) return null;
  const numbers = parts.slice(1, 4).map((n) => n.padStart(4, '0'));
  return `${numbers.join('.')}${parts[4] === undefined ? '~' : `-${parts[4]}`}`;
}

/** What a `.sig` file holds: the signed facts, the signing key's id, and the signature over the facts. */
export interface BundleSignature {
  format: typeof SIGNATURE_FORMAT;
  version: string;
  sha256: string;
  size: number;
  /** The signing key's id (`sha256/` and the base64 SHA-256 of its public key, as TLS pins are written). */
  key: string;
  signature: string;
}

/** Why a bundle is not to be run. */
export class BundleRefused extends Error {}

/** A release key's id: its pin, as a TLS key's is written (`sha256/` and the base64 SHA-256 of its public key). */
export const keyIdOf = keyPinOf;

const signedFacts = (s: Pick<BundleSignature, 'version' | 'sha256' | 'size'>) =>
  Buffer.from(canonicalJson({ format: SIGNATURE_FORMAT, version: s.version, sha256: s.sha256, size: s.size }));

/** Signs `bundle` as `version` with the release key. Throws for a version that is not one. */
export function signBundle(bundle: Buffer, version: string, privateKeyPem: string): BundleSignature {
  if (!BUNDLE_VERSION.test(version)) throw new BundleRefused(`'${version}' is not a version (major.minor.patch)`);
  const key = createPrivateKey(privateKeyPem);
  const facts = { version, sha256: createHash('sha256').update(bundle).digest('hex'), size: bundle.length };
  return {
    format: SIGNATURE_FORMAT,
    ...facts,
    key: keyIdOf(key),
    signature: sign(null, signedFacts(facts), key).toString('base64'),
  };
}

/** `value` as a signature, or why it is not one. */
function signatureOf(value: unknown): BundleSignature {
  const s = value as Record<string, unknown> | null;
  const fine =
    typeof s === 'object' &&
    s !== null &&
    s.format === SIGNATURE_FORMAT &&
    typeof s.version === 'string' &&
    BUNDLE_VERSION.test(s.version) &&
    typeof s.sha256 === 'string' &&
    /^[0-9a-f]{64}$/.test(s.sha256) &&
    Number.isSafeInteger(s.size) &&
    typeof s.key === 'string' &&
    typeof s.signature === 'string';
  if (!fine) throw new BundleRefused(`the signature is not a ${SIGNATURE_FORMAT} document`);
  return s as unknown as BundleSignature;
}

/**
 * Checks that `signature` (a `.sig` file's JSON) was made by one of `trusted` for exactly `bundle`; returns the
 * version it vouches for. Throws `BundleRefused` naming what does not hold.
 */
export function verifyBundle(bundle: Buffer, signature: unknown, trusted: readonly KeyObject[]): string {
  const s = signatureOf(signature);
  const key = trusted.find((candidate) => keyIdOf(candidate) === s.key);
  if (!key) throw new BundleRefused(`it is signed by ${s.key}, which is not a release key trusted here`);
  if (!verify(null, signedFacts(s), key, Buffer.from(s.signature, 'base64')))
    throw new BundleRefused('the signature does not verify: the signed facts were altered');
  if (bundle.length !== s.size || createHash('sha256').update(bundle).digest('hex') !== s.sha256)
    throw new BundleRefused('the bundle is not the one signed (its size or SHA-256 differ)');
  return s.version;
}

/** A release key's public half as agents are given it: the base64 of its SubjectPublicKeyInfo (60 characters). */
export function releaseKeyText(key: KeyObject): string {
  return key.export({ type: 'spki', format: 'der' }).toString('base64');
}

/** The most release keys an agent is given (two while one replaces another, and room for a mistake). */
export const MAX_RELEASE_KEYS = 4;

/** Release keys from their comma-separated text (`releaseKeyText`), or why the text is not that. */
export function parseReleaseKeys(text: string): KeyObject[] | string {
  const parts = text.split(',').filter((part) => part !== '');
  if (parts.length > MAX_RELEASE_KEYS) return `at most ${MAX_RELEASE_KEYS} release keys`;
  const keys: KeyObject[] = [];
  for (const part of parts) {
    let key: KeyObject;
    try {
      if (!/^[A-Za-z0-9+/]{59}=$/.test(part)) throw new Error('not base64 of a key');
      key = createPublicKey({ key: Buffer.from(part, 'base64'), format: 'der', type: 'spki' });
    } catch {
      return `'${part.slice(0, 80)}' is not a release key (an Ed25519 public key in base64, as the master gives it)`;
    }
    if (key.asymmetricKeyType !== 'ed25519') return `'${part.slice(0, 80)}' is not an Ed25519 key`;
    keys.push(key);
  }
  return keys;
}
