// The master's maintenance commands, run beside (backup, verify, wait-ready, serve-alone) or instead of
// (restore, reset-password, promote) a serving master: `master backup|restore|verify [--data-dir DIR]
// FILE`, `master reset-password [--data-dir DIR] USERNAME`, `master wait-ready [--data-dir
// DIR] PID`, `master promote|serve-alone [--data-dir DIR]`.

import { SYSTEM_ACTOR } from '../../internal/store/audit.ts';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { hashPassword, MIN_PASSWORD } from '../../internal/auth/secrets.ts';
import { backupDataDir, restoreDataDir, verifyBackup } from '../../internal/backup/backup.ts';
import { Clock } from '../../internal/runtime/clock.ts';
import { writeFileAtomic } from '../../internal/runtime/files.ts';
import { waitReady } from '../../internal/runtime/readiness.ts';
import { askToServeAlone } from '../../internal/runtime/serve-alone.ts';
import { openStore } from '../../internal/store/store.ts';
import { SECRET_FIELDS } from '../../internal/domain/secret-fields.ts';
import { importUsage, parseImport, runImportCommand, type ImportCommand } from './import-command.ts';

export const commandNames = [
  'backup',
  'verify',
  'restore',
  'reset-password',
  'wait-ready',
  'promote',
  'serve-alone',
  'import',
] as const;

/** How long `wait-ready` waits: systemd's own default start time-out. */
const WAIT_READY_MS = 90_000;
export type CommandName = (typeof commandNames)[number];

export type Command =
  | {
      name: Exclude<CommandName, 'import'>;
      dataDir: string;
      /** The backup file, the username, or the pid. */
      operand: string;
    }
  | ({ name: 'import' } & ImportCommand);

export const commandUsage = `Commands:
  master backup [--data-dir DIR] FILE          write a backup of the data dir to FILE, while a master may serve from it
  master verify FILE                           check a backup whole (every file's SHA-256, the database's integrity)
  master restore [--data-dir DIR] FILE         fill an empty data dir from a backup, once it is verified
  master reset-password [--data-dir DIR] USER  set USER's password (read from stdin, or generated and printed)
                                               and end its sessions; with no master running on the data dir
  master wait-ready [--data-dir DIR] PID       wait until the master of process PID serves from the data dir
                                               (exit 0), or exit 1 if it ends first (systemd: ExecStartPost)
  master promote [--data-dir DIR]              make a stopped standby's copy the primary of the next epoch; then
                                               start it without --follow
  master serve-alone [--data-dir DIR]          make a sync-mode primary that waits for its peers (none answers)
                                               serve without them: only once you know none of them was promoted
${importUsage}
`;

/** Parses `argv` when it starts with a command; null when it does not. */
export function parseCommand(
  argv: readonly string[],
  env: Record<string, string | undefined>,
): Command | { error: string } | null {
  const [name, ...rest] = argv;
  if (!(commandNames as readonly string[]).includes(name ?? '')) return null;
  if (name === 'import') {
    const parsed = parseImport(rest, env);
    return 'error' in parsed ? parsed : { name, ...parsed };
  }
  let dataDir = env.MASTER_DATA_DIR || './data';
  const operands: string[] = [];
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i]!;
    if (arg === '--data-dir') dataDir = rest[++i] ?? '';
    else if (arg.startsWith('--data-dir=')) dataDir = arg.slice('--data-dir='.length);
    else if (arg.startsWith('-')) return { error: `unknown option '${arg}' for ${name} (see --help)` };
    else operands.push(arg);
  }
  if (!dataDir) return { error: '--data-dir needs a value' };
  if (name === 'promote' || name === 'serve-alone')
    return operands.length === 0 ? { name, dataDir, operand: '' } : { error: `${name} takes no operand` };
  const operand = { 'reset-password': 'USERNAME', 'wait-ready': 'PID' }[name as string] ?? 'FILE';
  if (operands.length !== 1) return { error: `${name} takes one ${operand}` };
  if (name === 'wait-ready' && !/^[1-9][0-9]{0,9}$/.test(operands[0]!))
    return { error: `wait-ready takes a process id, not '${operands[0]}'` };
  return { name: name as Exclude<CommandName, 'import'>, dataDir, operand: operands[0]! };
}

