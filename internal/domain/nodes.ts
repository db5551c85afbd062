// A node's states, as lists report and filter them.

export const nodeStatuses = ['new', 'installing', 'online', 'offline', 'install_failed'] as const;
export type NodeStatus = (typeof nodeStatuses)[number];
