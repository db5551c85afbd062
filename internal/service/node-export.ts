// A node's rules written as another tool's config (internal/formats), in port order.

import { ruleFieldsOf } from '../domain/rules.ts';
import { notFound } from '../errors/errors.ts';
import { exportAs, type ExportFormat } from '../formats/formats.ts';
import { EVERY_RULE } from '../store/rules.ts';
import type { Store } from '../store/store.ts';

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