/** Runs a command; resolves to what to print. Throws with a message for the operator. */
export async function runCommand(command: Command, stdin: () => string): Promise<string> {
  if (command.name === 'import') return runImportCommand(command, stdin);
  const { dataDir, operand } = command;
  if (command.name === 'backup') {
    const archive = await backupDataDir(dataDir);
    // A backup file is whole or absent, and written through nothing that was there before.
    writeFileAtomic(operand, archive);
    return `backed up ${dataDir} to ${operand} (${archive.length} bytes); keep it as safe as the data dir itself\n`;
  }
  if (command.name === 'verify') {
    const { manifest, files } = verifyBackup(readFileSync(operand));
    return (
      `${operand} is intact: ${files.length} files match their SHA-256 in the manifest, and the database (schema ` +
      `version ${manifest.schema_version}) passes integrity_check and foreign_key_check; taken at ` +
      `${manifest.created_at} by master ${manifest.master_version}\n`
    );
  }
  if (command.name === 'restore') {
    const files = restoreDataDir(dataDir, readFileSync(operand));
    return `verified and restored ${files.length} files into ${dataDir}\n`;
  }
  if (command.name === 'wait-ready') {
    const ready = await waitReady(dataDir, Number(operand), WAIT_READY_MS);
    return `the master (pid ${ready.pid}) serves at ${ready.url}\n`;
  }
  if (command.name === 'promote') return promote(dataDir);
  if (command.name === 'serve-alone') {
    const why = askToServeAlone(dataDir);
    return `asked the master of ${dataDir} to serve without its peers; it waited because ${why}\n`;
  }
  const given = stdin().replace(/\r?\n$/, '');
  const password = given || randomBytes(18).toString('base64url');
  if (password.length < MIN_PASSWORD) throw new Error(`the password must have at least ${MIN_PASSWORD} characters`);
  const hash = await hashPassword(password);
  // Opening the store takes the data dir's lock: a running master refuses this, by name.
  const store = openStore(dataDir, { secretFields: SECRET_FIELDS });
  try {
    const clock = new Clock();
    store.write(() => {
      const user = store.users.findWithHash(operand);
      if (!user) throw new Error(`there is no user ${operand}`);
      store.users.setPassword(user.id, hash, clock.timestamp());
      const ended = store.tokens.deleteForUser(user.id, ['session']);
      store.audit.record(
        SYSTEM_ACTOR,
        {
          action: 'user.reset_password',
          resource: 'user',
          resource_id: user.id,
          status: 'success',
          changes: { sessions_ended: ended.length },
        },
        clock.timestamp(),
      );
    });
    await store.committed();
  } finally {
    store.close();
  }
  return given
    ? `the password of ${operand} is set; its sessions are ended\n`
    : `the new password of ${operand} (shown only now): ${password}\n`;
}

/**
 * A standby's copy, its master stopped, becomes the primary's database: what its copy went without installed again,
 * the epoch raised (as POST /api/replication/promote does on a running standby), audited.
 */
async function promote(dataDir: string): Promise<string> {
  // Opened as a copy is (never migrated); the data dir's lock refuses a master still running on it.
  const store = openStore(dataDir, { secretFields: SECRET_FIELDS, copy: true });
  try {
    store.takeOver();
    const clock = new Clock();
    const epoch = store.write(() => {
      const raised = store.epoch.raise(clock.timestamp());
      store.audit.record(
        SYSTEM_ACTOR,
        {
          action: 'replication.promote',
          resource: 'master',
          resource_id: null,
          status: 'success',
          changes: { after: { role: 'primary', epoch: raised } },
        },
        clock.timestamp(),
      );
      return raised;
    });
    await store.committed();
    return `promoted ${dataDir}: the primary of epoch ${epoch}; start its master without --follow\n`;
  } finally {
    store.close();
  }
}
