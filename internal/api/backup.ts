// The backup, over HTTP: the same archive `master backup` writes, for a remote cron job.

import { describe } from '../schema/schema.ts';
import { type Ctx, operation, operations, type Reply } from './route.ts';
import { takeBackup } from '../service/backup.ts';

async function downloadBackup(ctx: Ctx<undefined, {}>): Promise<Reply> {
  const { app } = ctx;
  const archive = await takeBackup(app, ctx, app.standby === null);
  const name = `portplane-backup-${app.timestamp().replace(/[-:]/g, '')}.tar`;
  return {
    status: 200,
    raw: archive,
    headers: { 'Content-Type': 'application/x-tar', 'Content-Disposition': `attachment; filename="${name}"` },
  };
}

export const backupOperations = operations({
  getBackup: operation({
    summary: 'A backup of the data dir, as `master backup` writes it',
    description:
      'A tar archive: the database (a consistent copy through SQLite, taken while the master serves), ' +
      'the sealing key (unless it lives outside the data dir), the license, the master certificate agents pin, ' +
      'and pinned SSH host keys. ' +
      'It is as sensitive as the data dir. Check it with `npm run master -- verify FILE` and restore it with ' +
      '`npm run master -- restore --data-dir NEW-DIR FILE` (README, Backup and restore). Audited as backup.download ' +
      '(but on a standby, which writes nothing of its own). One is made at a time: callers asking while it is ' +
      'made are given it too (each audited).',
    responses: {
      200: {
        description: 'The archive',
        mediaType: 'application/x-tar',
        schema: describe({ type: 'string', format: 'binary' }),
        headers: {
          'Content-Disposition': {
            description: 'attachment; filename="portplane-backup-<UTC time>.tar"',
            schema: { type: 'string' },
          },
        },
      },
    },
    handler: downloadBackup,
  }),
});
