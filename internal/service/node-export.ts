// A node's rules written as another tool's config (internal/formats), in port order.

import { ruleFieldsOf } from '../domain/rules.ts';
import { notFound } from '../errors/errors.ts';
import { exportAs, type ExportFormat } from '../formats/formats.ts';
import { EVERY_RULE } from '../store/rules.ts';
import type { Store } from '../store/store.ts';

/** One node's rules in another tool's format, as an export asks for them. */
export interface NodeExport {
  id: number;
  format: ExportFormat;
}

/**
 * Makes an export where it grows with the data away from requests (a worker thread): the whole export document, or
 * with `node` that node's rules in its format (UTF-8 text).
 */
export type Exporter = (exportedAt: string, node?: NodeExport) => Promise<Uint8Array>;

/** The node's name and its rules as `format`; throws not_found for no such node. */
export function exportNodeAs(store: Store, nodeId: number, format: ExportFormat): { name: string; text: string } {
  const node = store.nodes.find(nodeId);
  if (!node) throw notFound('node', nodeId);
  // A node's rules are bounded by its ports (65,535 a protocol): the text grows with them, as the node's config does.
  const rules = store.rules
    .list({ afterId: 0, limit: Number.MAX_SAFE_INTEGER, ...EVERY_RULE, node_id: nodeId })
    .map(ruleFieldsOf)
    .sort((a, b) => a.listen_port - b.listen_port || a.protocol.localeCompare(b.protocol));
  return { name: node.name, text: exportAs(format, rules) };
}
