// Which rows carry each tag, kept by triggers (see derived.ts), so that a tag filter (and a tenant's grant by tag)
// reads the rows that match through an index, where reading every row's tags grew with the fleet: nodes' and rules'.

import { trigger, type Derivation } from './trigger.ts';

/** The index of `table`'s tags: table `index` of (tag, `column`), each row's tags once. */
function tagIndex(table: 'nodes' | 'rules', index: string, column: string): Derivation {
  const tagsOf = (row: string) => `SELECT DISTINCT value, ${row}.id FROM json_each(${row}.tags)`;
  const remove = `DELETE FROM ${index} WHERE ${column} = OLD.id AND tag IN (SELECT value FROM json_each(OLD.tags))`;
  return {
    name: index,
    triggers: [
      trigger(
        `${index}_insert`,
        `AFTER INSERT ON ${table} WHEN NEW.tags <> '[]' BEGIN
    INSERT INTO ${index} (tag, ${column}) ${tagsOf('NEW')};
  END`,
      ),
      trigger(
        `${index}_delete`,
        `AFTER DELETE ON ${table} WHEN OLD.tags <> '[]' BEGIN
    ${remove};
  END`,
      ),
      trigger(
        `${index}_update`,
        `AFTER UPDATE OF tags ON ${table} WHEN OLD.tags IS NOT NEW.tags BEGIN
    ${remove};
    INSERT INTO ${index} (tag, ${column}) ${tagsOf('NEW')};
  END`,
      ),
    ],
    derivedOnCopies: [index],
    rebuild: `DELETE FROM ${index};
    INSERT INTO ${index} (tag, ${column}) SELECT DISTINCT t.value, r.id FROM ${table} r, json_each(r.tags) t`,
  };
}

export const nodeTagDerivation = tagIndex('nodes', 'node_tag_index', 'node_id');
export const ruleTagDerivation = tagIndex('rules', 'rule_tag_index', 'rule_id');
