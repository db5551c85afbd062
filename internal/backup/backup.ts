// Backups of a data dir, online: the database through SQLite's backup API (a consistent copy
// while the master writes), with the files a restore needs beside it (the sealing key unless
// it lives elsewhere, the license, the master's own certificate that agents pin, pinned SSH
// host keys). Each carries a manifest with the SHA-256 of every file, and the manifest's own
// beside it: a backup is verified whole (every byte of it) and its database checked before a
// restore writes anything, and restore fills only an empty data dir.

import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { checkDatabaseFile, compactDatabaseFile, copyDatabaseFile, schemaVersionOfFile } from '../store/files.ts';
import { VERSION } from '../version.ts';
import { readTar, writeTar, type Entry } from './archive.ts';
import { ID_DIGITS } from '../schema/ids.ts';

const DATABASE = 'master.db';
export const MANIFEST = 'MANIFEST.json';
/** The manifest's own SHA-256, in the form `sha256sum -c` reads. */
export const MANIFEST_SUM = 'MANIFEST.sha256';
/**
 * The files of a data dir a backup carries besides the database (copied through SQLite): the sealing key, the license,
 * the master's own certificate, pinned SSH host keys. Nothing else is backed up or restored: not the live database's
 * log and lock files, not the readiness mark, not whatever else lies in the dir.
 */
const KEPT = new RegExp(`^(secret\\.key|license\\.json|tls/(cert|key)\\.pem|known_hosts/${ID_DIGITS})$`);
const FORMAT = 'portplane-backup';

export interface Manifest {
  format: typeof FORMAT;
  version: 1;
  created_at: string;
  master_version: string;
  schema_version: number;
  files: { name: string; size: number; sha256: string }[];
}

/** What a verified backup holds: its manifest, and its files in order. */
export interface Verified {
  manifest: Manifest;
  files: Entry[];
}

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');
const sumLine = (manifest: Buffer) => `${sha256(manifest)}  ${MANIFEST}\n`;

function filesOf(dir: string, root = dir): Entry[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    const name = relative(root, path);
    if (entry.isDirectory()) return filesOf(path, root);
    if (!entry.isFile() || !KEPT.test(name)) return [];
    return [{ name, mode: statSync(path).mode & 0o777, data: readFileSync(path) }];
  });
}

/** Runs `fn` with a folder of its own, removed after. */
function inScratch<T>(fn: (dir: string) => T): T;
function inScratch<T>(fn: (dir: string) => Promise<T>): Promise<T>;
function inScratch<T>(fn: (dir: string) => T | Promise<T>): T | Promise<T> {
  const dir = mkdtempSync(join(tmpdir(), 'portplane-backup-'));
  const clean = () => rmSync(dir, { recursive: true, force: true });
  try {
    const result = fn(dir);
    if (result instanceof Promise) return result.finally(clean);
    clean();
    return result;
  } catch (error) {
    clean();
    throw error;
  }
}

/** The backup of `dataDir` as one tar archive, taken while a master may be writing to it. */
export function backupDataDir(dataDir: string, now = new Date()): Promise<Buffer> {
  return inScratch(async (scratch) => {
    const copy = join(scratch, DATABASE);
    await copyDatabaseFile(join(dataDir, DATABASE), copy);
    const files = [{ name: DATABASE, mode: 0o600, data: await readFile(copy) }, ...filesOf(dataDir)];
    const manifest: Manifest = {
      format: FORMAT,
      version: 1,
      created_at: now.toISOString().replace(/\.\d{3}Z$/, 'Z'),
      master_version: VERSION,
      schema_version: schemaVersionOfFile(copy),
      files: files.map(({ name, data }) => ({ name, size: data.length, sha256: sha256(data) })),
    };
    const text = Buffer.from(`${JSON.stringify(manifest, null, 2)}\n`);
    return writeTar([
      { name: MANIFEST, mode: 0o600, data: text },
      ...files,
      { name: MANIFEST_SUM, mode: 0o600, data: Buffer.from(sumLine(text)) },
    ]);
  });
}

