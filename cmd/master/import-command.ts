// `master import --from FORMAT FILE --node NAME`: another tool's config imported into a data dir with no master
// running on it (the store's lock refuses one that is), through the same service as POST /api/import: the same
// reading, checks, dry run and per-item results, as the user named by --as (whose scopes it needs, as the API would).

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { grants } from '../../internal/auth/scopes.ts';
import { SecretBox } from '../../internal/crypto/box.ts';
import { SECRET_FIELDS } from '../../internal/domain/secret-fields.ts';
import { DomainError } from '../../internal/errors/errors.ts';
import { importFormats } from '../../internal/formats/formats.ts';
import { loadLicense, viewLicense } from '../../internal/license/license.ts';
import { VENDOR_PUBLIC_KEY_PEM } from '../../internal/license/vendor-key.ts';
import { Clock } from '../../internal/runtime/clock.ts';
import { localPolicy, Settings } from '../../internal/settings/settings.ts';
import { openStore } from '../../internal/store/store.ts';
import { VERSION } from '../../internal/version.ts';
import { importInWorker } from './workers.ts';

export interface ImportCommand {
  dataDir: string;
  format: string;
  file: string;
  node: string;
  peerNode: string | null;
  dryRun: boolean;
  as: string;
  secretKeyPath: string | null;
  licenseKeyPath: string | null;
}

export const importUsage = `  master import [--data-dir DIR] --from FORMAT --node NAME [--peer-node NAME]
        [--dry-run] [--as USER] FILE           read another tool's config for node NAME into rules, as
                                               POST /api/import does (FILE -: stdin), with no master running on
                                               the data dir, as USER (default admin); FORMAT: one of
                                               ${importFormats.join(', ')}`;

/** Parses the arguments after `import`; an error in words otherwise. */
export function parseImport(
  rest: readonly string[],
  env: Record<string, string | undefined>,
): ImportCommand | { error: string } {
  const command: ImportCommand = {
    dataDir: env.MASTER_DATA_DIR || './data',
    format: '',
    file: '',
    node: '',
    peerNode: null,
    dryRun: false,
    as: 'admin',
    secretKeyPath: env.MASTER_SECRET_KEY || null,
    licenseKeyPath: env.MASTER_LICENSE_KEY || null,
  };
  const valued: Record<string, keyof ImportCommand> = {
    '--data-dir': 'dataDir',
    '--from': 'format',
    '--node': 'node',
    '--peer-node': 'peerNode',
    '--as': 'as',
    '--secret-key': 'secretKeyPath',
    '--license-key': 'licenseKeyPath',
  };
  const files: string[] = [];
  for (let i = 0; i < rest.length; i++) {
    const [flag, inline] = rest[i]!.split(/=(.*)/s, 2) as [string, string | undefined];
    if (flag === '--dry-run') command.dryRun = true;
    else if (valued[flag]) {
      const value = inline ?? rest[++i];
      if (!value) return { error: `${flag} needs a value` };
      (command as unknown as Record<string, string>)[valued[flag]] = value;
    } else if (flag.startsWith('-') && flag !== '-')
      return { error: `unknown option '${flag}' for import (see --help)` };
    else files.push(rest[i]!);
  }
  if (!(importFormats as string[]).includes(command.format))
    return { error: `import needs --from, one of ${importFormats.join(', ')}` };
  if (!command.node) return { error: 'import needs --node NAME: the node the config is read for' };
  if (files.length !== 1) return { error: 'import takes one FILE (- for stdin)' };
  command.file = files[0]!;
  return command;
}

/** Runs the import; resolves to what to print (the per-item results and what did not map, as JSON). */
export async function runImportCommand(command: ImportCommand, stdin: () => string): Promise<string> {
  const source = command.file === '-' ? stdin() : readFileSync(command.file, 'utf8');
  const keyPem = command.licenseKeyPath ? readFileSync(command.licenseKeyPath, 'utf8') : VENDOR_PUBLIC_KEY_PEM;
  // Opening the store takes the data dir's lock: a running master refuses this, by name.
  const store = openStore(command.dataDir, { secretFields: SECRET_FIELDS });
  try {
    const box = SecretBox.open(command.secretKeyPath ?? join(command.dataDir, 'secret.key'));
    const settings = new Settings(store, box);
    const user = store.users.findWithHash(command.as);
    if (!user || user.disabled) throw new Error(`there is no user ${command.as} to import as (give --as USER)`);
    if (!grants(user.scopes, '*')) throw new Error(`${command.as} does not hold *, which an import needs`);
    const clock = new Clock();
    const job = {
      document: Buffer.from(
        JSON.stringify({ format: command.format, node: command.node, peer_node: command.peerNode, source }),
      ),
      requester: {
        actor: {
          actor_type: 'user' as const,
          actor_id: user.id,
          actor_name: user.username,
          ip: null,
          request_id: null,
        },
        caller: { scopes: user.scopes, userId: user.id, role: user.role, planId: user.plan_id },
        action: 'config.import',
      },
      dryRun: command.dryRun,
      timestamp: clock.timestamp(),
      license: viewLicense(loadLicense(join(command.dataDir, 'license.json'), keyPem), clock.now()),
      targets: localPolicy(settings, 'allow_local_rule_targets'),
      channels: localPolicy(settings, 'allow_local_channel_targets'),
    };
    // In a worker thread on a connection of its own, as the master imports: the same decoding, checks and writes.
    try {
      const done = await importInWorker({ version: VERSION, databasePath: store.db.path, sealingKey: box.key() })(job);
      await done.finished;
      return `${JSON.stringify(JSON.parse(Buffer.from(done.json as Uint8Array).toString('utf8')), null, 2)}\n`;
    } catch (error) {
      if (!(error instanceof DomainError)) throw error;
      const errors = (error.facts?.errors ?? []) as { pointer: string; detail: string }[];
      throw new Error([error.detail, ...errors.map((e) => `  ${e.pointer}: ${e.detail}`)].join('\n'));
    }
  } finally {
    store.close();
  }
}
