// Backups of a data dir, online: the database through SQLite's backup API (a consistent copy
// while the master writes), with the files a restore needs beside it (the sealing key unless
// it lives elsewhere, the license, the master's own certificate that agents pin, pinned SSH
// host keys). Restore fills an empty data dir from one.

import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, normalize, relative } from 'node:path';
import { readTar, writeTar, type Entry } from './archive.ts';

const DATABASE = 'master.db';
/** Files of a running data dir that a backup never carries: the live database is copied through SQLite instead. */
const SKIPPED = new Set([DATABASE, `${DATABASE}-wal`, `${DATABASE}-shm`, 'master.lock']);

function sqlite(): typeof import('node:sqlite') {
  return process.getBuiltinModule('node:sqlite') as typeof import('node:sqlite');
}

function filesOf(dir: string, root = dir): Entry[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    const name = relative(root, path);
    if (entry.isDirectory()) return filesOf(path, root);
    if (!entry.isFile() || SKIPPED.has(name) || name.endsWith('.tmp')) return [];
    return [{ name, mode: statSync(path).mode & 0o777, data: readFileSync(path) }];
  });
}

/** The backup of `dataDir` as one tar archive, taken while a master may be writing to it. */
export async function backupDataDir(dataDir: string): Promise<Buffer> {
  const scratch = mkdtempSync(join(tmpdir(), 'portplane-backup-'));
  try {
    const copy = join(scratch, DATABASE);
    const { DatabaseSync, backup } = sqlite();
    const source = new DatabaseSync(join(dataDir, DATABASE), { readOnly: true });
    try {
      await backup(source, copy);
    } finally {
      source.close();
    }
    return writeTar([{ name: DATABASE, mode: 0o600, data: readFileSync(copy) }, ...filesOf(dataDir)]);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

/**
 * Fills `dataDir`, which must be empty or missing, from a backup. Throws on a damaged backup or
 * a used dir, and then leaves the dir empty again: a half-restored data dir would start.
 */
export function restoreDataDir(dataDir: string, archive: Buffer): string[] {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  if (readdirSync(dataDir).length > 0) throw new Error(`${dataDir} is not empty; restore only into an empty data dir`);
  const entries = readTar(archive);
  if (!entries.some((e) => e.name === DATABASE)) throw new Error(`the backup holds no ${DATABASE}`);
  const paths = entries.map((entry) => {
    const path = normalize(join(dataDir, entry.name));
    if (relative(dataDir, path).startsWith('..') || entry.name.startsWith('/'))
      throw new Error(`the backup names a file outside the data dir: ${entry.name}`);
    // A lock naming some pid, or a WAL SQLite would replay over the copy, is never in a backup.
    if (entry.name !== DATABASE && SKIPPED.has(entry.name))
      throw new Error(`the backup carries ${entry.name}, which no backup holds`);
    return path;
  });
  try {
    entries.forEach((entry, i) => {
      mkdirSync(dirname(paths[i]!), { recursive: true, mode: 0o700 });
      writeFileSync(paths[i]!, entry.data, { mode: 0o600 });
    });
    checkIntegrity(join(dataDir, DATABASE));
  } catch (error) {
    for (const name of readdirSync(dataDir)) rmSync(join(dataDir, name), { recursive: true, force: true });
    throw error;
  }
  return entries.map((e) => e.name);
}

function checkIntegrity(path: string): void {
  const { DatabaseSync } = sqlite();
  const restored = new DatabaseSync(path);
  try {
    const check = restored.prepare('PRAGMA integrity_check').get() as { integrity_check: string };
    if (check.integrity_check !== 'ok')
      throw new Error(`the restored database fails its integrity check: ${check.integrity_check}`);
  } finally {
    restored.close();
  }
}