/** The manifest `text` holds, checked field by field. Throws naming what is wrong. */
function parseManifest(text: Buffer): Manifest {
  let parsed: Partial<Manifest>;
  try {
    parsed = JSON.parse(text.toString('utf8')) as Partial<Manifest>;
  } catch {
    throw new Error(`the backup is damaged (${MANIFEST} is not JSON)`);
  }
  const fileOk = (f: Manifest['files'][number]) =>
    typeof f === 'object' &&
    f !== null &&
    typeof f.name === 'string' &&
    Number.isSafeInteger(f.size) &&
    typeof f.sha256 === 'string' &&
    /^[0-9a-f]{64}$/.test(f.sha256);
  if (
    parsed.format !== FORMAT ||
    parsed.version !== 1 ||
    typeof parsed.created_at !== 'string' ||
    typeof parsed.master_version !== 'string' ||
    !Number.isSafeInteger(parsed.schema_version) ||
    !Array.isArray(parsed.files) ||
    !parsed.files.every(fileOk)
  )
    throw new Error(`the backup is damaged (${MANIFEST} is not a manifest this master reads)`);
  return parsed as Manifest;
}

/**
 * Checks a backup whole before anything is restored from it: the archive's every header and padding byte, the
 * manifest against its own SHA-256, every file against the manifest (name, size, SHA-256, nothing missing or
 * added), the file names (inside the data dir; no lock, WAL or readiness file), and the database (a schema this
 * master knows, SQLite's integrity and foreign key checks on a scratch copy: store/files.ts). Throws with the reason.
 */
export function verifyBackup(archive: Buffer): Verified {
  let entries: Entry[];
  try {
    entries = readTar(archive);
  } catch (error) {
    // Not even an archive: an error page saved in its place (curl without --fail), or another file.
    if (archive.length < 1024 || !archive.subarray(257, 262).equals(Buffer.from('ustar'))) {
      const start = JSON.stringify(archive.subarray(0, 40).toString('latin1'));
      throw new Error(`this is not a backup (no tar archive: it starts ${start})`);
    }
    throw error;
  }
  const first = entries[0];
  const last = entries[entries.length - 1];
  if (first?.name !== MANIFEST || last?.name !== MANIFEST_SUM || entries.length < 3)
    throw new Error(
      entries.some((e) => e.name === DATABASE) && !entries.some((e) => e.name === MANIFEST)
        ? 'the backup has no manifest (an older master made it): it cannot be verified; restore it with that ' +
            'master, then take a new backup'
        : `the backup is damaged (it does not begin with ${MANIFEST} and end with ${MANIFEST_SUM})`,
    );
  if (last.data.toString('latin1') !== sumLine(first.data))
    throw new Error(`the backup is damaged (${MANIFEST} does not match ${MANIFEST_SUM})`);
  const manifest = parseManifest(first.data);
  const files = entries.slice(1, -1);
  if (files.length !== manifest.files.length) throw new Error('the backup is damaged (files missing or added)');
  files.forEach((file, i) => {
    const listed = manifest.files[i]!;
    if (file.name !== listed.name) throw new Error(`the backup is damaged (${file.name} is not in its manifest)`);
    if (file.data.length !== listed.size || sha256(file.data) !== listed.sha256)
      throw new Error(`the backup is damaged (${file.name} does not match its SHA-256 in the manifest)`);
  });
  const names = new Set<string>();
  for (const { name } of files) {
    if (names.has(name)) throw new Error(`the backup names ${name} twice`);
    names.add(name);
    // A lock naming some pid, or a WAL SQLite would replay over the copy, is never in a backup; nor is anything else.
    if (name !== DATABASE && !KEPT.test(name)) throw new Error(`the backup carries ${name}, which no backup holds`);
  }
  const database = files.find((file) => file.name === DATABASE);
  if (!database) throw new Error(`the backup holds no ${DATABASE}`);
  inScratch((scratch) => {
    const path = join(scratch, DATABASE);
    writeFileSync(path, database.data, { mode: 0o600 });
    checkDatabaseFile(path);
  });
  return { manifest, files };
}

/**
 * Fills `dataDir`, which must be empty or missing, from a backup, once `verifyBackup` passes: a damaged backup
 * leaves the dir as it was. Should writing fail midway (a full disk), the dir is emptied again: a half-restored data
 * dir would start.
 */
export function restoreDataDir(dataDir: string, archive: Buffer): string[] {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  if (readdirSync(dataDir).length > 0) throw new Error(`${dataDir} is not empty; restore only into an empty data dir`);
  const { files } = verifyBackup(archive);
  try {
    for (const file of files) {
      const path = join(dataDir, file.name);
      mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
      // Exclusively: never through a file or symlink that appeared in the dir since it was found empty.
      writeFileSync(path, file.data, { mode: 0o600, flag: 'wx' });
    }
    compactDatabaseFile(join(dataDir, DATABASE));
  } catch (error) {
    for (const name of readdirSync(dataDir)) rmSync(join(dataDir, name), { recursive: true, force: true });
    throw error;
  }
  return files.map((file) => file.name);
}
