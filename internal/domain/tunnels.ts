// A tunnel's states and transports, as lists report and filter them.

export const tunnelStatuses = ['pending', 'up', 'down'] as const;
export type TunnelStatus = (typeof tunnelStatuses)[number];
export const transports = ['tls', 'ws'] as const;
export type TunnelTransport = (typeof transports)[number];
