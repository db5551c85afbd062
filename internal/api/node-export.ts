// A node's rules as another tool's config (GET /api/nodes/{id}/export?format=): for leaving, or for running a node
// without its agent. The writers are internal/formats'; what a format cannot carry is said in its comments.

import { DomainError, notFound } from '../errors/errors.ts';
import { exportFormats, type ExportFormat } from '../formats/formats.ts';
import { textParam, type QueryOf } from '../schema/query.ts';
import { describe } from '../schema/schema.ts';
import { type Ctx, idParam, operation, operations, type Reply } from './route.ts';

const TEXT = 'text/plain; charset=utf-8';
const FILE_TYPES: Record<ExportFormat, string> = { realm: 'toml', nftables: 'nft', haproxy: 'cfg' };

const exportQuery = {
  format: textParam({
    max: 16,
    values: exportFormats,
    description: `The tool to write for (required): ${exportFormats.join(', ')}.`,
  }),
};

async function exportNode(ctx: Ctx<undefined, QueryOf<typeof exportQuery>>): Promise<Reply> {
  const format = ctx.query.format as ExportFormat | undefined;
  if (format === undefined)
    throw new DomainError('invalid_query', 'format is required', {
      errors: [{ pointer: '?format', detail: `is required: one of ${exportFormats.join(', ')}` }],
    });
  const id = idParam(ctx);
  const node = ctx.app.store.nodes.find(id);
  if (!node) throw notFound('node', id);
  // Written in a worker thread: a node's rules (up to 65,535 a protocol) are text that grows with them.
  const text = await ctx.app.exporter(ctx.app.timestamp(), { id, format });
  return {
    status: 200,
    raw: Buffer.from(text.buffer, text.byteOffset, text.byteLength),
    headers: {
      'Content-Type': TEXT,
      'Content-Disposition': `attachment; filename="${node.name}.${FILE_TYPES[format]}"`,
    },
  };
}

export const nodeExportOperations = operations({
  exportNode: operation({
    summary: "A node's rules as another tool's config",
    description:
      'realm: an [[endpoints]] table each; nftables: a script for nft -f making the table inet portplane_export ' +
      '(a DNAT a rule, its targets source-NATed as the rule says). Rules a format cannot carry (disabled, through a ' +
      'tunnel, needing the relay, to a name for nftables, on a range of ports for realm) are left out with a comment ' +
      'saying why; controls it does not have (limits, quotas, ...) are named in a comment under the rule.',
    query: exportQuery,
    responses: {
      200: {
        description: 'The config',
        mediaType: TEXT,
        schema: describe({ type: 'string' }),
        headers: {
          'Content-Disposition': {
            description: 'attachment; filename="NODE.EXT" (toml for realm)',
            schema: { type: 'string' },
          },
        },
      },
    },
    handler: exportNode,
  }),
});
