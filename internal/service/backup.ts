// A backup taken for a caller: the same archive `master backup` writes, recorded in the audit log, since it holds
// everything the data dir does.

import { transact, type Committer, type Requester } from './write.ts';

/**
 * The backup of the master's data dir, as a tar archive, audited with its size (but on a standby, which writes nothing
 * of its own: `audited` false).
 */
export async function takeBackup(
  app: Committer & { archive(): Promise<Buffer> },
  requester: Requester,
  audited = true,
): Promise<Buffer> {
  const archive = await app.archive();
  if (!audited) return archive;
  await transact(app, requester, (change) =>
    change.audit({
      action: 'backup.download',
      resource: 'backup',
      resource_id: null,
      changes: { bytes: archive.length },
    }),
  );
  return archive;
}
