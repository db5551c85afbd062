// How a rule looks in the API, as SQL. Triggers render it into rule_views on every write,
// including traffic totals, so a list is a concatenation of ready JSON texts. The shape
// must match `toRule` in rules.ts (a test compares reads with write answers).

/** The JSON object of a rule row; `row` is a prefix such as `NEW.` or ``. */
export function ruleJson(row: string): string {
  const c = (name: string) => `${row}${name}`;
  return `json_object('id', ${c('id')}, 'name', ${c('name')}, 'node_id', ${c('node_id')}, 'tunnel_id', ${c('tunnel_id')},
    'protocol', ${c('protocol')}, 'listen_port', ${c('listen_port')}, 'targets', json(${c('targets')}), 'strategy', ${c('strategy')},
    'enabled', json(CASE ${c('enabled')} WHEN 1 THEN 'true' ELSE 'false' END),
    'sync', json_object('state', ${c('sync_state')}, 'error', json(${c('sync_error')}), 'applied_at', ${c('sync_applied_at')}),
    'traffic', json_object('bytes_in', ${c('bytes_in')}, 'bytes_out', ${c('bytes_out')}),
    'version', ${c('version')}, 'created_at', ${c('created_at')}, 'updated_at', ${c('updated_at')})`;
}

export const RULE_VIEW_TRIGGERS = `
  CREATE TRIGGER rule_views_insert AFTER INSERT ON rules BEGIN
    INSERT INTO rule_views (id, json) VALUES (NEW.id, ${ruleJson('NEW.')});
  END;
  CREATE TRIGGER rule_views_update AFTER UPDATE ON rules BEGIN
    UPDATE rule_views SET json = ${ruleJson('NEW.')} WHERE id = NEW.id;
  END;
`;
