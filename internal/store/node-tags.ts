// Which nodes carry each tag, kept by triggers (see derived.ts), so that a tag filter and a tenant's grant by tag
// read the nodes that match through an index, where reading every node's tags grew with the fleet.

import { trigger, type Derivation } from './trigger.ts';

/** The rows of `row`'s tags (`NEW` or `OLD`), each tag once. */
const tagsOf = (row: string) => `SELECT DISTINCT value, ${row}.id FROM json_each(${row}.tags)`;

export const nodeTagDerivation: Derivation = {
  name: 'node_tag_index',
  triggers: [
    trigger(
      'node_tag_index_insert',
      `AFTER INSERT ON nodes BEGIN
    INSERT INTO node_tag_index (tag, node_id) ${tagsOf('NEW')};
  END`,
    ),
    trigger(
      'node_tag_index_delete',
      `AFTER DELETE ON nodes BEGIN
    DELETE FROM node_tag_index WHERE node_id = OLD.id AND tag IN (SELECT value FROM json_each(OLD.tags));
  END`,
    ),
    trigger(
      'node_tag_index_update',
      `AFTER UPDATE OF tags ON nodes WHEN OLD.tags IS NOT NEW.tags BEGIN
    DELETE FROM node_tag_index WHERE node_id = OLD.id AND tag IN (SELECT value FROM json_each(OLD.tags));
    INSERT INTO node_tag_index (tag, node_id) ${tagsOf('NEW')};
  END`,
    ),
  ],
  derivedOnCopies: ['node_tag_index'],
  rebuild: `DELETE FROM node_tag_index;
    INSERT INTO node_tag_index (tag, node_id) SELECT DISTINCT t.value, n.id FROM nodes n, json_each(n.tags) t`,
};
