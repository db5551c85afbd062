// The keys each list sorts by (then by id), as the API takes them; the store holds each as SQL.

export const nodeSorts = ['id', 'name', 'status', 'traffic'] as const;
export const ruleSorts = ['id', 'name', 'listen_port', 'traffic', 'sync_state', 'node_id'] as const;
export const tunnelSorts = ['id', 'name', 'status', 'listen_port'] as const;
export const tokenSorts = ['id', 'name', 'created_at'] as const;
export const userSorts = ['id', 'username', 'created_at'] as const;

/** The SQL a list orders by for each of its sort keys. */
export type SortSql<Keys extends readonly string[]> = Record<Keys[number], string>;
