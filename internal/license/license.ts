// Licenses: a JSON document signed with Ed25519 over its canonical form (keys sorted, no
// white space, `signature` left out). Verification never throws: a missing, tampered or
// expired license is reported and the master runs as the free edition.

import { createPrivateKey, createPublicKey, generateKeyPairSync, sign, verify, type KeyObject } from 'node:crypto';
import { readFileSync } from 'node:fs';

export interface Limits {
  /** Most nodes the master will manage; null means no limit. */
  max_nodes: number | null;
}

export interface LicenseFields {
  license_id: string;
  edition: string;
  licensee: string;
  limits: Limits;
  issued_at: string;
  expires_at: string | null;
}

export type LicenseStatus = 'none' | 'valid' | 'expired' | 'invalid';

export interface LicenseView {
  status: LicenseStatus;
  valid: boolean;
  /** Why the license is not in force; null when it is, or when there is none. */
  problem: string | null;
  edition: string;
  licensee: string | null;
  license_id: string | null;
  limits: Limits;
  issued_at: string | null;
  expires_at: string | null;
}

export const FREE_EDITION: Limits = { max_nodes: 5 };

/** JSON with object keys sorted at every depth: the bytes that are signed. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value && typeof value === 'object') {
    const entries = Object.entries(value)
      .filter(([, inner]) => inner !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([key, inner]) => `${JSON.stringify(key)}:${canonicalJson(inner)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

export function generateLicenseKeys(): { publicKeyPem: string; privateKeyPem: string } {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  return {
    publicKeyPem: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
    privateKeyPem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
  };
}

/** Returns the license file's text: the fields plus a base64 `signature`. */
export function issueLicense(fields: LicenseFields, privateKeyPem: string): string {
  const signature = sign(null, Buffer.from(canonicalJson(fields)), createPrivateKey(privateKeyPem)).toString('base64');
  return `${JSON.stringify({ ...fields, signature }, null, 2)}\n`;
}

function freeView(status: LicenseStatus, problem: string | null): LicenseView {
  return {
    status,
    valid: false,
    problem,
    edition: 'free',
    licensee: null,
    license_id: null,
    limits: FREE_EDITION,
    issued_at: null,
    expires_at: null,
  };
}

function isFields(value: unknown): value is LicenseFields & { signature: string } {
  const v = value as Record<string, unknown>;
  const limits = v?.limits as Record<string, unknown> | undefined;
  return (
    typeof v === 'object' &&
    v !== null &&
    typeof v.signature === 'string' &&
    typeof v.license_id === 'string' &&
    typeof v.edition === 'string' &&
    typeof v.licensee === 'string' &&
    typeof v.issued_at === 'string' &&
    (v.expires_at === null || typeof v.expires_at === 'string') &&
    typeof limits === 'object' &&
    limits !== null &&
    (limits.max_nodes === null || (Number.isInteger(limits.max_nodes) && (limits.max_nodes as number) >= 0))
  );
}

/** A verified license, or the reason there is none in force. Expiry is judged later, per call. */
export type Verified =
  { ok: true; fields: LicenseFields } | { ok: false; status: 'none' | 'invalid'; problem: string | null };

export function verifyLicense(text: string, publicKey: KeyObject): Verified {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return { ok: false, status: 'invalid', problem: 'the license file is not valid JSON' };
  }
  if (!isFields(parsed))
    return {
      ok: false,
      status: 'invalid',
      problem: 'the license file is missing fields or has fields of the wrong type',
    };
  const { signature, ...fields } = parsed;
  const good = verify(null, Buffer.from(canonicalJson(fields)), publicKey, Buffer.from(signature, 'base64'));
  if (!good)
    return {
      ok: false,
      status: 'invalid',
      problem: 'the signature does not match: the license was altered or issued for another key',
    };
  return { ok: true, fields };
}

/** Reads and verifies the license at `path`; a missing file is the free edition. */
export function loadLicense(path: string, publicKeyPem: string): Verified {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return { ok: false, status: 'none', problem: null };
    return { ok: false, status: 'invalid', problem: `the license file cannot be read: ${(error as Error).message}` };
  }
  let key: KeyObject;
  try {
    key = createPublicKey(publicKeyPem);
  } catch {
    return { ok: false, status: 'invalid', problem: 'the configured license public key is not a valid PEM key' };
  }
  return verifyLicense(text, key);
}

/** What the license means at time `now`: expired licenses fall back to the free limits. */
export function viewLicense(verified: Verified, now: number): LicenseView {
  if (!verified.ok) return freeView(verified.status, verified.problem);
  const { fields } = verified;
  const expired = fields.expires_at !== null && Date.parse(fields.expires_at) <= now;
  return {
    status: expired ? 'expired' : 'valid',
    valid: !expired,
    problem: expired ? `the license expired at ${fields.expires_at}` : null,
    edition: fields.edition,
    licensee: fields.licensee,
    license_id: fields.license_id,
    limits: expired ? FREE_EDITION : fields.limits,
    issued_at: fields.issued_at,
    expires_at: fields.expires_at,
  };
}
